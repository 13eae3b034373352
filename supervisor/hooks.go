package supervisor

import (
	"context"
	"time"

	"golang.org/x/sys/unix"
)

// Stop is a stop of the trainer as the supervisor determined it, once, when
// it began: what Observer.Stopping, Job.Stopping and Checkpoints.Flush are
// told, and what the termination log says.
type Stop struct {
	// Reason says why the stop began: "SIGTERM", "aws preemption notice",
	// "max runtime 1h0m0s reached", "lifeboat was asked to stop",
	// "job-wide stop (rank 1: SIGTERM)". A later stop that brings the
	// deadline in keeps the first one's reason.
	Reason string
	// Signal is the stop signal received, 0 when the stop had another cause
	// (a notice, the maximum runtime, the context, a job-wide stop).
	Signal unix.Signal
	// At is when the stop began.
	At time.Time
	// Deadline is the end of the grace budget. A later stop (a preemption
	// notice with an earlier deadline) may bring it in, never push it out.
	Deadline time.Time
}

// FlushEnd is when the final upload of the stop must end: the end of its
// grace budget less ExitMargin, so that lifeboat exits by itself before
// the kubelet's SIGKILL. It is the one place the margin is taken off a
// stop's deadline: the supervisor's Flush context ends there, and so does
// a sidecar's final upload.
func (s Stop) FlushEnd() time.Time { return s.Deadline.Add(-ExitMargin) }

// Checkpoints is what the supervisor asks of the checkpoint pipeline
// beside the trainer: the part of the grace budget its final upload needs,
// the work between a crash and a restart, and the final upload itself.
// Reserve and FlushNote run in the supervision loop and must not block;
// BeforeRestart and Flush run in goroutines of their own under contexts
// the loop ends.
type Checkpoints interface {
	// Reserve is asked when a stop begins: how much of the grace budget
	// to keep for after the trainer's tree has exited (the final upload),
	// and why. The tree is SIGKILLed at the stop's deadline less the
	// reserve, which is capped at half the grace, so the trainer always
	// gets the other half to save.
	Reserve() (time.Duration, string)
	// BeforeRestart runs between a crash and the restart (with the
	// trainer's tree gone, after the backoff): it commits what the trainer
	// completed and restores the newest committed checkpoint, and returns
	// environment variables to set for the new trainer. Its context ends
	// after Config.AfterExitTimeout, or at once when a stop begins; the
	// restart is then abandoned for the final upload (Flush), which runs
	// after BeforeRestart has returned. An error means no restart.
	BeforeRestart(ctx context.Context, attempt int) ([]string, error)
	// Flush is the final upload: it runs once the main child and every
	// descendant are gone, before Run returns, while the loop keeps
	// answering signals. stop is the stop in progress, nil when the
	// trainer exited on its own. Its context ends at the stop's FlushEnd,
	// or after Config.AfterExitTimeout without a stop;
	// a stop during it brings that in to the stop's deadline, and a second
	// SIGINT cancels it. Run never waits for it past that end: a Flush
	// still running then is left behind and recorded as failed ("the
	// final upload did not finish within the grace period"). An error is
	// logged, written to the termination log, and turns a clean exit 0
	// into CodeFlushFailed.
	Flush(ctx context.Context, stop *Stop) error
	// FlushNote is asked after Flush for what the final upload did, for
	// the termination message ("the final upload committed step 100
	// instead of step 200, an interrupted save"); "" adds nothing.
	FlushNote() string
}

// Job is the rest of a job of several ranks that stop together (the
// job-wide stop): told of this rank's stop and failure, so that the other
// ranks stop too, and asked whether this rank's end is part of a stop one
// of them began. Stopping, Failed and JobWideStop run in the supervision
// loop and must not block; PeerStop runs in a goroutine of its own.
type Job interface {
	// Stopping is told when a stop begins on this rank (and again when
	// its deadline is brought in), for the other ranks to follow.
	Stopping(stop Stop)
	// Failed is told when the trainer failed for good: no stop in
	// progress, none found by PeerStop, no restart left; reason says how
	// it ended. The other ranks are to stop too.
	Failed(reason string)
	// PeerStop is asked when the trainer failed (a non-zero code or a
	// signal) and its tree is gone, with no stop in progress: it looks now
	// for a job-wide stop another rank began (a collective fails as soon
	// as a peer leaves, often before this rank has seen the peer's stop)
	// and names it ("rank 0: SIGTERM"), or returns "". With a name the
	// failure is part of that stop: no restart, the final upload under the
	// grace budget, and JobWideStop is asked at the exit. It must return
	// when its context ends (10s).
	PeerStop(ctx context.Context) string
	// JobWideStop is asked once, after the final upload, when the trainer
	// failed during a stop (a non-zero code, or a SIGKILL lifeboat sent at
	// the grace deadline or at a second SIGINT; not one another, such as
	// the OOM killer, sent): it names the job-wide stop this lifeboat took
	// part in ("rank 1: SIGTERM"), or returns "" when the stop was this
	// pod's alone. A trainer whose collective failed when a peer left, or
	// that was blocked in one and SIGKILLed, ended because of the stop, so
	// with a name lifeboat exits with PreemptExitCode (unless
	// PreemptChild), and the Job retries every rank instead of counting a
	// failure.
	JobWideStop() string
}

// Observer is told what happens to the trainer: metrics, the pod's
// annotations, the agent's view of interrupted saves. Every method runs in
// the supervision loop and must not block.
type Observer interface {
	// Stopping is told when a stop begins, and again with the new
	// Deadline when a later stop brings it in.
	Stopping(stop Stop)
	// StopSignal is told of each stop signal received (one of
	// Config.StopSignals: the kubelet's TERM is the pod's preemption
	// notice), before it is forwarded. Notices and MaxRuntime are not
	// signals received and are not reported here.
	StopSignal(sig unix.Signal)
	// Restarted is told of each restart and why: "oom" when the OOM killer
	// killed the trainer (Memory counted the kill), "signal" for another
	// signal, "exit_code" for a non-zero exit.
	Restarted(reason string)
	// OOMKilled is told of each OOM kill in the trainer's cgroup.
	OOMKilled()
	// Reaped is told of every process lifeboat reaps (the trainer and
	// each orphan of its tree): its pid, how it ended and when. The
	// checkpoint pipeline tells an interrupted save from a whole one by it.
	Reaped(pid int, status unix.WaitStatus, at time.Time)
	// Killing is told just before the trainer's tree is SIGKILLed (the
	// grace deadline, or a second SIGINT), and when: a file still open
	// for writing then is an interrupted save.
	Killing(at time.Time)
}
