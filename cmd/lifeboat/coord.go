package main

import (
	"context"
	"errors"
	"flag"
	"log/slog"
	"os"
	"time"

	"golang.org/x/sys/unix"

	"github.com/lifeboat-project/lifeboat/coord"
	"github.com/lifeboat-project/lifeboat/pipeline"
	"github.com/lifeboat-project/lifeboat/signals"
	"github.com/lifeboat-project/lifeboat/storage"
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

// start starts the job-wide stop when it applies (a store, more than one
// rank, --coord-interval above 0) and returns nil when it does not:
// another rank's record arrives as a notice with no deadline of its own
// (JobStop.Merge), so this rank's grace applies, and the trainer learns
// of the stop file through LIFEBOAT_STOP_FILE (JobStop.Env). A stop that
// begins here is written by JobStop.Stopping. Its looks at the stop flag are passed on to cl, this
// rank's claim (nil: none), which then asks the store for nothing more
// while all is settled.
func (o *coordOptions) start(ctx context.Context, p *pipeline.Pipeline, cl *coord.Claim, grace time.Duration, log *slog.Logger) (*pipeline.JobStop, error) {
	if p == nil || p.WorldSize < 2 || o.interval == 0 {
		return nil, nil
	}
	host, _ := os.Hostname()
	c, err := coord.New(coord.Config{Store: p.Store, Rank: p.Rank, WorldSize: p.WorldSize, Host: host,
		Interval: o.interval, Started: processStarted, Dir: p.Dir, StepWait: grace / 4, Log: log, Claim: cl})
	if err != nil {
		return nil, err
	}
	go c.Run(ctx)
	return pipeline.NewJobStop(c, p.Dir, log), nil
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
// sidecar writes a stop record on its own stop (JobStop.Stopping), and follows
// another rank's: the trainer, in another container, learns of it from the
// stop file in --dir (lifeboat.stop_requested(), LIFEBOAT_STOP_FILE) and
// saves; the sidecar uploads until its own stop, as before. Its looks at
// the stop flag are passed on to cl, as start's are.
func (o *coordOptions) startSidecar(ctx context.Context, p *pipeline.Pipeline, cl *coord.Claim, log *slog.Logger) (*pipeline.JobStop, error) {
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
	return pipeline.NewJobStop(c, p.Dir, log), nil
}
