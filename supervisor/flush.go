package supervisor

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// beginFlush enters the last phase: Checkpoints.Flush (the final upload)
// runs in its own goroutine until the stop's FlushEnd after a stop, or
// AfterExitTimeout when the trainer exited on its own. Without Checkpoints
// the supervision is done.
func (l *loop) beginFlush() {
	cp := l.cfg.Checkpoints
	if cp == nil {
		l.phase = phaseDone
		return
	}
	var stop *Stop
	end, limit := l.cfg.Clock.Now().Add(l.cfg.AfterExitTimeout), l.cfg.AfterExitTimeout.String()
	if l.stopping {
		s := l.stop
		stop = &s
		end, limit = s.FlushEnd(), "the grace period"
	}
	ctx, cancel := context.WithDeadline(context.Background(), end)
	done := make(chan error, 1)
	l.phase = phaseFlushing
	l.flushDone = done
	l.startHook(cancel, end, limit)
	go func() {
		defer func() {
			if r := recover(); r != nil {
				done <- fmt.Errorf("final upload panicked: %v", r)
			}
		}()
		done <- cp.Flush(ctx, stop)
	}()
}

// endFlush takes Checkpoints.Flush's result.
func (l *loop) endFlush(err error) {
	l.endHook()
	l.flushErr = err
	if err != nil {
		l.cfg.Log.Error("supervisor.final_upload_failed", "err", err)
	}
	l.phase = phaseDone
}

// startHook records the hook now in flight: its cancel, and when the loop
// stops waiting for it.
func (l *loop) startHook(cancel context.CancelFunc, end time.Time, limit string) {
	l.cancelHook = cancel
	l.hookEndAt, l.hookLimit = end, limit
	l.hookEnd.set(end.Sub(l.cfg.Clock.Now()))
}

// boundHook brings the end of the hook in flight forward to end, when that
// is earlier (a stop during the flush of a trainer that exited on its own,
// or during BeforeRestart). The hook's context ends then too: the loop
// cancels it when it stops waiting.
func (l *loop) boundHook(end time.Time, limit string) {
	if !l.hookEnd.armed() || !end.Before(l.hookEndAt) {
		return
	}
	l.hookEndAt, l.hookLimit = end, limit
	l.hookEnd.set(end.Sub(l.cfg.Clock.Now()))
}

// endHook forgets the hook in flight and ends its context.
func (l *loop) endHook() {
	if l.cancelHook != nil {
		l.cancelHook()
		l.cancelHook = nil
	}
	l.hookEnd.stop()
	l.restartDone, l.flushDone, l.checkDone = nil, nil, nil
}

// hookOverdue runs when the hook in flight has used up its time. PID 1
// never waits past that: a result that is already there is taken;
// otherwise the hook is cancelled and left behind, the failure recorded,
// and the supervision ends.
func (l *loop) hookOverdue() {
	switch l.phase {
	case phaseFlushing:
		select {
		case err := <-l.flushDone:
			l.endFlush(err)
			return
		default:
		}
		l.endHook()
		l.flushErr = fmt.Errorf("the final upload did not finish within %s", l.hookLimit)
		l.cfg.Log.Error("supervisor.final_upload_failed", "err", l.flushErr,
			"effect", "exiting without waiting for it")
	case phaseRestarting:
		select {
		case r := <-l.restartDone:
			l.endRestart(r)
			return
		default:
		}
		l.endHook()
		l.flushErr = fmt.Errorf("the final upload did not run: the commit before the restart did not end within %s", l.hookLimit)
		l.cfg.Log.Error("supervisor.restart_failed", "err", errors.New("the commit before the restart did not return"),
			"effect", "exiting without the final upload")
	case phaseChecking:
		select {
		case stop := <-l.checkDone:
			l.endCheck(stop)
		default:
			l.endCheck("")
		}
		return
	default:
		return
	}
	l.phase = phaseDone
}
