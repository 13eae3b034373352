package supervisor

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// noticeRun is a supervision on a fake clock of a trainer that writes its
// pid and then ignores every signal but SIGKILL, or exits 0 on TERM.
type noticeRun struct {
	clock *fakeClock
	k     *killLog
	logs  *logBuffer
	in    chan os.Signal
	ns    chan Notice
	done  chan error
	tlog  string
	pid   int
	ended bool // Run's result was read
}

func startNoticeRun(t *testing.T, grace time.Duration, noticeSig unix.Signal, exitOnTerm bool) *noticeRun {
	t.Helper()
	dir := t.TempDir()
	pidFile := filepath.Join(dir, "pid")
	r := &noticeRun{clock: newFakeClock(), k: &killLog{}, logs: &logBuffer{}, in: make(chan os.Signal, 1),
		ns: make(chan Notice, 1), done: make(chan error, 1), tlog: filepath.Join(dir, "tlog")}
	onTerm := "''"
	if exitOnTerm {
		onTerm = "'exit 0'"
	}
	script := fmt.Sprintf(`trap '' USR1 USR2; trap %s TERM; echo $$ > "$0.tmp"; mv "$0.tmp" "$0"; while :; do sleep 0.05; done`, onTerm)
	go func() {
		r.done <- Run(context.Background(), Config{Argv: []string{"sh", "-c", script, pidFile},
			Signals: r.in, Notices: r.ns, NoticeSignal: noticeSig, Kill: r.k.kill, Clock: r.clock, Grace: grace,
			TerminationLog: r.tlog, TerminationLogCreate: true, Log: r.logs.logger()})
	}()
	waitFor(t, "the trainer's pid", func() bool {
		b, err := os.ReadFile(pidFile)
		_, serr := fmt.Sscan(string(b), &r.pid)
		return err == nil && serr == nil
	})
	t.Cleanup(func() {
		// A test that failed half way leaves no loop behind to reap the
		// next test's trainer (every loop waits for any child).
		if !r.ended {
			_ = unix.Kill(-r.pid, unix.SIGKILL)
			r.clock.advance(time.Hour)
			<-r.done
		}
	})
	return r
}

// notice sends n and waits until the stop's timers are armed.
func (r *noticeRun) notice(t *testing.T, n Notice) {
	t.Helper()
	r.ns <- n
	waitLog(t, r.logs, "supervisor.stopping", r.done)
}

// exit waits for Run and returns lifeboat's exit code.
func (r *noticeRun) exit(t *testing.T) int {
	t.Helper()
	err := waitRun(t, r.done, r.logs)
	r.ended = true
	var ee *ExitError
	if err == nil {
		return 0
	}
	if !errors.As(err, &ee) {
		t.Fatalf("Run = %v", err)
	}
	return ee.Code
}

// TestNoticeDeadlineChecked: a notice's deadline is believed only when it
// leaves the trainer NoticeMinLead; one already past or a second away is
// said (supervisor.notice_deadline_unusable) and the stop runs on the
// grace period from the notice, and one years away is clamped to the
// grace period as any later deadline is. A trainer SIGKILLed at the end of
// a notice's budget was preempted: exit 143, and the termination log and
// supervisor.grace_expired say which budget was used.
func TestNoticeDeadlineChecked(t *testing.T) {
	const grace = 30 * time.Second
	for _, tc := range []struct {
		name     string
		deadline time.Duration // from the notice; 0 for none
		budget   time.Duration // the kill alarm armed
		unusable bool
	}{
		{"past", -6 * time.Second, grace, true},
		{"a second away", time.Second, grace, true},
		{"just usable", NoticeMinLead + ExitMargin, NoticeMinLead, false},
		{"twenty seconds away", 20 * time.Second, 20*time.Second - ExitMargin, false},
		{"years away", 5 * 365 * 24 * time.Hour, grace, false},
		{"none", 0, grace, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := startNoticeRun(t, grace, unix.SIGTERM, false)
			n := Notice{Source: "url"}
			if tc.deadline != 0 {
				n.Deadline = r.clock.Now().Add(tc.deadline)
			}
			r.notice(t, n)
			if got := r.clock.armed(); !slices.Contains(got, tc.budget) || slices.Max(got) != tc.budget {
				t.Fatalf("timers armed %v, want the kill at %v", got, tc.budget)
			}
			ev := logEvents(t, r.logs, "supervisor.notice_deadline_unusable")
			if tc.unusable != (len(ev) == 1) {
				t.Fatalf("%d supervisor.notice_deadline_unusable, want it: %v; log:\n%s", len(ev), tc.unusable, r.logs.String())
			}
			if tc.unusable && ev[0]["left"] != (tc.deadline-ExitMargin).String() {
				t.Errorf("left = %v, want %v", ev[0]["left"], tc.deadline-ExitMargin)
			}
			stopping := logEvents(t, r.logs, "supervisor.stopping")
			if want := logTime(r.clock.Now().Add(tc.budget)); len(stopping) != 1 || stopping[0]["deadline"] != want {
				t.Errorf("supervisor.stopping %v, want deadline %s", stopping, want)
			}
			if got := r.k.list(r.pid); !slices.Equal(got, []string{fmt.Sprintf("%d:TERM", r.pid)}) {
				t.Errorf("sent %v at the notice, want TERM to the trainer", got)
			}
			r.clock.advance(tc.budget)
			if code := r.exit(t); code != 143 {
				t.Errorf("exit %d, want 143: a trainer killed at a notice's deadline was preempted", code)
			}
			ge := logEvents(t, r.logs, "supervisor.grace_expired")
			if len(ge) != 1 || ge[0]["grace"] != tc.budget.String() {
				t.Errorf("supervisor.grace_expired %v, want grace %s (the budget used)", ge, tc.budget)
			}
			if b, _ := os.ReadFile(r.tlog); !strings.Contains(string(b), "killed at the end of a preemption notice's budget, so a preemption") ||
				!strings.Contains(string(b), "exit code 143") {
				t.Errorf("termination log %q", b)
			}
		})
	}
}

// TestNoticeSignalFollowedByStop: with a notice signal that is not a stop
// signal (USR1, "save now"), the trainer gets TERM when half the notice's
// budget has passed (a budget never longer than the grace period), so it
// exits on its own with 143; one that ignores
// the TERM too is SIGKILLed at the deadline and it is still a preemption.
// A stop signal received in between is the TERM: none follows.
func TestNoticeSignalFollowedByStop(t *testing.T) {
	const grace = 30 * time.Second
	for _, tc := range []struct {
		name       string
		deadline   time.Duration // 0: none
		termAt     time.Duration
		budget     time.Duration
		exitOnTerm bool
		sigterm    bool // a SIGTERM reaches lifeboat before termAt
	}{
		{"aws two minutes, clamped to the grace", 2 * time.Minute, grace / 2, grace, true, false},
		{"gcp thirty seconds", 30 * time.Second, (30*time.Second - ExitMargin) / 2, 30*time.Second - ExitMargin, true, false},
		{"ten seconds", 10 * time.Second, (10*time.Second - ExitMargin) / 2, 10*time.Second - ExitMargin, true, false},
		{"no deadline", 0, grace / 2, grace, true, false},
		{"TERM ignored", 2 * time.Minute, grace / 2, grace, false, false},
		{"kubelet's TERM first", 2 * time.Minute, 0, grace, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := startNoticeRun(t, grace, unix.SIGUSR1, tc.exitOnTerm)
			n := Notice{Source: "aws"}
			if tc.deadline != 0 {
				n.Deadline = r.clock.Now().Add(tc.deadline)
			}
			r.notice(t, n)
			usr1 := []string{fmt.Sprintf("%d:USR1", r.pid)}
			if got := r.k.list(r.pid); !slices.Equal(got, usr1) {
				t.Fatalf("sent %v at the notice, want USR1 only", got)
			}
			if tc.sigterm {
				r.in <- unix.SIGTERM
				waitFor(t, "the TERM forwarded", func() bool { return len(r.k.list(r.pid)) == 2 })
				r.clock.advance(tc.budget - time.Millisecond)
				if got := r.k.list(r.pid); len(got) != 2 {
					t.Errorf("sent %v, want no second TERM after the one lifeboat received", got)
				}
				r.clock.advance(time.Millisecond)
			} else {
				if got := r.clock.armed(); !slices.Equal(got, []time.Duration{tc.termAt, tc.budget}) {
					t.Fatalf("timers armed %v, want TERM at %v and the kill at %v", got, tc.termAt, tc.budget)
				}
				r.clock.advance(tc.termAt - time.Millisecond)
				if got := r.k.list(r.pid); !slices.Equal(got, usr1) {
					t.Fatalf("sent %v before the TERM is due", got)
				}
				r.clock.advance(time.Millisecond)
				waitLog(t, r.logs, "supervisor.stop_after_notice", r.done)
				if got, want := r.k.list(r.pid), append(usr1, fmt.Sprintf("%d:TERM", r.pid)); !slices.Equal(got[:min(2, len(got))], want) {
					t.Fatalf("sent %v, want USR1 then TERM", got)
				}
				if !tc.exitOnTerm {
					r.clock.advance(tc.budget - tc.termAt)
				}
			}
			if code := r.exit(t); code != 143 {
				t.Errorf("exit %d, want 143 (a preemption)", code)
			}
			killed := slices.Contains(r.k.list(r.pid), fmt.Sprintf("%d:KILL", -r.pid))
			if killed == tc.exitOnTerm {
				t.Errorf("sent %v: SIGKILL %v, want it only for a trainer that ignores TERM", r.k.list(r.pid), killed)
			}
		})
	}
}
