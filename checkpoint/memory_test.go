package checkpoint

import (
	"bytes"
	"context"
	"errors"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lifeboat-project/lifeboat/storage/mem"
)

// keepNoManifest makes every manifest be read again where its files or
// chunks are needed, as a store of large manifests has them (keptBudget).
func keepNoManifest(t *testing.T) {
	t.Helper()
	old := keptBudget
	keptBudget = 0
	t.Cleanup(func() { keptBudget = old })
}

// TestManifestsReadAgain: with no manifest kept decoded after choosing,
// RestoreLatest restores the newest step, ListChecked counts a step's
// missing chunk, and Prune keeps the newest step and deletes the older
// one and its chunks, as with every manifest kept: each reads the
// manifests it needs whole again.
func TestManifestsReadAgain(t *testing.T) {
	keepNoManifest(t)
	ctx := context.Background()
	s := mem.New()
	clock := newFakeClock()
	u := newUploader(s, clock)
	upload(t, u, 1, 0, 1, sampleTree(1))
	clock.Advance(time.Minute)
	upload(t, u, 2, 0, 1, sampleTree(2))

	dir := t.TempDir()
	res, err := RestoreLatest(ctx, s, 0, dir, RestoreOptions{})
	if err != nil || res.Step != 2 || len(res.Fallbacks) != 0 {
		t.Fatalf("RestoreLatest = step %d, fallbacks %v, %v; want step 2", res.Step, res.Fallbacks, err)
	}
	checkTree(t, dir, sampleTree(2))

	m1, err := readManifest(ctx, s, manifestKey(Target{Step: 1, WorldSize: 1}, 0))
	if err != nil {
		t.Fatal(err)
	}
	var only1 string // a chunk of step 1's model: step 2's has other bytes
	for _, f := range m1.Files {
		if f.Path == "model.pdparams" {
			only1 = f.Chunks[0].SHA256
		}
	}
	if err := s.Delete(ctx, chunkKey(only1)); err != nil {
		t.Fatal(err)
	}
	snaps, err := ListChecked(ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	if len(snaps) != 2 || snaps[0].MissingChunks != 1 || snaps[1].MissingChunks != 0 || !snaps[1].Restorable() {
		t.Fatalf("ListChecked = %+v; want step 1 missing one chunk, step 2 restorable", snaps)
	}

	later := func() time.Time { return time.Now().Add(2 * DefaultSafetyWindow) } // the store's times are real
	pr, err := Prune(ctx, s, PruneOptions{Keep: 1, Clock: later})
	if err != nil {
		t.Fatal(err)
	}
	if len(pr.Kept) != 1 || pr.Kept[0] != 2 || len(pr.DeletedSteps) != 1 || pr.DeletedSteps[0] != 1 || pr.DeletedChunks == 0 {
		t.Fatalf("Prune = %+v; want step 2 kept, step 1 and its chunks deleted", pr)
	}
	dir = t.TempDir()
	if res, err := RestoreLatest(ctx, s, 0, dir, RestoreOptions{}); err != nil || res.Step != 2 {
		t.Fatalf("RestoreLatest after the prune = %v; want step 2", err)
	}
	checkTree(t, dir, sampleTree(2))
}

// TestManifestChangedSinceChosen: a manifest that, read again to restore
// its step, is no longer the one chosen (another id under its key: a store
// that let it be overwritten) makes the step corrupt, and RestoreLatest
// falls back to the older step.
func TestManifestChangedSinceChosen(t *testing.T) {
	keepNoManifest(t)
	ctx := context.Background()
	inner := mem.New()
	clock := newFakeClock()
	u := newUploader(inner, clock)
	upload(t, u, 1, 0, 1, sampleTree(1))
	clock.Advance(time.Minute)
	upload(t, u, 2, 0, 1, sampleTree(2))
	dropRecords(t, inner) // a recorded step's manifest is read once: read them in full

	key := manifestKey(Target{Step: 2, WorldSize: 1}, 0)
	m, err := readManifest(ctx, inner, key)
	if err != nil {
		t.Fatal(err)
	}
	m.ID = "00000000000000ff"
	other, err := m.Encode()
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	gets := 0
	s := &mem.FaultStore{Inner: inner, OnGet: func(ctx context.Context, k string, offset, length int64) (io.ReadCloser, error) {
		if k == key {
			mu.Lock()
			gets++
			n := gets
			mu.Unlock()
			if n > 1 {
				return io.NopCloser(bytes.NewReader(other)), nil
			}
		}
		return inner.Get(ctx, k, offset, length)
	}}
	dir := t.TempDir()
	res, err := RestoreLatest(ctx, s, 0, dir, RestoreOptions{})
	if err != nil || res.Step != 1 {
		t.Fatalf("RestoreLatest = %v; want step 1", err)
	}
	if len(res.Fallbacks) != 1 || res.Fallbacks[0].Step != 2 || !errors.Is(res.Fallbacks[0].Err, ErrCorrupt) ||
		!strings.Contains(res.Fallbacks[0].Err.Error(), "changed since it was read") {
		t.Fatalf("fallbacks %v; want step 2, its manifest changed since it was read", res.Fallbacks)
	}
	checkTree(t, dir, sampleTree(1))
}
