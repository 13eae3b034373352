package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/lifeboat-project/lifeboat/internal/testenv"
	"github.com/lifeboat-project/lifeboat/signals"
)

// TestEarlySignalTrials sends SIGTERMs from 0 to 30 ms after lifeboat
// starts (its exec), both build flavours, as PID 1 of a new PID namespace
// and not, and counts where each landed and how it ended.
//
// Each trial stops lifeboat with SIGSTOP at its moment and, while nothing
// of it runs, reads what the kernel knows (/proc/PID/status: which signals
// have handlers) and which packages have initialised (the runtime's
// GODEBUG=inittrace=1 lines so far), then sends SIGTERM and SIGCONT. So
// where the signal landed is known, not guessed from a clock:
//
//   - before the Go runtime installed its handlers: the kernel's default
//     (lifeboat dies of the signal; as PID 1 the kernel discards it and
//     the trainer runs). No program written in Go can act here.
//   - the runtime's handlers, lifeboat not yet subscribed, no package of
//     lifeboat's own initialised: the runtime's default (death by the
//     signal; exit 2 as PID 1), or 143 where the subscription came in
//     between.
//   - every signal caught (the runtime installs handlers for SIGCONT and
//     the terminal stop signals only when a program subscribes to them):
//     a stop, exit 143, lifeboat.stopped_during_startup (or
//     supervisor.stopping once the trainer runs) and the termination log.
//
// A package of lifeboat's own initialised while signals were not yet
// caught fails the test: the subscription is made before any of them
// (internal/earlysignal). So does any other outcome in a stage than the
// ones above. The test asserts no timing.
func TestEarlySignalTrials(t *testing.T) {
	testenv.RequireRoot(t)
	flavours := []struct{ name, bin string }{{"cgo", lifeboatBin}, {"static", staticLifeboat(t)}}
	for _, fl := range flavours {
		firstOwnInit(t, fl.bin)
	}
	const trials = 12
	counts := map[string]int{}
	for _, fl := range flavours {
		for _, mode := range modes {
			for i := range trials {
				// Denser near the start, where the stages change.
				f := float64(i) / (trials - 1)
				at := time.Duration(f * f * float64(30*time.Millisecond))
				st, out := earlySignalTrial(t, fl.bin, mode, at)
				counts[fmt.Sprintf("%s %s: %s: %s", fl.name, mode, st, out)]++
			}
		}
	}
	keys := make([]string, 0, len(counts))
	for k := range counts {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "\n  %2d  %s", counts[k], k)
	}
	t.Logf("where the SIGTERMs landed and how lifeboat ended:%s", b.String())
}

// firstOwnInit checks that internal/earlysignal is the first of
// lifeboat's packages that bin initialises, as the runtime reports it
// (GODEBUG=inittrace=1), so that every other one initialises with signals
// caught.
func firstOwnInit(t *testing.T, bin string) {
	t.Helper()
	c := exec.Command(bin, "version")
	c.Env = append(os.Environ(), "GODEBUG=inittrace=1")
	out, err := c.CombinedOutput()
	if err != nil {
		t.Fatalf("%s version: %v\n%s", bin, err, out)
	}
	if own := ownInitialised(string(out)); own != "github.com/lifeboat-project/lifeboat/internal/earlysignal" {
		t.Errorf("%s: the first of lifeboat's packages to initialise is %q, not internal/earlysignal, which catches the signals", filepath.Base(bin), own)
	}
}

// Stages of lifeboat's first moment, as a trial saw them.
const (
	stageKernel  = "before the runtime's handlers"
	stageRuntime = "runtime's handlers, not yet caught"
	stageCaught  = "caught"
)

// earlySignalTrial starts bin run in mode ("plain" or "pid1"), stops it at
// about at after its exec, sends SIGTERM, and checks the outcome against
// the stage the signal landed in; it returns both.
func earlySignalTrial(t *testing.T, bin, mode string, at time.Duration) (stage, outcome string) {
	t.Helper()
	dir := t.TempDir()
	termLog := filepath.Join(dir, "termination-log")
	stderr, err := os.Create(filepath.Join(dir, "stderr"))
	if err != nil {
		t.Fatal(err)
	}
	defer stderr.Close()
	cmd := exec.Command(bin, "run", "--log-format", "json", "--termination-log", termLog, "--", "sleep", "10")
	cmd.Env = append(os.Environ(), "GODEBUG=inittrace=1")
	cmd.Stdout, cmd.Stderr = nil, stderr // a file: complete at any moment, no copier to drain
	if mode == "pid1" {
		// PID 1 of a new PID namespace, exec'd directly (as unshare --pid
		// --fork would), so the trial's moment counts from its exec.
		cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWPID}
	}
	if err := cmd.Start(); err != nil { // returns once the exec has succeeded
		t.Fatalf("start %s: %v", bin, err)
	}
	pid := cmd.Process.Pid
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	defer func() {
		select {
		case <-done:
		default:
			_ = syscall.Kill(pid, syscall.SIGKILL)
			<-done
		}
	}()
	time.Sleep(at)

	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatalf("SIGSTOP lifeboat: %v", err)
	}
	if !waitAllStopped(t, pid, done) {
		<-done
		b, _ := os.ReadFile(stderr.Name())
		t.Fatalf("%s %s: lifeboat ended before the trial's SIGTERM (%s):\n%s", filepath.Base(bin), mode, cmd.ProcessState, tail(string(b)))
	}
	caught := sigCaught(t, pid)
	trace, _ := os.ReadFile(stderr.Name())
	switch {
	case caught&(1<<(syscall.SIGTERM-1)) == 0:
		stage = stageKernel
	case caught&(1<<(syscall.SIGCONT-1)) != 0:
		stage = stageCaught
	default:
		stage = stageRuntime
		if own := ownInitialised(string(trace)); own != "" {
			t.Errorf("%s %s at %s: %s had initialised while lifeboat did not yet catch SIGTERM", filepath.Base(bin), mode, at, own)
		}
	}
	_ = syscall.Kill(pid, syscall.SIGTERM)
	_ = syscall.Kill(pid, syscall.SIGCONT)
	discarded := mode == "pid1" && stage == stageKernel
	if discarded {
		// The kernel discarded the SIGTERM (PID 1, no handler): lifeboat
		// goes on and starts the trainer, which would run its 10 s.
		for deadline := time.Now().Add(hangLimit); ; time.Sleep(10 * time.Millisecond) {
			b, _ := os.ReadFile(stderr.Name())
			if strings.Contains(string(b), `"msg":"supervisor.started"`) {
				break
			}
			select {
			case <-done:
				t.Fatalf("%s %s at %s: the SIGTERM was discarded, but lifeboat exited (%s) before it started the trainer:\n%s",
					filepath.Base(bin), mode, at, cmd.ProcessState, tail(string(b)))
			default:
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s %s at %s: lifeboat did not start the trainer within %s:\n%s", filepath.Base(bin), mode, at, hangLimit, tail(string(b)))
			}
		}
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	select {
	case <-done:
	case <-time.After(hangLimit):
		t.Fatalf("%s %s: lifeboat did not exit within %s of the SIGTERM", filepath.Base(bin), mode, hangLimit)
	}

	ws := cmd.ProcessState.Sys().(syscall.WaitStatus)
	switch {
	case discarded:
		outcome = "discarded: the trainer started"
	case ws.Signaled():
		outcome = "died of SIG" + signals.Name(ws.Signal())
	default:
		outcome = "exit " + strconv.Itoa(ws.ExitStatus())
	}
	log, _ := os.ReadFile(stderr.Name())
	tl, _ := os.ReadFile(termLog)
	stopLogged := strings.Contains(string(log), `"msg":"lifeboat.stopped_during_startup"`) || strings.Contains(string(log), `"msg":"supervisor.stopping"`)
	stop := ws.Exited() && ws.ExitStatus() == 143 && strings.Contains(string(tl), "stopped by SIGTERM") && stopLogged
	if stop {
		outcome = "stop (143, logged, termination log)"
	}
	var ok bool
	switch stage {
	case stageKernel:
		if mode == "pid1" {
			ok = !stopLogged
		} else {
			ok = ws.Signaled() && ws.Signal() == syscall.SIGTERM
		}
	case stageCaught:
		ok = stop
	case stageRuntime:
		if mode == "pid1" {
			ok = stop || ws.Exited() && ws.ExitStatus() == 2
		} else {
			ok = stop || ws.Signaled() && ws.Signal() == syscall.SIGTERM
		}
	}
	if !ok {
		t.Errorf("%s %s at %s: SIGTERM landed %s; lifeboat %s; termination log %q; stderr:\n%s",
			filepath.Base(bin), mode, at, stage, outcome, tl, tail(string(log)))
	}
	return stage, outcome
}

// waitAllStopped waits until every thread of pid is stopped (SIGSTOP) and
// reports true, or false once the process has ended.
func waitAllStopped(t *testing.T, pid int, done <-chan struct{}) bool {
	t.Helper()
	deadline := time.Now().Add(hangLimit)
	for time.Now().Before(deadline) {
		select {
		case <-done:
			return false
		default:
		}
		tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
		if err != nil {
			return false
		}
		all := len(tasks) > 0
		for _, task := range tasks {
			b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/stat", pid, task.Name()))
			if err != nil {
				all = false
				break
			}
			// pid (comm) STATE ...: comm may hold spaces and parentheses.
			s := string(b)
			if i := strings.LastIndexByte(s, ')'); i < 0 || i+2 >= len(s) {
				all = false
			} else if st := s[i+2]; st == 'Z' || st == 'X' {
				return false
			} else if st != 'T' {
				all = false
			}
		}
		// A thread cannot be created once the stop is pending: the same
		// set, all stopped, is the whole process.
		if again, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid)); all && err == nil && len(again) == len(tasks) {
			return true
		}
		time.Sleep(100 * time.Microsecond)
	}
	t.Fatalf("lifeboat (pid %d) did not stop within %s of SIGSTOP", pid, hangLimit)
	return false
}

// sigCaught returns the mask of signals pid has handlers for (SigCgt:
// bit n-1 for signal n).
func sigCaught(t *testing.T, pid int) uint64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatalf("read lifeboat's status: %v", err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "SigCgt:"); ok {
			m, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			if err != nil {
				t.Fatalf("SigCgt %q: %v", v, err)
			}
			return m
		}
	}
	t.Fatalf("no SigCgt in /proc/%d/status", pid)
	return 0
}

// ownInitialised returns the first of lifeboat's own packages (main
// included) whose initialisation the runtime reported in trace
// (GODEBUG=inittrace=1: "init PATH @..." once a package's init has run),
// or "". internal/earlysignal's own line counts: it is written once its
// init has subscribed.
func ownInitialised(trace string) string {
	for _, l := range strings.Split(trace, "\n") {
		f := strings.Fields(l)
		if len(f) < 3 || f[0] != "init" || !strings.HasPrefix(f[2], "@") {
			continue // not a whole line of the trace: the runtime was stopped while writing it
		}
		if f[1] == "main" || strings.HasPrefix(f[1], "github.com/lifeboat-project/lifeboat/") {
			return f[1]
		}
	}
	return ""
}

var staticFlavour struct {
	once sync.Once
	bin  string
	err  error
	out  []byte
}

// staticLifeboat builds the static flavour (CGO_ENABLED=0) once, as it
// ships (signals.LinkFlag); lifeboatBin is the cgo one.
func staticLifeboat(t *testing.T) string {
	t.Helper()
	staticFlavour.once.Do(func() {
		staticFlavour.bin = filepath.Join(filepath.Dir(lifeboatBin), "lifeboat-static")
		build := exec.Command("go", "build", "-ldflags", signals.LinkFlag, "-o", staticFlavour.bin, lifeboatPkg)
		build.Env = append(os.Environ(), "CGO_ENABLED=0")
		staticFlavour.out, staticFlavour.err = build.CombinedOutput()
	})
	if staticFlavour.err != nil {
		t.Fatalf("build without cgo: %v\n%s", staticFlavour.err, staticFlavour.out)
	}
	return staticFlavour.bin
}
