package signals

import (
	"bytes"
	"log/slog"
	"os"
	"os/exec"
	"runtime/debug"
	"strings"
	"sync"
	"testing"

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
	// SIGURG is the runtime's until main says otherwise (see
	// TestURGFollowsTheRuntime).
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

func TestDeliverToGroup(t *testing.T) {
	rec := &recorder{}
	log := slog.New(slog.DiscardHandler)
	for _, s := range []unix.Signal{unix.SIGCHLD, unix.SIGTERM, unix.SIGHUP, unix.SIGINT} {
		Deliver(Target{Pid: 42}, Rewrite{unix.SIGTERM: unix.SIGUSR1}, rec.kill, s, log)
	}
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

// TestAsyncPreemptOff reads the build settings and GODEBUG as the runtime
// does: the linked defaults first, then the environment, the last
// asyncpreemptoff that parses winning.
func TestAsyncPreemptOff(t *testing.T) {
	ld := func(v string) []debug.BuildSetting { return []debug.BuildSetting{{Key: "-ldflags", Value: v}} }
	shipped := ld("-s -w -X main.version=v1 " + LinkFlag)
	for _, tc := range []struct {
		name  string
		build []debug.BuildSetting
		env   string
		off   bool
	}{
		{"plain build", nil, "", false},
		{"plain build, other ldflags", ld("-s -w -X main.version=v1"), "", false},
		{"plain build, env off", nil, "asyncpreemptoff=1", true},
		{"plain build, env off among others", nil, "madvdontneed=1,asyncpreemptoff=1,gctrace=0", true},
		{"plain build, env not a number", nil, "asyncpreemptoff=yes", false},
		{"shipped", shipped, "", true},
		{"shipped, env on", shipped, "asyncpreemptoff=0", false},
		{"shipped, env other settings", shipped, "gctrace=1", true},
		{"shipped, env on then off", shipped, "asyncpreemptoff=0,asyncpreemptoff=1", true},
		{"shipped, env off then on", shipped, "asyncpreemptoff=1,asyncpreemptoff=0", false},
		{"shipped, env not a number", shipped, "asyncpreemptoff=", true},
		{"shipped, env non-zero", shipped, "asyncpreemptoff=2", true},
		{"-X=", ld("-X=runtime.godebugDefault=asyncpreemptoff=1"), "", true},
		{"--X", ld("--X runtime.godebugDefault=asyncpreemptoff=1"), "", true},
		{"quoted with others", ld(`-s '-X' 'runtime.godebugDefault=x509sha1=1,asyncpreemptoff=1' -w`), "", true},
		{"double-quoted", ld(`-X "runtime.godebugDefault=asyncpreemptoff=1"`), "", true},
		{"pattern", ld("all=-X runtime.godebugDefault=asyncpreemptoff=1"), "", true},
		{"linked 0", ld("-X runtime.godebugDefault=asyncpreemptoff=0"), "", false},
		{"last -X wins", ld("-X runtime.godebugDefault=asyncpreemptoff=1 -X runtime.godebugDefault=gctrace=0"), "", false},
		{"other symbol", ld("-X main.godebugDefault=asyncpreemptoff=1"), "", false},
		{"value of another -X", ld("-X main.note=runtime.godebugDefault=asyncpreemptoff=1"), "", false},
		{"DefaultGODEBUG", []debug.BuildSetting{{Key: "DefaultGODEBUG", Value: "asyncpreemptoff=1"}}, "", true},
		{"-X replaces DefaultGODEBUG", []debug.BuildSetting{{Key: "DefaultGODEBUG", Value: "asyncpreemptoff=1"},
			{Key: "-ldflags", Value: "-X runtime.godebugDefault=gctrace=0"}}, "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := AsyncPreemptOff(BuildGODEBUG(tc.build), tc.env); got != tc.off {
				t.Errorf("AsyncPreemptOff(%q, %q) = %v, want %v", BuildGODEBUG(tc.build), tc.env, got, tc.off)
			}
		})
	}
}

// TestURGFollowsTheRuntime: SIGURG is forwarded (and may be rewritten)
// only while the runtime does not own it, and the reason it is not is
// logged at Debug once.
func TestURGFollowsTheRuntime(t *testing.T) {
	t.Cleanup(func() { SetRuntimeOwnsURG(true) })
	explainedURG = sync.Once{} // TestForward may have used it up
	if !RuntimeOwnsURG() || Forwardable(unix.SIGURG) {
		t.Fatalf("SIGURG is forwardable before main says the runtime leaves it alone")
	}
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	rec := &recorder{}
	for range 3 {
		if Deliver(Target{Pid: 7}, nil, rec.kill, unix.SIGURG, log) {
			t.Errorf("SIGURG delivered while the runtime owns it")
		}
	}
	if n := strings.Count(buf.String(), "signal.urg_not_forwarded"); n != 1 || !strings.Contains(buf.String(), "level=DEBUG") {
		t.Errorf("want one debug line saying why SIGURG is not forwarded; got:\n%s", buf.String())
	}
	if err := (Rewrite{}).ParseRewrite("URG:TERM"); err == nil {
		t.Errorf("URG:TERM accepted while the runtime owns SIGURG")
	}

	SetRuntimeOwnsURG(false)
	if !Forwardable(unix.SIGURG) {
		t.Fatalf("SIGURG is not forwardable with async preemption off")
	}
	if !Deliver(Target{Pid: 7}, nil, rec.kill, unix.SIGURG, log) || len(rec.sent) != 1 || rec.sent[0] != (sent{-7, unix.SIGURG}) {
		t.Errorf("SIGURG not delivered to the group: %v", rec.sent)
	}
	if err := (Rewrite{}).ParseRewrite("URG:TERM"); err != nil {
		t.Errorf("URG:TERM refused with async preemption off: %v", err)
	}
	for _, s := range []unix.Signal{unix.SIGCHLD, unix.SIGPIPE, unix.SIGTTIN, unix.SIGTTOU} {
		if Forwardable(s) {
			t.Errorf("%v became forwardable with SIGURG", s)
		}
	}
}

// TestLinkFlagInEveryBuild keeps the builds outside Go (the image and the
// scripts, which the Makefile uses) on LinkFlag, and checks that LinkFlag
// replaces no GODEBUG default of the go command's: -X
// runtime.godebugDefault overrides its DefaultGODEBUG, so any default it
// computes (a go.mod godebug line, a go line older than the toolchain) must
// be added to LinkFlag.
func TestLinkFlagInEveryBuild(t *testing.T) {
	for _, f := range []string{"../Dockerfile", "../scripts/lib.sh"} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(b), LinkFlag) {
			t.Errorf("%s does not build lifeboat with %q", f, LinkFlag)
		}
	}
	out, err := exec.Command("go", "list", "-f", "{{.DefaultGODEBUG}}", "github.com/lifeboat-project/lifeboat/cmd/lifeboat").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	if def := strings.TrimSpace(string(out)); def != "" {
		t.Errorf("the go command links lifeboat with GODEBUG defaults %q, which LinkFlag replaces; add them to LinkFlag's value", def)
	}
}

func TestParseDelivery(t *testing.T) {
	for _, d := range []Delivery{MainFirst, Group, MainOnly} {
		got, err := ParseDelivery(d.String())
		if err != nil || got != d {
			t.Errorf("ParseDelivery(%q) = %v, %v", d.String(), got, err)
		}
	}
	if _, err := ParseDelivery("sideways"); err == nil || !strings.Contains(err.Error(), "main-first, group or main-only") {
		t.Errorf("ParseDelivery(sideways) = %v, want an error naming the choices", err)
	}
}
