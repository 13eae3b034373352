//go:build lifeboat_faults

package checkpoint

import (
	"os"
	"runtime"
	"strconv"

	"golang.org/x/sys/unix"
)

// In a build with the lifeboat_faults tag (tests only; never shipped),
// LIFEBOAT_FAULT_STOP_AT_MOVE=N makes a restore stop its own process
// (SIGSTOP) once N files are moved into place (0: before the first), so
// that a test acts at that exact moment: swaps a directory for a link,
// sends SIGKILL, then SIGCONT.
func init() {
	n, err := strconv.Atoi(os.Getenv("LIFEBOAT_FAULT_STOP_AT_MOVE"))
	if err != nil {
		return
	}
	afterMove = func(moved int) {
		if moved == n {
			// To this thread: a process-wide SIGSTOP may be taken by
			// another thread, and this one move on before it stops.
			runtime.LockOSThread()
			unix.Tgkill(unix.Getpid(), unix.Gettid(), unix.SIGSTOP)
			runtime.UnlockOSThread()
		}
	}
}
