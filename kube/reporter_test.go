package kube

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// startReporter runs a Reporter of f with both features on and returns
// it with its log; Close and the goroutine's end are the test's cleanup.
func startReporter(t *testing.T, f *fakeAPI, o ReporterOptions) (*Reporter, *logBuffer) {
	t.Helper()
	logs := &logBuffer{}
	c := f.client(t)
	o.Events, o.Annotations, o.Log = true, true, logs.logger()
	r := NewReporter(c, o)
	done := make(chan struct{})
	go func() { r.Run(context.Background()); close(done) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		r.Close(ctx)
		<-done
		c.CloseIdleConnections()
	})
	return r, logs
}

// waitFor polls cond; the limit guards against hangs only.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(2 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatalf("timed out waiting for %s", what)
}

// TestForbiddenTurnsFeatureOffOnce: a 403 on events turns events off
// with exactly one warning naming the permission, and nothing more is
// sent; annotations, still allowed, go on.
func TestForbiddenTurnsFeatureOffOnce(t *testing.T) {
	f := newFakeAPI(t)
	f.setHandle(func(w http.ResponseWriter, r request) bool {
		if strings.HasSuffix(r.Path, "/events") {
			status(w, http.StatusForbidden, "Forbidden", `events is forbidden: User "system:serviceaccount:ml:default" cannot create resource "events" in API group "" in the namespace "ml"`)
			return true
		}
		return false
	})
	r, logs := startReporter(t, f, ReporterOptions{})
	r.Event(Event{Type: Normal, Reason: ReasonCommitted, Message: "1"})
	waitFor(t, "events off", func() bool { return !r.Enabled(FeatureEvents) })
	for i := range 5 {
		r.Event(Event{Type: Normal, Reason: ReasonCommitted, Message: fmt.Sprint(i)})
	}
	v := "1"
	r.Annotate(map[string]*string{AnnotationStep: &v})
	waitFor(t, "the annotation", func() bool { return len(f.requests(http.MethodPatch, "")) == 1 })
	if n := len(f.requests(http.MethodPost, "/events")); n != 1 {
		t.Errorf("%d event posts, want 1: nothing after the 403", n)
	}
	w := logs.lines("WARN", "kube.feature_off")
	if len(w) != 1 || w[0]["feature"] != "events" || !strings.Contains(fmt.Sprint(w[0]["permission"]), "create events") {
		t.Errorf("feature_off warnings %v, want one for events naming create events", w)
	}
	if !r.Enabled(FeatureAnnotations) {
		t.Error("annotations were turned off too")
	}
}

// TestPodLookupForbidden: without get pods the uid cannot be learnt:
// events go off with one warning naming get pods.
func TestPodLookupForbidden(t *testing.T) {
	f := newFakeAPI(t)
	f.setHandle(func(w http.ResponseWriter, r request) bool {
		if r.Method == http.MethodGet {
			status(w, http.StatusForbidden, "Forbidden", "pods is forbidden")
			return true
		}
		return false
	})
	r, logs := startReporter(t, f, ReporterOptions{})
	r.Event(Event{Type: Normal, Reason: ReasonCommitted, Message: "1"})
	r.Event(Event{Type: Normal, Reason: ReasonCommitted, Message: "2"})
	waitFor(t, "events off", func() bool { return !r.Enabled(FeatureEvents) })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	r.Close(ctx)
	w := logs.lines("WARN", "kube.feature_off")
	if len(w) != 1 || !strings.Contains(fmt.Sprint(w[0]["permission"]), "get pods") {
		t.Errorf("warnings %v, want one naming get pods", w)
	}
	if n := len(f.requests(http.MethodPost, "")) + len(f.requests(http.MethodGet, "")); n != 1 {
		t.Errorf("%d requests, want only the one GET", n)
	}
}

// TestUIDFromConfigSkipsLookup: a uid from the downward API is used as is.
func TestUIDFromConfigSkipsLookup(t *testing.T) {
	f := newFakeAPI(t)
	logs := &logBuffer{}
	c := f.client(t)
	defer c.CloseIdleConnections()
	c.cfg.PodUID = "from-env"
	r := NewReporter(c, ReporterOptions{Events: true, Log: logs.logger()})
	go r.Run(context.Background())
	r.Event(Event{Type: Normal, Reason: ReasonRestored, Message: "m"})
	r.Close(context.Background())
	posts := f.requests(http.MethodPost, "/events")
	if len(posts) != 1 || posts[0].Body["involvedObject"].(map[string]any)["uid"] != "from-env" {
		t.Errorf("posts %+v", posts)
	}
	if g := f.requests(http.MethodGet, ""); len(g) != 0 {
		t.Errorf("%d GETs, want none", len(g))
	}
}

// TestTransientFailureWarnsOnce: a 500 is retried, warned about once per
// feature, and the feature stays on; later failures are at debug.
func TestTransientFailureWarnsOnce(t *testing.T) {
	f := newFakeAPI(t)
	var mu sync.Mutex
	failing := true
	f.setHandle(func(w http.ResponseWriter, r request) bool {
		mu.Lock()
		defer mu.Unlock()
		if failing && r.Method == http.MethodPost {
			status(w, http.StatusInternalServerError, "InternalError", "etcd timeout")
			return true
		}
		return false
	})
	r, logs := startReporter(t, f, ReporterOptions{})
	r.Event(Event{Type: Normal, Reason: ReasonCommitted, Message: "1"})
	r.Event(Event{Type: Normal, Reason: ReasonCommitted, Message: "2"})
	waitFor(t, "six attempts", func() bool { return len(f.requests(http.MethodPost, "/events")) == 6 })
	mu.Lock()
	failing = false
	mu.Unlock()
	r.Event(Event{Type: Normal, Reason: ReasonCommitted, Message: "3"})
	waitFor(t, "the third event", func() bool { return len(f.requests(http.MethodPost, "/events")) == 7 })
	if !r.Enabled(FeatureEvents) {
		t.Error("a server error turned events off")
	}
	if w := logs.lines("WARN", "kube.request_failed"); len(w) != 1 {
		t.Errorf("%d request_failed warnings, want 1:\n%s", len(w), logs)
	}
	if d := logs.lines("DEBUG", "kube.request_failed"); len(d) != 1 {
		t.Errorf("%d request_failed debug lines, want 1", len(d))
	}
}

// TestQueueNeverBlocks: with the API server hanging, Event and Annotate
// return at once, events beyond the queue are dropped and counted, and
// Close gives up when its context ends.
func TestQueueNeverBlocks(t *testing.T) {
	f := newFakeAPI(t)
	release := make(chan struct{})
	f.setHandle(func(w http.ResponseWriter, r request) bool { <-release; return false })
	defer close(release)
	logs := &logBuffer{}
	c := f.client(t)
	defer c.CloseIdleConnections()
	c.cfg.PodUID = testUID
	r := NewReporter(c, ReporterOptions{Events: true, Annotations: true, Queue: 4, Log: logs.logger()})
	done := make(chan struct{})
	go func() { r.Run(context.Background()); close(done) }()
	// The server hangs until the test ends: a call that waited for it
	// would never return. The guard is against that hang, not a speed.
	queued := make(chan struct{})
	go func() {
		defer close(queued)
		for i := range 50 {
			r.Event(Event{Type: Normal, Reason: ReasonCommitted, Message: fmt.Sprint(i)})
			r.Annotate(map[string]*string{AnnotationStep: ptr(fmt.Sprint(i))})
		}
	}()
	select {
	case <-queued:
	case <-time.After(30 * time.Second):
		t.Fatal("Event or Annotate blocked with the server hanging")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	dropped := r.Close(ctx)
	<-done
	// One is in flight, four wait: at least 45 of 50 never went out.
	if dropped < 45 {
		t.Errorf("Close says %d dropped, want at least 45", dropped)
	}
	if l := logs.lines("INFO", "kube.drop_total"); len(l) != 1 {
		t.Errorf("drop_total lines %v, want one", l)
	}
}

// TestCloseSendsWhatIsQueued: Close drains the queue before returning.
func TestCloseSendsWhatIsQueued(t *testing.T) {
	f := newFakeAPI(t)
	c := f.client(t)
	defer c.CloseIdleConnections()
	r := NewReporter(c, ReporterOptions{Events: true, Annotations: true})
	for i := range 3 {
		r.Event(Event{Type: Normal, Reason: ReasonCommitted, Message: fmt.Sprint(i)})
	}
	r.Annotate(map[string]*string{AnnotationStep: ptr("9")})
	done := make(chan struct{})
	go func() { r.Run(context.Background()); close(done) }()
	if n := r.Close(context.Background()); n != 0 {
		t.Errorf("Close dropped %d", n)
	}
	<-done
	if n := len(f.requests(http.MethodPost, "/events")); n != 3 {
		t.Errorf("%d events sent, want 3", n)
	}
	if n := len(f.requests(http.MethodPatch, "")); n != 1 {
		t.Errorf("%d patches, want 1", n)
	}
	r.Event(Event{Type: Normal, Reason: ReasonCommitted, Message: "late"})
	if n := len(r.events); n != 0 {
		t.Errorf("an event after Close was queued")
	}
}

// TestUploadFailingIsRateLimited: failures within the limit make one
// event; the next one after it counts those in between.
func TestUploadFailingIsRateLimited(t *testing.T) {
	f := newFakeAPI(t)
	var mu sync.Mutex
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	r, _ := startReporter(t, f, ReporterOptions{Clock: clock})
	rec := NewRecorder(r, RecorderOptions{Clock: clock})
	for range 4 {
		rec.UploadFailed(20, "connection reset")
		advance(30 * time.Second)
	}
	rec.Committed(10, 1, 1, time.Time{}, false) // another reason is not limited
	advance(2 * time.Minute)                    // 4 min after the first
	rec.UploadFailed(20, "connection reset")
	waitFor(t, "two events", func() bool { return len(f.requests(http.MethodPost, "/events")) == 2 })
	posts := f.requests(http.MethodPost, "/events")
	if posts[0].Body["reason"] != ReasonUploadFailing || posts[0].Body["type"] != Warning {
		t.Errorf("first event %v", posts[0].Body)
	}
	for _, p := range posts[1:] {
		if p.Body["reason"] == ReasonUploadFailing {
			t.Fatalf("a second UploadFailing within 5 minutes: %v", p.Body["message"])
		}
	}
	advance(2 * time.Minute)
	rec.UploadFailed(20, "connection reset") // 6 min after the first
	waitFor(t, "the second UploadFailing", func() bool { return len(f.requests(http.MethodPost, "/events")) == 3 })
	msg := f.requests(http.MethodPost, "/events")[2].Body["message"].(string)
	if !strings.Contains(msg, "(4 more since 2026-03-01T12:00:00Z)") {
		t.Errorf("message %q does not count the 4 failures in between", msg)
	}
}
