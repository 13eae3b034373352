package kube

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"sync"
	"time"
)

// Event reasons (see the package documentation).
const (
	ReasonCommitted             = "CheckpointCommitted"
	ReasonPreemptedCommitted    = "PreemptedCommitted"
	ReasonPreemptedCommitFailed = "PreemptedCommitFailed"
	ReasonRestored              = "CheckpointRestored"
	ReasonInterrupted           = "SaveInterrupted"
	ReasonUploadFailing         = "UploadFailing"
	ReasonFreshStart            = "FreshStartOverProgress"
	ReasonRankClaimed           = "RankClaimedTwice"
)

// Checkpoint-freshness annotations on lifeboat's pod. A scheduler plugin
// or a queue controller (Kueue) choosing a victim reads them: the pod
// whose newest committed checkpoint is freshest loses the least work.
const (
	// AnnotationStep is the newest committed (or restored) step.
	AnnotationStep = "lifeboat.dev/checkpoint-step"
	// AnnotationTime is when it was committed, RFC 3339.
	AnnotationTime = "lifeboat.dev/checkpoint-time"
	// AnnotationAtRiskSince is when the work not in a committed
	// checkpoint began (the trainer's save of that step, or the trainer's
	// start when nothing was committed yet), RFC 3339: work at risk now is
	// now minus this, whenever it is read.
	AnnotationAtRiskSince = "lifeboat.dev/work-at-risk-since"
	// AnnotationAtRisk is that in whole seconds, as of the last update
	// (each commit, and every refresh interval).
	AnnotationAtRisk = "lifeboat.dev/work-at-risk-seconds"
	// AnnotationDeletionCost is Kubernetes' own: a ReplicaSet scaling down
	// deletes pods of lower cost first. Lifeboat sets it (when asked to)
	// to the seconds of work at risk, so the pod that loses least goes
	// first.
	AnnotationDeletionCost = "controller.kubernetes.io/pod-deletion-cost"
)

// DefaultRefresh is how often the work-at-risk annotations are refreshed
// between commits.
const DefaultRefresh = time.Minute

// RecorderOptions configure a Recorder.
type RecorderOptions struct {
	// DeletionCost also sets AnnotationDeletionCost.
	DeletionCost bool
	Clock        func() time.Time
}

// Recorder turns what lifeboat's checkpoint pipeline does into events and
// annotations on the pod, through a Reporter. Safe for concurrent use; a
// nil *Recorder does nothing.
type Recorder struct {
	r     *Reporter
	cost  bool
	clock func() time.Time

	mu        sync.Mutex
	step      int64     // newest committed or restored step; -1: none
	committed time.Time // when step was committed; zero when restored
	since     time.Time // work since then is in no committed checkpoint
	stopAt    time.Time // when the stop began; zero before
	final     bool      // the final flush committed a step
	refused   int64     // highest step refused as an interrupted save since the stop; -1: none
}

// NewRecorder returns a Recorder sending through r. Work counts as at risk
// from now until the first commit or restore.
func NewRecorder(r *Reporter, o RecorderOptions) *Recorder {
	if o.Clock == nil {
		o.Clock = time.Now
	}
	return &Recorder{r: r, cost: o.DeletionCost, clock: o.Clock, step: -1, refused: -1, since: o.Clock()}
}

// Committed records a commit of step (bytes, its upload took seconds),
// whose files the trainer last changed at saved (zero: unknown). final
// says the final flush committed it: after a stop that is the preemption's
// commit.
func (c *Recorder) Committed(step, bytes int64, seconds float64, saved time.Time, final bool) {
	if c == nil {
		return
	}
	now := c.clock()
	c.mu.Lock()
	c.step, c.committed = step, now
	c.since = saved
	if saved.IsZero() || saved.After(now) {
		c.since = now
	}
	stopAt, refused := c.stopAt, c.refused
	if final && !stopAt.IsZero() {
		c.final = true // not a restart's commit (Sync), which is final too
	}
	a := c.annotations(now)
	c.mu.Unlock()
	c.r.Annotate(a)
	if final && !stopAt.IsZero() {
		msg := fmt.Sprintf("preempted: committed step %d (%d bytes) %s after the stop began", step, bytes, secs(now.Sub(stopAt).Seconds()))
		if refused > step {
			msg += fmt.Sprintf(", instead of step %d, an interrupted save", refused)
		}
		c.r.Event(Event{Type: Normal, Reason: ReasonPreemptedCommitted, At: now, Message: msg})
		return
	}
	c.r.Event(Event{Type: Normal, Reason: ReasonCommitted, At: now,
		Message: fmt.Sprintf("committed step %d (%d bytes, uploaded in %s)", step, bytes, secs(seconds))})
}

// Restored records that step was restored before the trainer (re)started:
// from "store" in seconds (0: not measured), "local" (a newer checkpoint
// already in the directory was kept) or "init" (by an init container,
// whose own lifeboat restore sent the event: only the annotations are
// set). Work is at risk from now.
func (c *Recorder) Restored(step int64, source string, seconds float64) {
	if c == nil {
		return
	}
	now := c.clock()
	c.mu.Lock()
	c.step, c.committed, c.since = step, time.Time{}, now
	a := c.annotations(now)
	c.mu.Unlock()
	c.r.Annotate(a)
	var msg string
	switch source {
	case "init":
		return // the init container's lifeboat restore said so
	case "local":
		msg = fmt.Sprintf("resumed step %d from a newer checkpoint already in the directory (kept, and uploaded)", step)
	default:
		msg = fmt.Sprintf("restored step %d from the store", step)
		if seconds > 0 {
			msg += " in " + secs(seconds)
		}
	}
	c.r.Event(Event{Type: Normal, Reason: ReasonRestored, Message: msg, At: now})
}

// Interrupted records an interrupted save that was ignored: path (may be
// empty) and why.
func (c *Recorder) Interrupted(step int64, path, why string) {
	if c == nil {
		return
	}
	c.mu.Lock()
	last := c.step
	if !c.stopAt.IsZero() && step > c.refused {
		c.refused = step // said again by the stop's PreemptedCommitted
	}
	c.mu.Unlock()
	what := fmt.Sprintf("step %d", step)
	if path != "" {
		what += " (" + path + ")"
	}
	msg := fmt.Sprintf("interrupted save of %s ignored: %s; ", what, why)
	if last >= 0 {
		msg += fmt.Sprintf("step %d stays the latest", last)
	} else {
		msg += "no committed checkpoint yet"
	}
	c.r.Event(Event{Type: Warning, Reason: ReasonInterrupted, Message: msg})
}

// FreshStartOverProgress records that the trainer starts from scratch
// although the store holds complete step step of line (not restored: too
// large for the volume, another world size, --restore never without a
// resume file, ...; the log's resume.fresh_start says why). It is a
// Warning: the job is redoing work it has.
func (c *Recorder) FreshStartOverProgress(step int64, line string) {
	if c == nil {
		return
	}
	c.r.Event(Event{Type: Warning, Reason: ReasonFreshStart,
		Message: fmt.Sprintf("training from scratch although the store holds complete step %d (line %s), which was not restored; lifeboat's resume.fresh_start log line says why", step, line)})
}

// RankClaimed records that another live pod (otherRun on otherHost)
// claims this pod's rank: this pod (run) commits nothing more and exits
// with code 78.
func (c *Recorder) RankClaimed(run, otherRun, otherHost string) {
	if c == nil {
		return
	}
	c.r.Event(Event{Type: Warning, Reason: ReasonRankClaimed,
		Message: fmt.Sprintf("another live pod (%s, run %s) trains as this pod's rank; this pod (run %s) commits nothing more and exits 78: give every pod its own rank", otherHost, otherRun, run)})
}

// UploadFailed records a failed upload attempt of step; the Reporter's
// rate limit keeps this to one event per interval.
func (c *Recorder) UploadFailed(step int64, err string) {
	if c == nil {
		return
	}
	c.r.Event(Event{Type: Warning, Reason: ReasonUploadFailing,
		Message: fmt.Sprintf("upload of step %d failed: %s; retried, the previous committed checkpoint stays the latest", step, err)})
}

// Stopping records that a stop began at at (a later call, the deadline
// moving, changes nothing).
func (c *Recorder) Stopping(at time.Time) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stopAt.IsZero() {
		c.stopAt = at
	}
}

// Flushed records the end of the final upload after the trainer exited;
// stopped says a stop (preemption) came first. After a stop, a failure is
// a PreemptedCommitFailed event, and nothing new to commit a
// PreemptedCommitted event naming the step that stays the latest.
func (c *Recorder) Flushed(stopped bool, err error) {
	if c == nil || !stopped {
		return
	}
	now := c.clock()
	c.mu.Lock()
	final, step, stopAt, refused := c.final, c.step, c.stopAt, c.refused
	c.mu.Unlock()
	if stopAt.IsZero() {
		stopAt = now
	}
	latest := "no checkpoint was committed yet"
	if step >= 0 {
		latest = fmt.Sprintf("step %d stays the latest", step)
	}
	switch {
	case err != nil:
		c.r.Event(Event{Type: Warning, Reason: ReasonPreemptedCommitFailed, At: now,
			Message: fmt.Sprintf("preempted: the final upload failed %s after the stop began: %v; %s", secs(now.Sub(stopAt).Seconds()), err, latest)})
	case !final && refused > step:
		c.r.Event(Event{Type: Normal, Reason: ReasonPreemptedCommitted, At: now,
			Message: fmt.Sprintf("preempted: step %d was an interrupted save and was not committed; %s", refused, latest)})
	case !final:
		c.r.Event(Event{Type: Normal, Reason: ReasonPreemptedCommitted, At: now,
			Message: "preempted: nothing new to commit; " + latest})
	}
}

// Annotations are the freshness annotations as of now.
func (c *Recorder) Annotations() map[string]*string {
	if c == nil {
		return nil
	}
	now := c.clock()
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.annotations(now)
}

func (c *Recorder) annotations(now time.Time) map[string]*string {
	a := map[string]*string{}
	if c.step >= 0 {
		a[AnnotationStep] = ptr(strconv.FormatInt(c.step, 10))
	}
	a[AnnotationTime] = nil // a restored step's commit time is not known
	if !c.committed.IsZero() {
		a[AnnotationTime] = ptr(c.committed.UTC().Format(time.RFC3339))
	}
	risk := max(now.Sub(c.since), 0).Seconds()
	a[AnnotationAtRiskSince] = ptr(c.since.UTC().Format(time.RFC3339))
	a[AnnotationAtRisk] = ptr(strconv.FormatInt(int64(risk), 10))
	if c.cost {
		a[AnnotationDeletionCost] = ptr(strconv.FormatInt(int64(min(risk, math.MaxInt32)), 10))
	}
	return a
}

// Refresh sends the annotations now and then every interval until ctx
// ends, so that work at risk (and the deletion cost) stays current between
// commits. interval 0: only now.
func (c *Recorder) Refresh(ctx context.Context, interval time.Duration) {
	if c == nil {
		return
	}
	c.r.Annotate(c.Annotations())
	if interval <= 0 {
		return
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			c.r.Annotate(c.Annotations())
		}
	}
}

func ptr(s string) *string { return &s }

// secs renders seconds as "2.3s".
func secs(s float64) string { return strconv.FormatFloat(s, 'f', 1, 64) + "s" }
