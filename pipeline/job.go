package pipeline

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"

	"github.com/lifeboat-project/lifeboat/coord"
	"github.com/lifeboat-project/lifeboat/signals"
	"github.com/lifeboat-project/lifeboat/storage"
	"github.com/lifeboat-project/lifeboat/supervisor"
)

// JobStop is one lifeboat's part in the job-wide stop (coord.Coordinator):
// the supervisor's Job, and the end of the final upload's common step and
// record (Stopper.Flush). A nil *JobStop (one rank, or the job-wide stop
// off) does nothing.
type JobStop struct {
	c   *coord.Coordinator
	log *slog.Logger
	dir string // the checkpoint directory, where the stop file is written
}

var _ supervisor.Job = (*JobStop)(nil)

// NewJobStop is the job-wide stop of c, which the caller runs
// (Coordinator.Run); dir is the checkpoint directory, where c writes the
// stop file.
func NewJobStop(c *coord.Coordinator, dir string, log *slog.Logger) *JobStop {
	return &JobStop{c: c, log: log, dir: dir}
}

// Env is what the trainer is told of the job-wide stop: the stop file it
// may look for (lifeboat.stop_requested()); nothing without one.
func (j *JobStop) Env() []string {
	if j == nil {
		return nil
	}
	return []string{"LIFEBOAT_STOP_FILE=" + filepath.Join(j.dir, coord.StopFile)}
}

// Stopping writes the stop record of a stop that begins on this rank (a
// signal, a notice, the maximum runtime), with its reason and the end of
// its grace budget, for the other ranks to follow; only the first call
// counts.
func (j *JobStop) Stopping(s supervisor.Stop) {
	if j == nil {
		return
	}
	j.c.Begin(s.Reason, s.Deadline)
}

// PeerStop runs after the trainer failed with no stop in progress: it
// looks at the store now for another rank's stop and names it ("rank 0:
// SIGTERM"), "" when there is none.
func (j *JobStop) PeerStop(ctx context.Context) string {
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
func (j *JobStop) Failed(reason string) {
	if j == nil {
		return
	}
	j.log.Warn("coord.trainer_failed", "reason", reason,
		"effect", "a stop record is written: every other rank stops too instead of waiting in a collective for its timeout")
	j.c.Begin(reason, time.Time{})
}

// Merge relays the cloud notices and the stop of another rank, as a
// notice with no deadline (this rank's grace applies); a nil j relays
// cloud itself.
func (j *JobStop) Merge(ctx context.Context, cloud <-chan supervisor.Notice) <-chan supervisor.Notice {
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
func (j *JobStop) common(ctx context.Context, a Agent) {
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

// settle waits, until ctx ends (the stop's FlushEnd), for a stop record
// this rank is writing: the other ranks must see it even when lifeboat is
// done a moment after its stop began.
func (j *JobStop) settle(ctx context.Context) {
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
func (j *JobStop) JobWideStop() string {
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

// StopDuringStartup writes the stop record, then the stop flag, of a stop
// (sig, 0 when none came by a signal) that came while this rank was still
// starting (restoring its checkpoint), so that the other ranks, which may
// be training already, stop too at their next interval instead of waiting
// in a collective for this rank. It waits for the store at most wait and
// logs what it wrote or could not.
func StopDuringStartup(st storage.Store, rank int, host string, sig unix.Signal, wait time.Duration, log *slog.Logger) {
	reason := "stopped during start-up (store open and restore)"
	if sig != 0 {
		reason = "SIG" + signals.Name(sig) + " during start-up (store open and restore)"
	}
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	s, err := coord.Write(ctx, st, coord.Stop{Rank: rank, Host: host, Reason: reason, Written: time.Now()})
	if err != nil {
		log.Warn("coord.stop_not_stored", "err", err, "effect", "the other ranks are not stopped through the store")
		return
	}
	log.Info("coord.stop_written", "stop_id", s.ID, "rank", s.Rank, "host", s.Host, "reason", s.Reason, "effect", "every other rank stops too")
	if err := coord.Flag(ctx, st, s); err != nil {
		log.Warn("coord.stop_not_stored", "err", err, "effect", "the other ranks see the stop record when they next list the records (every 5 minutes) or when their trainer fails, not at their next interval")
	}
}
