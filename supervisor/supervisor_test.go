package supervisor

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/lifeboat-project/lifeboat/signals"
)

func TestStatusAndExitCode(t *testing.T) {
	exited := func(c int) unix.WaitStatus { return unix.WaitStatus(c << 8) }
	signaled := func(s unix.Signal) unix.WaitStatus { return unix.WaitStatus(s) }
	for _, tc := range []struct {
		name      string
		ws        unix.WaitStatus
		preempted bool
		preempt   int
		want      int
	}{
		{"exit 0", exited(0), false, 143, 0},
		{"exit 3", exited(3), false, 143, 3},
		{"exit 255", exited(255), false, 143, 255},
		{"killed by TERM", signaled(unix.SIGTERM), false, 143, 143},
		{"killed by KILL", signaled(unix.SIGKILL), true, 143, 137},
		{"preempted exit 0", exited(0), true, 143, 143},
		{"preempted exit 0, custom code", exited(0), true, 99, 99},
		{"preempted exit 0, keep child's", exited(0), true, PreemptChild, 0},
		{"preempted exit 1 keeps 1", exited(1), true, 143, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := exitCode(tc.ws, tc.preempted, tc.preempt); got != tc.want {
				t.Errorf("exitCode = %d, want %d", got, tc.want)
			}
		})
	}
}

func TestParseStat(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want proc
		ok   bool
	}{
		{"42 (python) S 1 42 42 0 -1", proc{42, 1, 'S'}, true},
		{"43 (a) b) (c) Z 42 43 43", proc{43, 42, 'Z'}, true},
		{"44 (with space) R 7 1", proc{44, 7, 'R'}, true},
		{"garbage", proc{}, false},
		{"45 (x) S", proc{}, false},
		{"x (y) S 1", proc{}, false},
	} {
		got, ok := parseStat([]byte(tc.in))
		if ok != tc.ok || (ok && got != tc.want) {
			t.Errorf("parseStat(%q) = %+v, %v; want %+v, %v", tc.in, got, ok, tc.want, tc.ok)
		}
	}
}

// writeProc writes a fake /proc tree: pid -> "ppid state".
func writeProc(t *testing.T, procs map[int]string) string {
	t.Helper()
	root := t.TempDir()
	for pid, rest := range procs {
		dir := filepath.Join(root, itoa(pid))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		f := strings.Fields(rest)
		stat := itoa(pid) + " (p " + itoa(pid) + ") " + f[1] + " " + f[0] + " 0 0"
		if err := os.WriteFile(filepath.Join(dir, "stat"), []byte(stat), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.MkdirAll(filepath.Join(root, "self"), 0o755); err != nil {
		t.Fatal(err)
	}
	return root
}

func itoa(i int) string { return fmtInt(i) }

func fmtInt(i int) string {
	if i == 0 {
		return "0"
	}
	var b []byte
	for ; i > 0; i /= 10 {
		b = append([]byte{byte('0' + i%10)}, b...)
	}
	return string(b)
}

func TestDescendants(t *testing.T) {
	// 1 is lifeboat; 10 the child; 11 its worker; 12 a zombie; 20 an
	// escapee reparented to 1; 30 a process outside the tree.
	root := writeProc(t, map[int]string{
		1: "0 S", 10: "1 S", 11: "10 R", 12: "10 Z", 13: "11 S", 20: "1 S", 30: "0 S", 31: "30 S",
	})
	procs, err := readProcs(root)
	if err != nil {
		t.Fatal(err)
	}
	got := descendants(procs, 1)
	want := []int{10, 20, 11, 13}
	if len(got) != len(want) {
		t.Fatalf("descendants = %v, want %v (any order, parents first)", got, want)
	}
	seen := map[int]bool{}
	for _, p := range got {
		seen[p] = true
	}
	for _, p := range want {
		if !seen[p] {
			t.Errorf("descendants = %v, missing %d", got, p)
		}
	}
	if _, err := readProcs(filepath.Join(root, "missing")); err == nil {
		t.Errorf("readProcs of a missing dir succeeded")
	}
}

// TestValidate: each thing wrong with a Config is a *FieldError naming
// Config's field (the caller names it as its user gave it), and a Config
// without a command an error.
func TestValidate(t *testing.T) {
	if err := (&Config{}).Validate(); err == nil || !strings.Contains(err.Error(), "no command") {
		t.Errorf("Validate of a Config without Argv = %v, want it to say there is no command", err)
	}
	for _, tc := range []struct {
		cfg   Config
		field string
		value string
	}{
		{Config{Grace: -time.Second}, FieldGrace, "-1s"},
		{Config{PreemptExitCode: 300}, FieldPreemptExitCode, "300"},
		{Config{StopSignals: []unix.Signal{unix.SIGCHLD}}, FieldStopSignals, "CHLD"},
		{Config{StopSignals: []unix.Signal{unix.SIGPIPE}}, FieldStopSignals, "PIPE"},
		{Config{ChildOnly: true, StopDelivery: signals.Group}, FieldStopDelivery, "group"},
		{Config{StopDelivery: 7}, FieldStopDelivery, "Delivery(7)"},
		{Config{MaxRuntime: -time.Hour}, FieldMaxRuntime, "-1h0m0s"},
		{Config{Restart: RestartPolicy{Max: -1}}, FieldMaxRestarts, "-1"},
		{Config{Restart: RestartPolicy{Backoff: -time.Second}}, FieldRestartBackoff, "-1s"},
		{Config{Restart: RestartPolicy{OnFailure: true}}, FieldMaxRestarts, "0"},
	} {
		tc.cfg.Argv = []string{"x"}
		var fe *FieldError
		if err := tc.cfg.Validate(); !errors.As(err, &fe) || fe.Field != tc.field || fe.Value != tc.value {
			t.Errorf("Validate(%+v) = %v, want a FieldError of %s %s", tc.cfg, err, tc.field, tc.value)
		}
		if (tc.cfg.ChildOnly && tc.cfg.StopDelivery == signals.Group) != errors.Is(fe, ErrGroupChildOnly) {
			t.Errorf("Validate(%+v) = %v; ErrGroupChildOnly only for a group delivery with ChildOnly", tc.cfg, fe)
		}
		if tc.cfg.Restart.OnFailure != errors.Is(fe, ErrNoRestarts) {
			t.Errorf("Validate(%+v) = %v; ErrNoRestarts only for restarts on failure", tc.cfg, fe)
		}
	}
	ok := Config{Argv: []string{"x"}}
	if err := ok.Validate(); err != nil {
		t.Errorf("Validate of a good config: %v", err)
	}
}

func TestResolve(t *testing.T) {
	dir := t.TempDir()
	exe := filepath.Join(dir, "train")
	noexec := filepath.Join(dir, "data")
	_ = os.WriteFile(exe, []byte("#!/bin/sh\n"), 0o755)
	_ = os.WriteFile(noexec, []byte("x"), 0o644)
	env := []string{"PATH=" + dir}
	for _, tc := range []struct {
		argv0 string
		path  string
		code  int
	}{
		{"train", exe, 0}, {exe, exe, 0}, {"data", "", CodeNotExecutable}, {noexec, "", CodeNotExecutable},
		{"nope", "", CodeNotFound}, {filepath.Join(dir, "nope"), "", CodeNotFound}, {dir, "", CodeNotExecutable},
		{"", "", CodeNotFound},
	} {
		got, err := resolve(tc.argv0, env)
		var ee *ExitError
		switch {
		case tc.code == 0 && (err != nil || got != tc.path):
			t.Errorf("resolve(%q) = %q, %v; want %q", tc.argv0, got, err, tc.path)
		case tc.code != 0 && (!errors.As(err, &ee) || ee.Code != tc.code):
			t.Errorf("resolve(%q) error %v, want exit code %d", tc.argv0, err, tc.code)
		}
	}
}

// sendRecorder wraps unix.Kill and records every call.
type sendRecorder struct {
	mu   sync.Mutex
	sent []string
}

func (r *sendRecorder) kill(pid int, sig unix.Signal) error {
	r.mu.Lock()
	r.sent = append(r.sent, signals.Name(sig))
	r.mu.Unlock()
	return unix.Kill(pid, sig)
}

// TestRunInjectedSignals drives the loop through its seams: signals come
// from a channel, sends go through a recording KillFunc.
func TestRunInjectedSignals(t *testing.T) {
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Fatal(err)
	}
	in := make(chan os.Signal, 4)
	rec := &sendRecorder{}
	ready := filepath.Join(t.TempDir(), "ready")
	in <- unix.SIGURG  // the runtime's in a test binary (preemption on): not forwarded
	in <- unix.SIGPIPE // lifeboat's own (its stderr's reader left): never forwarded
	done := make(chan error, 1)
	go func() {
		done <- Run(context.Background(), Config{
			Argv:    []string{sh, "-c", `trap 'exit 0' USR1; touch "$0"; while :; do sleep 0.05; done`, ready},
			Signals: in, Kill: rec.kill, Rewrite: signals.Rewrite{unix.SIGTERM: unix.SIGUSR1},
		})
	}()
	waitFile(t, ready)
	in <- unix.SIGTERM
	err = <-done
	var ee *ExitError
	if !errors.As(err, &ee) || ee.Code != DefaultPreemptExitCode || !ee.Preempted {
		t.Fatalf("Run = %v, want preempted exit 143", err)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if !reflect.DeepEqual(rec.sent[:1], []string{"USR1"}) {
		t.Errorf("sent %v, want USR1 first (URG and PIPE are never forwarded)", rec.sent)
	}
}

// TestRunContextDone: a cancelled context stops the child as the first
// stop signal would.
func TestRunContextDone(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := Run(ctx, Config{Argv: []string{"sleep", "60"}, Signals: make(chan os.Signal)})
	var ee *ExitError
	if !errors.As(err, &ee) || ee.Code != 143 || !ee.Preempted {
		t.Fatalf("Run = %v, want 143 after TERM from the cancelled context", err)
	}
}

// TestImports keeps the PID-1 path free of heavy dependencies: only the
// standard library, golang.org/x/sys/unix and lifeboat's signals package.
func TestImports(t *testing.T) {
	for _, pkg := range []string{".", "../signals"} {
		out, err := exec.Command("go", "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", pkg).Output()
		if err != nil {
			t.Fatalf("go list %s: %v", pkg, err)
		}
		for _, dep := range strings.Fields(string(out)) {
			switch dep {
			case "golang.org/x/sys/unix", "github.com/lifeboat-project/lifeboat/signals",
				"github.com/lifeboat-project/lifeboat/supervisor":
			default:
				t.Errorf("%s depends on %s", pkg, dep)
			}
		}
	}
}

// TestNoticePullsInDeadline: a preemption notice sends the notice signal
// and moves the end of the grace budget to the notice's deadline: a
// trainer that ignores it, and the TERM that follows a notice signal that
// is not a stop signal, is killed then, long before the 1h grace, and
// that is a preemption (143).
func TestNoticePullsInDeadline(t *testing.T) {
	notices := make(chan Notice, 1)
	rec := &sendRecorder{}
	ready := filepath.Join(t.TempDir(), "ready")
	done := make(chan error, 1)
	go func() {
		done <- Run(context.Background(), Config{
			Argv:    []string{"sh", "-c", `trap '' TERM USR1; touch "$0"; while :; do sleep 0.05; done`, ready},
			Signals: make(chan os.Signal), Kill: rec.kill, Grace: time.Hour,
			Notices: notices, NoticeSignal: unix.SIGUSR1,
		})
	}()
	for {
		if _, err := os.Stat(ready); err == nil {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	notices <- Notice{Source: "aws", Deadline: time.Now().Add(NoticeMinLead + time.Second)}
	err := <-done
	var ee *ExitError
	if !errors.As(err, &ee) || ee.Code != 143 || !ee.Preempted {
		t.Fatalf("Run = %v, want 143 (killed at the notice's deadline: a preemption), preempted", err)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.sent) < 2 || rec.sent[0] != "USR1" || rec.sent[1] != "TERM" {
		t.Errorf("sent %v, want USR1, then TERM", rec.sent)
	}
}

func TestDescendantsExported(t *testing.T) {
	root := writeProc(t, map[int]string{1: "0 S", 10: "1 S", 11: "10 S", 30: "0 S"})
	got, err := Descendants(root, 1)
	if err != nil || len(got) != 2 {
		t.Errorf("Descendants = %v, %v; want 10 and 11", got, err)
	}
	if _, err := Descendants(filepath.Join(root, "missing"), 1); err == nil {
		t.Errorf("Descendants of a missing /proc succeeded")
	}
}

// TestReapAndKillHooks: every reaped process is reported with its status,
// and Observer.Killing is told before the tree is SIGKILLed at the grace deadline,
// while the trainer is still alive.
func TestReapAndKillHooks(t *testing.T) {
	ready := filepath.Join(t.TempDir(), "ready")
	var mu sync.Mutex
	var reaped []unix.WaitStatus
	aliveAtKill := false
	var pid int
	in := make(chan os.Signal, 1)
	done := make(chan error, 1)
	go func() {
		done <- Run(context.Background(), Config{
			Argv:    []string{"sh", "-c", `trap '' TERM; touch "$0"; while :; do sleep 0.05; done`, ready},
			Signals: in, Grace: 300 * time.Millisecond,
			Observer: &hooks{reaped: func(p int, ws unix.WaitStatus, at time.Time) {
				mu.Lock()
				defer mu.Unlock()
				if p == pid {
					reaped = append(reaped, ws)
				}
			}, killing: func(time.Time) {
				mu.Lock()
				defer mu.Unlock()
				aliveAtKill = unix.Kill(pid, 0) == nil
			}},
		})
	}()
	for {
		if _, err := os.Stat(ready); err == nil {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	mu.Lock()
	pid = findChild(t, "sh")
	mu.Unlock()
	in <- unix.SIGTERM
	if err := <-done; err == nil {
		t.Fatal("Run = nil, want the SIGKILLed trainer's 137")
	}
	mu.Lock()
	defer mu.Unlock()
	if !aliveAtKill {
		t.Errorf("Killing was told when the trainer was already gone (or never ran)")
	}
	if len(reaped) != 1 || !reaped[0].Signaled() || reaped[0].Signal() != unix.SIGKILL {
		t.Errorf("Reaped for the trainer got %v, want one SIGKILL status", reaped)
	}
}

// findChild is the pid of lifeboat's (this test's) direct child named comm.
func findChild(t *testing.T, comm string) int {
	t.Helper()
	procs, err := readProcs("/proc")
	if err != nil {
		t.Fatal(err)
	}
	self := os.Getpid()
	for _, p := range procs {
		if p.ppid == self {
			b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", p.pid))
			if strings.TrimSpace(string(b)) == comm {
				return p.pid
			}
		}
	}
	t.Fatalf("no child named %s", comm)
	return 0
}

// waitZombie waits until this test's child pid is dead: a zombie, or
// already reaped by the loop (it also reaps on its own tick).
func waitZombie(t *testing.T, pid int) {
	t.Helper()
	deadline := time.Now().Add(hangLimit)
	for time.Now().Before(deadline) {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if errors.Is(err, os.ErrNotExist) {
			return
		}
		if err != nil {
			t.Fatalf("child %d: %v", pid, err)
		}
		if p, ok := parseStat(b); ok && p.state == 'Z' {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("child %d did not die within %s", pid, hangLimit)
}

// TestJobWideStop: a trainer SIGKILLed at the grace deadline of a stop
// exits 137, unless Job.JobWideStop names a job-wide stop: then lifeboat
// exits with the preemption code, says so in the termination log and in
// supervisor.exit, and JobWideStop is asked once. With PreemptChild, a
// trainer that exits at the stop, or one SIGKILLed by another than
// lifeboat, it is not asked.
func TestJobWideStop(t *testing.T) {
	for _, tc := range []struct {
		name     string
		script   string
		answer   string
		preempt  int
		want     int
		asked    int
		inTermLg string
	}{
		{"job-wide", `trap '' TERM`, "rank 1: SIGTERM", 0, 143, 1, "part of a job-wide stop (rank 1: SIGTERM), so a preemption; exit code 143"},
		{"this pod's alone", `trap '' TERM`, "", 0, 137, 1, "; exit code 137"},
		{"own preemption code", `trap '' TERM`, "rank 0: SIGTERM", 99, 99, 1, "; exit code 99"},
		{"the child's code", `trap '' TERM`, "rank 1: SIGTERM", PreemptChild, 137, 0, "; exit code 137"},
		{"trainer exits at the stop", `trap 'exit 0' TERM`, "rank 1: SIGTERM", 0, 143, 0, "; exit code 143"},
		// Killed, but not by lifeboat at the deadline (the OOM killer, say):
		// a failure, not a preemption.
		{"trainer SIGKILLed by another", "", "rank 1: SIGTERM", 0, 137, 0, "; exit code 137"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			ready, tlog := filepath.Join(dir, "ready"), filepath.Join(dir, "termination-log")
			logs := &logBuffer{}
			in := make(chan os.Signal, 1)
			var asked atomic.Int32
			// The test's own SIGKILL must come before lifeboat's: with the
			// deadline an hour away, no busy machine makes it late.
			grace := 300 * time.Millisecond
			if tc.script == "" {
				grace = time.Hour
			}
			done := make(chan error, 1)
			go func() {
				done <- Run(context.Background(), Config{
					Argv:    []string{"sh", "-c", cmp.Or(tc.script, `trap '' TERM`) + `; touch "$0"; while :; do sleep 0.05; done`, ready},
					Signals: in, Grace: grace, PreemptExitCode: tc.preempt,
					Log: logs.logger(), TerminationLog: tlog, TerminationLogCreate: true,
					Job: &hooks{jobWideStop: func() string { asked.Add(1); return tc.answer }},
				})
			}()
			waitFile(t, ready)
			in <- unix.SIGTERM
			if tc.script == "" {
				waitLog(t, logs, "supervisor.stopping", done)
				pid := findChild(t, "sh")
				if err := unix.Kill(pid, unix.SIGKILL); err != nil {
					t.Fatal(err)
				}
				// The kernel's SIGCHLD comes once the child is dead; the
				// test injects its signals, so it waits for that too.
				waitZombie(t, pid)
				in <- unix.SIGCHLD
			}
			err := waitRun(t, done, logs)
			var ee *ExitError
			if !errors.As(err, &ee) || ee.Code != tc.want {
				t.Fatalf("Run = %v, want exit code %d; log:\n%s", err, tc.want, logs.String())
			}
			if n := asked.Load(); int(n) != tc.asked {
				t.Errorf("JobWideStop asked %d times, want %d", n, tc.asked)
			}
			b, _ := os.ReadFile(tlog)
			if !strings.Contains(string(b), tc.inTermLg) || strings.Count(string(b), "\n") != 1 {
				t.Errorf("termination log %q, want one line with %q", b, tc.inTermLg)
			}
			if jobWide := tc.want != 137 && tc.asked == 1; strings.Contains(string(b), "job-wide") != jobWide {
				t.Errorf("termination log %q: mentions the job-wide stop %v, want %v", b, !jobWide, jobWide)
			}
			want := fmt.Sprintf(`"msg":"supervisor.exit","code":%d,`, tc.want)
			if !strings.Contains(logs.String(), want) {
				t.Errorf("log has no %s; log:\n%s", want, logs.String())
			}
		})
	}
}
