package checkpoint

import (
	"bytes"
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

// streaming runs u.Stream over dir for the one file rel, polling every
// millisecond, until stop() is called; stored receives the offset of each
// chunk it stored.
func streaming(t *testing.T, u *Uploader, dir, rel string) (stored chan int64, stop func() StreamResult) {
	t.Helper()
	stored = make(chan int64, 1024)
	quit := make(chan struct{})
	done := make(chan StreamResult, 1)
	go func() {
		done <- u.Stream(context.Background(), dir, quit, StreamOptions{
			Find: func() []string { return []string{rel} }, Poll: time.Millisecond, Rescan: time.Millisecond,
			Stored: func(_ string, off int64) { stored <- off },
		})
	}()
	return stored, func() StreamResult { close(quit); return <-done }
}

// awaitStored waits until the stream has stored the chunks at each of offs.
func awaitStored(t *testing.T, stored <-chan int64, offs ...int64) {
	t.Helper()
	want := map[int64]bool{}
	for _, o := range offs {
		want[o] = true
	}
	for len(want) > 0 {
		select {
		case o := <-stored:
			delete(want, o)
		case <-time.After(time.Minute):
			t.Fatalf("the stream did not store the chunks at %v", slices.Collect(func(yield func(int64) bool) {
				for o := range want {
					if !yield(o) {
						return
					}
				}
			}))
		}
	}
}

// A region the trainer rewrites after the stream stored its chunk is read,
// hashed and stored again by the final upload: the commit holds the bytes
// on disk at the end, and only the chunks whose bytes are unchanged are
// taken from the stream.
func TestStreamRewrittenRegionIsSentAgain(t *testing.T) {
	defer verifyNone(t)
	stores(t, func(t *testing.T, s storage.Store) {
		ctx := context.Background()
		dir := t.TempDir()
		u := newUploader(s, nil)
		final := pickleOf(randomBytes(29, 6*testChunk+100)) // 7 chunks, the last partial
		first := slices.Clone(final)
		copy(first[testChunk+10:testChunk+4010], randomBytes(30, 4000)) // what chunk 1 held when read
		f, err := os.Create(filepath.Join(dir, "model.pdparams"))
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		stored, stop := streaming(t, u, dir, "model.pdparams")
		if _, err := f.Write(first[:3*testChunk]); err != nil {
			t.Fatal(err)
		}
		awaitStored(t, stored, 0, testChunk, 2*testChunk)
		// The writer goes back and rewrites part of chunk 1, then writes on.
		if _, err := f.WriteAt(final[testChunk+10:testChunk+4010], testChunk+10); err != nil {
			t.Fatal(err)
		}
		if _, err := f.Write(final[3*testChunk:]); err != nil {
			t.Fatal(err)
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
		awaitStored(t, stored, 3*testChunk, 4*testChunk, 5*testChunk)
		sres := stop()
		if sres.Err != nil || sres.Chunks != 6 || sres.UploadedChunks != 6 {
			t.Fatalf("stream: %+v; want 6 chunks stored, no error", sres)
		}

		res, err := u.UploadFiles(ctx, dir, []string{"model.pdparams"}, Target{Step: 7, WorldSize: 1})
		if err != nil {
			t.Fatal(err)
		}
		// Chunks 0 and 2-5 as streamed; chunk 1 (rewritten) and the partial
		// chunk 6 (never streamed) hashed and Put by the upload.
		if res.StreamedChunks != 5 || res.StreamedBytes != 5*testChunk || res.UploadedChunks != 2 {
			t.Errorf("upload: streamed %d chunks (%d bytes), uploaded %d; want 5 (%d bytes) and 2",
				res.StreamedChunks, res.StreamedBytes, res.UploadedChunks, 5*testChunk)
		}
		checkRecordedCRC32Cs(t, res.Manifest, tree{"model.pdparams": final})
		out := t.TempDir()
		if _, err := Restore(ctx, s, 7, 0, out, RestoreOptions{Workers: 3}); err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(filepath.Join(out, "model.pdparams"))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, final) {
			t.Errorf("restored file differs from what the trainer wrote last (equal to its first bytes: %v)", bytes.Equal(got, first))
		}
	})
}

// The chunks a stream stored of a save that is cut short are stored, but
// nothing commits them: the upload refuses the torn file, and no manifest
// names them.
func TestStreamTornSaveNeverCommitted(t *testing.T) {
	defer verifyNone(t)
	stores(t, func(t *testing.T, s storage.Store) {
		ctx := context.Background()
		dir := t.TempDir()
		u := newUploader(s, nil)
		whole := pickleOf(randomBytes(31, 6*testChunk))
		f, err := os.Create(filepath.Join(dir, "model.pdparams"))
		if err != nil {
			t.Fatal(err)
		}
		stored, stop := streaming(t, u, dir, "model.pdparams")
		if _, err := f.Write(whole[:3*testChunk+500]); err != nil {
			t.Fatal(err)
		}
		awaitStored(t, stored, 0, testChunk, 2*testChunk)
		f.Close() // the writer dies here: the save is cut short
		if sres := stop(); sres.Chunks != 3 {
			t.Fatalf("stream: %+v; want 3 chunks", sres)
		}
		_, err = u.UploadFiles(ctx, dir, []string{"model.pdparams"}, Target{Step: 8, WorldSize: 1})
		if !errors.Is(err, ErrInterrupted) {
			t.Fatalf("upload of the torn save: %v; want ErrInterrupted", err)
		}
		if keys := storedKeys(t, s, snapshotsPrefix); len(keys) != 0 {
			t.Errorf("manifests stored for a torn save: %v", keys)
		}
		// The 3 the stream stored, and the upload's reading pass may have
		// Put the last partial chunk before the format check at its end
		// refused the file, as any upload of a torn file may: all are left
		// to prune.
		if keys := storedKeys(t, s, chunksPrefix); len(keys) < 3 {
			t.Errorf("chunks stored: %d, want at least the 3 the stream stored (left to prune)", len(keys))
		}
		if _, err := Latest(ctx, s, 1); !errors.Is(err, ErrNoCheckpoint) {
			t.Errorf("Latest after a torn save: %v; want ErrNoCheckpoint", err)
		}
	})
}

// A stream and the final upload after it share the Uploader's Buffers:
// the upload reads with the buffers the stream used, so the chunks in
// memory, and the buffers ever made, stay within Buffers. With a set of
// buffers per stream and per upload, a stop made twice as many, and
// lifeboat's peak memory at a stop doubled (bench/checkpoint.sh).
func TestStreamAndUploadShareBuffers(t *testing.T) {
	defer verifyNone(t)
	ctx := context.Background()
	dir := t.TempDir()
	u := newUploader(mem.New(), nil) // Buffers 4
	save := pickleOf(randomBytes(31, 12*testChunk+100))
	f, err := os.Create(filepath.Join(dir, "model.pdparams"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	stored, stop := streaming(t, u, dir, "model.pdparams")
	if _, err := f.Write(save); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	offs := make([]int64, 12)
	for i := range offs {
		offs[i] = int64(i) * testChunk
	}
	awaitStored(t, stored, offs...)
	if sres := stop(); sres.Err != nil || sres.Chunks != 12 {
		t.Fatalf("stream: %+v; want 12 chunks stored, no error", sres)
	}
	streamMade := u.bufs.allocated.Load()
	res, err := u.UploadFiles(ctx, dir, []string{"model.pdparams"}, Target{Step: 1, WorldSize: 1})
	if err != nil {
		t.Fatal(err)
	}
	if res.StreamedChunks != 12 {
		t.Errorf("upload took %d chunks from the stream, want 12", res.StreamedChunks)
	}
	// A second, unrelated upload of 13 new chunks reads through the same
	// buffers too.
	upload(t, u, 2, 0, 1, tree{"other.pdparams": pickleOf(randomBytes(32, 12*testChunk+100))})
	if made := u.bufs.allocated.Load(); made > int64(u.Buffers) {
		t.Errorf("%d chunk buffers made (%d by the stream), want at most Buffers = %d: the upload did not reuse the stream's",
			made, streamMade, u.Buffers)
	}
}
