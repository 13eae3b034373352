package checkpoint

import (
	"context"
	"slices"
	"testing"

	"github.com/lifeboat-project/lifeboat/storage"
	"github.com/lifeboat-project/lifeboat/storage/mem"
)

// TestPruneKeepsRestorable: a step whose chunks are missing or stored with
// another size than its manifest says cannot be restored; it never counts
// toward Keep, and a restorable step is never deleted to keep it.
func TestPruneKeepsRestorable(t *testing.T) {
	tests := []struct {
		name  string
		chunk []byte // what is stored under the hash the 1 TiB manifest names; nil: nothing
	}{
		{"1 TiB of a missing chunk", nil},
		{"1 TiB of a chunk of another size", []byte("a few bytes, not 64 MiB")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			defer verifyNone(t)
			ctx := context.Background()
			clock := newFakeClock()
			s := mem.New(mem.WithClock(clock.Now))
			good := sampleTree(8)
			upload(t, newUploader(s, clock), 1, 0, 1, good)
			sum := hashOf([]byte("the chunk a garbled manifest names"))
			if tt.chunk != nil {
				putBytes(t, s, chunkKey(sum), tt.chunk)
			}
			putHuge(t, s, 2, sum)
			clock.Advance(2 * window)

			res, err := Prune(ctx, s, PruneOptions{Keep: 1, Clock: clock.Now})
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(res.Kept, []int64{1}) || len(res.DeletedSteps) != 0 {
				t.Errorf("Prune = kept %v, deleted %v; want step 1 kept, nothing deleted", res.Kept, res.DeletedSteps)
			}
			if rep, err := Verify(ctx, s, 1, VerifyOptions{ReadData: Subset{1, 1}}); err != nil || !rep.OK() {
				t.Fatalf("the restorable step after prune: Verify = %+v, %v", rep, err)
			}
			rr, err := RestoreLatest(ctx, s, 0, t.TempDir(), RestoreOptions{})
			if err != nil || rr.Step != 1 {
				t.Errorf("RestoreLatest after prune = %+v, %v; want step 1", rr, err)
			}

			snaps, err := ListChecked(ctx, s)
			if err != nil {
				t.Fatal(err)
			}
			if len(snaps) != 2 || !snaps[0].Restorable() || snaps[1].Restorable() || !snaps[1].ChunksChecked {
				t.Fatalf("ListChecked = %+v; want step 1 restorable, step 2 not", snaps)
			}
			if missing, wrong := snaps[1].MissingChunks, snaps[1].WrongSizeChunks; (tt.chunk == nil) != (missing == 1 && wrong == 0) || (tt.chunk != nil) != (missing == 0 && wrong == 1) {
				t.Errorf("step 2: %d missing, %d wrong-size chunks", missing, wrong)
			}
		})
	}
}

// TestPruneDeletesOlderUnrestorable: a step that cannot be restored and is
// older than the steps kept goes like any other old step; one newer than
// the oldest kept step stays (it may be an upload still in progress).
func TestPruneDeletesOlderUnrestorable(t *testing.T) {
	defer verifyNone(t)
	ctx := context.Background()
	clock := newFakeClock()
	s := mem.New(mem.WithClock(clock.Now))
	u := newUploader(s, clock)
	breakStep := func(res *UploadResult) {
		t.Helper()
		f := res.Manifest.Files[len(res.Manifest.Files)-1]
		if err := s.Delete(ctx, chunkKey(f.Chunks[0].SHA256)); err != nil {
			t.Fatal(err)
		}
	}
	breakStep(upload(t, u, 1, 0, 1, tree{"a.bin": randomBytes(31, 1000)}))
	upload(t, u, 2, 0, 1, tree{"b.bin": randomBytes(32, 1000)})
	breakStep(upload(t, u, 3, 0, 1, tree{"c.bin": randomBytes(33, 1000)}))
	upload(t, u, 4, 0, 1, tree{"d.bin": randomBytes(34, 1000)})
	clock.Advance(2 * window)

	res, err := Prune(ctx, s, PruneOptions{Keep: 2, Clock: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(res.Kept, []int64{4, 2}) || !slices.Equal(res.DeletedSteps, []int64{1}) {
		t.Errorf("Prune = kept %v, deleted %v; want 4 and 2 kept, 1 deleted", res.Kept, res.DeletedSteps)
	}
	want := []string{manifestKey(Target{Step: 2, WorldSize: 1}, 0), manifestKey(Target{Step: 3, WorldSize: 1}, 0), manifestKey(Target{Step: 4, WorldSize: 1}, 0)}
	if got := storedKeys(t, s, snapshotsPrefix); !slices.Equal(got, want) {
		t.Errorf("manifests left %v, want %v", got, want)
	}
}

// TestListMarksDamage: List marks what reading the manifests shows (one
// that does not decode, a rank missing) without listing chunks;
// ListChecked also counts missing chunks.
func TestListMarksDamage(t *testing.T) {
	defer verifyNone(t)
	ctx := context.Background()
	s := mem.New()
	u := newUploader(s, nil)
	upload(t, u, 1, 0, 1, tree{"a.bin": randomBytes(41, 1000)})
	upload(t, u, 2, 0, 2, tree{"b.bin": randomBytes(42, 1000)}) // rank 1 missing
	upload(t, u, 3, 0, 1, tree{"c.bin": randomBytes(43, 1000)})
	putBytes(t, s, manifestKey(Target{Step: 3, WorldSize: 1}, 0), []byte("{"))
	res := upload(t, u, 4, 0, 1, tree{"d.bin": randomBytes(44, 1000)})
	if err := s.Delete(ctx, chunkKey(res.Manifest.Files[0].Chunks[0].SHA256)); err != nil {
		t.Fatal(err)
	}
	var chunkLists int
	f := &mem.FaultStore{Inner: s}
	f.OnList = func(ctx context.Context, prefix string, fn func(storage.ObjectInfo) error) error {
		if prefix == chunksPrefix {
			chunkLists++
		}
		return s.List(ctx, prefix, fn)
	}
	snaps, err := List(ctx, f)
	if err != nil {
		t.Fatal(err)
	}
	if chunkLists != 0 {
		t.Errorf("List listed the chunks %d times", chunkLists)
	}
	got := []bool{}
	for _, sn := range snaps {
		got = append(got, sn.Restorable())
	}
	// Unchecked, step 4 looks restorable: only its chunks tell.
	if !slices.Equal(got, []bool{true, false, false, true}) {
		t.Errorf("List restorable = %v", got)
	}
	if snaps, err = ListChecked(ctx, f); err != nil {
		t.Fatal(err)
	}
	got = got[:0]
	for _, sn := range snaps {
		got = append(got, sn.Restorable())
	}
	if !slices.Equal(got, []bool{true, false, false, false}) || snaps[3].MissingChunks != 1 || chunkLists != 1 {
		t.Errorf("ListChecked restorable = %v, step 4 %+v, %d chunk listings", got, snaps[3], chunkLists)
	}
}
