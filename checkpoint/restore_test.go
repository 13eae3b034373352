package checkpoint

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/lifeboat-project/lifeboat/internal/testenv"
	"github.com/lifeboat-project/lifeboat/storage"
	"github.com/lifeboat-project/lifeboat/storage/mem"
)

// corruption damages the snapshot whose manifest is m, at its target'th
// chunk that no older snapshot shares.
type corruption struct {
	name     string
	kind     ProblemKind
	fallback bool // RestoreLatest reports a fallback (a missing manifest is simply not a step)
	damage   func(t *testing.T, s storage.Store, m *Manifest, chunkKey string)
}

var corruptions = []corruption{
	{"bit flip in a chunk", CorruptChunk, true, func(t *testing.T, s storage.Store, _ *Manifest, key string) {
		b := getBytes(t, s, key)
		b[len(b)/2] ^= 0x10
		putBytes(t, s, key, b)
	}},
	{"truncated chunk", TruncatedChunk, true, func(t *testing.T, s storage.Store, _ *Manifest, key string) {
		b := getBytes(t, s, key)
		putBytes(t, s, key, b[:len(b)-1])
	}},
	{"chunk longer than its manifest says", TruncatedChunk, true, func(t *testing.T, s storage.Store, _ *Manifest, key string) {
		b := getBytes(t, s, key)
		putBytes(t, s, key, append(b, 0))
	}},
	{"missing chunk", MissingChunk, true, func(t *testing.T, s storage.Store, _ *Manifest, key string) {
		if err := s.Delete(context.Background(), key); err != nil {
			t.Fatal(err)
		}
	}},
	{"garbled manifest", BadManifest, true, func(t *testing.T, s storage.Store, m *Manifest, _ string) {
		key := manifestKey(m.target(), m.Revision)
		b := getBytes(t, s, key)
		putBytes(t, s, key, b[:len(b)/2])
	}},
	{"missing manifest", MissingManifest, false, func(t *testing.T, s storage.Store, m *Manifest, _ string) {
		if err := s.Delete(context.Background(), manifestKey(m.target(), m.Revision)); err != nil {
			t.Fatal(err)
		}
	}},
}

// TestCorruptionFallsBack damages the newest snapshot in each way, at every
// chunk of it in turn (up to 8 spread over the snapshot), and checks that Verify names the damage and that
// RestoreLatest restores the previous snapshot, every time.
func TestCorruptionFallsBack(t *testing.T) {
	defer verifyNone(t)
	for _, c := range corruptions {
		t.Run(c.name, func(t *testing.T) {
			stores(t, func(t *testing.T, _ storage.Store) {
				// A fresh store per target; the parent's store only names the backend.
				for target := 0; ; target++ {
					s := newSameKind(t)
					u := newUploader(s, nil)
					older, newer := sampleTree(1), sampleTree(2)
					newer["model.pdopt"] = older["model.pdopt"] // shared chunks stay intact
					upload(t, u, 1, 0, 1, older)
					res := upload(t, u, 2, 0, 1, newer)
					keys := spread(uniqueChunks(res.Manifest, older, u), 8)
					if target == len(keys) || (target > 0 && (c.kind == BadManifest || c.kind == MissingManifest)) {
						if target == 0 {
							t.Fatal("no chunk unique to the newer snapshot")
						}
						return
					}
					c.damage(t, s, res.Manifest, keys[target])
					checkDamage(t, s, c, older)
				}
			})
		})
	}
}

var newSameKind func(t *testing.T) storage.Store

func init() {
	newSameKind = func(t *testing.T) storage.Store {
		if strings.HasSuffix(t.Name(), "/fs") || strings.Contains(t.Name(), "/fs/") {
			s, err := fsNew(t)
			if err != nil {
				t.Fatal(err)
			}
			return s
		}
		return mem.New()
	}
}

// spread returns at most n of keys, evenly spaced, first and last included.
func spread(keys []string, n int) []string {
	if len(keys) <= n {
		return keys
	}
	out := make([]string, n)
	for i := range n {
		out[i] = keys[i*(len(keys)-1)/(n-1)]
	}
	return out
}

func uniqueChunks(m *Manifest, older tree, u *Uploader) []string {
	shared := map[string]bool{}
	for _, b := range older {
		for off := 0; off < len(b); off += testChunk {
			shared[hashOf(b[off:min(off+testChunk, len(b))])] = true
		}
	}
	var keys []string
	for _, f := range m.Files {
		for _, c := range f.Chunks {
			if !shared[c.SHA256] {
				keys = append(keys, chunkKey(c.SHA256))
			}
		}
	}
	return keys
}

func checkDamage(t *testing.T, s storage.Store, c corruption, older tree) {
	t.Helper()
	ctx := context.Background()
	rep, err := Verify(ctx, s, 2, VerifyOptions{WorldSize: 1, ReadData: Subset{1, 1}})
	if err != nil {
		t.Fatalf("Verify: %v", err)
	}
	if len(rep.Problems) != 1 || rep.Problems[0].Kind != c.kind {
		t.Errorf("Verify problems %v, want one %s", rep.Problems, c.kind)
	}
	dir := t.TempDir()
	res, err := RestoreLatest(ctx, s, 0, dir, RestoreOptions{})
	if err != nil {
		t.Fatalf("RestoreLatest: %v", err)
	}
	if res.Step != 1 {
		t.Errorf("RestoreLatest restored step %d, want 1", res.Step)
	}
	if c.fallback && (len(res.Fallbacks) != 1 || res.Fallbacks[0].Step != 2 || !errors.Is(res.Fallbacks[0].Err, ErrCorrupt)) {
		t.Errorf("fallbacks %+v, want step 2 with ErrCorrupt", res.Fallbacks)
	}
	checkTree(t, dir, older)
}

// TestRestoreLeavesUserFilesUntilComplete checks the rule in Restore's doc:
// a failed restore leaves dir exactly as it was; a successful one replaces
// the snapshot's files and keeps the others.
func TestRestoreLeavesUserFilesUntilComplete(t *testing.T) {
	defer verifyNone(t)
	ctx := context.Background()
	s := mem.New()
	tr := sampleTree(5)
	res := upload(t, newUploader(s, nil), 1, 0, 1, tr)

	dir := t.TempDir()
	user := tree{"model.pdparams": []byte("the user's own params"), "notes.txt": []byte("keep me")}
	writeTree(t, dir, user)

	last := res.Manifest.Files[len(res.Manifest.Files)-1]
	if err := s.Delete(ctx, chunkKey(last.Chunks[len(last.Chunks)-1].SHA256)); err != nil {
		t.Fatal(err)
	}
	if _, err := Restore(ctx, s, 1, 0, dir, RestoreOptions{}); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Restore with a missing chunk = %v, want ErrCorrupt", err)
	}
	checkTree(t, dir, user) // also proves no temporary directory is left

	res = upload(t, newUploader(s, nil), 2, 0, 1, tr)
	if _, err := Restore(ctx, s, 2, 0, dir, RestoreOptions{}); err != nil {
		t.Fatal(err)
	}
	want := tree{"notes.txt": user["notes.txt"]}
	for p, b := range tr {
		want[p] = b
	}
	checkTree(t, dir, want)
}

func TestRestoreRejectsEscapes(t *testing.T) {
	defer verifyNone(t)
	ctx := context.Background()
	content := []byte("owned")
	sum := hashOf(content)
	for _, p := range []string{"../escape", "/etc/escape", "a/../../escape", "a/./b", "a\\..\\escape", ""} {
		t.Run(fmt.Sprintf("%q", p), func(t *testing.T) {
			s := mem.New()
			putBytes(t, s, chunkKey(sum), content)
			raw := fmt.Sprintf(`{"format":1,"id":"0123456789abcdef","step":1,"rank":0,"world_size":1,"created":"2025-01-01T00:00:00Z","producer":"evil","chunk_size":5,"files":[{"path":%q,"size":5,"mode":420,"chunks":[{"sha256":%q,"size":5}]}]}`, p, sum)
			putBytes(t, s, manifestKey(Target{Step: 1, WorldSize: 1}, 0), []byte(raw))
			parent := t.TempDir()
			dir := filepath.Join(parent, "ckpt")
			if _, err := Restore(ctx, s, 1, 0, dir, RestoreOptions{}); !errors.Is(err, ErrCorrupt) {
				t.Errorf("Restore = %v, want ErrCorrupt", err)
			}
			checkTree(t, parent, tree{})
		})
	}

	t.Run("symlinked parent", func(t *testing.T) {
		s := mem.New()
		upload(t, newUploader(s, nil), 1, 0, 1, tree{"sub/x": content})
		outside, dir := t.TempDir(), t.TempDir()
		if err := os.Symlink(outside, filepath.Join(dir, "sub")); err != nil {
			t.Fatal(err)
		}
		if _, err := Restore(ctx, s, 1, 0, dir, RestoreOptions{}); err == nil {
			t.Error("Restore through a symlinked directory succeeded")
		}
		checkTree(t, outside, tree{})
	})
}

func TestRestoreLatestEmptyStore(t *testing.T) {
	defer verifyNone(t)
	_, err := RestoreLatest(context.Background(), mem.New(), 0, t.TempDir(), RestoreOptions{})
	if !errors.Is(err, ErrNoCheckpoint) {
		t.Errorf("RestoreLatest on an empty store = %v, want ErrNoCheckpoint", err)
	}
}

func TestRestoreLatestAllCorrupt(t *testing.T) {
	defer verifyNone(t)
	s := mem.New()
	upload(t, newUploader(s, nil), 1, 0, 1, tree{"a": []byte("a")})
	putBytes(t, s, manifestKey(Target{Step: 1, WorldSize: 1}, 0), []byte("{"))
	res, err := RestoreLatest(context.Background(), s, 0, t.TempDir(), RestoreOptions{})
	if !errors.Is(err, ErrNoCheckpoint) || !errors.Is(err, ErrCorrupt) || len(res.Fallbacks) != 1 {
		t.Errorf("RestoreLatest = %+v, %v; want ErrNoCheckpoint and ErrCorrupt with one fallback", res, err)
	}
}

// readerFunc adapts a function to io.ReadCloser.
type readerFunc func([]byte) (int, error)

func (f readerFunc) Read(p []byte) (int, error) { return f(p) }
func (f readerFunc) Close() error               { return nil }

var _ io.ReadCloser = readerFunc(nil)

// TestRestoreTooLargeForTheVolume restores into a tmpfs smaller than the
// snapshot: the restore fails with ENOSPC while it reserves the files'
// space, before it has fetched a single chunk, and leaves the directory as
// it was.
func TestRestoreTooLargeForTheVolume(t *testing.T) {
	testenv.RequireRoot(t)
	defer verifyNone(t)
	ctx := context.Background()
	inner := mem.New()
	tr := tree{"model.pdparams": pickleOf(randomBytes(7, 3<<20)), "model.pdopt": pickleOf(randomBytes(8, 3<<20))}
	upload(t, newUploader(inner, nil), 1, 0, 1, tr)

	small := t.TempDir()
	if err := unix.Mount("tmpfs", small, "tmpfs", 0, "size=4m"); err != nil {
		testenv.Skip(t, "cannot mount a small tmpfs: "+err.Error())
	}
	t.Cleanup(func() { _ = unix.Unmount(small, 0) })
	user := tree{"notes.txt": []byte("keep me")}
	writeTree(t, small, user)

	var gets atomic.Int64
	s := &mem.FaultStore{Inner: inner}
	s.OnGet = func(ctx context.Context, key string, offset, length int64) (io.ReadCloser, error) {
		if strings.HasPrefix(key, "chunks/") {
			gets.Add(1)
		}
		return inner.Get(ctx, key, offset, length)
	}
	_, err := Restore(ctx, s, 1, 0, small, RestoreOptions{})
	if !errors.Is(err, unix.ENOSPC) {
		t.Fatalf("Restore into a 4 MiB volume of a 6 MiB snapshot = %v, want ENOSPC", err)
	}
	if n := gets.Load(); n != 0 {
		t.Errorf("the restore fetched %d chunks before it found the volume too small", n)
	}
	checkTree(t, small, user)
}
