package checkpoint

import (
	"context"
	"fmt"
	"io"
	"maps"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lifeboat-project/lifeboat/storage"
	"github.com/lifeboat-project/lifeboat/storage/mem"
)

// countingStore counts Lists of chunks/ and Puts of chunks.
type countingStore struct {
	*mem.FaultStore
	mu         sync.Mutex
	lists      int
	chunkPuts  int
	chunkBytes int64
}

func newCountingStore() *countingStore {
	inner := mem.New()
	c := &countingStore{FaultStore: &mem.FaultStore{Inner: inner}}
	c.OnList = func(ctx context.Context, prefix string, fn func(storage.ObjectInfo) error) error {
		if strings.HasPrefix(prefix, chunksPrefix) {
			c.mu.Lock()
			c.lists++
			c.mu.Unlock()
		}
		return inner.List(ctx, prefix, fn)
	}
	c.OnPut = func(ctx context.Context, key string, r io.Reader, size int64, opts storage.PutOptions) (storage.ObjectInfo, error) {
		if strings.HasPrefix(key, chunksPrefix) {
			c.mu.Lock()
			c.chunkPuts++
			c.chunkBytes += size
			c.mu.Unlock()
		}
		return inner.Put(ctx, key, r, size, opts)
	}
	return c
}

func (c *countingStore) counts() (lists, puts int, bytes int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lists, c.chunkPuts, c.chunkBytes
}

// finalUpload writes tr into a new directory and stores it with
// UploadFiles, as the final upload after a stop does.
func finalUpload(t *testing.T, u *Uploader, step int64, tr tree) *UploadResult {
	t.Helper()
	dir := t.TempDir()
	writeTree(t, dir, tr)
	var paths []string
	for p := range tr {
		paths = append(paths, p)
	}
	res, err := u.UploadFiles(context.Background(), dir, paths, Target{Step: step, WorldSize: 1})
	if err != nil {
		t.Fatalf("final upload of step %d: %v", step, err)
	}
	return res
}

// TestFinalUploadDoesNotList: after an upload has listed the store, the
// final upload decides from what the Uploader knows, without listing; it
// still stores only the chunks the store lacks, and restores whole.
func TestFinalUploadDoesNotList(t *testing.T) {
	defer verifyNone(t)
	s := newCountingStore()
	u := newUploader(s, nil)
	first := sampleTree(1)
	upload(t, u, 1, 0, 1, first)
	if lists, _, _ := s.counts(); lists != 1 {
		t.Fatalf("the first upload listed chunks %d times, want 1", lists)
	}
	second := sampleTree(2)
	second["model.pdopt"] = first["model.pdopt"] // frozen: its chunks are stored
	_, putsBefore, bytesBefore := s.counts()
	res := finalUpload(t, u, 2, second)
	lists, puts, bytes := s.counts()
	if lists != 1 {
		t.Errorf("the final upload listed the store's chunks (%d lists in all, want 1)", lists)
	}
	// meta/trainer.json is the same in both trees too.
	if want := int64(len(second["model.pdparams"]) + len(second["rng/rank_state.bin"])); bytes-bytesBefore != want || res.UploadedBytes != want {
		t.Errorf("the final upload stored %d bytes (result says %d), want only the %d new ones", bytes-bytesBefore, res.UploadedBytes, want)
	}
	if puts == putsBefore {
		t.Error("the final upload stored no chunk")
	}
	dir := t.TempDir()
	if _, err := Restore(context.Background(), s, 2, 0, dir, RestoreOptions{}); err != nil {
		t.Fatal(err)
	}
	checkTree(t, dir, second)

	// A third, final again: chunks the Uploader stored in the second are
	// known without a listing too.
	third := maps.Clone(second)
	third["meta/trainer.json"] = []byte(`{"step": 3}`)
	res = finalUpload(t, u, 3, third)
	if lists, _, _ := s.counts(); lists != 1 {
		t.Errorf("%d lists after two final uploads, want 1", lists)
	}
	if res.UploadedBytes != int64(len(third["meta/trainer.json"])) {
		t.Errorf("third upload stored %d bytes, want %d (only the changed file)", res.UploadedBytes, len(third["meta/trainer.json"]))
	}
}

// TestFinalUploadListsFirst: an Uploader that never listed lists once, so
// a final upload right after a restore still deduplicates.
func TestFinalUploadListsFirst(t *testing.T) {
	defer verifyNone(t)
	s := newCountingStore()
	tr := sampleTree(3)
	upload(t, newUploader(s, nil), 1, 0, 1, tr)
	u := newUploader(s, nil) // a new process: knows nothing yet
	res := finalUpload(t, u, 2, tr)
	if lists, _, _ := s.counts(); lists != 2 {
		t.Errorf("%d chunk listings, want 2 (one per Uploader)", lists)
	}
	if res.UploadedBytes != 0 {
		t.Errorf("final upload of an unchanged tree stored %d bytes, want 0", res.UploadedBytes)
	}
}

// TestFinalUploadKeepsTheAgeRule: a chunk the Uploader knows but that is
// too old to be safe from Prune by the time the upload commits is Put
// again, listing or not.
func TestFinalUploadKeepsTheAgeRule(t *testing.T) {
	defer verifyNone(t)
	s := newCountingStore()
	clock := newFakeClock()
	u := newUploader(s, clock)
	tr := sampleTree(4)
	upload(t, u, 1, 0, 1, tr)
	clock.Advance(DefaultSafetyWindow * 3 / 4) // still young enough: age == reuse limit
	res := finalUpload(t, u, 2, tr)
	if res.UploadedBytes != 0 {
		t.Fatalf("chunks at the reuse limit were stored again (%d bytes)", res.UploadedBytes)
	}
	clock.Advance(time.Second)
	res = finalUpload(t, u, 3, tr)
	var total int64
	for _, b := range tr {
		total += int64(len(b))
	}
	if res.UploadedBytes != total {
		t.Errorf("chunks past the reuse limit: %d bytes stored again, want all %d", res.UploadedBytes, total)
	}
	if lists, _, _ := s.counts(); lists != 1 {
		t.Errorf("%d chunk listings, want 1", lists)
	}
	// Stored again, they are young: the next final upload reuses them.
	if res := finalUpload(t, u, 4, tr); res.UploadedBytes != 0 {
		t.Errorf("after they were stored again, %d bytes stored once more, want 0", res.UploadedBytes)
	}
}

// TestUploadsListOnce: an Uploader lists the store's chunks once, at its
// first upload, however many uploads follow and however many chunks other
// writers store: a commit costs requests for its own chunks only. A chunk
// another writer stored since is Put again, and every snapshot restores
// whole. On the code before, every background upload listed chunks/ (one
// page per 1,000 chunks the store holds).
func TestUploadsListOnce(t *testing.T) {
	defer verifyNone(t)
	s := newCountingStore()
	for i := range 3000 { // other ranks' chunks
		putBytes(t, s, chunkKey(fmt.Sprintf("%064x", i)), []byte{byte(i)})
	}
	u := newUploader(s, nil)
	other := newUploader(s, nil)
	trees := []tree{sampleTree(11), sampleTree(12), sampleTree(13)}
	trees[2]["model.pdopt"] = trees[1]["model.pdopt"] // frozen since step 2
	for i, tr := range trees {
		step := int64(i + 1)
		if i == 2 {
			// Another writer stores the new params first.
			upload(t, other, 100, 0, 1, tree{"model.pdparams": tr["model.pdparams"]})
		}
		_, _, before := s.counts()
		res := upload(t, u, step, 0, 1, tr)
		_, _, after := s.counts()
		if i == 2 {
			if want := int64(len(tr["model.pdparams"]) + len(tr["rng/rank_state.bin"])); res.UploadedBytes != want || after-before != want {
				t.Errorf("step 3 stored %d bytes (result %d), want %d: the params another writer stored again, the frozen optimizer reused", after-before, res.UploadedBytes, want)
			}
		}
	}
	if lists, _, _ := s.counts(); lists != 2 {
		t.Errorf("%d listings of chunks/ for four uploads by two Uploaders, want 2 (one each)", lists)
	}
	for i, tr := range trees {
		dir := t.TempDir()
		if _, err := Restore(context.Background(), s, int64(i+1), 0, dir, RestoreOptions{}); err != nil {
			t.Fatal(err)
		}
		checkTree(t, dir, tr)
	}
}
