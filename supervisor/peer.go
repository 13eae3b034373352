package supervisor

import (
	"context"
	"fmt"
	"time"
)

// peerStopTimeout bounds the look for another rank's stop after the
// trainer failed (Job.PeerStop).
const peerStopTimeout = 10 * time.Second

// failed reports whether the trainer that just ended failed: a non-zero
// code or a signal.
func (l *loop) failed() bool { return StatusCode(l.childStatus) != 0 }

// beginCheck enters phaseChecking: the trainer failed with no stop in
// progress, and Job.PeerStop looks, in its own goroutine, for a
// job-wide stop another rank began (a collective fails as soon as a peer
// leaves, often before this rank has seen the peer's stop record). The
// loop keeps answering signals meanwhile.
func (l *loop) beginCheck() {
	job := l.cfg.Job
	end := l.cfg.Clock.Now().Add(peerStopTimeout)
	ctx, cancel := context.WithDeadline(context.Background(), end)
	done := make(chan string, 1)
	l.phase = phaseChecking
	l.checkDone = done
	l.startHook(cancel, end.Add(killWait), peerStopTimeout.String())
	go func() {
		defer func() {
			if r := recover(); r != nil {
				done <- ""
			}
		}()
		done <- job.PeerStop(ctx)
	}()
}

// endCheck takes PeerStop's answer. A job-wide stop makes the failure part
// of it: the stop begins here as well (no restart, the final upload under
// the grace budget, the preemption code at exit).
func (l *loop) endCheck(stop string) {
	l.endHook()
	l.phase = phaseRunning
	if stop != "" {
		l.cfg.Log.Warn("supervisor.failed_in_job_stop", "status", describeStatus(l.childStatus), "stop", stop,
			"effect", "the trainer failed because the job is stopping (a collective whose peer left): part of the job-wide stop, no restart; lifeboat exits with the preemption code")
		if !l.stopping {
			l.startStop(0, 0, "job-wide stop ("+stop+")", time.Time{})
		}
	}
	l.afterTrainer()
}

// afterTrainer decides what follows a trainer whose tree is gone: a
// restart, or the final flush. A trainer that failed for good with no
// stop in progress is told to Job.Failed first, so that the other ranks
// stop too.
func (l *loop) afterTrainer() {
	if l.shouldRestart() {
		l.beginBackoff()
		return
	}
	if !l.stopping && l.failed() && l.cfg.Job != nil {
		reason := describeStatus(l.childStatus)
		if l.restarts > 0 {
			reason += fmt.Sprintf(" after %d restarts", l.restarts)
		}
		l.cfg.Job.Failed(reason)
	}
	l.beginFlush()
}
