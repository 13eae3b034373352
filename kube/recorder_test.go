package kube

import (
	"errors"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestFreshnessAnnotations: work is at risk from the start until the
// first commit, then from that checkpoint's save; the deletion cost is the
// seconds at risk, only when asked for.
func TestFreshnessAnnotations(t *testing.T) {
	var mu sync.Mutex
	start := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	now := start
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	set := func(d time.Duration) { mu.Lock(); now = start.Add(d); mu.Unlock() }
	get := func(a map[string]*string, k string) string {
		if v, ok := a[k]; ok && v != nil {
			return *v
		}
		if _, ok := a[k]; ok {
			return "<remove>"
		}
		return "<absent>"
	}
	for _, cost := range []bool{false, true} {
		set(0)
		c := NewRecorder(nil, RecorderOptions{DeletionCost: cost, Clock: clock})
		set(90 * time.Second)
		a := c.Annotations()
		if get(a, AnnotationStep) != "<absent>" || get(a, AnnotationAtRisk) != "90" || get(a, AnnotationAtRiskSince) != "2026-03-01T12:00:00Z" {
			t.Errorf("before any commit: %v", show(a))
		}
		set(100 * time.Second)
		c.Committed(500, 1<<20, 2, start.Add(95*time.Second), false)
		set(160 * time.Second)
		a = c.Annotations()
		if get(a, AnnotationStep) != "500" || get(a, AnnotationTime) != "2026-03-01T12:01:40Z" ||
			get(a, AnnotationAtRiskSince) != "2026-03-01T12:01:35Z" || get(a, AnnotationAtRisk) != "65" {
			t.Errorf("after a commit: %v", show(a))
		}
		if want := map[bool]string{false: "<absent>", true: "65"}[cost]; get(a, AnnotationDeletionCost) != want {
			t.Errorf("deletion cost %s with DeletionCost %v, want %s", get(a, AnnotationDeletionCost), cost, want)
		}
		c.Restored(400, "store", 3)
		set(170 * time.Second)
		a = c.Annotations()
		if get(a, AnnotationStep) != "400" || get(a, AnnotationTime) != "<remove>" || get(a, AnnotationAtRisk) != "10" {
			t.Errorf("after a restart's restore: %v", show(a))
		}
	}
}

func show(a map[string]*string) map[string]string {
	out := map[string]string{}
	for k, v := range a {
		out[k] = "<nil>"
		if v != nil {
			out[k] = *v
		}
	}
	return out
}

// TestPreemptionEvents: after a stop, the final flush's commit is
// PreemptedCommitted with the time since the stop; nothing new, or a
// failure, are said as such; without a stop a final commit is a plain
// CheckpointCommitted and Flushed says nothing.
func TestPreemptionEvents(t *testing.T) {
	start := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	var mu sync.Mutex
	now := start
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	set := func(d time.Duration) { mu.Lock(); now = start.Add(d); mu.Unlock() }
	run := func(t *testing.T, f func(rec *Recorder)) []request {
		fk := newFakeAPI(t)
		r, _ := startReporter(t, fk, ReporterOptions{Clock: clock})
		f(NewRecorder(r, RecorderOptions{Clock: clock}))
		r.Close(t.Context())
		return fk.requests(http.MethodPost, "/events")
	}
	t.Run("committed", func(t *testing.T) {
		set(0)
		ev := run(t, func(rec *Recorder) {
			rec.Stopping(start.Add(time.Second))
			rec.Stopping(start.Add(2 * time.Second)) // the deadline moved: the stop began at 1s
			set(5500 * time.Millisecond)
			rec.Committed(1200, 4096, 3, start, true)
			rec.Flushed(true, nil)
		})
		if len(ev) != 1 || ev[0].Body["reason"] != ReasonPreemptedCommitted || ev[0].Body["message"] != "preempted: committed step 1200 (4096 bytes) 4.5s after the stop began" {
			t.Errorf("events %v", bodies(ev))
		}
	})
	t.Run("nothing new", func(t *testing.T) {
		ev := run(t, func(rec *Recorder) {
			rec.Committed(1100, 1, 1, time.Time{}, false)
			rec.Stopping(start)
			rec.Flushed(true, nil)
		})
		if len(ev) != 2 || ev[1].Body["reason"] != ReasonPreemptedCommitted || !strings.Contains(ev[1].Body["message"].(string), "nothing new to commit; step 1100 stays the latest") {
			t.Errorf("events %v", bodies(ev))
		}
	})
	t.Run("restart's commit, then a stop with nothing new", func(t *testing.T) {
		ev := run(t, func(rec *Recorder) {
			rec.Committed(1150, 1, 1, time.Time{}, true) // the commit before a restart
			rec.Stopping(start)
			rec.Flushed(true, nil)
		})
		if len(ev) != 2 || ev[0].Body["reason"] != ReasonCommitted || ev[1].Body["reason"] != ReasonPreemptedCommitted ||
			!strings.Contains(ev[1].Body["message"].(string), "nothing new to commit; step 1150 stays the latest") {
			t.Errorf("events %v", bodies(ev))
		}
	})
	t.Run("failed", func(t *testing.T) {
		ev := run(t, func(rec *Recorder) {
			rec.Committed(1100, 1, 1, time.Time{}, false)
			rec.Stopping(start)
			rec.Flushed(true, errors.New("final upload of step 1200: context deadline exceeded"))
		})
		if len(ev) != 2 || ev[1].Body["reason"] != ReasonPreemptedCommitFailed || ev[1].Body["type"] != Warning ||
			!strings.Contains(ev[1].Body["message"].(string), "step 1100 stays the latest") {
			t.Errorf("events %v", bodies(ev))
		}
	})
	t.Run("committed instead of an interrupted save", func(t *testing.T) {
		set(0)
		ev := run(t, func(rec *Recorder) {
			rec.Interrupted(1250, "step-1250/model.pt", "a background scan's") // before the stop: not the stop's
			rec.Stopping(start)
			rec.Interrupted(1300, "step-1300/model.pt", "zip: no end-of-central-directory record")
			set(2 * time.Second)
			rec.Committed(1200, 4096, 1, start, true)
			rec.Flushed(true, nil)
		})
		if len(ev) != 3 || ev[2].Body["reason"] != ReasonPreemptedCommitted ||
			ev[2].Body["message"] != "preempted: committed step 1200 (4096 bytes) 2.0s after the stop began, instead of step 1300, an interrupted save" {
			t.Errorf("events %v", bodies(ev))
		}
	})
	t.Run("nothing committed instead of an interrupted save", func(t *testing.T) {
		ev := run(t, func(rec *Recorder) {
			rec.Committed(1100, 1, 1, time.Time{}, false)
			rec.Stopping(start)
			rec.Interrupted(1300, "", "the trainer was killed while writing it")
			rec.Flushed(true, nil)
		})
		if len(ev) != 3 || ev[2].Body["reason"] != ReasonPreemptedCommitted ||
			ev[2].Body["message"] != "preempted: step 1300 was an interrupted save and was not committed; step 1100 stays the latest" {
			t.Errorf("events %v", bodies(ev))
		}
	})
	t.Run("no stop", func(t *testing.T) {
		ev := run(t, func(rec *Recorder) {
			rec.Committed(1300, 1, 1, time.Time{}, true)
			rec.Flushed(false, nil)
		})
		if len(ev) != 1 || ev[0].Body["reason"] != ReasonCommitted {
			t.Errorf("events %v", bodies(ev))
		}
	})
	t.Run("rank claimed twice", func(t *testing.T) {
		ev := run(t, func(rec *Recorder) {
			rec.RankClaimed("run-b", "run-a", "train-1-abcde")
		})
		if len(ev) != 1 || ev[0].Body["reason"] != ReasonRankClaimed || ev[0].Body["type"] != Warning ||
			ev[0].Body["message"] != "another live pod (train-1-abcde, run run-a) trains as this pod's rank; this pod (run run-b) commits nothing more and exits 78: give every pod its own rank" {
			t.Errorf("events %v", bodies(ev))
		}
	})
	t.Run("interrupted and restored", func(t *testing.T) {
		ev := run(t, func(rec *Recorder) {
			rec.Restored(900, "store", 2.25)
			rec.Interrupted(1000, "step-1000/model.bin", "open for writing when the trainer's tree was SIGKILLed")
		})
		if len(ev) != 2 || ev[0].Body["reason"] != ReasonRestored || ev[0].Body["message"] != "restored step 900 from the store in 2.2s" ||
			ev[1].Body["reason"] != ReasonInterrupted || ev[1].Body["type"] != Warning ||
			ev[1].Body["message"] != "interrupted save of step 1000 (step-1000/model.bin) ignored: open for writing when the trainer's tree was SIGKILLed; step 900 stays the latest" {
			t.Errorf("events %v", bodies(ev))
		}
	})
}

func bodies(rs []request) []any {
	var out []any
	for _, r := range rs {
		out = append(out, []any{r.Body["reason"], r.Body["message"]})
	}
	return out
}
