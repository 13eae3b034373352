package checkpoint

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/lifeboat-project/lifeboat/storage"
	"github.com/lifeboat-project/lifeboat/storage/mem"
)

// putSnapshot commits a snapshot of rank 0 of 1 at step straight into s:
// n files of a few bytes each (manyPath(i) holding manyContent(i)), whose
// chunks are put once each. It builds in a second what uploading n files
// would take minutes for.
func putSnapshot(t *testing.T, s storage.Store, step int64, n int) {
	t.Helper()
	m := &Manifest{Format: FormatVersion, ID: "00000000000000aa", Step: step, WorldSize: 1,
		Created: time.Now().UTC(), Producer: "test", ChunkSize: testChunk} // steps are ordered by when they were committed
	put := map[string]bool{}
	for i := range n {
		b := manyContent(i)
		sum := hashOf(b)
		if !put[sum] {
			putBytes(t, s, chunkKey(sum), b)
			put[sum] = true
		}
		m.Files = append(m.Files, File{Path: manyPath(i), Size: int64(len(b)), Mode: 0o644, Chunks: []Chunk{{SHA256: sum, Size: int64(len(b))}}})
	}
	slices.SortFunc(m.Files, func(a, b File) int { return strings.Compare(a.Path, b.Path) })
	putManifest(t, s, m)
}

func manyPath(i int) string    { return fmt.Sprintf("many/%03d/%06d.bin", i/1000, i) }
func manyContent(i int) []byte { return fmt.Appendf(nil, "%d\n", i%97) }

func putManifest(t *testing.T, s storage.Store, m *Manifest) {
	t.Helper()
	b, err := m.Encode()
	if err != nil {
		t.Fatal(err)
	}
	putBytes(t, s, manifestKey(m.target(), m.Revision), b)
}

// tebibyte is what the manifest of putHuge claims.
const tebibyte = 1 << 40

// putHuge commits a snapshot of rank 0 of 1 at step that claims one file
// of 1 TiB: 16384 chunks of MaxChunkSize, every one the chunk sum. The
// manifest is valid; no volume a test runs on holds the file.
func putHuge(t *testing.T, s storage.Store, step int64, sum string) {
	t.Helper()
	chunks := make([]Chunk, tebibyte/MaxChunkSize)
	for i := range chunks {
		chunks[i] = Chunk{SHA256: sum, Size: MaxChunkSize}
	}
	putManifest(t, s, &Manifest{Format: FormatVersion, ID: "00000000000000bb", Step: step, WorldSize: 1,
		Created: time.Now().UTC(), Producer: "test", ChunkSize: MaxChunkSize,
		Files: []File{{Path: "model.pdparams", Size: tebibyte, Mode: 0o644, Chunks: chunks}}})
}

// skipIfTebibyteFits skips a test whose volume could hold putHuge's file.
func skipIfTebibyteFits(t *testing.T, dir string) {
	t.Helper()
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err == nil && st.Bavail*uint64(st.Bsize) > tebibyte {
		t.Skipf("%s has more than 1 TiB free", dir)
	}
}

// nofileChild names the environment variable that makes a test binary the
// child of TestRestoreManyFilesUnderFileLimit.
const nofileChild = "LIFEBOAT_TEST_NOFILE_CHILD"

// TestRestoreManyFilesUnderFileLimit restores a snapshot of 100,000 small
// files in a process limited to 1024 open files (a child process of this
// test binary, so the limit binds nowhere else): the restore holds a
// bounded number of files open, whatever their count, and restores every
// file without falling back.
func TestRestoreManyFilesUnderFileLimit(t *testing.T) {
	if os.Getenv(nofileChild) == "" {
		cmd := exec.Command(os.Args[0], "-test.run=^TestRestoreManyFilesUnderFileLimit$", "-test.count=1", "-test.v")
		cmd.Env = append(os.Environ(), nofileChild+"=1")
		out, err := cmd.CombinedOutput()
		if err != nil || !bytes.Contains(out, []byte("--- PASS: TestRestoreManyFilesUnderFileLimit")) {
			t.Fatalf("the child under a limit of 1024 open files: %v\n%s", err, out)
		}
		t.Logf("child:\n%s", out)
		return
	}
	defer verifyNone(t)
	const n = 100_000
	ctx := context.Background()
	s := mem.New()
	upload(t, newUploader(s, nil), 1, 0, 1, sampleTree(3))
	t0 := time.Now()
	putSnapshot(t, s, 2, n)
	t.Logf("built a snapshot of %d files in %v", n, time.Since(t0))

	if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &unix.Rlimit{Cur: 1024, Max: 1024}); err != nil {
		t.Fatal(err)
	}
	dir := memDir(t)
	// Count the open descriptors now and then while the restore runs.
	var calls, most atomic.Int64
	progress := func(done, total int64) {
		if calls.Add(1)%500 != 0 {
			return
		}
		ents, err := os.ReadDir("/proc/self/fd")
		if err != nil {
			return
		}
		for {
			m := most.Load()
			if int64(len(ents)) <= m || most.CompareAndSwap(m, int64(len(ents))) {
				break
			}
		}
	}
	t0 = time.Now()
	res, err := RestoreLatest(ctx, s, 0, dir, RestoreOptions{Progress: progress})
	if err != nil {
		t.Fatalf("RestoreLatest of %d files under a limit of 1024 open files: %v", n, err)
	}
	t.Logf("restored %d files in %v; at most %d descriptors open", res.Files, time.Since(t0), most.Load())
	if res.Step != 2 || res.Files != n || len(res.Fallbacks) != 0 {
		t.Fatalf("RestoreLatest = step %d, %d files, fallbacks %v; want step 2, %d files, none", res.Step, res.Files, res.Fallbacks, n)
	}
	// The workers' files, the store's and the runtime's: far below 1024.
	if m := most.Load(); m > 2*DefaultDownloadWorkers+32 {
		t.Errorf("%d descriptors open during the restore, want at most %d", m, 2*DefaultDownloadWorkers+32)
	}
	count := 0
	if err := filepath.WalkDir(filepath.Join(dir, "many"), func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			count++
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if count != n {
		t.Errorf("%d files restored, want %d", count, n)
	}
	for _, i := range []int{0, 1, 96, 97, 54321, n - 1} {
		b, err := os.ReadFile(filepath.Join(dir, filepath.FromSlash(manyPath(i))))
		if err != nil || !bytes.Equal(b, manyContent(i)) {
			t.Errorf("%s: %q, %v; want %q", manyPath(i), b, err, manyContent(i))
		}
		if fi, err := os.Stat(filepath.Join(dir, filepath.FromSlash(manyPath(i)))); err != nil || fi.Mode().Perm() != 0o644 {
			t.Errorf("%s: mode %v, %v; want 0644", manyPath(i), fi.Mode(), err)
		}
	}
}

// memDir returns an empty directory on a tmpfs of its own where the test
// may mount one (as root), else t.TempDir(): creating and syncing 100,000
// files on a busy disk takes minutes, on a tmpfs seconds, and the file
// count is what the test is about.
func memDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size=2g"); err != nil {
		t.Logf("restoring onto the disk: cannot mount a tmpfs: %v", err)
		return dir
	}
	t.Cleanup(func() { _ = unix.Unmount(dir, unix.MNT_DETACH) })
	return dir
}

// TestRestoreLatestFallsBack: each way the newest snapshot can fail that
// is about the snapshot itself makes RestoreLatest restore the previous
// complete one, with the reason in Fallbacks; the directory holds exactly
// the previous snapshot and what was there before.
func TestRestoreLatestFallsBack(t *testing.T) {
	tests := []struct {
		name string
		// newer commits step 2 into s and prepares dir.
		newer func(t *testing.T, s storage.Store, dir string)
		want  []error // what the fallback's reason wraps
		user  tree    // dir's own files, left as they are
	}{
		{"claims 1 TiB", func(t *testing.T, s storage.Store, dir string) {
			skipIfTebibyteFits(t, dir)
			putHuge(t, s, 2, hashOf([]byte("never stored")))
		}, []error{ErrTooBig, unix.ENOSPC}, nil},
		{"missing chunk", func(t *testing.T, s storage.Store, _ string) {
			res := upload(t, newUploader(s, nil), 2, 0, 1, tree{"model.pdparams": pickleOf(randomBytes(21, 3*testChunk))})
			if err := s.Delete(context.Background(), chunkKey(res.Manifest.Files[0].Chunks[1].SHA256)); err != nil {
				t.Fatal(err)
			}
		}, []error{ErrCorrupt}, nil},
		{"a directory is in the way of a file", func(t *testing.T, s storage.Store, dir string) {
			upload(t, newUploader(s, nil), 2, 0, 1, tree{"model.pdparams": pickleOf(randomBytes(22, 2*testChunk)), "logs/run": []byte("a file")})
			writeTree(t, dir, tree{"logs/run/events": []byte("the user's")})
		}, nil, tree{"logs/run/events": []byte("the user's")}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			defer verifyNone(t)
			s := mem.New()
			older := sampleTree(4)
			upload(t, newUploader(s, nil), 1, 0, 1, older)
			dir := t.TempDir()
			tt.newer(t, s, dir)
			res, err := RestoreLatest(context.Background(), s, 0, dir, RestoreOptions{})
			if err != nil {
				t.Fatalf("RestoreLatest: %v", err)
			}
			if res.Step != 1 || len(res.Fallbacks) != 1 || res.Fallbacks[0].Step != 2 {
				t.Fatalf("RestoreLatest = step %d, fallbacks %v; want step 1 after falling back from step 2", res.Step, res.Fallbacks)
			}
			for _, w := range tt.want {
				if !errors.Is(res.Fallbacks[0].Err, w) {
					t.Errorf("fallback reason %v does not wrap %v", res.Fallbacks[0].Err, w)
				}
			}
			want := tree{}
			for p, b := range older {
				want[p] = b
			}
			for p, b := range tt.user {
				want[p] = b
			}
			checkTree(t, dir, want)
		})
	}
}

// TestRestoreTooBigFetchesNothing: a snapshot larger than the volume's free
// space is refused before a chunk is fetched or a byte reserved, with an
// error that names the sizes and what to do.
func TestRestoreTooBigFetchesNothing(t *testing.T) {
	defer verifyNone(t)
	inner := mem.New()
	sum := hashOf([]byte("never stored"))
	putHuge(t, inner, 2, sum)
	var gets atomic.Int64
	s := &mem.FaultStore{Inner: inner}
	s.OnGet = func(ctx context.Context, key string, offset, length int64) (io.ReadCloser, error) {
		if strings.HasPrefix(key, chunksPrefix) {
			gets.Add(1)
		}
		return inner.Get(ctx, key, offset, length)
	}
	dir := t.TempDir()
	skipIfTebibyteFits(t, dir)
	_, err := Restore(context.Background(), s, 2, 0, dir, RestoreOptions{})
	if !errors.Is(err, ErrTooBig) || !errors.Is(err, unix.ENOSPC) {
		t.Fatalf("Restore of 1 TiB = %v, want ErrTooBig and ENOSPC", err)
	}
	for _, s := range []string{"1099511627776 bytes", "free", "make the volume larger"} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error %q does not say %q", err, s)
		}
	}
	if n := gets.Load(); n != 0 {
		t.Errorf("%d chunks fetched for a snapshot that cannot fit", n)
	}
	checkTree(t, dir, tree{})
}

// TestRestoreLatestStopsOnStoreFailures: a cancelled context and failures
// of the store that every snapshot would meet alike end RestoreLatest at
// once, without falling back to (or touching) an older snapshot.
func TestRestoreLatestStopsOnStoreFailures(t *testing.T) {
	denied := storage.Permanent(errors.New("access denied"))
	tests := []struct {
		name string
		get  func(ctx context.Context, cancel context.CancelFunc) error // for each chunk Get
		want error
	}{
		{"context cancelled", func(ctx context.Context, cancel context.CancelFunc) error {
			cancel()
			return ctx.Err()
		}, context.Canceled},
		{"access denied", func(context.Context, context.CancelFunc) error { return denied }, denied},
		{"store unreachable", func(context.Context, context.CancelFunc) error { return errors.New("dial tcp: connection refused") }, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			defer verifyNone(t)
			inner := mem.New()
			first := upload(t, newUploader(inner, nil), 1, 0, 1, sampleTree(6))
			second := upload(t, newUploader(inner, nil), 2, 0, 1, sampleTree(7))
			onlyFirst := map[string]bool{} // chunks of step 1 that step 2 lacks
			for _, f := range first.Manifest.Files {
				for _, ch := range f.Chunks {
					onlyFirst[chunkKey(ch.SHA256)] = true
				}
			}
			for _, f := range second.Manifest.Files {
				for _, ch := range f.Chunks {
					delete(onlyFirst, chunkKey(ch.SHA256))
				}
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			var older atomic.Int64 // reads of step 1's own chunks
			s := &mem.FaultStore{Inner: inner}
			s.OnGet = func(c context.Context, key string, offset, length int64) (io.ReadCloser, error) {
				if onlyFirst[key] {
					older.Add(1)
				}
				if strings.HasPrefix(key, chunksPrefix) {
					return nil, tt.get(ctx, cancel)
				}
				return inner.Get(c, key, offset, length)
			}
			dir := t.TempDir()
			res, err := RestoreLatest(ctx, retried(s), 0, dir, RestoreOptions{})
			if err == nil || errors.Is(err, ErrNothingRestorable) || errors.Is(err, ErrNoCheckpoint) {
				t.Fatalf("RestoreLatest = %+v, %v; want the store's error", res, err)
			}
			if tt.want != nil && !errors.Is(err, tt.want) {
				t.Errorf("RestoreLatest = %v, want %v", err, tt.want)
			}
			if n := older.Load(); n != 0 {
				t.Errorf("step 1's chunks read %d times: it fell back", n)
			}
			checkTree(t, dir, tree{})
		})
	}
}

// TestRestoreLatestNothingRestorable: when every complete step fails, the
// error says so and wraps each reason; only when every reason is in the
// store's data (nothing there could ever be restored) is it ErrNoCheckpoint
// too.
func TestRestoreLatestNothingRestorable(t *testing.T) {
	defer verifyNone(t)
	s := mem.New()
	res := upload(t, newUploader(s, nil), 1, 0, 1, tree{"model.pdparams": pickleOf(randomBytes(23, 2*testChunk))})
	if err := s.Delete(context.Background(), chunkKey(res.Manifest.Files[0].Chunks[0].SHA256)); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	skipIfTebibyteFits(t, dir)
	putHuge(t, s, 2, hashOf([]byte("never stored")))
	rr, err := RestoreLatest(context.Background(), s, 0, dir, RestoreOptions{})
	if !errors.Is(err, ErrNothingRestorable) || !errors.Is(err, ErrTooBig) || !errors.Is(err, ErrCorrupt) || errors.Is(err, ErrNoCheckpoint) {
		t.Errorf("RestoreLatest = %v; want ErrNothingRestorable wrapping ErrTooBig and ErrCorrupt, not ErrNoCheckpoint", err)
	}
	if rr == nil || len(rr.Fallbacks) != 2 || rr.Fallbacks[0].Step != 2 || rr.Fallbacks[1].Step != 1 {
		t.Errorf("result %+v, want fallbacks from steps 2 and 1", rr)
	}
	checkTree(t, dir, tree{})

	if err := s.Delete(context.Background(), manifestKey(Target{Step: 2, WorldSize: 1}, 0)); err != nil {
		t.Fatal(err)
	}
	if _, err := RestoreLatest(context.Background(), s, 0, dir, RestoreOptions{}); !errors.Is(err, ErrNothingRestorable) || !errors.Is(err, ErrNoCheckpoint) {
		t.Errorf("RestoreLatest with only a corrupt step = %v; want ErrNothingRestorable and ErrNoCheckpoint", err)
	}
}

// TestRestoreStopsWhileReserving: a stop while the files of a large
// snapshot are being created ends the restore there, without a chunk
// fetched or a fallback.
func TestRestoreStopsWhileReserving(t *testing.T) {
	defer verifyNone(t)
	inner := mem.New()
	upload(t, newUploader(inner, nil), 1, 0, 1, sampleTree(9))
	putSnapshot(t, inner, 2, 20_000)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var chunkGets atomic.Int64
	s := &mem.FaultStore{Inner: inner}
	s.OnGet = func(c context.Context, key string, offset, length int64) (io.ReadCloser, error) {
		switch {
		case key == manifestKey(Target{Step: 2, WorldSize: 1}, 0):
			defer cancel() // the stop arrives as the manifest is read
		case strings.HasPrefix(key, chunksPrefix):
			chunkGets.Add(1)
		}
		return inner.Get(c, key, offset, length)
	}
	dir := t.TempDir()
	var progressed atomic.Bool // the downloads began: every file was created
	res, err := RestoreLatest(ctx, retried(s), 0, dir, RestoreOptions{Progress: func(int64, int64) { progressed.Store(true) }})
	if !errors.Is(err, context.Canceled) || res != nil {
		t.Fatalf("RestoreLatest = %+v, %v; want context.Canceled and no result", res, err)
	}
	if progressed.Load() {
		t.Error("the restore went on creating every file after the stop")
	}
	if n := chunkGets.Load(); n != 0 {
		t.Errorf("%d chunks fetched after the stop", n)
	}
	checkTree(t, dir, tree{})
}
