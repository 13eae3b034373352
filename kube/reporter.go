package kube

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"sync"
	"sync/atomic"
	"time"
)

// DefaultQueue is how many events may wait to be sent; more are dropped.
const DefaultQueue = 64

// DefaultRateLimit is the least time between two UploadFailing events.
const DefaultRateLimit = 5 * time.Minute

// ReporterOptions configure a Reporter. Zero fields take the defaults.
type ReporterOptions struct {
	Events      bool // send events
	Annotations bool // send annotations
	// Queue is how many events may wait; more are dropped. Default
	// DefaultQueue.
	Queue int
	// RateLimits is the least time between two events of a reason; the
	// ones in between are counted in the next one's message. Default:
	// UploadFailing every DefaultRateLimit.
	RateLimits map[string]time.Duration
	Log        *slog.Logger
	Clock      func() time.Time
}

// Reporter sends events and annotations to the API server from one
// background goroutine (Run), so that no caller ever waits for it: Event
// and Annotate return at once. A nil *Reporter does nothing.
type Reporter struct {
	c      *Client
	log    *slog.Logger
	clock  func() time.Time
	limits map[string]time.Duration

	events chan Event
	wake   chan struct{} // annotations are pending
	quit   chan struct{} // closed by Close: drain and return
	done   chan struct{} // closed when Run returns

	eventsOn, annotationsOn atomic.Bool
	dropped                 atomic.Int64

	mu      sync.Mutex
	pending map[string]*string
	closed  bool
	running bool
	cancel  context.CancelFunc // ends Run's requests
	limited map[string]*limitState

	// Run's goroutine only.
	uid, node string
	uidKnown  bool
	warned    map[string]bool // a failure other than a denial was warned about
}

type limitState struct {
	last       time.Time
	suppressed int
}

// Feature names, as the log says them.
const (
	FeatureEvents      = "events"
	FeatureAnnotations = "annotations"
)

// NewReporter returns a Reporter for c; start it with Run.
func NewReporter(c *Client, o ReporterOptions) *Reporter {
	if o.Queue <= 0 {
		o.Queue = DefaultQueue
	}
	if o.RateLimits == nil {
		o.RateLimits = map[string]time.Duration{ReasonUploadFailing: DefaultRateLimit}
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.Clock == nil {
		o.Clock = time.Now
	}
	r := &Reporter{c: c, log: o.Log, clock: o.Clock, limits: o.RateLimits,
		events: make(chan Event, o.Queue), wake: make(chan struct{}, 1), quit: make(chan struct{}), done: make(chan struct{}),
		pending: map[string]*string{}, limited: map[string]*limitState{}, warned: map[string]bool{}}
	r.uid = c.cfg.PodUID
	r.uidKnown = r.uid != ""
	r.eventsOn.Store(o.Events)
	r.annotationsOn.Store(o.Annotations)
	return r
}

// Enabled reports whether feature (FeatureEvents, FeatureAnnotations) is
// on: asked for and not turned off by a denial.
func (r *Reporter) Enabled(feature string) bool {
	if r == nil {
		return false
	}
	if feature == FeatureEvents {
		return r.eventsOn.Load()
	}
	return r.annotationsOn.Load()
}

// Event queues e. It never blocks: when the queue is full, e is dropped.
// A reason with a rate limit sends at most one event per limit; the ones
// in between are counted in the next one's message.
func (r *Reporter) Event(e Event) {
	if r == nil || !r.eventsOn.Load() {
		return
	}
	if e.At.IsZero() {
		e.At = r.clock()
	}
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return
	}
	if every, ok := r.limits[e.Reason]; ok {
		st := r.limited[e.Reason]
		if st != nil && e.At.Sub(st.last) < every {
			st.suppressed++
			r.mu.Unlock()
			return
		}
		if st == nil {
			st = &limitState{}
			r.limited[e.Reason] = st
		}
		if st.suppressed > 0 {
			e.Message += fmt.Sprintf(" (%d more since %s)", st.suppressed, st.last.UTC().Format(time.RFC3339))
		}
		st.last, st.suppressed = e.At, 0
	}
	r.mu.Unlock()
	select {
	case r.events <- e:
	default:
		r.dropped.Add(1)
		r.log.Debug("kube.event_dropped", "event_reason", e.Reason, "reason", "the queue is full")
	}
}

// Annotate queues annotations for the pod (a nil value removes one),
// merged with any not yet sent. It never blocks.
func (r *Reporter) Annotate(a map[string]*string) {
	if r == nil || !r.annotationsOn.Load() {
		return
	}
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return
	}
	maps.Copy(r.pending, a)
	r.mu.Unlock()
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// Run sends what is queued until ctx ends or Close has drained the queue.
func (r *Reporter) Run(ctx context.Context) {
	if r == nil {
		return
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	r.mu.Lock()
	if r.running || r.closed {
		r.mu.Unlock()
		return
	}
	r.running, r.cancel = true, cancel
	r.mu.Unlock()
	defer close(r.done)
	for {
		select {
		case <-ctx.Done():
			return
		case e := <-r.events:
			r.send(ctx, e)
		case <-r.wake:
			r.annotate(ctx)
		case <-r.quit:
			r.drain(ctx)
			return
		}
	}
}

// drain sends what is queued, until ctx ends.
func (r *Reporter) drain(ctx context.Context) {
	for ctx.Err() == nil {
		select {
		case e := <-r.events:
			r.send(ctx, e)
		default:
			r.annotate(ctx)
			return
		}
	}
}

// Close stops taking new events and annotations and waits until Run has
// sent what is queued, or ctx ends (what is left is dropped). It returns
// how many events were dropped in all.
func (r *Reporter) Close(ctx context.Context) int {
	if r == nil {
		return 0
	}
	r.mu.Lock()
	wasClosed, running := r.closed, r.running
	r.closed, r.running = true, true // a Run not started yet never will
	cancel := r.cancel
	r.mu.Unlock()
	if !wasClosed {
		close(r.quit)
	}
	switch {
	case !running:
		// Run never started: drain here.
		r.drain(ctx)
		close(r.done)
	default:
		select {
		case <-r.done:
		case <-ctx.Done():
			if cancel != nil {
				cancel()
			}
			<-r.done
		}
	}
	left := len(r.events)
	for range left {
		<-r.events
	}
	n := int(r.dropped.Load()) + left
	if n > 0 {
		r.log.Info("kube.drop_total", "count", n, "reason", "the queue was full, or the API server did not answer before lifeboat exited")
	}
	return n
}

// send creates e, looking the pod's uid up first when unknown.
func (r *Reporter) send(ctx context.Context, e Event) {
	if !r.eventsOn.Load() {
		return
	}
	if !r.uidKnown {
		p, err := r.c.Pod(ctx)
		switch {
		case err == nil:
			r.uid, r.node, r.uidKnown = p.UID, p.Node, true
		case IsDenied(err):
			r.off(FeatureEvents, err, "kubectl describe finds a pod's events by its uid")
			return
		default:
			// Sent without the uid (kubectl get events still lists it);
			// the next event asks again.
			r.failed(FeatureEvents, err)
		}
	}
	if err := r.c.CreateEvent(ctx, e, r.uid, r.node); err != nil {
		if IsDenied(err) {
			r.off(FeatureEvents, err, "")
			return
		}
		r.failed(FeatureEvents, err)
	}
}

// annotate sends the pending annotations in one patch.
func (r *Reporter) annotate(ctx context.Context) {
	r.mu.Lock()
	a := r.pending
	r.pending = map[string]*string{}
	r.mu.Unlock()
	if len(a) == 0 || !r.annotationsOn.Load() {
		return
	}
	if err := r.c.Annotate(ctx, a); err != nil {
		if IsDenied(err) {
			r.off(FeatureAnnotations, err, "")
			return
		}
		r.failed(FeatureAnnotations, err)
	}
}

// off turns feature off after a denial, with one warning naming the
// permission.
func (r *Reporter) off(feature string, err error, why string) {
	var on *atomic.Bool
	if feature == FeatureEvents {
		on = &r.eventsOn
	} else {
		on = &r.annotationsOn
	}
	if !on.Swap(false) {
		return
	}
	var ae *APIError
	errors.As(err, &ae)
	args := []any{"feature", feature, "pod", r.c.cfg.PodRef(), "http_status", ae.Code, "err", err.Error(),
		"effect", "lifeboat goes on without " + feature + " on its pod; training is not affected"}
	switch ae.Code {
	case 401:
		args = append(args, "hint", "the API server does not accept the pod's service-account token")
	case 404:
		args = append(args, "hint", "no pod "+r.c.cfg.PodRef()+": set LIFEBOAT_POD_NAME and LIFEBOAT_POD_NAMESPACE from the downward API (fieldRef metadata.name, metadata.namespace)")
	default:
		args = append(args, "permission", ae.Permission.String(),
			"hint", "grant the pod's service account "+ae.Permission.String()+" in a Role (deploy/k8s has one), or turn the feature off")
	}
	if why != "" {
		args = append(args, "reason", why)
	}
	r.log.Warn("kube.feature_off", args...)
}

// failed reports a failure that is not a denial: the first one of each
// feature as a warning, later ones at debug. The feature stays on.
func (r *Reporter) failed(feature string, err error) {
	if errors.Is(err, context.Canceled) {
		r.log.Debug("kube.request_failed", "feature", feature, "err", err.Error())
		return
	}
	if r.warned[feature] {
		r.log.Debug("kube.request_failed", "feature", feature, "err", err.Error())
		return
	}
	r.warned[feature] = true
	r.log.Warn("kube.request_failed", "feature", feature, "err", err.Error(),
		"effect", "this one is dropped and lifeboat keeps trying (further failures are logged at debug); training is not affected")
}
