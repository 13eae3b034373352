package e2e

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/lifeboat-project/lifeboat/internal/testenv"
	"github.com/lifeboat-project/lifeboat/signals"
)

// lifeboatPkg is the package of the lifeboat binary.
const lifeboatPkg = "github.com/lifeboat-project/lifeboat/cmd/lifeboat"

var lifeboatBin, childBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "lifeboat-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	// A test run inside a pod must not have every lifeboat it starts talk to
	// that pod's API server; the Kubernetes tests set their own.
	os.Unsetenv("KUBERNETES_SERVICE_HOST")
	os.Unsetenv("KUBERNETES_SERVICE_PORT")
	lifeboatBin = filepath.Join(dir, "lifeboat")
	childBin = filepath.Join(dir, "child")
	// Both as lifeboat ships (signals.LinkFlag): the runtime sends itself
	// no SIGURG, so lifeboat forwards it and the child records only those
	// it is sent.
	for _, b := range [][]string{{lifeboatBin, lifeboatPkg}, {childBin, "./testdata/child"}} {
		out, err := exec.Command("go", "build", "-ldflags", signals.LinkFlag, "-o", b[0], b[1]).CombinedOutput()
		if err != nil {
			fmt.Fprintf(os.Stderr, "build %s: %v\n%s", b[1], err, out)
			os.Exit(1)
		}
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// syncBuffer is a bytes.Buffer safe for the exec package's copier and the
// test reading it at the same time.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// lb is one running lifeboat.
type lb struct {
	t      *testing.T
	cmd    *exec.Cmd
	pid    int // lifeboat's pid as seen from the test
	stdout *syncBuffer
	stderr *syncBuffer
	done   chan struct{}
	code   int
}

// modes lists how lifeboat is run: as a plain process and as PID 1.
var modes = []string{"plain", "pid1"}

// start runs lifeboat with args in mode: "plain", "pid1" (PID 1 of a new
// PID namespace) or "nobody" (as user nobody, through setpriv, which execs
// lifeboat).
func start(t *testing.T, mode string, args ...string) *lb {
	t.Helper()
	return startEnv(t, mode, nil, args...)
}

// startEnv is start with env added to the test's environment.
func startEnv(t *testing.T, mode string, env []string, args ...string) *lb {
	t.Helper()
	var cmd *exec.Cmd
	switch mode {
	case "plain":
		cmd = exec.Command(lifeboatBin, args...)
	case "pid1":
		testenv.RequireRoot(t)
		if _, err := exec.LookPath("unshare"); err != nil {
			testenv.Skip(t, "unshare (util-linux) is not installed")
		}
		cmd = exec.Command("unshare", append([]string{"--pid", "--fork", "--mount-proc", lifeboatBin}, args...)...)
	case "nobody":
		cmd = exec.Command("setpriv", append([]string{"--reuid=nobody", "--regid=nogroup", "--clear-groups", lifeboatBin}, args...)...)
	default:
		t.Fatalf("unknown mode %q", mode)
	}
	if env != nil {
		cmd.Env = append(os.Environ(), env...)
	}
	p := &lb{t: t, cmd: cmd, stdout: &syncBuffer{}, stderr: &syncBuffer{}, done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = p.stdout, p.stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("start lifeboat: %v", err)
	}
	p.pid = cmd.Process.Pid
	go func() {
		_ = cmd.Wait()
		p.code = cmd.ProcessState.ExitCode()
		if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			p.code = 128 + int(ws.Signal())
		}
		close(p.done)
	}()
	if mode == "pid1" {
		p.pid = waitChildPid(t, cmd.Process.Pid, p.done)
	}
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			if p.pid > 0 {
				_ = syscall.Kill(p.pid, syscall.SIGKILL)
			}
			_ = cmd.Process.Kill()
			<-p.done
		}
	})
	return p
}

// waitChildPid returns the pid of parent's only child (unshare --fork's
// lifeboat), or 0 if unshare exits first (lifeboat has already finished).
func waitChildPid(t *testing.T, parent int, done <-chan struct{}) int {
	t.Helper()
	path := fmt.Sprintf("/proc/%d/task/%d/children", parent, parent)
	for i := 0; i < 2000; i++ {
		b, err := os.ReadFile(path)
		if err == nil {
			if f := strings.Fields(string(b)); len(f) > 0 {
				pid, _ := strconv.Atoi(f[0])
				return pid
			}
		}
		select {
		case <-done:
			return 0
		case <-time.After(5 * time.Millisecond):
		}
	}
	t.Fatalf("unshare (pid %d) never started lifeboat", parent)
	return 0
}

// hangLimit is how long a test waits before it calls lifeboat hung. It is a
// bound against hangs, far above any expected time, not a speed test.
const hangLimit = 60 * time.Second

// wait waits for lifeboat to exit and returns its exit code.
func (p *lb) wait() int {
	p.t.Helper()
	select {
	case <-p.done:
		return p.code
	case <-time.After(hangLimit):
		p.t.Fatalf("lifeboat did not exit within %s; stderr:\n%s", hangLimit, p.stderr.String())
		return -1
	}
}

func (p *lb) signal(sig syscall.Signal) {
	p.t.Helper()
	if p.pid <= 0 {
		p.t.Fatalf("lifeboat exited before it could be sent signal %d", sig)
	}
	if err := syscall.Kill(p.pid, sig); err != nil {
		p.t.Fatalf("kill -%d lifeboat: %v", sig, err)
	}
}

func (p *lb) alive() bool {
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// waitFile waits until path exists (the child wrote it) or lifeboat exits.
func waitFile(t *testing.T, p *lb, path string) {
	t.Helper()
	deadline := time.Now().Add(hangLimit)
	for time.Now().Before(deadline) {
		if _, err := os.Stat(path); err == nil {
			return
		}
		if p != nil && !p.alive() {
			t.Fatalf("lifeboat exited (code %d) before %s appeared; stderr:\n%s", p.code, path, p.stderr.String())
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("%s never appeared", path)
}

// waitLines waits until path holds at least n lines and returns them.
func waitLines(t *testing.T, path string, n int) []string {
	t.Helper()
	deadline := time.Now().Add(hangLimit)
	for time.Now().Before(deadline) {
		b, _ := os.ReadFile(path)
		lines := strings.Fields(string(b))
		if len(lines) >= n {
			return lines
		}
		time.Sleep(5 * time.Millisecond)
	}
	b, _ := os.ReadFile(path)
	t.Fatalf("%s has %q, want %d lines", path, b, n)
	return nil
}

func processAlive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i > 0 && len(s) > i+2 && s[i+2] != 'Z'
}
