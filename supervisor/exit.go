package supervisor

import (
	"errors"
	"fmt"
	"log/slog"
	"os"

	"golang.org/x/sys/unix"

	"github.com/lifeboat-project/lifeboat/signals"
)

// Exit codes lifeboat uses for itself.
const (
	CodeNotExecutable = 126 // CMD exists but cannot be executed
	CodeNotFound      = 127 // CMD does not exist
	CodeInternal      = 125 // lifeboat could not supervise (fork failed, ...)
)

// ExitError says how the supervised command ended when that was not a plain
// exit 0. Code is what lifeboat should exit with.
type ExitError struct {
	// Status is the main child's wait status; zero when it never started.
	Status unix.WaitStatus
	// Started is false when the command could not be executed (Err says why).
	Started bool
	// Err is the spawn failure when Started is false.
	Err error
	// Preempted is true when lifeboat received a stop signal (or its context
	// ended) before the child exited.
	Preempted bool
	// Code is the exit code lifeboat should use.
	Code int
}

func (e *ExitError) Error() string {
	if !e.Started {
		return e.Err.Error()
	}
	return fmt.Sprintf("%s; exit code %d", describeStatus(e.Status), e.Code)
}

func (e *ExitError) Unwrap() error { return e.Err }

// ExitCode returns the code lifeboat should exit with.
func (e *ExitError) ExitCode() int { return e.Code }

// StatusCode maps a wait status to a shell-style exit code: the child's own
// code, or 128+n when it died by signal n.
func StatusCode(ws unix.WaitStatus) int {
	switch {
	case ws.Exited():
		return ws.ExitStatus()
	case ws.Signaled():
		return 128 + int(ws.Signal())
	}
	return CodeInternal
}

func describeStatus(ws unix.WaitStatus) string {
	switch {
	case ws.Exited():
		return fmt.Sprintf("trainer exited with code %d", ws.ExitStatus())
	case ws.Signaled():
		s := fmt.Sprintf("trainer killed by SIG%s", signals.Name(ws.Signal()))
		if ws.CoreDump() {
			s += " (core dumped)"
		}
		return s
	}
	return fmt.Sprintf("trainer ended with wait status %#x", uint32(ws))
}

// PreemptChild as Config.PreemptExitCode keeps the child's own exit code
// after a stop signal.
const PreemptChild = -1

// exitCode decides lifeboat's exit code for a child that ended with ws.
// preempted children that exit 0 get preemptCode (unless PreemptChild), so
// that Kubernetes retries the pod instead of marking it Completed.
func exitCode(ws unix.WaitStatus, preempted bool, preemptCode int) int {
	code := StatusCode(ws)
	if preempted && code == 0 && preemptCode != PreemptChild {
		return preemptCode
	}
	return code
}

// WriteTerminationLog writes msg as the one line of the file where
// Kubernetes reads why a container stopped (terminationMessagePath). The
// file is created only with create; otherwise a missing file (no
// Kubernetes) is left alone silently. A failure is logged (log may be
// nil), never fatal: PID 1 exits with its code either way.
func WriteTerminationLog(path string, create bool, msg string, log *slog.Logger) {
	if path == "" {
		return
	}
	flags := os.O_WRONLY | os.O_TRUNC
	if create {
		flags |= os.O_CREATE
	}
	f, err := os.OpenFile(path, flags, 0o644)
	if err != nil {
		if (create || !errors.Is(err, os.ErrNotExist)) && log != nil {
			log.Warn("supervisor.termination_log_failed", "path", path, "err", err)
		}
		return
	}
	defer f.Close()
	if _, err := fmt.Fprintln(f, msg); err != nil && log != nil {
		log.Warn("supervisor.termination_log_failed", "path", path, "err", err)
	}
}
