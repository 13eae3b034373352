package checkpoint

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"maps"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/lifeboat-project/lifeboat/storage"
	"github.com/lifeboat-project/lifeboat/storage/mem"
)

// storeHolds reports whether any chunk in s holds the bytes of b's first
// chunk (of the test chunk size).
func storeHolds(t *testing.T, s storage.Store, b []byte) bool {
	t.Helper()
	return slices.Contains(storedKeys(t, s, chunksPrefix), chunkKey(hashOf(b[:min(len(b), testChunk)])))
}

// TestFileSwappedDuringUpload replaces a checkpoint file between its stat
// and its open. What took its place is never followed or read: a symlink
// or FIFO fails the upload with ErrChanged and commits nothing; another
// regular file is read from its start and committed whole.
func TestFileSwappedDuringUpload(t *testing.T) {
	secret := pickleOf(randomBytes(61, 3*testChunk)) // a whole pickle: only the swap may stop it
	tests := []struct {
		name string
		rel  string // the file swapped
		swap func(dir, rel, outside string) error
		// want: nil for a commit of the new file, else the error
		want error
	}{
		{"symlink to a file outside", "model.pdparams", func(dir, rel, outside string) error {
			p := filepath.Join(dir, rel)
			return errors.Join(os.Remove(p), os.Symlink(filepath.Join(outside, "model.pdparams"), p))
		}, ErrChanged},
		{"directory above replaced by a symlink", "step-1/model.pdparams", func(dir, rel, outside string) error {
			return errors.Join(os.Rename(filepath.Join(dir, "step-1"), filepath.Join(dir, "old")),
				os.Symlink(outside, filepath.Join(dir, "step-1")))
		}, ErrChanged},
		{"FIFO", "model.pdparams", func(dir, rel, outside string) error {
			p := filepath.Join(dir, rel)
			return errors.Join(os.Remove(p), unix.Mkfifo(p, 0o600))
		}, ErrChanged},
		{"another regular file renamed over it", "model.pdparams", func(dir, rel, outside string) error {
			tmp := filepath.Join(dir, "new.tmp")
			return errors.Join(os.WriteFile(tmp, secret, 0o600), os.Rename(tmp, filepath.Join(dir, rel)))
		}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			defer verifyNone(t)
			ctx := context.Background()
			s := mem.New()
			outside := t.TempDir()
			writeTree(t, outside, tree{"model.pdparams": secret})
			mustDo(t, os.Chmod(filepath.Join(outside, "model.pdparams"), 0o600))
			dir := t.TempDir()
			tr := tree{tt.rel: pickleOf(randomBytes(62, 2*testChunk)), "zz.json": []byte("{}")}
			writeTree(t, dir, tr)
			u := newUploader(s, nil)
			var opens atomic.Int32
			u.beforeOpen = func(rel string) {
				if rel == tt.rel && opens.Add(1) == 1 {
					if err := tt.swap(dir, rel, outside); err != nil {
						t.Errorf("swap: %v", err)
					}
				}
			}
			res, err := u.UploadFiles(ctx, dir, slices.Sorted(func(yield func(string) bool) {
				for p := range tr {
					yield(p)
				}
			}), Target{Step: 1, WorldSize: 1})
			if tt.want != nil {
				if !errors.Is(err, tt.want) {
					t.Fatalf("upload = %+v, %v; want %v", res, err, tt.want)
				}
				if m := storedKeys(t, s, snapshotsPrefix); len(m) != 0 {
					t.Errorf("committed %v", m)
				}
				if storeHolds(t, s, secret) {
					t.Error("the file outside the directory was read and stored")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if res.Reread != 1 || opens.Load() != 2 {
				t.Errorf("read again %d times, opened %d times; want 1 and 2", res.Reread, opens.Load())
			}
			out := t.TempDir()
			if _, err := Restore(ctx, s, 1, 0, out, RestoreOptions{}); err != nil {
				t.Fatal(err)
			}
			tr[tt.rel] = secret
			checkTree(t, out, tr)
		})
	}
}

func mustDo(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// TestFileRewrittenInPlaceDuringUpload rewrites a file in place while it
// is read, keeping its size and putting its modification time back (dd
// conv=notrunc, then touch -r): only its change time tells. Rewritten
// once, it is read again and its new bytes are committed; rewritten during
// every read, the upload fails with ErrChanged. A mix of old and new bytes
// is never committed.
func TestFileRewrittenInPlaceDuringUpload(t *testing.T) {
	old := pickleOf(randomBytes(71, 20*testChunk))
	next := pickleOf(randomBytes(72, 20*testChunk))
	tests := []struct {
		name    string
		always  bool
		wantErr error
	}{
		{"once: read again", false, nil},
		{"during every read: ErrChanged", true, ErrChanged},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			defer verifyNone(t)
			ctx := context.Background()
			dir := t.TempDir()
			p := filepath.Join(dir, "model.pdparams")
			writeTree(t, dir, tree{"model.pdparams": old})
			fi, err := os.Stat(p)
			mustDo(t, err)
			waitCtimeTick(t, p)

			var (
				mu       sync.Mutex
				rewrites int
			)
			// The reader holds at most Buffers chunks, so the first
			// chunk's Put runs while the file is still being read.
			inner := mem.New()
			f := &mem.FaultStore{Inner: inner}
			f.OnPut = func(ctx context.Context, key string, r io.Reader, size int64, opts storage.PutOptions) (storage.ObjectInfo, error) {
				mu.Lock()
				if strings.HasPrefix(key, chunksPrefix) && (tt.always || rewrites == 0) {
					if rewrites > 0 {
						waitCtimeTick(t, p)
					}
					b := next
					if rewrites%2 == 1 {
						b = old
					}
					rewriteInPlace(t, p, b, fi)
					rewrites++
				}
				mu.Unlock()
				return inner.Put(ctx, key, r, size, opts)
			}
			u := newUploader(f, nil)
			var opens atomic.Int32
			u.beforeOpen = func(string) { opens.Add(1) }
			res, err := u.Upload(ctx, dir, Target{Step: 1, WorldSize: 1})
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) || opens.Load() != maxRereads+1 {
					t.Fatalf("upload = %+v, %v after %d reads; want %v after %d", res, err, opens.Load(), tt.wantErr, maxRereads+1)
				}
				if m := storedKeys(t, inner, snapshotsPrefix); len(m) != 0 {
					t.Errorf("committed %v", m)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if res.Reread != 1 {
				t.Errorf("read again %d times, want 1", res.Reread)
			}
			out := t.TempDir()
			if _, err := Restore(ctx, inner, 1, 0, out, RestoreOptions{}); err != nil {
				t.Fatal(err)
			}
			checkTree(t, out, tree{"model.pdparams": next})
		})
	}
}

// rewriteInPlace writes b over the file at p without truncating it, then
// sets its times back to fi's. It runs in the upload's goroutines, so it
// reports failures with t.Error.
func rewriteInPlace(t *testing.T, p string, b []byte, fi os.FileInfo) {
	t.Helper()
	f, err := os.OpenFile(p, os.O_WRONLY, 0)
	if err != nil {
		t.Error(err)
		return
	}
	_, err = f.WriteAt(b, 0)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chtimes(p, fi.ModTime(), fi.ModTime())
	}
	if err != nil {
		t.Error(err)
	}
}

// TestSkippedSpecialFilesLoggedOnce: symlinks, FIFOs and sockets are left
// out, listed in Skipped and logged in one line per upload.
func TestSkippedSpecialFilesLoggedOnce(t *testing.T) {
	defer verifyNone(t)
	dir := t.TempDir()
	writeTree(t, dir, tree{"a.pdparams": pickleOf([]byte("a"))})
	mustDo(t, os.Symlink("a.pdparams", filepath.Join(dir, "latest")))
	mustDo(t, unix.Mkfifo(filepath.Join(dir, "pipe"), 0o600))
	l, err := net.Listen("unix", filepath.Join(dir, "sock"))
	mustDo(t, err)
	defer l.Close()
	var logs bytes.Buffer
	u := newUploader(mem.New(), nil)
	u.Log = slog.New(slog.NewJSONHandler(&logs, nil))
	res, err := u.Upload(context.Background(), dir, Target{Step: 1, WorldSize: 1})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"latest", "pipe", "sock"}
	if !slices.Equal(res.Skipped, want) || res.Files != 1 {
		t.Errorf("skipped %v, %d files; want %v and 1", res.Skipped, res.Files, want)
	}
	got := map[string]any{}
	for line := range strings.Lines(logs.String()) {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		if rec["msg"] == "checkpoint.skipped_special" {
			got[rec["path"].(string)] = rec["type"]
		}
	}
	if wantTypes := map[string]any{"latest": "symlink", "pipe": "fifo", "sock": "socket"}; !maps.Equal(got, wantTypes) {
		t.Errorf("checkpoint.skipped_special lines give types %v, want %v (one line per path):\n%s", got, wantTypes, logs.String())
	}
}
