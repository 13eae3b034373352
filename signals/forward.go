package signals

import (
	"errors"
	"log/slog"

	"golang.org/x/sys/unix"
)

// Linux signal numbering: glibc reserves 32 and 33 for its threads, so the
// first real-time signal a program may use is 34; the last is 64.
const (
	sigRTMin  = 34
	maxSignal = 64
)

// KillFunc sends sig to pid: unix.Kill in production, a recorder in tests.
// A negative pid addresses a process group.
type KillFunc func(pid int, sig unix.Signal) error

// Forwardable reports whether lifeboat relays sig to the child. SIGCHLD
// belongs to the reaper, SIGTTIN and SIGTTOU are the kernel's notices about
// lifeboat's own terminal access (relaying them would stop the child),
// SIGPIPE is the kernel's notice that a reader of lifeboat's own output
// went away (relaying it would kill the trainer over a dead log shipper),
// and KILL and STOP cannot be caught. SIGURG is forwarded unless the Go
// runtime preempts goroutines with it (RuntimeOwnsURG).
func Forwardable(sig unix.Signal) bool {
	switch sig {
	case 0, unix.SIGCHLD, unix.SIGTTIN, unix.SIGTTOU, unix.SIGPIPE, unix.SIGKILL, unix.SIGSTOP:
		return false
	case unix.SIGURG:
		return !RuntimeOwnsURG()
	}
	return sig > 0 && int(sig) <= maxSignal
}

// Target says where forwarded signals go.
type Target struct {
	Pid       int  // the direct child
	ChildOnly bool // send to Pid only, not to its process group
}

// Send delivers sig to the target: the child's process group (the child
// leads it), or the child alone when ChildOnly is set. ESRCH (the target is
// already gone) is returned like any other error; callers decide.
func (t Target) Send(kill KillFunc, sig unix.Signal) error {
	if t.ChildOnly {
		return kill(t.Pid, sig)
	}
	return kill(-t.Pid, sig)
}

// Deliver forwards one received signal to the target, rewritten by rw. It
// reports whether a signal was sent.
func Deliver(t Target, rw Rewrite, kill KillFunc, sig unix.Signal, log *slog.Logger) bool {
	if !Forwardable(sig) {
		if sig == unix.SIGURG {
			ExplainURG(log)
		}
		return false
	}
	out := rw.Apply(sig)
	err := t.Send(kill, out)
	switch {
	case err == nil:
		log.Debug("signal.forwarded", "received", Name(sig), "sent", Name(out), "pid", t.Pid, "group", !t.ChildOnly)
		return true
	case errors.Is(err, unix.ESRCH):
		log.Debug("signal.forward_no_target", "signal", Name(out), "pid", t.Pid)
	default:
		log.Warn("signal.forward_failed", "signal", Name(out), "pid", t.Pid, "err", err)
	}
	return false
}
