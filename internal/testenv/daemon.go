package testenv

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// startDaemon starts cmd, its output in logPath, and waits until ready
// returns true (within limit). It is stopped (TERM, then KILL after 10 s)
// when the test ends, and its log is printed if the test failed. The error
// says why it is not ready: it exited, or limit passed.
func startDaemon(t testing.TB, cmd *exec.Cmd, logPath string, limit time.Duration, ready func() bool) error {
	t.Helper()
	logf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	bin := cmd.Path
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", bin, err)
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	stop := func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
	}
	for deadline := time.Now().Add(limit); time.Now().Before(deadline); {
		select {
		case <-exited:
			b, _ := os.ReadFile(logPath)
			return fmt.Errorf("%s exited: %s", filepath.Base(bin), tailLines(string(b), 10))
		default:
		}
		if ready() {
			t.Cleanup(func() {
				stop()
				if t.Failed() {
					b, _ := os.ReadFile(logPath)
					t.Logf("%s log (%s):\n%s", filepath.Base(bin), logPath, tailLines(string(b), 30))
				}
			})
			return nil
		}
		select {
		case <-exited:
		case <-time.After(100 * time.Millisecond):
		}
	}
	stop()
	b, _ := os.ReadFile(logPath)
	return fmt.Errorf("%s not ready within %s: %s", filepath.Base(bin), limit, tailLines(string(b), 10))
}
