package checkpoint

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lifeboat-project/lifeboat/storage"
	"github.com/lifeboat-project/lifeboat/storage/mem"
)

// rankTree is a small checkpoint of rank at the trainer's iteration iter.
func rankTree(rank int, iter int64) tree {
	return tree{fmt.Sprintf("shard-%d.bin", rank): []byte(fmt.Sprintf("rank %d iteration %d", rank, iter))}
}

// uploadTarget writes tr into a fresh directory and uploads it as target.
func uploadTarget(t *testing.T, u *Uploader, target Target, tr tree) *UploadResult {
	t.Helper()
	dir := t.TempDir()
	writeTree(t, dir, tr)
	res, err := u.Upload(context.Background(), dir, target)
	if err != nil {
		t.Fatalf("upload %s: %v", target, err)
	}
	return res
}

// snapshotOf returns List's snapshot of step for worldSize.
func snapshotOf(t *testing.T, s storage.Store, step int64, worldSize int) Snapshot {
	t.Helper()
	snaps, err := List(context.Background(), s)
	if err != nil {
		t.Fatal(err)
	}
	for _, sn := range snaps {
		if sn.Step == step && sn.WorldSize == worldSize {
			return sn
		}
	}
	t.Fatalf("List has no step %d of world size %d: %+v", step, worldSize, snaps)
	return Snapshot{}
}

// TestCounterRanksPairByNamedRevisions: two ranks commit named steps 5 and
// 10, then each rank's lifeboat commits a counter checkpoint
// (backup/latest.pdparams saved at SIGTERM) as a revision of step 10. The
// ranks' counters come from different iterations (50 and 31) and nothing
// proves otherwise, so they are never restored; but both ranks' named
// step 10 is still stored beneath them, and the trainer numbered it: step
// 10 is complete with those revisions, and every reader restores them
// instead of falling back to step 5 (the work of a whole save interval).
// A rank whose step 10 holds a counter checkpoint only (its named save of
// 10 never committed) leaves step 10 unpaired: every reader falls back to
// step 5.
func TestCounterRanksPairByNamedRevisions(t *testing.T) {
	defer verifyNone(t)
	for _, tc := range []struct {
		name     string
		counters map[int]int64 // rank -> iteration of its counter checkpoint at step 10
		noNamed  int           // a rank without a named revision of step 10, or -1
		why      string
	}{
		{"both ranks", map[int]int64{0: 50, 1: 31}, -1, "ranks 0,1 are counter checkpoints: ranks cannot be paired"},
		{"one rank", map[int]int64{1: 31}, -1, "rank 1 is a counter checkpoint: ranks cannot be paired"},
		{"a rank without a named revision", map[int]int64{0: 50, 1: 31}, 1, "ranks 0,1 are counter checkpoints: ranks cannot be paired"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			allStores(t, func(t *testing.T, s storage.Store) {
				ctx := context.Background()
				u := newUploader(s, nil)
				for _, step := range []int64{5, 10} {
					for rank := range 2 {
						if step == 10 && rank == tc.noNamed {
							continue
						}
						uploadTarget(t, u, Target{Step: step, Rank: rank, WorldSize: 2}, rankTree(rank, step))
					}
				}
				for rank, iter := range tc.counters {
					res := uploadTarget(t, u, Target{Step: 10, Rank: rank, WorldSize: 2, Counter: true}, rankTree(rank, iter))
					if want := 1; rank == tc.noNamed && res.Revision != 0 || rank != tc.noNamed && res.Revision != want {
						t.Fatalf("counter checkpoint of rank %d committed as revision %d", rank, res.Revision)
					}
				}
				paired := tc.noNamed < 0
				sn := snapshotOf(t, s, 10, 2)
				if paired {
					if !sn.Complete || !sn.Restorable() || sn.Incomplete != "" || sn.PassedOver != tc.why || sn.Counter || sn.Revision != 0 {
						t.Errorf("List: step 10 complete %v, incomplete %q, passed over %q, counter %v, revision %d; want complete with the named revisions 0, passed over because %q",
							sn.Complete, sn.Incomplete, sn.PassedOver, sn.Counter, sn.Revision, tc.why)
					}
				} else if sn.Complete || sn.Restorable() || sn.Incomplete != tc.why || sn.PassedOver != "" {
					t.Errorf("List: step 10 complete %v, incomplete %q, passed over %q; want not complete because %q", sn.Complete, sn.Incomplete, sn.PassedOver, tc.why)
				}
				want := int64(5)
				if paired {
					want = 10
				}
				if step, err := Latest(ctx, s, 2); err != nil || step != want {
					t.Errorf("Latest = %d, %v; want %d", step, err, want)
				}
				for rank := range 2 {
					out := t.TempDir()
					res, err := RestoreLatest(ctx, s, rank, out, RestoreOptions{WorldSize: 2})
					if err != nil || res.Step != want || res.Revision != 0 {
						t.Fatalf("RestoreLatest rank %d = %+v, %v; want step %d revision 0", rank, res, err, want)
					}
					if !paired && (len(res.Fallbacks) != 1 || res.Fallbacks[0].Step != 10 || !errors.Is(res.Fallbacks[0].Err, ErrNotPaired) || !strings.Contains(res.Fallbacks[0].Err.Error(), tc.why)) {
						t.Fatalf("RestoreLatest rank %d fell back %+v; want past step 10 because %s", rank, res.Fallbacks, tc.why)
					}
					if paired && len(res.Fallbacks) != 0 {
						t.Fatalf("RestoreLatest rank %d fell back %+v; want none", rank, res.Fallbacks)
					}
					checkTree(t, out, rankTree(rank, want))
				}
				if paired {
					// The restore of the step by number takes the same revisions.
					out := t.TempDir()
					if res, err := Restore(ctx, s, 10, 1, out, RestoreOptions{WorldSize: 2}); err != nil || res.Revision != 0 {
						t.Fatalf("Restore step 10 rank 1 = %+v, %v; want revision 0", res, err)
					}
					checkTree(t, out, rankTree(1, 10))
				}
			})
		})
	}
}

// TestPruneKeepsNamedRevisionsBeneathCounters: step 10's named revisions
// are what a restore takes when the counter revisions above them cannot
// be paired, so a prune long after (every revision older than the safety
// window) counts step 10 as restorable and deletes neither them nor the
// counters; and when step 10 itself is old, every revision of it goes.
func TestPruneKeepsNamedRevisionsBeneathCounters(t *testing.T) {
	defer verifyNone(t)
	ctx := context.Background()
	s := mem.New()
	u := newUploader(s, nil)
	for _, step := range []int64{5, 10} {
		for rank := range 2 {
			uploadTarget(t, u, Target{Step: step, Rank: rank, WorldSize: 2}, rankTree(rank, step))
		}
	}
	for rank, iter := range []int64{50, 31} {
		uploadTarget(t, u, Target{Step: 10, Rank: rank, WorldSize: 2, Counter: true}, rankTree(rank, iter))
	}
	later := func() time.Time { return time.Now().Add(2 * DefaultSafetyWindow) }
	res, err := Prune(ctx, s, PruneOptions{Keep: 1, Clock: later})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(res.Kept, []int64{10}) || !slices.Equal(res.DeletedSteps, []int64{5}) || res.DeletedRevisions != 0 {
		t.Errorf("prune kept %v, deleted steps %v and %d revisions; want step 10 kept whole, step 5 deleted", res.Kept, res.DeletedSteps, res.DeletedRevisions)
	}
	for rank := range 2 {
		out := t.TempDir()
		if r, err := RestoreLatest(ctx, s, rank, out, RestoreOptions{WorldSize: 2}); err != nil || r.Step != 10 || r.Revision != 0 {
			t.Fatalf("after the prune, RestoreLatest rank %d = %+v, %v; want step 10 revision 0", rank, r, err)
		}
		checkTree(t, out, rankTree(rank, 10))
	}
	for rank := range 2 {
		uploadTarget(t, u, Target{Step: 20, Rank: rank, WorldSize: 2}, rankTree(rank, 20))
	}
	if res, err = Prune(ctx, s, PruneOptions{Keep: 1, Clock: later}); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(res.DeletedSteps, []int64{10}) || res.DeletedManifests != 4 {
		t.Errorf("prune deleted steps %v, %d manifests; want step 10's 4 (2 named, 2 counter)", res.DeletedSteps, res.DeletedManifests)
	}
}

// TestSplitSaveRanksArePaired: rank 0's step 10 was committed before and
// after the trainer added a file (revisions 0 and 1), rank 1's once. The
// trainer named the step, so both describe iteration 10: complete.
func TestSplitSaveRanksArePaired(t *testing.T) {
	defer verifyNone(t)
	ctx := context.Background()
	stores(t, func(t *testing.T, s storage.Store) {
		u := newUploader(s, nil)
		uploadTarget(t, u, Target{Step: 10, WorldSize: 2}, rankTree(0, 10))
		whole := rankTree(0, 10)
		whole["optimizer.bin"] = []byte("optimizer state of iteration 10")
		if res := uploadTarget(t, u, Target{Step: 10, WorldSize: 2}, whole); res.Revision != 1 {
			t.Fatalf("second part committed as revision %d, want 1", res.Revision)
		}
		uploadTarget(t, u, Target{Step: 10, Rank: 1, WorldSize: 2}, rankTree(1, 10))
		if sn := snapshotOf(t, s, 10, 2); !sn.Complete || sn.Incomplete != "" || sn.Revision != 1 {
			t.Errorf("List: step 10 complete %v (%q) revision %d; want complete at revision 1", sn.Complete, sn.Incomplete, sn.Revision)
		}
		out := t.TempDir()
		if res, err := RestoreLatest(ctx, s, 0, out, RestoreOptions{WorldSize: 2}); err != nil || res.Step != 10 || res.Revision != 1 {
			t.Fatalf("RestoreLatest = %+v, %v; want step 10 revision 1", res, err)
		}
		checkTree(t, out, whole)
	})
}

// TestIncompleteReasons: ls shows why a step is not complete.
func TestIncompleteReasons(t *testing.T) {
	defer verifyNone(t)
	s := mem.New()
	u := newUploader(s, nil)
	uploadTarget(t, u, Target{Step: 1, WorldSize: 4}, rankTree(0, 1))
	uploadTarget(t, u, Target{Step: 1, Rank: 2, WorldSize: 4}, rankTree(2, 1))
	for rank := range 2 {
		uploadTarget(t, u, Target{Step: 2, Rank: rank, WorldSize: 2}, rankTree(rank, 2))
	}
	putBytes(t, s, manifestKey(Target{Step: 2, Rank: 1, WorldSize: 2}, 1), []byte("{garbled"))
	if sn := snapshotOf(t, s, 1, 4); sn.Complete || sn.Incomplete != "missing ranks 1,3" {
		t.Errorf("step 1: complete %v, incomplete %q; want missing ranks 1,3", sn.Complete, sn.Incomplete)
	}
	if sn := snapshotOf(t, s, 2, 2); sn.Complete || !strings.HasPrefix(sn.Incomplete, "bad manifest of rank 1") {
		t.Errorf("step 2: complete %v, incomplete %q; want a bad manifest of rank 1", sn.Complete, sn.Incomplete)
	}
}

// TestSameGenerationPairsCounters: counter checkpoints of every rank that
// carry the same job-wide save generation are one iteration (the ranks
// agreed on the save); any other mix is not.
func TestSameGenerationPairsCounters(t *testing.T) {
	defer verifyNone(t)
	for _, tc := range []struct {
		name        string
		generations [2]string
		complete    bool
		why         string
	}{
		{"same generation", [2]string{"g-7", "g-7"}, true, ""},
		{"different generations", [2]string{"g-7", "g-8"}, false, "ranks 0,1 are counter checkpoints and the ranks' save generations differ: ranks cannot be paired"},
		{"one without", [2]string{"g-7", ""}, false, "ranks 0,1 are counter checkpoints and the ranks' save generations differ: ranks cannot be paired"},
		{"none", [2]string{"", ""}, false, "ranks 0,1 are counter checkpoints: ranks cannot be paired"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			s := mem.New()
			u := newUploader(s, nil)
			// Counter checkpoints only: no named revision of step 5 pairs
			// beneath them.
			for rank, gen := range tc.generations {
				res := uploadTarget(t, u, Target{Step: 5, Rank: rank, WorldSize: 2, Counter: true, Generation: gen}, rankTree(rank, 9))
				if res.Manifest.Generation != gen {
					t.Fatalf("manifest generation %q, want %q", res.Manifest.Generation, gen)
				}
			}
			sn := snapshotOf(t, s, 5, 2)
			if sn.Complete != tc.complete || sn.Incomplete != tc.why || sn.Ranks[0].Generation != tc.generations[0] {
				t.Errorf("List: complete %v, incomplete %q, rank 0's generation %q; want %v, %q", sn.Complete, sn.Incomplete, sn.Ranks[0].Generation, tc.complete, tc.why)
			}
			step, err := Latest(ctx, s, 2)
			if tc.complete && (err != nil || step != 5) || !tc.complete && !errors.Is(err, ErrNoCheckpoint) {
				t.Errorf("Latest = %d, %v", step, err)
			}
		})
	}
	if err := (Target{Step: 1, WorldSize: 1, Generation: strings.Repeat("g", MaxGenerationLen+1)}).Validate(); err == nil {
		t.Error("a generation over MaxGenerationLen bytes validates")
	}
}
