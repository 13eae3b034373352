package coord

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/lifeboat-project/lifeboat/storage"
	"github.com/lifeboat-project/lifeboat/storage/mem"
)

// TestFlushedEveryRank: three ranks in one job-wide stop, two of which
// wrote a stop record of their own at the same moment, publish their
// newest committed steps under the same (lowest) stop id and each learns
// all three; the common step is the lowest.
func TestFlushedEveryRank(t *testing.T) {
	eachStore(t, func(t *testing.T, inner storage.Store) {
		rs, _ := twoStopAtOnce(t, inner)
		newest := []int64{28, 25, 30}
		got := make([]Flushed, 3)
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

// TestFlushedWithoutStop: outside a job-wide stop there is nothing to
// publish under.
func TestFlushedWithoutStop(t *testing.T) {
	rs := startRanks(t, mem.New(), 2, time.Now(), time.Second, 0)
	if _, err := rs[0].Flushed(context.Background(), 10, time.Millisecond); err == nil {
		t.Error("Flushed without a stop succeeded")
	}
}
