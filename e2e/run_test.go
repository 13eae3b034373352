package e2e

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"io"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/lifeboat-project/lifeboat/internal/testenv"
)

// TestForwardsEverySignalToTheGroup sends every catchable signal to
// lifeboat, including SEGV, BUS and URG (lifeboat is built as it ships, with
// asynchronous preemption off), and checks that both the child and a
// grandchild in its process group receive each one, and that lifeboat
// survives them all.
func TestForwardsEverySignalToTheGroup(t *testing.T) {
	sigs := []syscall.Signal{
		syscall.SIGHUP, syscall.SIGINT, syscall.SIGQUIT, syscall.SIGUSR1, syscall.SIGUSR2, syscall.SIGWINCH,
		syscall.SIGCONT, syscall.SIGALRM, syscall.SIGSEGV, syscall.SIGBUS, syscall.SIGABRT, syscall.SIGPWR,
		syscall.SIGURG, syscall.SIGTERM,
	}
	for _, mode := range modes {
		t.Run(mode, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "rec")
			p := start(t, mode, "run", "--grace", "1m", "--", childBin, "record", out, "TERM", "grandchild")
			waitFile(t, p, out+".ready")
			for i, s := range sigs {
				p.signal(s)
				// One at a time, so the order is known and none coalesce.
				waitLines(t, out, i+1)
				waitLines(t, out+".gc", i+1)
			}
			if code := p.wait(); code != 143 {
				t.Errorf("exit code %d, want 143 (stopped by TERM, child exited 0); stderr:\n%s", code, p.stderr.String())
			}
			var want []string
			for _, s := range sigs {
				want = append(want, strings.TrimPrefix(unix.SignalName(s), "SIG"))
			}
			for _, f := range []string{out, out + ".gc"} {
				got := waitLines(t, f, len(want))
				if strings.Join(got, " ") != strings.Join(want, " ") {
					t.Errorf("%s received %v, want %v", filepath.Base(f), got, want)
				}
			}
		})
	}
}

// TestSignalChildOnly checks that --signal-child-only spares the group:
// the grandchild sees only the TERM sent to leftovers after the child exits.
func TestSignalChildOnly(t *testing.T) {
	out := filepath.Join(t.TempDir(), "rec")
	p := start(t, "plain", "run", "--signal-child-only", "--", childBin, "record", out, "TERM", "grandchild")
	waitFile(t, p, out+".ready")
	p.signal(syscall.SIGUSR1)
	waitLines(t, out, 1)
	p.signal(syscall.SIGTERM)
	p.wait()
	if got := strings.Join(waitLines(t, out, 2), " "); got != "USR1 TERM" {
		t.Errorf("child received %q, want \"USR1 TERM\"", got)
	}
	if got := strings.Join(waitLines(t, out+".gc", 1), " "); got != "TERM" {
		t.Errorf("grandchild received %q, want only the TERM sent to leftovers", got)
	}
}

// TestRewrite checks that --rewrite TERM:USR1 delivers USR1 and that the
// grace deadline still starts on the received TERM.
func TestRewrite(t *testing.T) {
	out := filepath.Join(t.TempDir(), "rec")
	p := start(t, "plain", "run", "--rewrite", "TERM:USR1", "--grace", "1s", "--", childBin, "record", out, "never")
	waitFile(t, p, out+".ready")
	p.signal(syscall.SIGTERM)
	// The child ignores USR1 as an exit request, so only the deadline ends it.
	if code := p.wait(); code != 137 {
		t.Errorf("exit code %d, want 137 (killed at the grace deadline)", code)
	}
	if got := strings.Join(waitLines(t, out, 1), " "); got != "USR1" {
		t.Errorf("child received %q, want USR1", got)
	}
	if !strings.Contains(p.stderr.String(), "supervisor.grace_expired") {
		t.Errorf("no grace_expired event; stderr:\n%s", p.stderr.String())
	}
}

// TestReapsThousandOrphans checks that 1000 orphans exiting at once are all
// reaped, as PID 1 and as a subreaper when not PID 1.
func TestReapsThousandOrphans(t *testing.T) {
	for _, mode := range modes {
		t.Run(mode, func(t *testing.T) {
			p := start(t, mode, "run", "--log-level", "debug", "--", childBin, "orphans", "1000")
			if code := p.wait(); code != 0 {
				t.Fatalf("exit code %d, want 0; stderr tail:\n%s", code, tail(p.stderr.String()))
			}
			if n := strings.Count(p.stderr.String(), `"msg":"supervisor.reaped"`); n != 1000 {
				t.Errorf("lifeboat reaped %d orphans, want 1000", n)
			}
		})
	}
}

// TestNoLostEarlySignal sends TERM 0-5 ms after start, 200 times; the child
// must never run on.
func TestNoLostEarlySignal(t *testing.T) {
	tries := 200
	if testing.Short() {
		tries = 40
	}
	rng := rand.New(rand.NewSource(1))
	for i := 0; i < tries; i++ {
		marker := fmt.Sprintf("%dms", 600000+i) // unique argv for this try
		cmd := exec.Command(lifeboatBin, "run", "--log-level", "error", "--", childBin, "sleep", marker)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Duration(rng.Intn(5000)) * time.Microsecond)
		_ = cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(hangLimit):
			_ = cmd.Process.Kill()
			t.Fatalf("try %d: lifeboat did not exit after TERM", i)
		}
		if pids := findProcs(childBin + "\x00sleep\x00" + marker); len(pids) > 0 {
			for _, pid := range pids {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
			t.Fatalf("try %d: child %v runs on after lifeboat got TERM and exited", i, pids)
		}
	}
}

// findProcs returns the pids whose command line starts with prefix
// (NUL-separated).
func findProcs(prefix string) []int {
	var out []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && strings.HasPrefix(string(b), prefix) && processAlive(pid) {
			out = append(out, pid)
		}
	}
	return out
}

// TestExitCodes checks that every code 0..255 passes through, that death by
// signal n gives 128+n, and that exec failures give 127 and 126 with a
// message naming the path.
func TestExitCodes(t *testing.T) {
	for _, mode := range modes {
		t.Run(mode, func(t *testing.T) {
			for code := 0; code < 256; code++ {
				p := start(t, mode, "run", "--log-level", "error", "--", "sh", "-c", fmt.Sprintf("exit %d", code))
				if got := p.wait(); got != code {
					t.Fatalf("child exit %d: lifeboat exited %d", code, got)
				}
			}
			p := start(t, mode, "run", "--", "sh", "-c", "kill -KILL $$")
			if got := p.wait(); got != 137 {
				t.Errorf("child killed by KILL: lifeboat exited %d, want 137", got)
			}
		})
	}
	dir := t.TempDir()
	notExec := filepath.Join(dir, "train.sh")
	if err := os.WriteFile(notExec, []byte("#!/bin/sh\necho hi\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	badInterp := filepath.Join(dir, "bad.sh")
	if err := os.WriteFile(badInterp, []byte("#!/no/such/interpreter\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		argv0 string
		code  int
		msg   string
	}{
		{filepath.Join(dir, "missing"), 127, filepath.Join(dir, "missing") + ": no such file"},
		{"no-such-command-xyz", 127, "no-such-command-xyz: command not found in PATH"},
		{notExec, 126, notExec + " is not executable"},
		{dir, 126, dir + " is a directory"},
		{badInterp, 127, "interpreter on its #! line"},
	} {
		t.Run(filepath.Base(tc.argv0), func(t *testing.T) {
			p := start(t, "plain", "run", "--", tc.argv0)
			if got := p.wait(); got != tc.code {
				t.Errorf("exit %d, want %d", got, tc.code)
			}
			if !strings.Contains(p.stderr.String(), tc.msg) {
				t.Errorf("stderr %q does not say %q", p.stderr.String(), tc.msg)
			}
		})
	}
}

// TestGraceKillsEscapedTree: at the deadline, everything left is SIGKILLed,
// including a TERM-ignoring process that escaped with setsid and a double
// fork.
func TestGraceKillsEscapedTree(t *testing.T) {
	for _, mode := range modes {
		t.Run(mode, func(t *testing.T) {
			pidFile := filepath.Join(t.TempDir(), "escapee")
			p := start(t, mode, "run", "--grace", "1s", "--", childBin, "escape", pidFile)
			waitFile(t, p, pidFile)
			b, _ := os.ReadFile(pidFile)
			escapee, _ := strconv.Atoi(string(b))
			if mode == "pid1" {
				escapee = hostPid(t, p.pid, escapee)
			}
			p.signal(syscall.SIGTERM)
			if code := p.wait(); code != 137 {
				t.Errorf("exit %d, want 137 (child ignored TERM and was killed)", code)
			}
			if processAlive(escapee) {
				_ = syscall.Kill(escapee, syscall.SIGKILL)
				t.Errorf("escaped descendant %d survived the grace deadline", escapee)
			}
		})
	}
}

// hostPid maps a pid inside lifeboat's namespace to the test's view: the
// process other than root in root's PID namespace whose NSpid ends in
// nsPid. Matching NSpid alone is not enough: every PID namespace on the
// machine (a container, another test's lifeboat) has its own small pids,
// and one of theirs, alive and none of lifeboat's business, once made
// TestGraceKillsEscapedTree/pid1 report a survivor.
func hostPid(t *testing.T, root, nsPid int) int {
	t.Helper()
	ns, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", root))
	if err != nil {
		t.Fatalf("lifeboat's PID namespace: %v", err)
	}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == root {
			continue
		}
		if l, err := os.Readlink(filepath.Join("/proc", e.Name(), "ns", "pid")); err != nil || l != ns {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "status"))
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			if f := strings.Fields(line); len(f) >= 2 && f[0] == "NSpid:" && f[len(f)-1] == strconv.Itoa(nsPid) {
				return pid
			}
		}
	}
	t.Fatalf("no process with pid %d in lifeboat's PID namespace %s", nsPid, ns)
	return 0
}

// TestSecondTermDoesNotResetDeadline sends TERM every 200 ms to a tree
// that ignores TERM with a 2 s grace until lifeboat exits: if each TERM
// reset the deadline, lifeboat would outlive the barrage, which goes on
// for the hang limit (60 s), far beyond the 2 s.
func TestSecondTermDoesNotResetDeadline(t *testing.T) {
	out := filepath.Join(t.TempDir(), "child")
	p := start(t, "plain", "run", "--grace", "2s", "--", childBin, "ignore-term", out)
	waitFile(t, p, out+".ready")
	for deadline := time.Now().Add(hangLimit); p.alive() && time.Now().Before(deadline); {
		_ = syscall.Kill(p.pid, syscall.SIGTERM)
		time.Sleep(200 * time.Millisecond)
	}
	if p.alive() {
		t.Fatalf("lifeboat still running after %s of TERMs with a 2 s grace: the deadline was reset", hangLimit)
	}
	if code := p.wait(); code != 137 {
		t.Errorf("exit %d, want 137", code)
	}
	if n := strings.Count(p.stderr.String(), "supervisor.stopping"); n != 1 {
		t.Errorf("%d stopping events, want 1", n)
	}
}

// TestSecondIntKillsAtOnce: the second INT escalates to SIGKILL without
// waiting for the deadline.
func TestSecondIntKillsAtOnce(t *testing.T) {
	out := filepath.Join(t.TempDir(), "rec")
	p := start(t, "plain", "run", "--grace", "1h", "--", childBin, "record", out, "never")
	waitFile(t, p, out+".ready")
	p.signal(syscall.SIGINT)
	waitLines(t, out, 1)
	p.signal(syscall.SIGINT)
	if code := p.wait(); code != 137 {
		t.Errorf("exit %d, want 137 after a second INT", code)
	}
	if !strings.Contains(p.stderr.String(), "supervisor.second_interrupt") {
		t.Errorf("no second_interrupt event; stderr:\n%s", p.stderr.String())
	}
}

// TestTreeGetsToFinish: when the main child exits, a grandchild that needs
// 1 s after TERM to clean up gets to finish, as PID 1 (where exiting early
// would make the kernel kill it) and as a plain process.
func TestTreeGetsToFinish(t *testing.T) {
	for _, mode := range modes {
		t.Run(mode, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "clean")
			script := fmt.Sprintf(`%s cleanup %s 1s & while [ ! -f %s.ready ]; do sleep 0.01; done; exit 0`, childBin, out, out)
			p := start(t, mode, "run", "--grace", "30s", "--", "sh", "-c", script)
			if code := p.wait(); code != 0 {
				t.Errorf("exit %d, want 0", code)
			}
			b, err := os.ReadFile(out)
			if err != nil || string(b) != "clean" {
				t.Errorf("grandchild did not finish its cleanup: %q, %v", b, err)
			}
		})
	}
}

// TestQuickTreeQuickExit: with a long grace and nothing left behind,
// lifeboat exits as soon as the child does; the hang limit (60 s) is far
// below the grace (1 h).
func TestQuickTreeQuickExit(t *testing.T) {
	for _, mode := range modes {
		t.Run(mode, func(t *testing.T) {
			p := start(t, mode, "run", "--grace", "1h", "--", "sh", "-c", "sleep 0.1 & exit 0")
			if code := p.wait(); code != 0 {
				t.Errorf("exit %d, want 0", code)
			}
		})
	}
}

// TestPreemptExitCode: stopped by TERM and the child exits 0 -> 143 by
// default, N with --preempt-exit-code N, 0 with child; the termination log
// says why.
func TestPreemptExitCode(t *testing.T) {
	for _, tc := range []struct {
		flag string
		env  string
		want int
	}{{"", "", 143}, {"99", "", 99}, {"child", "", 0}, {"", "42", 42}, {"7", "42", 7}} {
		t.Run(fmt.Sprintf("flag=%s,env=%s", tc.flag, tc.env), func(t *testing.T) {
			dir := t.TempDir()
			out, tlog := filepath.Join(dir, "rec"), filepath.Join(dir, "termination-log")
			args := []string{"run", "--termination-log", tlog}
			if tc.flag != "" {
				args = append(args, "--preempt-exit-code", tc.flag)
			}
			args = append(args, "--", childBin, "record", out, "TERM")
			cmd := exec.Command(lifeboatBin, args...)
			if tc.env != "" {
				cmd.Env = append(os.Environ(), "LIFEBOAT_PREEMPT_EXIT_CODE="+tc.env)
			}
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			waitFile(t, nil, out+".ready")
			_ = cmd.Process.Signal(syscall.SIGTERM)
			_ = cmd.Wait()
			if got := cmd.ProcessState.ExitCode(); got != tc.want {
				t.Errorf("exit %d, want %d; stderr:\n%s", got, tc.want, stderr.String())
			}
			b, _ := os.ReadFile(tlog)
			if !strings.Contains(string(b), "stopped by SIGTERM; trainer exited with code 0") || strings.Count(string(b), "\n") != 1 {
				t.Errorf("termination log %q does not give the reason in one line", b)
			}
		})
	}
}

// TestUsage: no command or an unknown flag prints usage on stderr, exits 2
// and spawns nothing; a program named -x is run.
func TestUsage(t *testing.T) {
	marker := filepath.Join(t.TempDir(), "ran")
	for _, args := range [][]string{{}, {"run"}, {"run", "--"}, {"run", "--no-such-flag", "--", "touch", marker}, {"bogus"}} {
		var stdout, stderr bytes.Buffer
		cmd := exec.Command(lifeboatBin, args...)
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		_ = cmd.Run()
		if code := cmd.ProcessState.ExitCode(); code != 2 {
			t.Errorf("%v: exit %d, want 2", args, code)
		}
		if stdout.Len() != 0 || !strings.Contains(stderr.String(), "Usage") {
			t.Errorf("%v: stdout %q, stderr %q: want usage on stderr only", args, stdout.String(), stderr.String())
		}
	}
	if _, err := os.Stat(marker); err == nil {
		t.Errorf("a command was spawned despite the bad flag")
	}
	dir := t.TempDir()
	prog := filepath.Join(dir, "-x")
	if err := os.WriteFile(prog, []byte("#!/bin/sh\necho \"ran $0 $*\"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(lifeboatBin, "run", "--", "-x", "--grace", "-y")
	cmd.Env = append(os.Environ(), "PATH="+dir)
	out, err := cmd.Output()
	if err != nil || string(out) != "ran "+prog+" --grace -y\n" {
		t.Errorf("program named -x: %q, %v", out, err)
	}
}

// TestEnvTwins: every flag reads LIFEBOAT_<NAME>, and the flag wins.
func TestEnvTwins(t *testing.T) {
	out := filepath.Join(t.TempDir(), "rec")
	cmd := exec.Command(lifeboatBin, "run", "--", childBin, "record", out, "never")
	cmd.Env = append(os.Environ(), "LIFEBOAT_GRACE=1s", "LIFEBOAT_REWRITE=TERM:USR2", "LIFEBOAT_LOG_LEVEL=warn")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waitFile(t, nil, out+".ready")
	_ = cmd.Process.Signal(syscall.SIGTERM)
	_ = cmd.Wait()
	if got := cmd.ProcessState.ExitCode(); got != 137 {
		t.Errorf("exit %d, want 137 (LIFEBOAT_GRACE=1s expired)", got)
	}
	if got := strings.Join(waitLines(t, out, 1), " "); got != "USR2" {
		t.Errorf("child got %q, want USR2 from LIFEBOAT_REWRITE", got)
	}
	if strings.Contains(stderr.String(), "supervisor.started") {
		t.Errorf("LIFEBOAT_LOG_LEVEL=warn ignored: %s", stderr.String())
	}
	cmd = exec.Command(lifeboatBin, "run", "--log-level", "info", "--", "true")
	cmd.Env = append(os.Environ(), "LIFEBOAT_LOG_LEVEL=error", "LIFEBOAT_GRACE=bogus")
	b, err := cmd.CombinedOutput()
	if cmd.ProcessState.ExitCode() != 2 || !strings.Contains(string(b), `LIFEBOAT_GRACE="bogus"`) {
		t.Errorf("bad LIFEBOAT_GRACE: exit %d, %q, %v", cmd.ProcessState.ExitCode(), b, err)
	}
}

// TestNothingOnStdout: at the default level lifeboat's own output goes to
// stderr, as JSON when stderr is not a terminal; stdout is the child's.
func TestNothingOnStdout(t *testing.T) {
	cmd := exec.Command(lifeboatBin, "run", "--", "sh", "-c", "printf child-out")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	if stdout.String() != "child-out" {
		t.Errorf("stdout %q, want only the child's", stdout.String())
	}
	for _, line := range strings.Split(strings.TrimSpace(stderr.String()), "\n") {
		if !strings.HasPrefix(line, "{") {
			t.Errorf("stderr line is not JSON: %q", line)
		}
	}
}

// TestPassthrough: 100 MB through stdin/stdout byte for byte; same cwd and
// environment; empty signal mask and default dispositions even when
// lifeboat's parent blocked or ignored signals.
func TestPassthrough(t *testing.T) {
	data := make([]byte, 100<<20)
	rand.New(rand.NewSource(2)).Read(data)
	cmd := exec.Command(lifeboatBin, "run", "--log-level", "error", "--", "cat")
	cmd.Stdin = bytes.NewReader(data)
	h := sha256.New()
	cmd.Stdout = h
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	if want := sha256.Sum256(data); !bytes.Equal(h.Sum(nil), want[:]) {
		t.Errorf("100 MB through lifeboat came out different")
	}

	dir := t.TempDir()
	cmd = exec.Command(lifeboatBin, "run", "--", "sh", "-c", `echo "$PWD $TRAIN_VAR"`)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "TRAIN_VAR=x y")
	out, err := cmd.Output()
	if err != nil || string(out) != dir+" x y\n" {
		t.Errorf("cwd/env: %q, %v", out, err)
	}

	if _, err := exec.LookPath("python3"); err != nil {
		t.Fatal("python3 is needed to start lifeboat with a blocked signal mask; install it")
	}
	py := `import os, signal
signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR1, signal.SIGTERM, signal.SIGHUP})
for s in (signal.SIGTTOU, signal.SIGTTIN, signal.SIGHUP, signal.SIGINT, signal.SIGPIPE):
    signal.signal(s, signal.SIG_IGN)
os.execv(os.environ["LB"], ["lifeboat", "run", "--", "grep", "-E", "^Sig(Blk|Ign)", "/proc/self/status"])`
	cmd = exec.Command("python3", "-c", py)
	cmd.Env = append(os.Environ(), "LB="+lifeboatBin)
	out, err = cmd.Output()
	if err != nil {
		t.Fatalf("mask check: %v", err)
	}
	if got := string(out); got != "SigBlk:\t0000000000000000\nSigIgn:\t0000000000000000\n" {
		t.Errorf("child's signal mask/ignored set is not empty:\n%s", got)
	}
}

// TestTerminalForeground: with a terminal on stdin, the child's process
// group becomes the terminal's foreground group.
func TestTerminalForeground(t *testing.T) {
	master, slave := openPTY(t)
	cmd := exec.Command(lifeboatBin, "run", "--log-level", "error", "--", "sh", "-c",
		`set -- $(cat /proc/self/stat); echo "pgrp=$5 tpgid=$8"`)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = slave, slave, slave
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	slave.Close()
	var buf bytes.Buffer
	done := make(chan struct{})
	go func() { _, _ = io.Copy(&buf, master); close(done) }()
	_ = cmd.Wait()
	<-done
	var pgrp, tpgid int
	if _, err := fmt.Sscanf(strings.TrimSpace(buf.String()), "pgrp=%d tpgid=%d", &pgrp, &tpgid); err != nil {
		t.Fatalf("child printed %q: %v", buf.String(), err)
	}
	if pgrp != tpgid || pgrp == cmd.Process.Pid {
		t.Errorf("child pgrp %d, terminal foreground %d, lifeboat %d: want the child's own group in the foreground", pgrp, tpgid, cmd.Process.Pid)
	}
}

// openPTY opens a pseudo-terminal pair.
func openPTY(t *testing.T) (*os.File, *os.File) {
	t.Helper()
	master, err := os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Fatalf("open /dev/ptmx: %v", err)
	}
	t.Cleanup(func() { master.Close() })
	unlock := 0
	if _, _, errno := unix.Syscall(unix.SYS_IOCTL, master.Fd(), unix.TIOCSPTLCK, uintptr(unsafe.Pointer(&unlock))); errno != 0 {
		t.Fatalf("unlock pty: %v", errno)
	}
	n, err := unix.IoctlGetInt(int(master.Fd()), unix.TIOCGPTN)
	if err != nil {
		t.Fatalf("pty number: %v", err)
	}
	slave, err := os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Fatalf("open pty slave: %v", err)
	}
	return master, slave
}

// TestSignalFlood: 1000 signals in a tight loop neither crash nor hang
// lifeboat, which then still stops the child on TERM.
func TestSignalFlood(t *testing.T) {
	for _, mode := range modes {
		t.Run(mode, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "rec")
			p := start(t, mode, "run", "--", childBin, "record", out, "TERM")
			waitFile(t, p, out+".ready")
			flood := []syscall.Signal{syscall.SIGUSR1, syscall.SIGUSR2, syscall.SIGHUP, syscall.SIGWINCH, syscall.SIGCONT, syscall.SIGALRM, syscall.SIGSEGV}
			for i := 0; i < 1000; i++ {
				if err := syscall.Kill(p.pid, flood[i%len(flood)]); err != nil {
					t.Fatalf("signal %d: lifeboat gone: %v", i, err)
				}
			}
			if !p.alive() {
				t.Fatalf("lifeboat died under the flood; stderr:\n%s", p.stderr.String())
			}
			p.signal(syscall.SIGTERM)
			if code := p.wait(); code != 143 {
				t.Errorf("exit %d after the flood and TERM, want 143; stderr tail:\n%s", code, tail(p.stderr.String()))
			}
		})
	}
}

func tail(s string) string {
	lines := strings.Split(s, "\n")
	if len(lines) > 20 {
		lines = lines[len(lines)-20:]
	}
	return strings.Join(lines, "\n")
}

// TestMaxRuntime: at --max-runtime the trainer is stopped as on preemption
// and lifeboat exits with the preemption code, saying why.
func TestMaxRuntime(t *testing.T) {
	dir := t.TempDir()
	out, tlog := filepath.Join(dir, "rec"), filepath.Join(dir, "tlog")
	p := start(t, "plain", "run", "--max-runtime", "1s", "--termination-log", tlog, "--", childBin, "record", out, "TERM")
	if code := p.wait(); code != 143 {
		t.Errorf("exit %d, want 143", code)
	}
	if got := strings.Join(waitLines(t, out, 1), " "); got != "TERM" {
		t.Errorf("child received %q, want TERM", got)
	}
	if b, _ := os.ReadFile(tlog); !strings.Contains(string(b), "max runtime 1s reached") {
		t.Errorf("termination log %q does not name the max runtime", b)
	}
}

// TestRestartOnFailure: a crashing trainer is restarted up to
// --max-restarts times; one that lifeboat stopped is not.
func TestRestartOnFailure(t *testing.T) {
	for _, tc := range []struct {
		name     string
		max      string
		failures int // runs that exit 3 before one exits 0
		wantCode int
		wantRuns int
	}{
		{"recovers", "3", 2, 0, 3},
		{"gives up", "1", 5, 3, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			count := filepath.Join(t.TempDir(), "runs")
			script := fmt.Sprintf(`n=$(cat %s 2>/dev/null || echo 0); echo $((n+1)) > %s; [ "$n" -ge %d ] || exit 3`, count, count, tc.failures)
			p := start(t, "plain", "run", "--restart", "on-failure", "--max-restarts", tc.max, "--restart-backoff", "10ms", "--", "sh", "-c", script)
			if code := p.wait(); code != tc.wantCode {
				t.Errorf("exit %d, want %d; stderr:\n%s", code, tc.wantCode, tail(p.stderr.String()))
			}
			b, _ := os.ReadFile(count)
			if strings.TrimSpace(string(b)) != strconv.Itoa(tc.wantRuns) {
				t.Errorf("the trainer ran %s times, want %d", strings.TrimSpace(string(b)), tc.wantRuns)
			}
			if n := strings.Count(p.stderr.String(), `"msg":"supervisor.restart"`); n != tc.wantRuns-1 {
				t.Errorf("%d restart events, want %d", n, tc.wantRuns-1)
			}
		})
	}
	t.Run("not after a stop", func(t *testing.T) {
		out := filepath.Join(t.TempDir(), "rec")
		p := start(t, "plain", "run", "--restart", "on-failure", "--restart-backoff", "10ms", "--", "sh", "-c",
			fmt.Sprintf(`trap 'exit 3' TERM; touch %s.ready; while :; do sleep 0.05; done`, out))
		waitFile(t, p, out+".ready")
		p.signal(syscall.SIGTERM)
		if code := p.wait(); code != 3 {
			t.Errorf("exit %d, want the trainer's 3 without a restart", code)
		}
		if strings.Contains(p.stderr.String(), "supervisor.restart") {
			t.Errorf("restarted after lifeboat stopped the trainer")
		}
	})
}

// TestRestartClearsTheLeftoversDeadline: when a crashed trainer left a
// process behind (it gets TERM and the grace deadline), the deadline must
// not fire on the restarted trainer.
func TestRestartClearsTheLeftoversDeadline(t *testing.T) {
	dir := t.TempDir()
	count := filepath.Join(dir, "runs")
	// First run: start a leftover that exits at once on TERM, then crash:
	// the 4 s deadline is armed for it, and no busy machine makes its
	// exit late for it. Second run: live 5 s (past the first run's
	// deadline), then exit 0.
	script := fmt.Sprintf(`n=$(cat %[1]s 2>/dev/null || echo 0); echo $((n+1)) > %[1]s
if [ "$n" = 0 ]; then %[2]s cleanup %[3]s 0s & while [ ! -f %[3]s.ready ]; do sleep 0.01; done; exit 3; fi
sleep 5; exit 0`, count, childBin, filepath.Join(dir, "leftover"))
	p := start(t, "plain", "run", "--grace", "4s", "--restart", "on-failure", "--restart-backoff", "10ms", "--", "sh", "-c", script)
	if code := p.wait(); code != 0 {
		t.Errorf("exit %d, want 0; stderr:\n%s", code, tail(p.stderr.String()))
	}
	if b, _ := os.ReadFile(count); strings.TrimSpace(string(b)) != "2" || strings.Contains(p.stderr.String(), "supervisor.grace_expired") {
		t.Errorf("the trainer ran %s times (want 2) or a deadline expired: the first trainer's deadline fired on the restarted one; stderr:\n%s",
			strings.TrimSpace(string(b)), tail(p.stderr.String()))
	}
}

// TestSigpipeFromOwnStderr: lifeboat's stderr is a pipe whose reader has
// gone (a log shipper died, `lifeboat run ... 2>&1 | head -1` exited). The
// SIGPIPE that lifeboat's own log write raises is lifeboat's, not the
// trainer's: it is never forwarded, lifeboat stops logging there and goes
// on, still forwarding real signals, and exits with the trainer's 0.
func TestSigpipeFromOwnStderr(t *testing.T) {
	for _, mode := range modes {
		t.Run(mode, func(t *testing.T) {
			dir := t.TempDir()
			ready, rec, alive := filepath.Join(dir, "ready"), filepath.Join(dir, "rec"), filepath.Join(dir, "alive")
			r, w, err := os.Pipe()
			if err != nil {
				t.Fatal(err)
			}
			r.Close() // the reader is gone before lifeboat writes its first line
			// The trainer records every PIPE and USR1 it gets; USR1 also ends
			// its sleep early. It writes alive when it runs to its end. Its
			// own stderr goes to /dev/null, so a PIPE it records was sent to
			// it, not raised by a write of its own to the dead pipe.
			script := `exec 2>/dev/null; trap 'echo PIPE >> "$1"' PIPE; trap 'echo USR1 >> "$1"' USR1; touch "$0"; sleep 1; echo alive > "$2"`
			args := []string{"run", "--log-level", "debug", "--", "sh", "-c", script, ready, rec, alive}
			cmd := exec.Command(lifeboatBin, args...)
			if mode == "pid1" {
				testenv.RequireRoot(t)
				cmd = exec.Command("unshare", append([]string{"--pid", "--fork", "--mount-proc", lifeboatBin}, args...)...)
			}
			cmd.Stderr = w
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			w.Close()
			done := make(chan struct{})
			go func() { _ = cmd.Wait(); close(done) }()
			t.Cleanup(func() {
				select {
				case <-done:
				default:
					_ = cmd.Process.Kill()
					<-done
				}
			})
			pid := cmd.Process.Pid
			if mode == "pid1" {
				pid = waitChildPid(t, pid, done)
			}
			// Once the trainer's traps are set, a signal lifeboat forwards and
			// logs (at debug level): one more write to the broken stderr.
			if waitReady(t, ready, done) && pid > 0 {
				_ = syscall.Kill(pid, syscall.SIGUSR1)
			}
			select {
			case <-done:
			case <-time.After(hangLimit):
				t.Fatalf("lifeboat did not exit")
			}
			if code := exitStatus(cmd); code != 0 {
				t.Errorf("lifeboat exited %d, want the trainer's 0", code)
			}
			if b, err := os.ReadFile(alive); err != nil || string(b) != "alive\n" {
				t.Errorf("the trainer did not run to its end (alive: %q, %v)", b, err)
			}
			if b, _ := os.ReadFile(rec); strings.Contains(string(b), "PIPE") {
				t.Errorf("the trainer was sent SIGPIPE (it recorded %q)", b)
			}
		})
	}
}

// waitReady waits until path exists and reports true, or false when done
// closes first.
func waitReady(t *testing.T, path string, done <-chan struct{}) bool {
	t.Helper()
	deadline := time.Now().Add(hangLimit)
	for time.Now().Before(deadline) {
		if _, err := os.Stat(path); err == nil {
			return true
		}
		select {
		case <-done:
			return false
		case <-time.After(5 * time.Millisecond):
		}
	}
	t.Fatalf("%s never appeared", path)
	return false
}

// exitStatus is a finished command's exit code, 128+n when a signal n
// killed it.
func exitStatus(cmd *exec.Cmd) int {
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return cmd.ProcessState.ExitCode()
}

// TestRestartBackoffStop: a SIGTERM during a restart's backoff (1h) ends
// it at once, as PID 1 and as a plain process: no second trainer, the
// crashed trainer's code (the exit-code rules are those of any stop), and
// the termination log names the signal.
func TestRestartBackoffStop(t *testing.T) {
	for _, mode := range modes {
		t.Run(mode, func(t *testing.T) {
			dir := t.TempDir()
			runs, tlog := filepath.Join(dir, "runs"), filepath.Join(dir, "tlog")
			p := start(t, mode, "run", "--restart", "on-failure", "--max-restarts", "3", "--restart-backoff", "1h",
				"--termination-log", tlog, "--", "sh", "-c", `echo run >> "$0"; exit 3`, runs)
			waitLog(t, p, `"msg":"supervisor.restart"`)
			p.signal(syscall.SIGTERM)
			if code := p.wait(); code != 3 {
				t.Errorf("exit %d, want the crashed trainer's 3; stderr:\n%s", code, tail(p.stderr.String()))
			}
			if b, _ := os.ReadFile(runs); strings.Count(string(b), "run") != 1 {
				t.Errorf("the trainer ran %d times, want 1", strings.Count(string(b), "run"))
			}
			if !strings.Contains(p.stderr.String(), `"msg":"supervisor.restart_cancelled"`) {
				t.Errorf("no restart_cancelled event; stderr:\n%s", tail(p.stderr.String()))
			}
			if b, _ := os.ReadFile(tlog); !strings.Contains(string(b), "stopped by SIGTERM") {
				t.Errorf("termination log %q does not name SIGTERM", b)
			}
		})
	}
}
