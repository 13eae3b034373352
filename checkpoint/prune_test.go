package checkpoint

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lifeboat-project/lifeboat/storage"
	"github.com/lifeboat-project/lifeboat/storage/mem"
)

const window = DefaultSafetyWindow

func TestPruneKeepsNewest(t *testing.T) {
	defer verifyNone(t)
	ctx := context.Background()
	clock := newFakeClock()
	s := mem.New(mem.WithClock(clock.Now))
	u := newUploader(s, clock)
	for step := int64(1); step <= 4; step++ {
		upload(t, u, step, 0, 1, sampleTree(uint64(step)))
	}
	clock.Advance(2 * window)
	upload(t, u, 5, 0, 2, sampleTree(5)) // rank 1 of step 5 still uploading

	dry, err := Prune(ctx, s, PruneOptions{Keep: 2, Clock: clock.Now, DryRun: true})
	if err != nil {
		t.Fatal(err)
	}
	before := s.Len()
	res, err := Prune(ctx, s, PruneOptions{Keep: 2, Clock: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(res.Kept, []int64{4, 3}) || !slices.Equal(res.DeletedSteps, []int64{1, 2}) || res.DeletedManifests != 2 || res.DeletedChunks == 0 {
		t.Errorf("Prune = %+v", res)
	}
	if dry.DeletedChunks != res.DeletedChunks || dry.DeletedManifests != res.DeletedManifests || dry.DeletedRecords != res.DeletedRecords || before-s.Len() != res.DeletedChunks+res.DeletedManifests+res.DeletedRecords {
		t.Errorf("dry run %+v differs from the prune %+v, or store shrank by %d", dry, res, before-s.Len())
	}
	for _, step := range []int64{3, 4} {
		rep, err := Verify(ctx, s, step, VerifyOptions{ReadData: Subset{1, 1}})
		if err != nil || !rep.OK() {
			t.Errorf("kept step %d: Verify = %+v, %v", step, rep, err)
		}
	}
	if rep, err := Verify(ctx, s, 5, VerifyOptions{}); err != nil || len(rep.Problems) != 1 || rep.Problems[0].Kind != MissingManifest {
		t.Errorf("in-progress step 5 after prune: Verify = %+v, %v; want only the missing rank", rep, err)
	}
	if _, err := Prune(ctx, s, PruneOptions{}); err == nil {
		t.Error("Prune with Keep 0 succeeded")
	}

	// Once the window has passed since rank 0 committed step 5, its upload
	// is over: the step is abandoned and goes, with its chunks; what is
	// left is exactly the kept steps' manifests and chunks.
	clock.Advance(window + time.Second)
	res, err = Prune(ctx, s, PruneOptions{Keep: 2, Clock: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(res.Kept, []int64{4, 3}) || !slices.Equal(res.Abandoned, []int64{5}) || !slices.Equal(res.DeletedSteps, []int64{5}) || res.DeletedChunks == 0 {
		t.Errorf("Prune after the window = %+v; want step 5 abandoned and deleted with its chunks", res)
	}
	want := map[string]bool{}
	for _, step := range []int64{3, 4} {
		key := manifestKey(Target{Step: step, WorldSize: 1}, 0)
		want[key] = true
		m, err := readManifest(ctx, s, key)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range m.Files {
			for _, c := range f.Chunks {
				want[chunkKey(c.SHA256)] = true
			}
		}
	}
	got := storedKeys(t, s, "")
	if len(got) != len(want) {
		t.Errorf("store holds %d objects, want the %d of steps 3 and 4: %v", len(got), len(want), got)
	}
	for _, k := range got {
		if !want[k] {
			t.Errorf("store still holds %s, which no kept step uses", k)
		}
	}
}

// TestPruneDuringUpload runs Prune at the worst moment of an upload: every
// chunk is stored and the manifest is about to be written. The upload's
// snapshot must still restore, whether it reused stored chunks that prune
// now finds unreferenced, or had to Put stale ones again.
func TestPruneDuringUpload(t *testing.T) {
	tests := []struct {
		name      string
		age       time.Duration // age of the old chunks when the upload starts
		wantReuse bool
	}{
		{"fresh chunks are reused", window / 2, true},
		// Without the Put, prune's cutoff (start + age + window/8 - window)
		// would be past the chunks' time and delete them.
		{"stale chunks are put again", window - window/16, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			defer verifyNone(t)
			ctx := context.Background()
			clock := newFakeClock()
			inner := mem.New(mem.WithClock(clock.Now))
			old, other := sampleTree(1), sampleTree(2)
			upload(t, newUploader(inner, clock), 1, 0, 1, old)
			upload(t, newUploader(inner, clock), 2, 0, 1, other)
			clock.Advance(tt.age)

			var pruned *PruneResult
			f := &mem.FaultStore{Inner: inner}
			f.OnPut = func(ctx context.Context, key string, r io.Reader, size int64, opts storage.PutOptions) (storage.ObjectInfo, error) {
				if strings.HasPrefix(key, snapshotsPrefix) && pruned == nil {
					// Step 1 is pruned; its chunks are what step 3 is made of.
					clock.Advance(window / 8) // within the quarter window an upload may take
					var err error
					if pruned, err = Prune(ctx, inner, PruneOptions{Keep: 1, Clock: clock.Now}); err != nil {
						t.Errorf("Prune: %v", err)
					}
				}
				return inner.Put(ctx, key, r, size, opts)
			}
			u := newUploader(f, clock)
			u.SafetyWindow = window
			res := upload(t, u, 3, 0, 1, old)
			if reused := res.DedupedBytes == res.Bytes; reused != tt.wantReuse {
				t.Errorf("deduped %d of %d bytes; want reuse %v", res.DedupedBytes, res.Bytes, tt.wantReuse)
			}
			if pruned == nil || !slices.Equal(pruned.DeletedSteps, []int64{1}) {
				t.Fatalf("concurrent prune = %+v, want step 1 deleted", pruned)
			}
			dir := t.TempDir()
			if _, err := Restore(ctx, inner, 3, 0, dir, RestoreOptions{}); err != nil {
				t.Fatalf("Restore of the step uploaded during prune: %v", err)
			}
			checkTree(t, dir, old)

			// Long after, prune again: step 3 is the newest and keeps its chunks.
			clock.Advance(3 * window)
			if _, err := Prune(ctx, inner, PruneOptions{Keep: 1, Clock: clock.Now}); err != nil {
				t.Fatal(err)
			}
			if rep, err := Verify(ctx, inner, 3, VerifyOptions{ReadData: Subset{1, 1}}); err != nil || !rep.OK() {
				t.Errorf("Verify after the second prune = %+v, %v", rep, err)
			}
			if left := storedKeys(t, inner, snapshotsPrefix); len(left) != 1 {
				t.Errorf("manifests left %v, want step 3 only", left)
			}
		})
	}
}

// TestUploadTooSlowDoesNotCommit: an upload that outlives a quarter of the
// safety window may rely on chunks prune has since deleted; it must not
// commit.
func TestUploadTooSlowDoesNotCommit(t *testing.T) {
	defer verifyNone(t)
	clock := newFakeClock()
	inner := mem.New(mem.WithClock(clock.Now))
	f := &mem.FaultStore{Inner: inner}
	f.OnPut = func(ctx context.Context, key string, r io.Reader, size int64, opts storage.PutOptions) (storage.ObjectInfo, error) {
		clock.Advance(window / 16) // a slow link
		return inner.Put(ctx, key, r, size, opts)
	}
	dir := t.TempDir()
	writeTree(t, dir, sampleTree(1))
	if _, err := newUploader(f, clock).Upload(context.Background(), dir, Target{Step: 1, WorldSize: 1}); err == nil || !strings.Contains(err.Error(), "safety window") {
		t.Errorf("slow Upload = %v, want a safety window error", err)
	}
	if m := storedKeys(t, inner, snapshotsPrefix); len(m) != 0 {
		t.Errorf("slow upload committed %v", m)
	}
}

// TestPruneRevisions: a deleted step loses every revision; a kept step
// loses a superseded revision once a revision above it is older than the
// safety window, and its chunks then go by the unreferenced-chunk rule.
func TestPruneRevisions(t *testing.T) {
	defer verifyNone(t)
	ctx := context.Background()
	clock := newFakeClock()
	s := mem.New(mem.WithClock(clock.Now))
	u := newUploader(s, clock)
	upload(t, u, 1, 0, 1, sampleTree(51))
	upload(t, u, 1, 0, 1, sampleTree(52)) // step 1 revision 1
	upload(t, u, 2, 0, 1, sampleTree(53))
	r0 := upload(t, u, 3, 0, 1, sampleTree(54))
	r1 := upload(t, u, 3, 0, 1, sampleTree(55))
	clock.Advance(window / 2)
	newest := sampleTree(56)
	r2 := upload(t, u, 3, 0, 1, newest)
	clock.Advance(window/2 + time.Minute)
	firstChunk := func(r *UploadResult) string {
		for _, f := range r.Manifest.Files {
			if f.Path == "model.pdparams" {
				return chunkKey(f.Chunks[0].SHA256)
			}
		}
		t.Fatal("no model.pdparams")
		return ""
	}
	exists := func(key string) bool {
		_, err := s.Stat(ctx, key)
		return err == nil
	}

	opts := PruneOptions{Keep: 2, Clock: clock.Now}
	dryOpts := opts
	dryOpts.DryRun = true
	dry, err := Prune(ctx, s, dryOpts)
	if err != nil {
		t.Fatal(err)
	}
	// Revision 0 of step 3 goes: revision 1 above it is older than the
	// window. Revision 1 stays: revision 2, the only one above it, is not.
	res, err := Prune(ctx, s, opts)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(res.Kept, []int64{3, 2}) || !slices.Equal(res.DeletedSteps, []int64{1}) ||
		res.DeletedManifests != 3 || res.DeletedRevisions != 1 || res.DeletedChunks == 0 {
		t.Errorf("Prune = %+v", res)
	}
	if dry.DeletedManifests != res.DeletedManifests || dry.DeletedRevisions != res.DeletedRevisions || dry.DeletedChunks != res.DeletedChunks {
		t.Errorf("dry run %+v differs from the prune %+v", dry, res)
	}
	want := []string{manifestKey(Target{Step: 2, WorldSize: 1}, 0), manifestKey(Target{Step: 3, WorldSize: 1}, 1), manifestKey(Target{Step: 3, WorldSize: 1}, 2)}
	if got := storedKeys(t, s, snapshotsPrefix); !slices.Equal(got, want) {
		t.Errorf("manifests left %v, want %v", got, want)
	}
	if exists(firstChunk(r0)) || !exists(firstChunk(r1)) || !exists(firstChunk(r2)) {
		t.Errorf("chunks of revisions 0, 1, 2 present: %v %v %v; want false true true", exists(firstChunk(r0)), exists(firstChunk(r1)), exists(firstChunk(r2)))
	}
	out := t.TempDir()
	if rr, err := RestoreLatest(ctx, s, 0, out, RestoreOptions{}); err != nil || rr.Step != 3 || rr.Revision != 2 {
		t.Fatalf("RestoreLatest = %+v, %v", rr, err)
	}
	checkTree(t, out, newest)

	// Later, with more steps to keep than there are: no step goes, but
	// revision 1 of step 3 does now.
	clock.Advance(window)
	res, err = Prune(ctx, s, PruneOptions{Keep: 5, Clock: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.DeletedSteps) != 0 || res.DeletedRevisions != 1 || res.DeletedManifests != 1 || exists(firstChunk(r1)) || !exists(firstChunk(r2)) {
		t.Errorf("second Prune = %+v; revision 1's chunk present %v", res, exists(firstChunk(r1)))
	}
	if rep, err := Verify(ctx, s, 3, VerifyOptions{ReadData: Subset{1, 1}}); err != nil || !rep.OK() || rep.Revision != 2 {
		t.Errorf("Verify step 3 = %+v, %v", rep, err)
	}
}

// TestPruneListRetried: a listing that fails after delivering its keys,
// retried by the store, counts each key once: the young unreferenced
// chunks are counted once and the old ones deleted once.
func TestPruneListRetried(t *testing.T) {
	defer verifyNone(t)
	ctx := context.Background()
	clock := newFakeClock()
	inner := mem.New(mem.WithClock(clock.Now))
	upload(t, newUploader(inner, clock), 1, 0, 1, sampleTree(1))
	unreferenced := func(n int, seed byte) {
		for i := range n {
			b := []byte{seed, byte(i)}
			putBytes(t, inner, chunkKey(hashOf(b)), b)
		}
	}
	unreferenced(3, 1)
	clock.Advance(2 * window)
	unreferenced(2, 2)
	var lists atomic.Int64
	f := &mem.FaultStore{Inner: inner, OnList: func(ctx context.Context, prefix string, fn func(storage.ObjectInfo) error) error {
		if err := inner.List(ctx, prefix, fn); err != nil {
			return err
		}
		if lists.Add(1)%2 == 1 {
			return errFlaky // every listing fails once, after its last key
		}
		return nil
	}}
	res, err := Prune(ctx, retried(f), PruneOptions{Keep: 1, Clock: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	if res.YoungUnreferenced != 2 || res.DeletedChunks != 3 || !slices.Equal(res.Kept, []int64{1}) {
		t.Errorf("Prune = %+v; want step 1 kept, 3 old chunks deleted and 2 young ones counted", res)
	}
}

// TestPruneSweepsLeftovers: what killed uploads left under chunks/ and
// snapshots/ goes once it is older than the safety window, through the
// store's wrappers; younger leftovers (a live Put's) stay, a dry run only
// counts, a line-scoped prune sweeps too (leftovers belong to no line),
// and leftovers under other keys are not touched. A sweep that fails is
// logged and does not fail the prune.
func TestPruneSweepsLeftovers(t *testing.T) {
	defer verifyNone(t)
	ctx := context.Background()
	clock := newFakeClock()
	m := mem.New(mem.WithClock(clock.Now))
	s := retried(storage.Recover(storage.Limit(m, 1<<40))) // as the commands stack them
	u := newUploader(s, clock)
	upload(t, u, 1, 0, 1, sampleTree(1))
	m.Leave("chunks/aa/old", 100)
	m.Leave("snapshots/00000000000000000002/rank-00000-of-00001.json", 10)
	m.Leave("coord/stop", 5)
	clock.Advance(window + time.Second)
	m.Leave("chunks/bb/young", 1000)

	dry, err := Prune(ctx, s, PruneOptions{Keep: 1, Clock: clock.Now, DryRun: true})
	if err != nil {
		t.Fatal(err)
	}
	if dry.DeletedLeftovers != 2 || dry.DeletedLeftoverBytes != 110 || dry.YoungLeftovers != 1 || m.Leftovers() != 4 {
		t.Errorf("dry run: %d leftovers (%d bytes) deleted, %d young, %d left in the store; want 2 (110), 1, 4",
			dry.DeletedLeftovers, dry.DeletedLeftoverBytes, dry.YoungLeftovers, m.Leftovers())
	}
	res, err := Prune(ctx, s, PruneOptions{Keep: 1, Clock: clock.Now, Line: &LineScope{Line: "other", WorldSize: 1}})
	if err != nil {
		t.Fatal(err)
	}
	if res.DeletedLeftovers != 2 || res.DeletedLeftoverBytes != 110 || res.YoungLeftovers != 1 || m.Leftovers() != 2 {
		t.Errorf("prune: %d leftovers (%d bytes) deleted, %d young, %d left in the store; want 2 (110), 1, 2 (the young one and coord/'s)",
			res.DeletedLeftovers, res.DeletedLeftoverBytes, res.YoungLeftovers, m.Leftovers())
	}
	if rep, err := Verify(ctx, s, 1, VerifyOptions{}); err != nil || !rep.OK() {
		t.Errorf("step 1 after the sweep: %+v, %v", rep, err)
	}

	var logs strings.Builder
	failing := &mem.FaultStore{Inner: m, OnSweep: func(context.Context, string, func(storage.Leftover) (bool, error)) error {
		return errors.New("access denied")
	}}
	if _, err := Prune(ctx, failing, PruneOptions{Keep: 1, Clock: clock.Now, Log: slog.New(slog.NewTextHandler(&logs, nil))}); err != nil {
		t.Errorf("Prune with a failing sweep: %v", err)
	}
	if !strings.Contains(logs.String(), "checkpoint.prune_sweep_failed") {
		t.Errorf("a failed sweep was not logged:\n%s", logs.String())
	}
}
