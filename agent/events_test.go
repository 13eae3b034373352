package agent

import (
	"bytes"
	"context"
	"errors"
	"io"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/lifeboat-project/lifeboat/storage"
	"github.com/lifeboat-project/lifeboat/storage/mem"
)

// recorder collects the agent's events.
type recorder struct {
	mu sync.Mutex
	ev []Event
}

func (r *recorder) add(e Event) { r.mu.Lock(); r.ev = append(r.ev, e); r.mu.Unlock() }

func (r *recorder) of(k EventKind) []Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []Event
	for _, e := range r.ev {
		if e.Kind == k {
			out = append(out, e)
		}
	}
	return out
}

// TestNotifyCommitsFailuresAndFinal: each commit is told with its step,
// size, upload time and save time; a failed upload is told with its error;
// the final flush's commit is marked Final.
func TestNotifyCommitsFailuresAndFinal(t *testing.T) {
	defer goleak.VerifyNone(t)
	dir, inner := t.TempDir(), mem.New()
	var fail, hold atomic.Bool
	blocked := make(chan struct{}, 1)
	s := &mem.FaultStore{Inner: inner, OnPut: func(ctx context.Context, key string, r io.Reader, size int64, o storage.PutOptions) (storage.ObjectInfo, error) {
		if fail.Load() {
			return storage.ObjectInfo{}, errors.New("injected: connection reset")
		}
		if err := holdBackground(ctx, &hold, blocked); err != nil {
			return storage.ObjectInfo{}, err
		}
		return inner.Put(ctx, key, r, size, o)
	}}
	writeFile(t, filepath.Join(dir, "step-10", "model.bin"), 100<<10, 1)
	a := setup(t, dir, s, time.Millisecond, 10*time.Millisecond)
	rec := &recorder{}
	a.Notify(rec.add)
	stop := run(t, a)
	waitFor(t, "the commit of step 10", func() bool { return len(rec.of(EventCommitted)) == 1 })
	c := rec.of(EventCommitted)[0]
	if c.Step != 10 || c.Bytes != 100<<10 || c.Final || c.Saved.IsZero() || c.At.Before(c.Saved) {
		t.Errorf("commit event %+v, want step 10, %d bytes, not final, saved before it was told", c, 100<<10)
	}
	fail.Store(true)
	writeFile(t, filepath.Join(dir, "step-20", "model.bin"), 100<<10, 2)
	waitFor(t, "a failed upload of step 20", func() bool { return len(rec.of(EventUploadFailed)) > 0 })
	if f := rec.of(EventUploadFailed)[0]; f.Step != 20 || f.Err == "" {
		t.Errorf("failure event %+v, want step 20 with its error", f)
	}
	// The background's next try of step 20 is held in flight, and step 20
	// is saved again (as at a stop), so that the final flush, and not a
	// background retry that a busy machine let come first, commits it.
	hold.Store(true)
	fail.Store(false)
	waitHeld(t, blocked)
	writeFile(t, filepath.Join(dir, "step-20", "model.bin"), 110<<10, 3)
	if err := a.Flush(flushContext()); err != nil {
		t.Fatal(err)
	}
	stop()
	cs := rec.of(EventCommitted)
	if last := cs[len(cs)-1]; last.Step != 20 || !last.Final {
		t.Errorf("last commit event %+v, want step 20 marked Final", last)
	}
}

// TestNotifyInterruptedAndRestored: an interrupted save and a restart's
// restore are told; a restore before Notify is not.
func TestNotifyInterruptedAndRestored(t *testing.T) {
	defer goleak.VerifyNone(t)
	dir := t.TempDir()
	a, _ := interruptAgent(t, dir, &bytes.Buffer{})
	a.Restored(5, nil, time.Time{}) // before Notify: the caller reports the start's restore itself
	rec := &recorder{}
	a.Notify(rec.add)
	writeFile(t, filepath.Join(dir, "step-200", "model.bin"), 10<<10, 2)
	a.Died(Death{Pid: 4242, How: "killed by SIGKILL", At: time.Now()})
	go a.Run(context.Background())
	if err := a.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	in := rec.of(EventInterrupted)
	if len(in) != 1 || in[0].Step != 200 || in[0].Path != "step-200/model.bin" || in[0].Why == "" {
		t.Errorf("interrupted events %+v, want one for step-200/model.bin with why", in)
	}
	a.Restored(7, nil, time.Time{})
	if r := rec.of(EventRestored); len(r) != 1 || r[0].Step != 7 {
		t.Errorf("restored events %+v, want only step 7's", r)
	}
}
