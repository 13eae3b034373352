package supervisor

import (
	"context"
	"fmt"
	"strings"
	"time"
)

// restartResult is what Checkpoints.BeforeRestart returned.
type restartResult struct {
	env []string
	err error
}

// maxBackoff caps the doubling wait between restarts.
const maxBackoff = 5 * time.Minute

// shouldRestart reports whether the trainer that just ended (with its
// tree) is to be started again.
func (l *loop) shouldRestart() bool {
	p := l.cfg.Restart
	return p.OnFailure && !l.stopping && l.restarts < p.Max && StatusCode(l.childStatus) != 0
}

// beginBackoff enters the wait before a restart: the backoff, doubled for
// each restart already done. A stop during it ends the supervision (step).
func (l *loop) beginBackoff() {
	backoff := l.cfg.Restart.Backoff
	for i := 0; i < l.restarts && backoff < maxBackoff; i++ {
		backoff *= 2
	}
	backoff = min(backoff, maxBackoff)
	l.cfg.Log.Warn("supervisor.restart", "status", describeStatus(l.childStatus), "attempt", l.restarts+1,
		"max", l.cfg.Restart.Max, "backoff", backoff.String())
	l.phase = phaseBackoff
	l.backoff.set(backoff)
}

// beginRestart ends the backoff: it runs Checkpoints.BeforeRestart in its
// own goroutine (the loop keeps answering signals meanwhile) or, without
// Checkpoints, starts the trainer again at once.
func (l *loop) beginRestart() {
	cp := l.cfg.Checkpoints
	if cp == nil {
		l.startAgain(nil)
		return
	}
	attempt := l.restarts + 1
	end := l.cfg.Clock.Now().Add(l.cfg.AfterExitTimeout)
	ctx, cancel := context.WithDeadline(context.Background(), end)
	done := make(chan restartResult, 1)
	l.phase = phaseRestarting
	l.restartEnded = false
	l.restartDone = done
	// A BeforeRestart that ignores its context is given killWait more
	// before the loop stops waiting for it; a stop brings that in to the
	// grace deadline.
	l.startHook(cancel, end.Add(killWait), l.cfg.AfterExitTimeout.String())
	go func() {
		defer func() {
			if r := recover(); r != nil {
				done <- restartResult{err: fmt.Errorf("the commit before the restart panicked: %v", r)}
			}
		}()
		env, err := cp.BeforeRestart(ctx, attempt)
		done <- restartResult{env, err}
	}()
}

// endRestart takes Checkpoints.BeforeRestart's result: a stop that came
// meanwhile goes on to the final flush, a failure ends the restarts, and
// otherwise the trainer starts again with the variables it returned.
func (l *loop) endRestart(r restartResult) {
	l.endHook()
	switch {
	case l.stopping:
		l.beginFlush()
	case r.err != nil:
		l.cfg.Log.Error("supervisor.restart_failed", "err", r.err, "effect", "not restarting")
		l.beginFlush()
	default:
		l.startAgain(r.env)
	}
}

// startAgain starts the trainer again with extra set in its environment.
func (l *loop) startAgain(extra []string) {
	l.restarts++
	l.killedAt, l.killedMain = time.Time{}, false
	reason := "exit_code"
	switch {
	case l.oomKilled:
		reason = "oom"
	case l.childStatus.Signaled():
		reason = "signal"
	}
	l.cfg.Observer.Restarted(reason)
	prev := l.env
	l.env = MergeEnv(l.env, extra)
	if err := l.start(); err != nil {
		l.cfg.Log.Error("supervisor.restart_failed", "err", err)
		l.env = prev
		l.beginFlush()
	}
}

// MergeEnv returns base with the variables in extra set, replacing earlier
// values (getenv in the child sees only the first of duplicates).
func MergeEnv(base, extra []string) []string {
	set := map[string]bool{}
	for _, kv := range extra {
		k, _, _ := strings.Cut(kv, "=")
		set[k] = true
	}
	out := make([]string, 0, len(base)+len(extra))
	for _, kv := range base {
		k, _, _ := strings.Cut(kv, "=")
		if !set[k] {
			out = append(out, kv)
		}
	}
	return append(out, extra...)
}
