package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"slices"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/lifeboat-project/lifeboat/signals"
	"github.com/lifeboat-project/lifeboat/supervisor"
)

// earlySignals catches every signal from lifeboat's first instant, before
// flags are parsed, the store is opened or a checkpoint restored, and
// relays them to whoever takes over (the supervisor) later. Until then, a
// stop signal cancels the start-up: Go's default for an uncaught SIGTERM
// is to exit 2 with nothing said, which a Job reads as a configuration
// error, and a restore killed that way leaves its files behind.
type earlySignals struct {
	relay chan os.Signal // every signal, in order, for the supervisor

	mu      sync.Mutex
	seen    []unix.Signal // signals received before the hand-off
	stops   []unix.Signal // what counts as a stop during start-up
	stopped unix.Signal   // the first stop signal, 0 if none
	cancel  context.CancelCauseFunc
}

// catchSignals relays in, the subscription to every signal that
// internal/earlysignal made before any other package of lifeboat's
// initialised. main calls it first.
func catchSignals(in <-chan os.Signal) *earlySignals {
	e := &earlySignals{relay: make(chan os.Signal, 1024), stops: []unix.Signal{unix.SIGTERM, unix.SIGINT}}
	go func() {
		for s := range in {
			e.note(s)
			select {
			case e.relay <- s:
			default: // the supervisor is not reading yet and the buffer is full: keep the newest
			}
		}
	}()
	return e
}

func (e *earlySignals) note(s os.Signal) {
	sig, ok := s.(unix.Signal)
	if !ok {
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.seen = append(e.seen, sig)
	if e.stopped == 0 && slices.Contains(e.stops, sig) {
		e.stopped = sig
		if e.cancel != nil {
			e.cancel(errStopped{sig})
		}
	}
}

// errStopped is the cause of a start-up cancelled by a stop signal.
type errStopped struct{ sig unix.Signal }

func (e errStopped) Error() string { return "stopped by SIG" + signals.Name(e.sig) }

// during returns a context for the start-up that ends when one of stops
// (TERM and INT when empty) arrives, or has arrived since lifeboat
// started. A nil e (lifeboat run in-process by tests) gives ctx itself.
func (e *earlySignals) during(ctx context.Context, stops []unix.Signal) (context.Context, context.CancelFunc) {
	if e == nil {
		return ctx, func() {}
	}
	ctx, cancel := context.WithCancelCause(ctx)
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(stops) > 0 {
		e.stops = stops
		for _, s := range e.seen {
			if e.stopped == 0 && slices.Contains(stops, s) {
				e.stopped = s
			}
		}
	}
	if e.stopped != 0 {
		cancel(errStopped{e.stopped})
	}
	e.cancel = cancel
	return ctx, func() { cancel(nil) }
}

// stop is the stop signal received during the start-up, 0 if none.
func (e *earlySignals) stop() unix.Signal {
	if e == nil {
		return 0
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.stopped
}

// handOff ends the start-up: later signals (and those queued) go to the
// returned channel's reader only. A nil e gives nil: the supervisor then
// subscribes itself.
func (e *earlySignals) handOff() <-chan os.Signal {
	if e == nil {
		return nil
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.cancel = nil
	return e.relay
}

// stopSignals returns a channel of the TERMs and INTs among relayed, or,
// when relayed is nil (in-process tests), of a new subscription to them.
func stopSignals(relayed <-chan os.Signal) <-chan os.Signal {
	out := make(chan os.Signal, 1)
	if relayed == nil {
		signal.Notify(out, unix.SIGTERM, unix.SIGINT)
		return out
	}
	go func() {
		for s := range relayed {
			if s == unix.SIGTERM || s == unix.SIGINT {
				select {
				case out <- s:
				default:
				}
			}
		}
	}()
	return out
}

// stoppedDuringStartup reports a start-up ended by a stop signal: one log
// line, the termination log, and the preemption exit code. err is what the
// interrupted step returned; it is reported when no stop signal caused it.
func stoppedDuringStartup(e *earlySignals, phase string, err error, log *slog.Logger, termLog string, termLogCreate bool, code int) (int, bool) {
	sig := e.stop()
	var es errStopped
	if sig == 0 && !errors.As(err, &es) {
		return 0, false
	}
	if sig == 0 {
		sig = es.sig
	}
	if log != nil {
		log.Warn("lifeboat.stopped_during_startup", "signal", signals.Name(sig), "phase", phase,
			"effect", "nothing was started; what the interrupted step wrote was removed", "code", code)
	}
	supervisor.WriteTerminationLog(termLog, termLogCreate,
		fmt.Sprintf("lifeboat: stopped by SIG%s during start-up (%s); nothing was started; exit code %d", signals.Name(sig), phase, code), log)
	return code, true
}

// kubeTerminationLog is where Kubernetes reads why a container stopped;
// commands without --termination-log write it when it exists.
const kubeTerminationLog = "/dev/termination-log"
