package supervisor

import (
	"context"
	"time"

	"golang.org/x/sys/unix"
)

// hooks is a Checkpoints, a Job and an Observer made of function fields,
// for tests: a nil field does nothing and returns zero values.
type hooks struct {
	reserve       func() (time.Duration, string)
	beforeRestart func(ctx context.Context, attempt int) ([]string, error)
	flush         func(ctx context.Context, stop *Stop) error
	flushNote     func() string
	peerStop      func(ctx context.Context) string
	jobWideStop   func() string

	stopping   func(Stop)
	stopSignal func(unix.Signal)
	restarted  func(reason string)
	oomKilled  func()
	reaped     func(pid int, status unix.WaitStatus, at time.Time)
	killing    func(at time.Time)
	failed     func(reason string)
}

var (
	_ Checkpoints = (*hooks)(nil)
	_ Job         = (*hooks)(nil)
	_ Observer    = (*hooks)(nil)
)

func (h *hooks) Reserve() (time.Duration, string) {
	if h.reserve == nil {
		return 0, ""
	}
	return h.reserve()
}

func (h *hooks) BeforeRestart(ctx context.Context, attempt int) ([]string, error) {
	if h.beforeRestart == nil {
		return nil, nil
	}
	return h.beforeRestart(ctx, attempt)
}

func (h *hooks) Flush(ctx context.Context, stop *Stop) error {
	if h.flush == nil {
		return nil
	}
	return h.flush(ctx, stop)
}

func (h *hooks) FlushNote() string {
	if h.flushNote == nil {
		return ""
	}
	return h.flushNote()
}

func (h *hooks) PeerStop(ctx context.Context) string {
	if h.peerStop == nil {
		return ""
	}
	return h.peerStop(ctx)
}

func (h *hooks) JobWideStop() string {
	if h.jobWideStop == nil {
		return ""
	}
	return h.jobWideStop()
}

func (h *hooks) Stopping(s Stop) {
	if h.stopping != nil {
		h.stopping(s)
	}
}

func (h *hooks) StopSignal(sig unix.Signal) {
	if h.stopSignal != nil {
		h.stopSignal(sig)
	}
}

func (h *hooks) Restarted(reason string) {
	if h.restarted != nil {
		h.restarted(reason)
	}
}

func (h *hooks) OOMKilled() {
	if h.oomKilled != nil {
		h.oomKilled()
	}
}

func (h *hooks) Reaped(pid int, status unix.WaitStatus, at time.Time) {
	if h.reaped != nil {
		h.reaped(pid, status, at)
	}
}

func (h *hooks) Killing(at time.Time) {
	if h.killing != nil {
		h.killing(at)
	}
}

func (h *hooks) Failed(reason string) {
	if h.failed != nil {
		h.failed(reason)
	}
}
