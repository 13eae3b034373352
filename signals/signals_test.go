package signals

import (
	"context"
	"log/slog"
	"os"
	"sync"
	"testing"

	"go.uber.org/goleak"
	"golang.org/x/sys/unix"
)

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want unix.Signal
		ok   bool
	}{
		{"TERM", unix.SIGTERM, true}, {"SIGTERM", unix.SIGTERM, true}, {"term", unix.SIGTERM, true},
		{" usr1 ", unix.SIGUSR1, true}, {"15", unix.SIGTERM, true}, {"RTMIN", 34, true}, {"RTMIN+2", 36, true},
		{"SIGRTMAX-1", 63, true}, {"RTMAX", 64, true},
		{"", 0, false}, {"0", 0, false}, {"65", 0, false}, {"-1", 0, false}, {"BOGUS", 0, false},
		{"RTMIN+40", 0, false}, {"RTMIN+x", 0, false},
	} {
		got, err := Parse(tc.in)
		if (err == nil) != tc.ok || (tc.ok && got != tc.want) {
			t.Errorf("Parse(%q) = %v, %v; want %v ok=%v", tc.in, got, err, tc.want, tc.ok)
		}
	}
}

func TestNameRoundTrip(t *testing.T) {
	for s := unix.Signal(1); s <= maxSignal; s++ {
		if s == 32 || s == 33 {
			continue
		}
		got, err := Parse(Name(s))
		if err != nil || got != s {
			t.Errorf("Parse(Name(%d)=%q) = %v, %v", s, Name(s), got, err)
		}
	}
}

func TestParseList(t *testing.T) {
	got, err := ParseList("TERM, INT,")
	if err != nil || len(got) != 2 || got[0] != unix.SIGTERM || got[1] != unix.SIGINT {
		t.Errorf("ParseList = %v, %v", got, err)
	}
	for _, bad := range []string{"", ",", "TERM,NOPE"} {
		if _, err := ParseList(bad); err == nil {
			t.Errorf("ParseList(%q) succeeded", bad)
		}
	}
}

func TestParseRewrite(t *testing.T) {
	for _, tc := range []struct {
		specs []string
		ok    bool
		str   string
	}{
		{[]string{"TERM:USR1"}, true, "TERM:USR1"},
		{[]string{"TERM:USR1", "INT:USR2"}, true, "INT:USR2,TERM:USR1"},
		{[]string{"TERM:USR1", "TERM:USR1"}, true, "TERM:USR1"},
		{[]string{"TERM:USR1", "TERM:USR2"}, false, ""},
		{[]string{"TERM"}, false, ""},
		{[]string{"TERM:KILL"}, false, ""},
		{[]string{"STOP:TERM"}, false, ""},
		{[]string{"CHLD:TERM"}, false, ""},
		{[]string{"PIPE:TERM"}, false, ""},
		{[]string{"TERM:NOPE"}, false, ""},
	} {
		rw := Rewrite{}
		var err error
		for _, s := range tc.specs {
			if err = rw.ParseRewrite(s); err != nil {
				break
			}
		}
		if (err == nil) != tc.ok {
			t.Errorf("%v: err %v, want ok=%v", tc.specs, err, tc.ok)
			continue
		}
		if tc.ok && rw.String() != tc.str {
			t.Errorf("%v: String() = %q, want %q", tc.specs, rw.String(), tc.str)
		}
	}
	rw := Rewrite{unix.SIGTERM: unix.SIGUSR1}
	if rw.Apply(unix.SIGTERM) != unix.SIGUSR1 || rw.Apply(unix.SIGINT) != unix.SIGINT {
		t.Errorf("Apply does not map TERM->USR1 and leave INT")
	}
}

func TestForwardable(t *testing.T) {
	for _, s := range []unix.Signal{unix.SIGCHLD, unix.SIGURG, unix.SIGTTIN, unix.SIGTTOU, unix.SIGPIPE, unix.SIGKILL, unix.SIGSTOP, 0, 65} {
		if Forwardable(s) {
			t.Errorf("%v is forwardable", s)
		}
	}
	for _, s := range []unix.Signal{unix.SIGHUP, unix.SIGINT, unix.SIGQUIT, unix.SIGUSR1, unix.SIGUSR2, unix.SIGTERM,
		unix.SIGWINCH, unix.SIGCONT, unix.SIGALRM, unix.SIGSEGV, unix.SIGBUS, unix.SIGTSTP, 40} {
		if !Forwardable(s) {
			t.Errorf("%v is not forwardable", s)
		}
	}
}

type sent struct {
	pid int
	sig unix.Signal
}

// recorder is a KillFunc that records what it was asked to send.
type recorder struct {
	mu   sync.Mutex
	sent []sent
	err  error
}

func (r *recorder) kill(pid int, sig unix.Signal) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.sent = append(r.sent, sent{pid, sig})
	return r.err
}

func TestForward(t *testing.T) {
	defer goleak.VerifyNone(t)
	rec := &recorder{}
	in := make(chan os.Signal)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		Forward(ctx, in, Target{Pid: 42}, Rewrite{unix.SIGTERM: unix.SIGUSR1}, rec.kill, slog.New(slog.DiscardHandler))
		close(done)
	}()
	for _, s := range []os.Signal{unix.SIGCHLD, unix.SIGTERM, unix.SIGURG, unix.SIGHUP, os.Interrupt} {
		in <- s
	}
	cancel()
	<-done
	want := []sent{{-42, unix.SIGUSR1}, {-42, unix.SIGHUP}, {-42, unix.SIGINT}}
	if len(rec.sent) != len(want) {
		t.Fatalf("sent %v, want %v", rec.sent, want)
	}
	for i := range want {
		if rec.sent[i] != want[i] {
			t.Errorf("sent[%d] = %v, want %v", i, rec.sent[i], want[i])
		}
	}
}

func TestDeliverChildOnlyAndErrors(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	rec := &recorder{}
	if !Deliver(Target{Pid: 7, ChildOnly: true}, nil, rec.kill, unix.SIGUSR2, log) || rec.sent[0] != (sent{7, unix.SIGUSR2}) {
		t.Errorf("child-only delivery sent %v", rec.sent)
	}
	rec = &recorder{err: unix.ESRCH}
	if Deliver(Target{Pid: 7}, nil, rec.kill, unix.SIGTERM, log) {
		t.Errorf("Deliver reported success on ESRCH")
	}
	if Deliver(Target{Pid: 7}, nil, rec.kill, unix.SIGCHLD, log) || len(rec.sent) != 1 {
		t.Errorf("SIGCHLD was forwarded")
	}
	// lifeboat's own SIGPIPE (its stderr's reader went away) is not the
	// trainer's business.
	if Deliver(Target{Pid: 7}, Rewrite{unix.SIGPIPE: unix.SIGTERM}, rec.kill, unix.SIGPIPE, log) || len(rec.sent) != 1 {
		t.Errorf("SIGPIPE was forwarded: %v", rec.sent)
	}
}
