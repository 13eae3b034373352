package pipeline

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/lifeboat-project/lifeboat/agent"
	"github.com/lifeboat-project/lifeboat/coord"
	"github.com/lifeboat-project/lifeboat/kube"
	"github.com/lifeboat-project/lifeboat/metrics"
	"github.com/lifeboat-project/lifeboat/supervisor"
)

// Agent is what the stop-and-flush sequence asks of the agent that
// uploads (*agent.Agent): to stream the trainer's last save from the stop,
// the reserve of the grace budget its final upload needs, the final
// upload, the commit of the job-wide stop's common step, and what the
// supervisor saw of the trainer's end.
type Agent interface {
	Stopping()
	Reserve() (time.Duration, string)
	Flush(ctx context.Context) error
	FlushWhenWritten(ctx context.Context, until time.Time) error
	FlushNote() string
	Newest() int64
	CommitStep(ctx context.Context, step int64) (bool, error)
	Reaped(pid int, status unix.WaitStatus, at time.Time)
	Killing(at time.Time)
}

var _ Agent = (*agent.Agent)(nil)

// Pod is told what the pipeline does, for the pod's events and
// annotations (*kube.Recorder): the restore before the trainer started, a
// fresh start beside complete steps, commits, failed uploads, interrupted
// saves (Pipeline.ReportTo), the stop and the final upload (Stopper), and
// another live pod of the rank (ClaimNotices). Its methods must not
// block.
type Pod interface {
	Restored(step int64, source string, seconds float64)
	FreshStartOverProgress(step int64, line string)
	Committed(step, bytes int64, seconds float64, saved time.Time, final bool)
	UploadFailed(step int64, err string)
	Interrupted(step int64, path, why string)
	Stopping(at time.Time)
	Flushed(stopped bool, err error)
	RankClaimed(run, otherRun, otherHost string)
}

var _ Pod = (*kube.Recorder)(nil)

// Restarter commits and restores between a crash and a restart
// (*Pipeline).
type Restarter interface {
	BeforeRestart(ctx context.Context, attempt int) ([]string, error)
}

var _ Restarter = (*Pipeline)(nil)

// Stopper is one lifeboat's stop-and-flush sequence, the same for run and
// the sidecar: Stopping when a stop begins, Flush for the final upload.
// For run the supervisor drives it, as its Checkpoints and Observer (and
// Job, the JobStop); the sidecar, which has no supervisor, drives it with
// StopSidecar.
//
// When a stop begins, the agent streams the trainer's last save as it is
// written (run; a sidecar's agent begins at its final upload), the grace
// budget's metric counts down to the stop's deadline, this rank's claim is
// released (a replacement pod may start while the final upload runs), and
// the pod records the stop. The final upload then runs until the stop's
// FlushEnd; when it committed (or, for the sidecar, committed what had
// settled while the trainer was still writing, agent.ErrStillWriting),
// the job-wide stop's common step follows; then the pod records the end
// of the upload, and lifeboat waits for its claim's deletion and for the
// stop record this rank is writing.
//
// Every field but Agent may be nil (nil or zero: that part is off).
// Agent is nil without a store; the Stopper is then only an Observer.
type Stopper struct {
	// Agent uploads the checkpoints; nil without a store.
	Agent Agent
	// Restart commits and restores between a crash and a restart
	// (run with a store).
	Restart Restarter
	// Job is this rank's part in the job-wide stop.
	Job *JobStop
	// Claim is this rank's claim.
	Claim *coord.Claim
	// Pod records events and annotations on the pod.
	Pod Pod
	// Metrics counts stop signals, restarts and OOM kills, and the grace
	// budget left.
	Metrics *metrics.Metrics
	// Sidecar is set when the trainer runs in another container: the
	// final upload waits while the trainer is still writing
	// (Agent.FlushWhenWritten), keeping the upload's reserve (at most half
	// the grace, as the supervisor caps it for run), and begins streaming
	// only then.
	Sidecar bool

	end atomic.Int64 // the stop's deadline, Unix ns; 0 before a stop
}

var (
	_ supervisor.Checkpoints = (*Stopper)(nil)
	_ supervisor.Observer    = (*Stopper)(nil)
)

// Stopping begins the stop s, and is told again with the new Deadline
// when a later stop brings it in. It never blocks.
func (s *Stopper) Stopping(stop supervisor.Stop) {
	if s.Agent != nil && !s.Sidecar {
		s.Agent.Stopping()
	}
	s.Metrics.SetGraceEnd(stop.Deadline)
	if s.Claim != nil {
		s.Claim.Release()
	}
	if s.Pod != nil {
		s.Pod.Stopping(stop.At)
	}
	s.end.Store(stop.Deadline.UnixNano())
}

// End is the end of the grace budget of the stop in progress, zero before
// a stop (and for a nil s).
func (s *Stopper) End() time.Time {
	if s == nil {
		return time.Time{}
	}
	if end := s.end.Load(); end != 0 {
		return time.Unix(0, end)
	}
	return time.Time{}
}

// Flush is the final upload, then the job-wide stop's common step, the
// pod's record of it, the deletion of this rank's claim and the wait for
// this rank's stop record, all under ctx (the stop's FlushEnd). stop is
// the stop in progress, nil when the trainer exited on its own (run).
func (s *Stopper) Flush(ctx context.Context, stop *supervisor.Stop) error {
	var err error
	if s.Sidecar {
		err = s.Agent.FlushWhenWritten(ctx, s.writtenBy(ctx, stop))
	} else {
		err = s.Agent.Flush(ctx)
	}
	if err == nil || errors.Is(err, agent.ErrStillWriting) {
		s.Job.common(ctx, s.Agent)
	}
	if s.Pod != nil {
		s.Pod.Flushed(stop != nil, err)
	}
	if s.Claim != nil {
		s.Claim.Release()
		s.Claim.Wait(ctx)
	}
	s.Job.settle(ctx)
	return err
}

// writtenBy is how long a sidecar's final upload waits for a trainer that
// is still writing: until the end of ctx less the upload's reserve, which
// is at most half the stop's grace budget.
func (s *Stopper) writtenBy(ctx context.Context, stop *supervisor.Stop) time.Time {
	end, ok := ctx.Deadline()
	if !ok {
		return time.Now()
	}
	reserve, _ := s.Agent.Reserve()
	if stop != nil {
		reserve = min(reserve, stop.Deadline.Sub(stop.At)/2)
	}
	return end.Add(-reserve)
}

// StopSidecar is the sidecar's stop, in the order the supervisor runs
// run's: the stop begins (Stopping, and the job-wide stop's record when a
// stop signal began it), the trainer in the other container gets
// flushWait to write its last checkpoint, and the final upload (Flush)
// runs until the stop's FlushEnd.
func (s *Stopper) StopSidecar(stop supervisor.Stop, flushWait time.Duration) error {
	s.Stopping(stop)
	if stop.Signal != 0 {
		s.Job.Stopping(stop)
	}
	if flushWait > 0 {
		time.Sleep(flushWait)
	}
	ctx, cancel := context.WithDeadline(context.Background(), stop.FlushEnd())
	defer cancel()
	return s.Flush(ctx, &stop)
}

// Reserve is the part of the grace budget the final upload needs
// (Agent.Reserve).
func (s *Stopper) Reserve() (time.Duration, string) { return s.Agent.Reserve() }

// BeforeRestart commits and restores between a crash and a restart
// (Restarter).
func (s *Stopper) BeforeRestart(ctx context.Context, attempt int) ([]string, error) {
	return s.Restart.BeforeRestart(ctx, attempt)
}

// FlushNote says what the final upload did (Agent.FlushNote).
func (s *Stopper) FlushNote() string { return s.Agent.FlushNote() }

// StopSignal counts a stop signal received, which is the pod's preemption
// notice (source "signal").
func (s *Stopper) StopSignal(sig unix.Signal) { s.Metrics.IncStopSignal(sig) }

// Restarted counts a restart by its reason.
func (s *Stopper) Restarted(reason string) { s.Metrics.IncRestart(reason) }

// OOMKilled counts an OOM kill.
func (s *Stopper) OOMKilled() { s.Metrics.IncOOMKill() }

// Reaped tells the agent of a process reaped: it tells an interrupted save
// by it.
func (s *Stopper) Reaped(pid int, status unix.WaitStatus, at time.Time) {
	if s.Agent != nil {
		s.Agent.Reaped(pid, status, at)
	}
}

// Killing tells the agent that the trainer's tree is SIGKILLed now: a
// file still open for writing is an interrupted save.
func (s *Stopper) Killing(at time.Time) {
	if s.Agent != nil {
		s.Agent.Killing(at)
	}
}

// ClaimNotices relays in, and adds a notice when another live pod claims
// this rank (c, nil when the claim is off: in itself is returned): the
// trainer is stopped as on preemption (its saves are no longer
// committed), and the pod (nil: none) records it.
func ClaimNotices(ctx context.Context, in <-chan supervisor.Notice, c *coord.Claim, pod Pod) <-chan supervisor.Notice {
	if c == nil {
		return in
	}
	out := make(chan supervisor.Notice, 2)
	go func() {
		defer close(out)
		twin := c.Conflict()
		for in != nil || twin != nil {
			var n supervisor.Notice
			select {
			case <-ctx.Done():
				return
			case cn, ok := <-in:
				if !ok {
					in = nil
					continue
				}
				n = cn
			case t := <-twin:
				twin = nil
				if pod != nil {
					pod.RankClaimed(c.Run(), t.Run, t.Host)
				}
				n = supervisor.Notice{Source: "rank claim", Detail: "another live pod claims this rank: run " + t.Run + " on " + t.Host}
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
