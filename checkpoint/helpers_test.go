package checkpoint

import (
	"bytes"
	"context"
	cryptorand "crypto/rand"
	"encoding/binary"
	"io"
	"io/fs"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	"golang.org/x/sys/unix"

	"github.com/lifeboat-project/lifeboat/internal/testenv"
	"github.com/lifeboat-project/lifeboat/storage"
	fsstore "github.com/lifeboat-project/lifeboat/storage/fs"
	"github.com/lifeboat-project/lifeboat/storage/mem"
	"github.com/lifeboat-project/lifeboat/storage/s3"
)

const testChunk = 64 << 10

// noWait retries up to 3 times without sleeping.
func noWait(attempt int) (time.Duration, bool) { return 0, attempt <= 3 }

// retried wraps s in storage.Retry with noWait, as the commands wrap their
// store, so that the faults a test injects are retried without sleeping.
func retried(s storage.Store) storage.Store {
	return storage.Retry(s, storage.RetryPolicy{Backoff: noWait})
}

// fakeClock is a Clock tests move by hand.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func newFakeClock() *fakeClock {
	return &fakeClock{now: time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

func newUploader(s storage.Store, clock *fakeClock) *Uploader {
	u := &Uploader{Store: retried(s), ChunkSize: testChunk, Workers: 3, Buffers: 4}
	if clock != nil {
		u.Clock = clock.Now
	}
	return u
}

// stores runs fn against each backend the round-trip tests cover: the
// in-memory store and a directory store.
func stores(t *testing.T, fn func(t *testing.T, s storage.Store)) {
	t.Helper()
	t.Run("mem", func(t *testing.T) { fn(t, mem.New()) })
	t.Run("fs", func(t *testing.T) {
		s, err := fsstore.New(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		fn(t, s)
	})
}

func randomBytes(seed uint64, n int) []byte {
	r := rand.New(rand.NewPCG(seed, 7))
	b := make([]byte, n)
	fillRandom(r, b)
	for i := n &^ 7; i < n; i++ {
		b[i] = byte(r.Uint32())
	}
	return b
}

// tree is a checkpoint directory's files by slash path.
type tree map[string][]byte

// sampleTree looks like a small Paddle checkpoint: a large params file, an
// optimizer file, metadata and an empty file, one in a subdirectory.
// Trees are cached by seed; callers may replace entries but must not
// modify the byte slices.
func sampleTree(seed uint64) tree {
	if cached, ok := sampleTrees.Load(seed); ok {
		return maps.Clone(cached.(tree))
	}
	tr := tree{
		"model.pdparams":     pickleOf(randomBytes(seed, 20*testChunk+123)),
		"model.pdopt":        pickleOf(randomBytes(seed+1000, 7*testChunk)),
		"meta/trainer.json":  []byte(`{"step": 1}`),
		"meta/empty.marker":  {},
		"rng/rank_state.bin": randomBytes(seed+2000, 999),
	}
	sampleTrees.Store(seed, tr)
	return maps.Clone(tr)
}

var sampleTrees sync.Map

// pickleOf returns a whole pickle (protocol 4) of the bytes object b, as
// the format checks of .pdparams and .pdopt files require.
func pickleOf(b []byte) []byte {
	out := make([]byte, 0, len(b)+12)
	out = append(out, 0x80, 4, 0x8e) // PROTO 4, BINBYTES8
	out = binary.LittleEndian.AppendUint64(out, uint64(len(b)))
	out = append(out, b...)
	return append(out, '.') // STOP
}

func writeTree(t *testing.T, dir string, tr tree) {
	t.Helper()
	for p, b := range tr {
		full := filepath.Join(dir, filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, b, 0o640); err != nil {
			t.Fatal(err)
		}
	}
}

func readTree(t *testing.T, dir string) tree {
	t.Helper()
	tr := tree{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		tr[filepath.ToSlash(rel)] = b
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

func checkTree(t *testing.T, dir string, want tree) {
	t.Helper()
	got := readTree(t, dir)
	for p, b := range want {
		g, ok := got[p]
		if !ok {
			t.Errorf("%s: missing after restore", p)
			continue
		}
		if !bytes.Equal(g, b) {
			t.Errorf("%s: restored %d bytes differ from the %d uploaded", p, len(g), len(b))
		}
	}
	for p := range got {
		if _, ok := want[p]; !ok {
			t.Errorf("%s: unexpected file after restore", p)
		}
	}
}

// upload writes tr into a fresh directory and uploads it.
func upload(t *testing.T, u *Uploader, step int64, rank, n int, tr tree) *UploadResult {
	t.Helper()
	dir := t.TempDir()
	writeTree(t, dir, tr)
	res, err := u.Upload(context.Background(), dir, Target{Step: step, Rank: rank, WorldSize: n})
	if err != nil {
		t.Fatalf("upload step %d rank %d: %v", step, rank, err)
	}
	return res
}

func getBytes(t *testing.T, s storage.Store, key string) []byte {
	t.Helper()
	rc, err := s.Get(context.Background(), key, 0, -1)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func putBytes(t *testing.T, s storage.Store, key string, b []byte) {
	t.Helper()
	if _, err := s.Put(context.Background(), key, bytes.NewReader(b), int64(len(b)), storage.PutOptions{}); err != nil {
		t.Fatal(err)
	}
}

// storedKeys lists the keys under prefix, except completion records
// (record.go), which the tests of records look at (recordKeys).
func storedKeys(t *testing.T, s storage.Store, prefix string) []string {
	t.Helper()
	var keys []string
	if err := s.List(context.Background(), prefix, func(oi storage.ObjectInfo) error {
		if _, _, _, ok := parseRecordKey(oi.Key); ok {
			return nil
		}
		keys = append(keys, oi.Key)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return keys
}

func fsNew(t *testing.T) (storage.Store, error) { return fsstore.New(t.TempDir()) }

// allStores runs fn against the in-memory store, a directory store and a
// fresh prefix of the test MinIO server (skipped without one, see
// testenv.RequireMinIO).
func allStores(t *testing.T, fn func(t *testing.T, s storage.Store)) {
	t.Helper()
	stores(t, fn)
	t.Run("s3", func(t *testing.T) { fn(t, newS3Store(t)) })
}

// newS3Store returns a store on a fresh prefix of the test MinIO server.
func newS3Store(t *testing.T) storage.Store {
	t.Helper()
	m := testenv.RequireMinIO(t)
	s, err := s3.New(context.Background(), s3.Config{
		Endpoint: m.Endpoint, Bucket: "lifeboat-test", Prefix: "checkpoint-" + strings.ToLower(cryptorand.Text()[:12]),
		AccessKey: m.AccessKey, SecretKey: m.SecretKey, CreateBucket: true, BucketLookup: s3.LookupPath,
	})
	if err != nil {
		t.Fatalf("open the test MinIO: %v", err)
	}
	return s
}

// waitCtimeTick returns once a change made now gets a later change time
// than path has. Change times come from a coarse clock (a timer tick), so
// a file written and then rewritten within one tick may keep its change
// time; tests that rewrite a file wait for the tick first.
// It may run in goroutines other than the test's, so it reports failures
// with t.Error.
func waitCtimeTick(t *testing.T, path string) {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		t.Error(err)
		return
	}
	probe := path + ".ctime-probe"
	if err := os.WriteFile(probe, nil, 0o600); err != nil {
		t.Error(err)
		return
	}
	defer os.Remove(probe)
	for mode := os.FileMode(0o600); ; mode ^= 0o040 {
		var p unix.Stat_t
		if err := os.Chmod(probe, mode); err != nil {
			t.Error(err)
			return
		}
		if err := unix.Stat(probe, &p); err != nil {
			t.Error(err)
			return
		}
		if p.Ctim.Nano() > st.Ctim.Nano() {
			return
		}
		time.Sleep(time.Millisecond)
	}
}

// verifyNone is goleak.VerifyNone, less the idle keep-alive connections
// of the S3 client's HTTP transport, which outlive the test that opened
// them by design.
func verifyNone(t *testing.T) {
	t.Helper()
	goleak.VerifyNone(t,
		goleak.IgnoreAnyFunction("net/http.(*persistConn).readLoop"),
		goleak.IgnoreAnyFunction("net/http.(*persistConn).writeLoop"))
}

// recordKeys lists the completion records under prefix.
func recordKeys(t *testing.T, s storage.Store, prefix string) []string {
	t.Helper()
	var keys []string
	if err := s.List(context.Background(), prefix, func(oi storage.ObjectInfo) error {
		if _, _, _, ok := parseRecordKey(oi.Key); ok {
			keys = append(keys, oi.Key)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return keys
}

// dropRecords deletes every completion record: the store is then as a
// lifeboat without records leaves it, read in full.
func dropRecords(t *testing.T, s storage.Store) {
	t.Helper()
	for _, k := range recordKeys(t, s, snapshotsPrefix) {
		if err := s.Delete(context.Background(), k); err != nil {
			t.Fatal(err)
		}
	}
}
