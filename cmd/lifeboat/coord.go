package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/lifeboat-project/lifeboat/coord"
	"github.com/lifeboat-project/lifeboat/signals"
	"github.com/lifeboat-project/lifeboat/supervisor"
)

// processStarted is when this lifeboat started, before the store was
// opened and the checkpoint restored: a stop record written earlier (less
// the clock skew) is an earlier run's.
var processStarted = time.Now()

// coordOptions are the flags of the job-wide stop.
type coordOptions struct {
	interval time.Duration
}

func (o *coordOptions) register(fs *flag.FlagSet) {
	o.interval = coord.DefaultInterval
	fs.Var((*coordInterval)(&o.interval), "coord-interval",
		"with a store and --world-size above 1: how often the store is asked whether another rank began a stop, which this rank then follows as a preemption (0: off)")
}

// coordInterval is --coord-interval: a duration, 0 or more.
type coordInterval time.Duration

func (d *coordInterval) String() string { return time.Duration(*d).String() }

func (d *coordInterval) Set(s string) error {
	v, err := time.ParseDuration(s)
	if err != nil || v < 0 {
		return errors.New("--coord-interval (LIFEBOAT_COORD_INTERVAL) must be a duration such as 2s, or 0 to turn the job-wide stop off")
	}
	*d = coordInterval(v)
	return nil
}

// jobStop is one lifeboat's part in the job-wide stop.
type jobStop struct {
	c      *coord.Coordinator
	log    *slog.Logger
	notice atomic.Pointer[supervisor.Notice] // the last cloud notice relayed
	end    atomic.Int64                      // the grace budget's end (Unix ns); 0 before a stop
}

// start wires the job-wide stop into cfg when it applies (a store, more
// than one rank, --coord-interval above 0) and returns nil when it does
// not: a stop that begins here (OnStop's first call) writes a stop record,
// and another rank's record arrives as a notice with no deadline of its
// own, so this rank's grace applies. The trainer learns of the stop file
// through LIFEBOAT_STOP_FILE.
func (o *coordOptions) start(ctx context.Context, cfg *supervisor.Config, p *pipeline) (*jobStop, error) {
	if p == nil || p.ranks.worldSize < 2 || o.interval == 0 {
		return nil, nil
	}
	host, _ := os.Hostname()
	c, err := coord.New(coord.Config{Store: p.store, Rank: p.ranks.rank, WorldSize: p.ranks.worldSize, Host: host,
		Interval: o.interval, Started: processStarted, Dir: p.dir, StepWait: cfg.Grace / 4, Log: cfg.Log})
	if err != nil {
		return nil, err
	}
	j := &jobStop{c: c, log: cfg.Log}
	go c.Run(ctx)
	cfg.Notices = j.merge(ctx, cfg.Notices)
	onStop, stops, maxRuntime := cfg.OnStop, cfg.StopSignals, cfg.MaxRuntime
	cfg.OnStop = func(end time.Time) {
		if onStop != nil {
			onStop(end)
		}
		j.end.Store(end.UnixNano())
		c.Begin(j.reason(stops, maxRuntime), end) // only the first call counts
	}
	cfg.Env = supervisor.MergeEnv(cfg.Env, []string{"LIFEBOAT_STOP_FILE=" + filepath.Join(p.dir, coord.StopFile)})
	return j, nil
}

// merge relays the cloud notices (recording the last, for the reason) and
// the stop of another rank, as a notice with no deadline.
func (j *jobStop) merge(ctx context.Context, cloud <-chan supervisor.Notice) <-chan supervisor.Notice {
	out := make(chan supervisor.Notice, 2)
	go func() {
		defer close(out)
		peer := j.c.Peer()
		for cloud != nil || peer != nil {
			var n supervisor.Notice
			select {
			case <-ctx.Done():
				return
			case cn, ok := <-cloud:
				if !ok {
					cloud = nil
					continue
				}
				j.notice.Store(&cn)
				n = cn
			case s := <-peer:
				peer = nil
				n = supervisor.Notice{Source: "peer", Detail: fmt.Sprintf("rank %d: %s", s.Rank, s.Reason)}
			}
			select {
			case out <- n:
			case <-ctx.Done():
				return
			}
		}
	}()
	return out
}

// reason says why the stop that begins now began: a cloud notice, a stop
// signal, the maximum runtime, or lifeboat's own context.
func (j *jobStop) reason(stops []unix.Signal, maxRuntime time.Duration) string {
	if n := j.notice.Load(); n != nil {
		return n.Source + " preemption notice"
	}
	if sig := lastStopSignal(startup, stops); sig != 0 {
		return "SIG" + signals.Name(sig)
	}
	if maxRuntime > 0 && time.Since(processStarted) >= maxRuntime {
		return fmt.Sprintf("max runtime %s reached", maxRuntime)
	}
	return "lifeboat was asked to stop"
}

// lastStopSignal is the last of stops that lifeboat received, 0 if none.
func lastStopSignal(e *earlySignals, stops []unix.Signal) unix.Signal {
	if e == nil {
		return 0
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	for i := len(e.seen) - 1; i >= 0; i-- {
		if slices.Contains(stops, e.seen[i]) {
			return e.seen[i]
		}
	}
	return 0
}

// exit makes a trainer SIGKILLed during a job-wide stop a preemption:
// lifeboat exits with the preemption code (143), not 137. A rank blocked
// in a collective whose peer is gone can only be stopped that way, and the
// Job must retry the whole gang instead of counting a failure.
//
// It first waits, until the grace budget ends, for a stop record this
// rank is writing: the other ranks must see it even when lifeboat is done
// a moment after its stop began.
func (j *jobStop) exit(err error, cfg supervisor.Config) error {
	if j == nil {
		return err
	}
	if end := j.end.Load(); end != 0 {
		ctx, cancel := context.WithDeadline(context.Background(), time.Unix(0, end).Add(-supervisor.ExitMargin))
		if serr := j.c.Settle(ctx); serr != nil {
			j.log.Warn("coord.stop_not_stored", "err", serr, "effect", "the other ranks are not stopped through the store")
		}
		cancel()
	}
	s, joined := j.c.Joined()
	var ee *supervisor.ExitError
	if !joined || !errors.As(err, &ee) || !ee.Started || !ee.Preempted || !ee.Status.Signaled() || ee.Status.Signal() != unix.SIGKILL {
		return err
	}
	code := cfg.PreemptExitCode
	switch code {
	case supervisor.PreemptChild:
		return err
	case 0:
		code = supervisor.DefaultPreemptExitCode
	}
	was := ee.Code
	ee.Code = code
	j.log.Warn("coord.exit_as_preemption", "code", code, "trainer_code", was, "stop_id", s.ID, "from_rank", s.Rank, "reason", s.Reason,
		"effect", "the Job retries every rank (in a job-wide stop a trainer blocked in a collective is SIGKILLed at its grace deadline)")
	appendTerminationLog(cfg, fmt.Sprintf("lifeboat: exit code %d, not %d: part of a job-wide stop (rank %d: %s)", code, was, s.Rank, s.Reason), j.log)
	return ee
}

// appendTerminationLog adds a line to the termination log the supervisor
// wrote.
func appendTerminationLog(cfg supervisor.Config, line string, log *slog.Logger) {
	if cfg.TerminationLog == "" {
		return
	}
	flags := os.O_WRONLY | os.O_APPEND
	if cfg.TerminationLogCreate {
		flags |= os.O_CREATE
	}
	f, err := os.OpenFile(cfg.TerminationLog, flags, 0o644)
	if err != nil {
		if !errors.Is(err, os.ErrNotExist) || cfg.TerminationLogCreate {
			log.Warn("supervisor.termination_log_failed", "path", cfg.TerminationLog, "err", err)
		}
		return
	}
	defer f.Close()
	if _, err := fmt.Fprintln(f, line); err != nil {
		log.Warn("supervisor.termination_log_failed", "path", cfg.TerminationLog, "err", err)
	}
}
