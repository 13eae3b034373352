package coord

import (
	"context"
	"errors"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lifeboat-project/lifeboat/storage"
	"github.com/lifeboat-project/lifeboat/storage/mem"
)

// flushAll calls Flushed on every rank at once, rank i publishing
// newest[i], and returns what each found; an error fails the test.
func flushAll(t *testing.T, rs []*rank, newest ...int64) []Flushed {
	t.Helper()
	got := make([]Flushed, len(rs))
	var wg sync.WaitGroup
	for i, r := range rs {
		wg.Go(func() {
			f, err := r.Flushed(context.Background(), newest[i], 5*time.Millisecond)
			if err != nil {
				t.Errorf("rank %d: %v", i, err)
			}
			got[i] = f
		})
	}
	wg.Wait()
	return got
}

// TestFlushedEveryRank: three ranks in one job-wide stop, two of which
// wrote a stop record of their own at the same moment, publish their
// newest committed steps under the same (lowest) stop id and each learns
// all three; the common step is the lowest.
func TestFlushedEveryRank(t *testing.T) {
	eachStore(t, func(t *testing.T, inner storage.Store) {
		rs, _ := twoStopAtOnce(t, inner)
		got := flushAll(t, rs, 28, 25, 30)
		for i, f := range got {
			step, ok := f.Common()
			if !f.All() || f.Steps[0] != 28 || f.Steps[1] != 25 || f.Steps[2] != 30 || step != 25 || !ok || f.StopID != got[0].StopID {
				t.Errorf("rank %d: %+v, common %d %v; want every rank's step under one stop id, common 25", i, f, step, ok)
			}
		}
	})
}

// TestFlushedNotEveryRank: a rank that never publishes (its lifeboat
// died) costs at most StepWait; what the others published is returned.
// A rank that committed nothing makes no step common.
func TestFlushedNotEveryRank(t *testing.T) {
	rs := startRanks(t, mem.New(), 3, time.Now(), 50*time.Millisecond, 0, 1)
	rs[0].Begin("SIGTERM", time.Time{})
	<-rs[1].Peer()
	if _, err := rs[0].Flushed(context.Background(), 10, time.Millisecond); err != nil {
		t.Fatal(err)
	}
	f, err := rs[1].Flushed(context.Background(), -1, time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if f.All() || len(f.Steps) != 2 || f.Steps[0] != 10 || f.Steps[1] != -1 {
		t.Errorf("flushed %+v; want ranks 0 (10) and 1 (none), not rank 2", f)
	}
	if step, ok := f.Common(); ok {
		t.Errorf("common step %d with a rank that committed nothing", step)
	}
}

// TestFlushedOutlastsAFailedRequest: during the stop the store answers one
// rank's publication with an error and lets one listing of the steps run
// into its request timeout; the ranks try again at their next poll, and
// both still learn both steps and the common one.
func TestFlushedOutlastsAFailedRequest(t *testing.T) {
	var puts, lists atomic.Int32
	inner := mem.New()
	st := &mem.FaultStore{Inner: inner,
		OnPut: func(ctx context.Context, key string, r io.Reader, size int64, opts storage.PutOptions) (storage.ObjectInfo, error) {
			if strings.HasPrefix(key, StepsPrefix) && puts.Add(1) == 1 {
				return storage.ObjectInfo{}, errors.New("503 Service Unavailable")
			}
			return inner.Put(ctx, key, r, size, opts)
		},
		OnList: func(ctx context.Context, prefix string, fn func(storage.ObjectInfo) error) error {
			// A listing of one stop's steps (what Flushed reads).
			if strings.HasPrefix(prefix, StepsPrefix) && prefix != StepsPrefix && lists.Add(1) == 1 {
				<-ctx.Done() // a request that hangs until its timeout
				return ctx.Err()
			}
			return inner.List(ctx, prefix, fn)
		},
	}
	rs := startRanks(t, st, 2, time.Now(), time.Minute, 0, 1)
	rs[0].Begin("SIGTERM", time.Time{})
	<-rs[1].Peer()
	got := flushAll(t, rs, 40, 30)
	if puts.Load() < 3 || lists.Load() < 2 {
		t.Fatalf("%d publications and %d listings: the faults were not met", puts.Load(), lists.Load())
	}
	for i, f := range got {
		if step, ok := f.Common(); !f.All() || step != 30 || !ok {
			t.Errorf("rank %d: %+v, common %d %v; want both ranks' steps, common 30", i, f, step, ok)
		}
	}
}

// TestFlushedWithoutStop: outside a job-wide stop there is nothing to
// publish under.
func TestFlushedWithoutStop(t *testing.T) {
	rs := startRanks(t, mem.New(), 2, time.Now(), time.Second, 0)
	if _, err := rs[0].Flushed(context.Background(), 10, time.Millisecond); err == nil {
		t.Error("Flushed without a stop succeeded")
	}
}
