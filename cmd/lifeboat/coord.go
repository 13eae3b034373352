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

// stoppedDuringStartup has the other ranks stop too when a stop came
// while this rank was still starting (pipeline.StopDuringStartup): with
// several ranks and the job-wide stop on, once the store was opened.
func (o *coordOptions) stoppedDuringStartup(st storage.Store, ro rankOptions, sig unix.Signal, grace time.Duration, log *slog.Logger) {
	if st == nil || ro.worldSize < 2 || o.interval == 0 {
		return
	}
	host, _ := os.Hostname()
	pipeline.StopDuringStartup(st, ro.rank, host, sig, min(grace/2, 10*time.Second), log)
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
