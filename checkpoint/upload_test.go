package checkpoint

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/lifeboat-project/lifeboat/storage"
	"github.com/lifeboat-project/lifeboat/storage/mem"
)

func TestRoundTrip(t *testing.T) {
	defer verifyNone(t)
	stores(t, func(t *testing.T, s storage.Store) {
		ctx := context.Background()
		tr := sampleTree(1)
		res := upload(t, newUploader(s, nil), 100, 0, 1, tr)
		if res.Files != len(tr) || res.UploadedBytes != res.Bytes || res.DedupedBytes != 0 {
			t.Errorf("first upload: files %d uploaded %d deduped %d of %d bytes", res.Files, res.UploadedBytes, res.DedupedBytes, res.Bytes)
		}
		if res.Key != "snapshots/00000000000000000100/rank-00000-of-00001.json" {
			t.Errorf("manifest key %q", res.Key)
		}
		dir := t.TempDir()
		rr, err := Restore(ctx, s, 100, 0, dir, RestoreOptions{Workers: 3})
		if err != nil {
			t.Fatal(err)
		}
		checkTree(t, dir, tr)
		if rr.Bytes != res.Bytes || rr.Manifest.ID != res.Manifest.ID {
			t.Errorf("restore result %+v, upload %+v", rr, res)
		}
		fi, err := os.Stat(filepath.Join(dir, "model.pdparams"))
		if err != nil || fi.Mode().Perm() != 0o640 {
			t.Errorf("restored mode %v, %v; want 0640", fi.Mode(), err)
		}
		step, err := Latest(ctx, s, 1)
		if err != nil || step != 100 {
			t.Errorf("Latest = %d, %v; want 100", step, err)
		}
		rep, err := Verify(ctx, s, 100, VerifyOptions{ReadData: Subset{1, 1}})
		if err != nil || !rep.OK() || rep.ChunksRead != rep.Chunks || rep.Manifests != 1 {
			t.Errorf("Verify = %+v, %v", rep, err)
		}
	})
}

func TestUploadDedupe(t *testing.T) {
	defer verifyNone(t)
	stores(t, func(t *testing.T, s storage.Store) {
		u := newUploader(s, nil)
		tr := sampleTree(2)
		first := upload(t, u, 1, 0, 1, tr)

		same := upload(t, u, 2, 0, 1, tr)
		if float64(same.UploadedBytes) > 0.01*float64(same.Bytes) {
			t.Errorf("unchanged re-upload moved %d of %d bytes, want <= 1%%", same.UploadedBytes, same.Bytes)
		}
		if same.DedupedBytes+same.UploadedBytes != first.Bytes {
			t.Errorf("deduped %d + uploaded %d != %d", same.DedupedBytes, same.UploadedBytes, first.Bytes)
		}

		// Overwrite a contiguous, unaligned run of params in place, as a
		// LoRA or partially frozen model does.
		changed := 3 * testChunk
		params := bytes.Clone(tr["model.pdparams"])
		copy(params[5*testChunk+1000:], randomBytes(99, changed))
		tr["model.pdparams"] = params
		part := upload(t, u, 3, 0, 1, tr)
		if max := int64(changed + 2*testChunk); part.UploadedBytes > max {
			t.Errorf("in-place change of %d bytes moved %d, want <= %d", changed, part.UploadedBytes, max)
		}
		dir := t.TempDir()
		if _, err := Restore(context.Background(), s, 3, 0, dir, RestoreOptions{}); err != nil {
			t.Fatal(err)
		}
		checkTree(t, dir, tr)
	})
}

func TestUploadDuplicateChunksInOneSnapshot(t *testing.T) {
	defer verifyNone(t)
	s := mem.New()
	zeros := make([]byte, 10*testChunk)
	res := upload(t, newUploader(s, nil), 1, 0, 1, tree{"a": zeros, "b": zeros})
	if res.UploadedChunks != 1 || res.DedupedChunks != 19 {
		t.Errorf("uploaded %d deduped %d chunks; want 1 and 19", res.UploadedChunks, res.DedupedChunks)
	}
	dir := t.TempDir()
	if _, err := Restore(context.Background(), s, 1, 0, dir, RestoreOptions{}); err != nil {
		t.Fatal(err)
	}
	checkTree(t, dir, tree{"a": zeros, "b": zeros})
}

func TestUploadSkipsNonRegularFiles(t *testing.T) {
	defer verifyNone(t)
	s := mem.New()
	dir := t.TempDir()
	writeTree(t, dir, tree{"a": []byte("a")})
	if err := os.Symlink("a", filepath.Join(dir, "latest")); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, tempPrefix+"x"), 0o755); err != nil {
		t.Fatal(err)
	}
	writeTree(t, filepath.Join(dir, tempPrefix+"x"), tree{"junk": []byte("junk")})
	res, err := newUploader(s, nil).Upload(context.Background(), dir, Target{Step: 1, WorldSize: 1})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Manifest.Files) != 1 || res.Manifest.Files[0].Path != "a" || len(res.Skipped) != 1 || res.Skipped[0] != "latest" {
		t.Errorf("files %+v skipped %v; want only a, skipping latest", res.Manifest.Files, res.Skipped)
	}
}

func TestUploadInvalidArguments(t *testing.T) {
	s := mem.New()
	tests := []struct {
		name    string
		u       *Uploader
		step    int64
		rank, n int
	}{
		{"no store", &Uploader{}, 1, 0, 1},
		{"negative step", &Uploader{Store: s}, -1, 0, 1},
		{"rank out of range", &Uploader{Store: s}, 1, 1, 1},
		{"zero world", &Uploader{Store: s}, 1, 0, 0},
		{"huge chunks", &Uploader{Store: s, ChunkSize: MaxChunkSize + 1}, 1, 0, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := tt.u.Upload(context.Background(), t.TempDir(), Target{Step: tt.step, Rank: tt.rank, WorldSize: tt.n}); err == nil {
				t.Error("Upload succeeded")
			}
		})
	}
}

func TestMultiRank(t *testing.T) {
	defer verifyNone(t)
	stores(t, func(t *testing.T, s storage.Store) {
		ctx := context.Background()
		u := newUploader(s, nil)
		trees := map[[2]int]tree{}
		for step := 1; step <= 2; step++ {
			for rank := range 3 {
				if step == 2 && rank == 1 {
					continue // rank 1 was preempted before it committed step 2
				}
				tr := sampleTree(uint64(10*step + rank))
				trees[[2]int{step, rank}] = tr
				upload(t, u, int64(step), rank, 3, tr)
			}
		}
		if step, err := Latest(ctx, s, 3); err != nil || step != 1 {
			t.Errorf("Latest(3) = %d, %v; want 1", step, err)
		}
		if _, err := Latest(ctx, s, 2); !errors.Is(err, ErrNoCheckpoint) {
			t.Errorf("Latest(2) = %v, want ErrNoCheckpoint", err)
		}
		snaps, err := List(ctx, s)
		if err != nil {
			t.Fatal(err)
		}
		if len(snaps) != 2 || !snaps[0].Complete || snaps[1].Complete || len(snaps[1].Ranks) != 2 ||
			snaps[1].Ranks[0].Rank != 0 || snaps[1].Ranks[1].Rank != 2 || snaps[0].Bytes == 0 {
			t.Errorf("List = %+v", snaps)
		}
		for rank := range 3 {
			dir := t.TempDir()
			res, err := RestoreLatest(ctx, s, rank, dir, RestoreOptions{WorldSize: 3})
			if err != nil || res.Step != 1 || len(res.Fallbacks) != 0 {
				t.Fatalf("RestoreLatest rank %d = %+v, %v; want step 1", rank, res, err)
			}
			checkTree(t, dir, trees[[2]int{1, rank}])
		}
		rep, err := Verify(ctx, s, 2, VerifyOptions{})
		if err != nil || len(rep.Problems) != 1 || rep.Problems[0].Kind != MissingManifest {
			t.Errorf("Verify step 2 = %+v, %v; want one missing manifest", rep, err)
		}
	})
}

// TestUploadFiles stores one checkpoint among others with the paths it has
// in the trainer's directory, and a restore puts it back there.
func TestUploadFiles(t *testing.T) {
	defer verifyNone(t)
	stores(t, func(t *testing.T, s storage.Store) {
		ctx := context.Background()
		src := t.TempDir()
		writeTree(t, src, tree{
			"step-1/model.pdparams": pickleOf(randomBytes(1, 1000)),
			"step-2/model.pdparams": pickleOf(randomBytes(2, 3000)),
			"step-2/opt.pdopt":      pickleOf(randomBytes(3, 10)),
			"notes.txt":             []byte("not part of it"),
		})
		u := newUploader(s, nil)
		res, err := u.UploadFiles(ctx, src, []string{"step-2/opt.pdopt", "step-2/model.pdparams", "step-2/opt.pdopt"}, Target{Step: 2, WorldSize: 1})
		if err != nil {
			t.Fatal(err)
		}
		if res.Files != 2 || res.Bytes != 3010+2*12 {
			t.Errorf("uploaded %d files, %d bytes; want 2, %d", res.Files, res.Bytes, 3010+2*12)
		}
		dst := t.TempDir()
		if _, err := Restore(ctx, s, 2, 0, dst, RestoreOptions{}); err != nil {
			t.Fatal(err)
		}
		checkTree(t, dst, tree{"step-2/model.pdparams": pickleOf(randomBytes(2, 3000)), "step-2/opt.pdopt": pickleOf(randomBytes(3, 10))})

		for _, bad := range [][]string{nil, {"../escape"}, {"/abs"}, {"step-9/missing"}} {
			if _, err := u.UploadFiles(ctx, src, bad, Target{Step: 3, WorldSize: 1}); err == nil {
				t.Errorf("UploadFiles(%q) succeeded", bad)
			}
		}
		if _, err := Latest(ctx, s, 1); err != nil {
			t.Fatal(err)
		}
		if step, _ := Latest(ctx, s, 1); step != 2 {
			t.Errorf("a rejected upload committed step %d", step)
		}
	})
}

// TestUnchangedFilesAreNotReadAgain: a second upload of unchanged files by
// the same Uploader reuses their chunks without reading them; a file
// rewritten with the same size and its old modification time is read
// again (its change time moved), and its new bytes are what is stored.
func TestUnchangedFilesAreNotReadAgain(t *testing.T) {
	defer verifyNone(t)
	ctx := context.Background()
	s := mem.New()
	dir := t.TempDir()
	tr := sampleTree(7)
	writeTree(t, dir, tr)
	u := newUploader(s, nil)
	first, err := u.Upload(ctx, dir, Target{Step: 1, WorldSize: 1})
	if err != nil {
		t.Fatal(err)
	}
	if first.ReusedFiles != 0 {
		t.Errorf("first upload reused %d files", first.ReusedFiles)
	}
	second, err := u.Upload(ctx, dir, Target{Step: 2, WorldSize: 1})
	if err != nil {
		t.Fatal(err)
	}
	if second.ReusedFiles != len(tr) || second.UploadedBytes != 0 || second.DedupedBytes != second.Bytes {
		t.Errorf("unchanged re-upload: reused %d of %d files, uploaded %d, deduped %d of %d bytes",
			second.ReusedFiles, len(tr), second.UploadedBytes, second.DedupedBytes, second.Bytes)
	}

	// Same size, same mtime, new bytes.
	p := filepath.Join(dir, "model.pdparams")
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	changed := bytes.Clone(tr["model.pdparams"])
	changed[len(changed)/2] ^= 0xff
	if err := os.WriteFile(p, changed, 0o640); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(p, fi.ModTime(), fi.ModTime()); err != nil {
		t.Fatal(err)
	}
	third, err := u.Upload(ctx, dir, Target{Step: 3, WorldSize: 1})
	if err != nil {
		t.Fatal(err)
	}
	if third.ReusedFiles != len(tr)-1 || third.UploadedBytes == 0 {
		t.Errorf("after a same-size rewrite: reused %d files (want %d), uploaded %d bytes", third.ReusedFiles, len(tr)-1, third.UploadedBytes)
	}
	out := t.TempDir()
	if _, err := Restore(ctx, s, 3, 0, out, RestoreOptions{}); err != nil {
		t.Fatal(err)
	}
	tr["model.pdparams"] = changed
	checkTree(t, out, tr)

	// A fresh Uploader (a new process) reads everything again.
	fresh, err := newUploader(s, nil).Upload(ctx, dir, Target{Step: 4, WorldSize: 1})
	if err != nil || fresh.ReusedFiles != 0 || fresh.UploadedBytes != 0 {
		t.Errorf("fresh uploader: %+v, %v; want every file read and deduped", fresh, err)
	}
}

// TestChunksCarryTheirCRC32C checks that every chunk Put carries, with its
// SHA-256, the CRC32C of the same bytes, for the store to check the
// transfer against.
func TestChunksCarryTheirCRC32C(t *testing.T) {
	defer verifyNone(t)
	var mu sync.Mutex
	chunks := 0
	s := &mem.FaultStore{Inner: mem.New()}
	s.OnPut = func(ctx context.Context, key string, r io.Reader, size int64, opts storage.PutOptions) (storage.ObjectInfo, error) {
		if !strings.HasPrefix(key, "chunks/") {
			return s.Inner.Put(ctx, key, r, size, opts)
		}
		b, err := io.ReadAll(r)
		if err != nil {
			return storage.ObjectInfo{}, err
		}
		if sum := sha256.Sum256(b); opts.SHA256 != hex.EncodeToString(sum[:]) || opts.CRC32C != crc32.Checksum(b, storage.CRC32CTable) {
			t.Errorf("Put %s with SHA256 %s CRC32C %08x; the bytes have %x %08x", key, opts.SHA256, opts.CRC32C, sum, crc32.Checksum(b, storage.CRC32CTable))
		}
		mu.Lock()
		chunks++
		mu.Unlock()
		return s.Inner.Put(ctx, key, bytes.NewReader(b), size, opts)
	}
	upload(t, newUploader(s, nil), 1, 0, 1, sampleTree(3))
	if chunks == 0 {
		t.Fatal("no chunk was Put")
	}
}

// TestManifestsRecordEachChunksCRC32C: every chunk of a manifest records
// the CRC32C of its bytes, however the upload came by the chunk: read and
// Put, found stored already (another uploader's), or taken unread from a
// file this uploader committed before. (A streamed chunk's:
// TestStreamRewrittenRegionIsSentAgain.)
func TestManifestsRecordEachChunksCRC32C(t *testing.T) {
	defer verifyNone(t)
	stores(t, func(t *testing.T, s storage.Store) {
		ctx := context.Background()
		dir := t.TempDir()
		tr := sampleTree(8)
		writeTree(t, dir, tr)
		u := newUploader(s, nil)
		for step, up := range map[int64]*Uploader{1: u, 2: u, 3: newUploader(s, nil)} {
			res, err := up.Upload(ctx, dir, Target{Step: step, WorldSize: 1})
			if err != nil {
				t.Fatal(err)
			}
			m, err := DecodeManifest(getBytes(t, s, res.Key))
			if err != nil {
				t.Fatal(err)
			}
			checkRecordedCRC32Cs(t, m, tr)
		}
	})
}

// checkRecordedCRC32Cs fails unless every chunk of m records the CRC32C of
// its bytes in tr.
func checkRecordedCRC32Cs(t *testing.T, m *Manifest, tr tree) {
	t.Helper()
	for _, f := range m.Files {
		b := tr[f.Path]
		for _, c := range f.Chunks {
			if want := crc32cHex(crc32.Checksum(b[:c.Size], storage.CRC32CTable)); c.CRC32C != want {
				t.Errorf("step %d %s: chunk %s records CRC32C %q, its bytes have %s", m.Step, f.Path, c.SHA256[:12], c.CRC32C, want)
			}
			b = b[c.Size:]
		}
	}
}

// TestSameFilesAsAManifestWithoutCRC32Cs: files committed by a lifeboat
// that recorded no CRC32Cs, uploaded again unchanged (the step a pod
// restored, after an upgrade), are already committed: a CRC32C one
// manifest lacks does not make the bytes another revision.
func TestSameFilesAsAManifestWithoutCRC32Cs(t *testing.T) {
	defer verifyNone(t)
	stores(t, func(t *testing.T, s storage.Store) {
		tr := sampleTree(10)
		first := upload(t, newUploader(s, nil), 1, 0, 1, tr)
		rewriteManifest(t, s, first, withoutCRC32C)
		again := upload(t, newUploader(s, nil), 1, 0, 1, tr)
		if !again.AlreadyCommitted || again.Revision != 0 || again.Key != first.Key {
			t.Errorf("upload of the same files: already committed %v, revision %d, key %s; want the committed %s",
				again.AlreadyCommitted, again.Revision, again.Key, first.Key)
		}
	})
}
