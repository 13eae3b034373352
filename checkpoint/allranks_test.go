package checkpoint

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/lifeboat-project/lifeboat/storage"
	"github.com/lifeboat-project/lifeboat/storage/mem"
)

// shardTree is what Paddle's save_state_dict writes on rank of a job: its
// shard, and on the coordinator the metadata.
func shardTree(rank int, step int64) tree {
	tr := tree{"ckpt/" + string(rune('0'+rank)) + "_0.distcp": pickleOf(randomBytes(uint64(step)*10+uint64(rank), 3*testChunk+rank))}
	if rank == 0 {
		tr["ckpt/0.metadata"] = pickleOf([]byte("metadata of step"))
	}
	return tr
}

// underRanks is the tree a restore with AllRanks leaves in dir: each
// rank's files under RanksDir/RankDir(rank).
func underRanks(ranks ...tree) tree {
	out := tree{}
	for r, tr := range ranks {
		for p, b := range tr {
			out[RanksDir+"/"+RankDir(r)+"/"+p] = b
		}
	}
	return out
}

// TestRestoreAllRanks: a job of two ranks saved resharding checkpoints
// (step 5020, then 5031) and comes back with one rank. RestoreLatest with
// AllRanks restores both old ranks' files of the newest complete step of
// any world size, each under its rank's directory in RanksDir, which then
// holds that step's ranks and nothing else; the user's files stay. A rank
// whose chunk is missing makes the step fall back as a whole. Restore of a
// named step does the same.
func TestRestoreAllRanks(t *testing.T) {
	defer verifyNone(t)
	stores(t, func(t *testing.T, s storage.Store) {
		ctx := context.Background()
		u := newUploader(s, nil)
		for _, step := range []int64{5020, 5031} {
			for rank := range 2 {
				uploadTarget(t, u, Target{Step: step, Rank: rank, WorldSize: 2}, shardTree(rank, step))
			}
		}
		dir := t.TempDir()
		user := tree{"notes.txt": []byte("the user's"), RanksDir + "/" + RankDir(2) + "/old.bin": []byte("a rank of an earlier restore")}
		writeTree(t, dir, user)
		res, err := RestoreLatest(ctx, s, 0, dir, RestoreOptions{WorldSize: 1, AllRanks: true})
		if err != nil {
			t.Fatalf("RestoreLatest with AllRanks: %v", err)
		}
		want := underRanks(shardTree(0, 5031), shardTree(1, 5031))
		if res.Step != 5031 || len(res.Ranks) != 2 || res.Dir != filepath.Join(dir, RanksDir) || res.Files != 3 ||
			res.Manifest.ID != res.Ranks[0].ID || res.Manifest.WorldSize != 2 {
			t.Errorf("RestoreLatest = %+v; want step 5031 of both ranks in %s", res, filepath.Join(dir, RanksDir))
		}
		var paths []string
		for _, f := range res.Manifest.Files {
			paths = append(paths, f.Path)
		}
		if want := []string{"rank-00000/ckpt/0.metadata", "rank-00000/ckpt/0_0.distcp", "rank-00001/ckpt/1_0.distcp"}; !slices.Equal(paths, want) {
			t.Errorf("restored paths %v, want %v", paths, want)
		}
		want["notes.txt"] = user["notes.txt"]
		checkTree(t, dir, want)

		// Rank 1's newest shard lost a chunk: both ranks fall back to 5020.
		m := res.Ranks[1]
		if err := s.Delete(ctx, chunkKey(m.Files[0].Chunks[1].SHA256)); err != nil {
			t.Fatal(err)
		}
		res, err = RestoreLatest(ctx, s, 0, dir, RestoreOptions{AllRanks: true})
		if err != nil || res.Step != 5020 || len(res.Fallbacks) != 1 || res.Fallbacks[0].Step != 5031 || !errors.Is(res.Fallbacks[0].Err, ErrCorrupt) {
			t.Fatalf("RestoreLatest with AllRanks = %+v, %v; want 5020 after 5031", res, err)
		}
		want = underRanks(shardTree(0, 5020), shardTree(1, 5020))
		want["notes.txt"] = user["notes.txt"]
		checkTree(t, dir, want)
		if ents, _ := os.ReadDir(dir); len(ents) != 2 {
			t.Errorf("%d entries in the directory, want notes.txt and %s only: %v", len(ents), RanksDir, ents)
		}

		// Restore of a named step, every rank.
		res, err = Restore(ctx, s, 5020, 0, dir, RestoreOptions{AllRanks: true})
		if err != nil || res.Step != 5020 || len(res.Ranks) != 2 {
			t.Fatalf("Restore of step 5020 with AllRanks = %+v, %v", res, err)
		}
		checkTree(t, dir, want)
	})
}

// TestRestoreAllRanksTakesTheNewestRun: once the job of one rank has
// committed a step, that step (newer than the old run's) is what
// RestoreLatest with AllRanks restores: the one rank, in RanksDir.
func TestRestoreAllRanksTakesTheNewestRun(t *testing.T) {
	defer verifyNone(t)
	ctx := context.Background()
	clock := newFakeClock()
	s := mem.New(mem.WithClock(clock.Now))
	u := newUploader(s, clock)
	for rank := range 2 {
		uploadTarget(t, u, Target{Step: 5031, Rank: rank, WorldSize: 2}, shardTree(rank, 5031))
	}
	clock.Advance(time.Hour)
	uploadTarget(t, u, Target{Step: 10, WorldSize: 1}, shardTree(0, 10))
	dir := t.TempDir()
	res, err := RestoreLatest(ctx, s, 0, dir, RestoreOptions{WorldSize: 1, AllRanks: true})
	if err != nil || res.Step != 10 || len(res.Ranks) != 1 {
		t.Fatalf("RestoreLatest with AllRanks = %+v, %v; want step 10 of world size 1", res, err)
	}
	checkTree(t, dir, underRanks(shardTree(0, 10)))
}
