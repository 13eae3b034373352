package agent

import (
	"context"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/lifeboat-project/lifeboat/checkpoint"
	"github.com/lifeboat-project/lifeboat/storage/mem"
)

// TestCommitStepOfSupersededStep: steps 25 and 28 are complete at the
// final flush; 28 is committed and 25 superseded. CommitStep(25) (the
// other ranks' newest) commits 25 after all, once; the newest stays 28.
// A step this run never had, and one it committed, are not uploaded.
func TestCommitStepOfSupersededStep(t *testing.T) {
	defer goleak.VerifyNone(t)
	dir, s := t.TempDir(), mem.New()
	writeFile(t, filepath.Join(dir, "step-000025", "model.bin"), 1000, 25)
	writeFile(t, filepath.Join(dir, "step-000028", "model.bin"), 1000, 28)
	a := setup(t, dir, s, time.Hour, 5*time.Millisecond)
	stop := run(t, a)
	defer stop()
	ctx := context.Background()
	if err := a.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if got := a.Newest(); got != 28 {
		t.Fatalf("Newest = %d after the flush, want 28", got)
	}
	for _, tc := range []struct {
		step int64
		want bool
	}{{25, true}, {25, false}, {28, false}, {30, false}} {
		if ok, err := a.CommitStep(ctx, tc.step); ok != tc.want || err != nil {
			t.Errorf("CommitStep(%d) = %v, %v; want %v", tc.step, ok, err, tc.want)
		}
	}
	snaps, err := checkpoint.List(ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	var steps []int64
	for _, sn := range snaps {
		steps = append(steps, sn.Step)
		if sn.Revision != 0 {
			t.Errorf("step %d stored at revision %d, want 0", sn.Step, sn.Revision)
		}
	}
	if !slices.Equal(steps, []int64{25, 28}) {
		t.Errorf("store holds steps %v, want 25 and 28", steps)
	}
	if st := a.Stats(); st.LastStep != 28 || a.Newest() != 28 {
		t.Errorf("last step %d, newest %d after CommitStep; want both 28", st.LastStep, a.Newest())
	}
}
