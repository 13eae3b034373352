package supervisor

import (
	"fmt"
	"os"
	"runtime"

	"golang.org/x/sys/unix"
)

// reexecMarker is set in the environment of the re-executed lifeboat so that
// it never loops; it is removed again before the child starts.
const reexecMarker = "LIFEBOAT_INTERNAL_MASK_CLEARED"

// ClearInheritedSignalMask makes sure the trainer will start with an empty
// signal mask. Go's runtime hands every process it forks the signal mask
// lifeboat itself was started with, so a parent that blocked, say, SIGUSR1
// before exec'ing lifeboat would leave the trainer deaf to USR1. When that
// mask is not empty, ClearInheritedSignalMask clears it on this thread and
// re-executes lifeboat (/proc/self/exe) with the same arguments and
// environment; exec keeps the calling thread's (now empty) mask. It returns
// nil without doing anything when the mask is already empty, and an error
// only when the re-exec itself failed (lifeboat then goes on as it is).
//
// Call it first thing in main, before any goroutine matters.
func ClearInheritedSignalMask() error {
	if _, again := os.LookupEnv(reexecMarker); again {
		os.Unsetenv(reexecMarker)
		return nil
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var cur unix.Sigset_t
	if err := unix.PthreadSigmask(unix.SIG_SETMASK, nil, &cur); err != nil {
		return fmt.Errorf("read signal mask: %w", err)
	}
	if cur == (unix.Sigset_t{}) {
		return nil
	}
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("find own executable to clear the signal mask: %w", err)
	}
	var empty unix.Sigset_t
	if err := unix.PthreadSigmask(unix.SIG_SETMASK, &empty, nil); err != nil {
		return fmt.Errorf("clear signal mask: %w", err)
	}
	env := append(os.Environ(), reexecMarker+"=1")
	err = unix.Exec(self, os.Args, env)
	// Only reached when exec failed: restore and go on.
	_ = unix.PthreadSigmask(unix.SIG_SETMASK, &cur, nil)
	return fmt.Errorf("re-exec %s with an empty signal mask: %w", self, err)
}
