package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"

	"github.com/lifeboat-project/lifeboat/agent"
	"github.com/lifeboat-project/lifeboat/coord"
	"github.com/lifeboat-project/lifeboat/pipeline"
	"github.com/lifeboat-project/lifeboat/signals"
	"github.com/lifeboat-project/lifeboat/storage"
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
		"with a store and --world-size above 1: how often the store is asked whether another rank began a stop, which this rank then follows as a preemption; with a store at any world size: how often the same HEAD tells this pod's claim of its rank whether another pod of the rank asked (another live pod of the rank: exit 78) (0: both off)")
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

// jobStop is one lifeboat's part in the job-wide stop: the supervisor's
// Job. A nil *jobStop (one rank, or the job-wide stop off) does nothing.
type jobStop struct {
	c   *coord.Coordinator
	log *slog.Logger
	dir string // the checkpoint directory, where the stop file is written
}

var _ supervisor.Job = (*jobStop)(nil)

// start starts the job-wide stop when it applies (a store, more than one
// rank, --coord-interval above 0) and returns nil when it does not:
// another rank's record arrives as a notice with no deadline of its own
// (merge), so this rank's grace applies, and the trainer learns of the
// stop file through LIFEBOAT_STOP_FILE (env). A stop that begins here is
// written by Stopping. Its looks at the stop flag are passed on to cl, this
// rank's claim (nil: none), which then asks the store for nothing more
// while all is settled.
func (o *coordOptions) start(ctx context.Context, p *pipeline.Pipeline, cl *coord.Claim, grace time.Duration, log *slog.Logger) (*jobStop, error) {
	if p == nil || p.WorldSize < 2 || o.interval == 0 {
		return nil, nil
	}
	host, _ := os.Hostname()
	c, err := coord.New(coord.Config{Store: p.Store, Rank: p.Rank, WorldSize: p.WorldSize, Host: host,
		Interval: o.interval, Started: processStarted, Dir: p.Dir, StepWait: grace / 4, Log: log, Claim: cl})
	if err != nil {
		return nil, err
	}
	j := &jobStop{c: c, log: log, dir: p.Dir}
	go c.Run(ctx)
	return j, nil
}

// env is what the trainer is told of the job-wide stop: the stop file it
// may look for (lifeboat.stop_requested()); nothing without one.
func (j *jobStop) env() []string {
	if j == nil {
		return nil
	}
	return []string{"LIFEBOAT_STOP_FILE=" + filepath.Join(j.dir, coord.StopFile)}
}

// stoppedDuringStartup writes the stop record, then the stop flag, of a
// stop that came while this rank was still starting (restoring its
// checkpoint), so that the other ranks, which may be training already,
// stop too at their next interval instead of waiting in a collective for
// this rank. It does nothing for one rank, with the
// job-wide stop off, or before the store was opened (nothing can be
// written then); it waits for the store at most half the grace.
func (o *coordOptions) stoppedDuringStartup(st storage.Store, ro rankOptions, sig unix.Signal, grace time.Duration, log *slog.Logger) {
	if st == nil || ro.worldSize < 2 || o.interval == 0 {
		return
	}
	reason := "stopped during start-up (store open and restore)"
	if sig != 0 {
		reason = "SIG" + signals.Name(sig) + " during start-up (store open and restore)"
	}
	host, _ := os.Hostname()
	ctx, cancel := context.WithTimeout(context.Background(), min(grace/2, 10*time.Second))
	defer cancel()
	s, err := coord.Write(ctx, st, coord.Stop{Rank: ro.rank, Host: host, Reason: reason, Written: time.Now()})
	if err != nil {
		log.Warn("coord.stop_not_stored", "err", err, "effect", "the other ranks are not stopped through the store")
		return
	}
	log.Info("coord.stop_written", "stop_id", s.ID, "rank", s.Rank, "host", s.Host, "reason", s.Reason, "effect", "every other rank stops too")
	if err := coord.Flag(ctx, st, s); err != nil {
		log.Warn("coord.stop_not_stored", "err", err, "effect", "the other ranks see the stop record when they next list the records (every 5 minutes) or when their trainer fails, not at their next interval")
	}
}

// startSidecar is the sidecar's part in the job-wide stop when it applies
// (more than one rank, --coord-interval above 0), nil otherwise. The
// sidecar writes a stop record on its own stop (Stopping), and follows
// another rank's: the trainer, in another container, learns of it from the
// stop file in --dir (lifeboat.stop_requested(), LIFEBOAT_STOP_FILE) and
// saves; the sidecar uploads until its own stop, as before. Its looks at
// the stop flag are passed on to cl, as start's are.
func (o *coordOptions) startSidecar(ctx context.Context, p *pipeline.Pipeline, cl *coord.Claim, log *slog.Logger) (*jobStop, error) {
	if p.WorldSize < 2 || o.interval == 0 {
		return nil, nil
	}
	host, _ := os.Hostname()
	c, err := coord.New(coord.Config{Store: p.Store, Rank: p.Rank, WorldSize: p.WorldSize, Host: host,
		Interval: o.interval, Started: processStarted, Dir: p.Dir, Log: log, Claim: cl})
	if err != nil {
		return nil, err
	}
	go c.Run(ctx) // a peer's stop: the stop file and coord.stop_seen; nothing to signal
	return &jobStop{c: c, log: log, dir: p.Dir}, nil
}

// Stopping writes the stop record of a stop that begins on this rank (a
// signal, a notice, the maximum runtime), with its reason and the end of
// its grace budget, for the other ranks to follow; only the first call
// counts.
func (j *jobStop) Stopping(s supervisor.Stop) {
	if j == nil {
		return
	}
	j.c.Begin(s.Reason, s.Deadline)
}

// PeerStop runs after the trainer failed with no stop in progress: it
// looks at the store now for another rank's stop and names it ("rank 0:
// SIGTERM"), "" when there is none.
func (j *jobStop) PeerStop(ctx context.Context) string {
	if j == nil {
		return ""
	}
	s, ok := j.c.Check(ctx)
	if !ok {
		return ""
	}
	return fmt.Sprintf("rank %d: %s", s.Rank, s.Reason)
}

// Failed is told that the trainer failed for good: the stop record written
// for it stops the other ranks instead of leaving them blocked in a
// collective until its timeout.
func (j *jobStop) Failed(reason string) {
	if j == nil {
		return
	}
	j.log.Warn("coord.trainer_failed", "reason", reason,
		"effect", "a stop record is written: every other rank stops too instead of waiting in a collective for its timeout")
	j.c.Begin(reason, time.Time{})
}

// merge relays the cloud notices and the stop of another rank, as a
// notice with no deadline; a nil j relays cloud itself.
func (j *jobStop) merge(ctx context.Context, cloud <-chan supervisor.Notice) <-chan supervisor.Notice {
	if j == nil {
		return cloud
	}
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

// common is the end of a job-wide stop's final upload: it publishes the
// newest step this rank holds in the store, waits for the other ranks'
// (coord.Coordinator.Flushed), and commits this rank's checkpoint of
// their lowest when that is older than its own newest, so that the stop
// leaves a step every rank holds (docs/FORMAT.md, "A stop leaves a
// complete step"). It does nothing without a job-wide stop; a failure is
// logged, and the commits already made stand.
func (j *jobStop) common(ctx context.Context, a *agent.Agent) {
	if j == nil {
		return
	}
	if _, ok := j.c.Joined(); !ok {
		return
	}
	newest := a.Newest()
	f, err := j.c.Flushed(ctx, newest, 200*time.Millisecond)
	if err != nil {
		j.log.Warn("coord.flushed_failed", "err", err, "effect", "this rank does not learn the other ranks' newest steps: a step only some ranks committed at the stop stays incomplete")
		return
	}
	step, ok := f.Common()
	j.log.Info("coord.flushed", "stop_id", f.StopID, "newest", newest, "reported", len(f.Steps), "world_size", f.WorldSize, "common", step, "common_known", ok)
	if !ok || step >= newest {
		return
	}
	if _, err := a.CommitStep(ctx, step); err != nil {
		j.log.Warn("checkpoint.common_step_failed", "step", step, "err", err,
			"effect", "the other ranks' newest step is not complete: the next start restores an older step every rank holds")
	}
}

// settle waits, until ctx ends (the grace budget's, less lifeboat's exit
// margin), for a stop record this rank is writing: the other ranks must
// see it even when lifeboat is done a moment after its stop began.
func (j *jobStop) settle(ctx context.Context) {
	if j == nil {
		return
	}
	if err := j.c.Settle(ctx); err != nil {
		j.log.Warn("coord.stop_not_stored", "err", err, "effect", "without its record the other ranks are not stopped through the store; without the flag, only at their next full listing (every 5 minutes) or when their trainer fails")
	}
}

// JobWideStop names the job-wide stop this rank took part in ("rank 1:
// SIGTERM"), "" when there was none; the supervisor asks when the trainer
// failed during a stop (its collective failed when a peer left, or it was
// blocked in one and SIGKILLed at the deadline). The Job must retry the
// whole gang instead of counting a failure, so lifeboat then exits with
// the preemption code.
func (j *jobStop) JobWideStop() string {
	if j == nil {
		return ""
	}
	s, ok := j.c.Joined()
	if !ok {
		return ""
	}
	j.log.Warn("coord.exit_as_preemption", "stop_id", s.ID, "from_rank", s.Rank, "reason", s.Reason,
		"effect", "lifeboat exits with the preemption code, and the Job retries every rank (in a job-wide stop a trainer fails when a peer leaves its collective, or blocks in it until SIGKILLed at its grace deadline)")
	return fmt.Sprintf("rank %d: %s", s.Rank, s.Reason)
}
