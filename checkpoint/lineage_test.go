package checkpoint

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/lifeboat-project/lifeboat/storage/mem"
)

// stepsOf lists the steps of worldSize in the store, ascending, and which
// of them are complete.
func stepsOf(snaps []Snapshot, worldSize int) (all, complete []int64) {
	for _, sn := range snaps {
		if sn.WorldSize != worldSize {
			continue
		}
		all = append(all, sn.Step)
		if sn.Complete {
			complete = append(complete, sn.Step)
		}
	}
	return all, complete
}

// TestPruneKeepsTheNewerRun: a job of two ranks committed steps 5020, 5030
// and 5031; it came back with one rank, found nothing for its world size,
// started fresh and commits steps 10, 20 and 30, an hour later, pruning
// with Keep 3 after each commit as rank 0's lifeboat does. The new run's
// steps are the newest work: none is ever deleted, and once three of them
// are committed the old run's steps go.
func TestPruneKeepsTheNewerRun(t *testing.T) {
	defer verifyNone(t)
	ctx := context.Background()
	clock := newFakeClock()
	s := mem.New(mem.WithClock(clock.Now))
	u := newUploader(s, clock)
	for _, step := range []int64{5020, 5030, 5031} {
		for rank := range 2 {
			uploadTarget(t, u, Target{Step: step, Rank: rank, WorldSize: 2}, rankTree(rank, step))
		}
		clock.Advance(time.Minute)
	}
	clock.Advance(time.Hour)
	var committed []int64
	wantKept := [][]int64{{10, 5031, 5030}, {20, 10, 5031}, {30, 20, 10}}
	for i, step := range []int64{10, 20, 30} {
		uploadTarget(t, u, Target{Step: step, WorldSize: 1}, rankTree(0, step))
		committed = append(committed, step)
		clock.Advance(time.Minute)
		res, err := Prune(ctx, s, PruneOptions{Keep: 3, Clock: clock.Now})
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(res.Kept, wantKept[i]) {
			t.Errorf("after step %d: Prune kept %v, want %v (newest in time first)", step, res.Kept, wantKept[i])
		}
		snaps, err := List(ctx, s)
		if err != nil {
			t.Fatal(err)
		}
		if _, complete := stepsOf(snaps, 1); !slices.Equal(complete, committed) {
			t.Fatalf("after step %d: the new run's complete steps are %v, want %v: prune deleted newer work", step, complete, committed)
		}
	}
	snaps, err := List(ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	if old, _ := stepsOf(snaps, 2); len(old) != 0 {
		t.Errorf("the old run's steps %v are still stored after three newer ones with Keep 3", old)
	}
	out := t.TempDir()
	if res, err := RestoreLatest(ctx, s, 0, out, RestoreOptions{WorldSize: 1}); err != nil || res.Step != 30 {
		t.Fatalf("RestoreLatest = %+v, %v; want step 30", res, err)
	}
}

// TestLatestPrefersTheNewerRun: one world size, a run that reached step
// 5031, then a run started from scratch on purpose (--restore never) that
// committed steps 10, 20 and 30 later. Step order and time order disagree;
// the newer run's work is what the job was doing, so Latest and
// RestoreLatest take step 30, and prune (which orders the same way) keeps
// it.
func TestLatestPrefersTheNewerRun(t *testing.T) {
	defer verifyNone(t)
	ctx := context.Background()
	clock := newFakeClock()
	s := mem.New(mem.WithClock(clock.Now))
	u := newUploader(s, clock)
	for _, step := range []int64{5020, 5030, 5031, 10, 20, 30} {
		uploadTarget(t, u, Target{Step: step, WorldSize: 1}, rankTree(0, step))
		clock.Advance(time.Minute)
	}
	if step, err := Latest(ctx, s, 1); err != nil || step != 30 {
		t.Errorf("Latest = %d, %v; want 30", step, err)
	}
	out := t.TempDir()
	res, err := RestoreLatest(ctx, s, 0, out, RestoreOptions{WorldSize: 1})
	if err != nil || res.Step != 30 {
		t.Fatalf("RestoreLatest = %+v, %v; want step 30", res, err)
	}
	checkTree(t, out, rankTree(0, 30))
	pr, err := Prune(ctx, s, PruneOptions{Keep: 2, Clock: clock.Now, DryRun: true})
	if err != nil || !slices.Equal(pr.Kept, []int64{30, 20}) || !slices.Equal(pr.DeletedSteps, []int64{10, 5020, 5030, 5031}) {
		t.Errorf("Prune = %+v, %v; want 30 and 20 kept, the rest deleted", pr, err)
	}
}
