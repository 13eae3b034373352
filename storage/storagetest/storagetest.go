// Package storagetest is the conformance suite for storage.Store backends.
// Every backend's tests call Run with a constructor for an empty store; the
// suite checks each contract written in the storage.Store doc comments.
package storagetest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"

	"github.com/lifeboat-project/lifeboat/storage"
)

// LargeSize is the size of the suite's large objects: more than one part for
// backends with a part size of 32 MiB (the S3 default) or less, small enough
// to keep CI fast.
const LargeSize = 36 << 20

// NewStoreFunc returns an empty store for one test. It registers any cleanup
// with t.Cleanup.
type NewStoreFunc func(t *testing.T) storage.Store

// Run runs the conformance suite against the stores newStore returns. Each
// subtest gets its own store and runs in parallel with the others.
func Run(t *testing.T, newStore NewStoreFunc) {
	tests := []struct {
		name string
		fn   func(t *testing.T, s storage.Store)
	}{
		{"PutGetKnownSize", testPutGetKnownSize},
		{"PutGetUnknownSize", testPutGetUnknownSize},
		{"EmptyObject", testEmptyObject},
		{"LargeObject", testLargeObject},
		{"Overwrite", testOverwrite},
		{"RangeGet", testRangeGet},
		{"Stat", testStat},
		{"NotExist", testNotExist},
		{"ListOrderAndPrefix", testList},
		{"ListStopsOnError", testListStops},
		{"ListDirs", testListDirs},
		{"DeleteIdempotent", testDelete},
		{"CreateOnly", testCreateOnly},
		{"CreateOnlyConcurrent", testCreateOnlyConcurrent},
		{"InvalidKeys", testInvalidKeys},
		{"SHA256", testSHA256},
		{"SHA256Mismatch", testSHA256Mismatch},
		{"SHA256MismatchLarge", testSHA256MismatchLarge},
		{"ShortRead", testShortRead},
		{"ContextCancelled", testContextCancelled},
		{"ContextCancelledMidPut", testContextCancelledMidPut},
		{"ConcurrentPuts", testConcurrentPuts},
		{"SweepLeavesObjects", testSweep},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tt.fn(t, newStore(t))
		})
	}
}

// Data returns n deterministic pseudo-random bytes for seed.
func Data(seed uint64, n int) []byte {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	b := make([]byte, n)
	for i := 0; i+8 <= n; i += 8 {
		v := r.Uint64()
		for j := range 8 {
			b[i+j] = byte(v >> (8 * j))
		}
	}
	for i := n - n%8; i < n; i++ {
		b[i] = byte(r.Uint32())
	}
	return b
}

func sum(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// put stores b under key and checks the returned info.
func put(t *testing.T, s storage.Store, key string, b []byte, size int64, opts storage.PutOptions) storage.ObjectInfo {
	t.Helper()
	info, err := s.Put(context.Background(), key, bytes.NewReader(b), size, opts)
	if err != nil {
		t.Fatalf("Put(%q, %d bytes, size %d): %v", key, len(b), size, err)
	}
	if info.Size != int64(len(b)) {
		t.Errorf("Put(%q) info.Size = %d, want %d", key, info.Size, len(b))
	}
	if info.SHA256 != sum(b) {
		t.Errorf("Put(%q) info.SHA256 = %q, want %q", key, info.SHA256, sum(b))
	}
	if info.Key != key {
		t.Errorf("Put(%q) info.Key = %q", key, info.Key)
	}
	return info
}

// get reads a range of key.
func get(t *testing.T, s storage.Store, key string, off, n int64) []byte {
	t.Helper()
	rc, err := s.Get(context.Background(), key, off, n)
	if err != nil {
		t.Fatalf("Get(%q, %d, %d): %v", key, off, n, err)
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		t.Fatalf("Get(%q, %d, %d): read: %v", key, off, n, err)
	}
	return b
}

// checkContent fails unless key holds want.
func checkContent(t *testing.T, s storage.Store, key string, want []byte) {
	t.Helper()
	got := get(t, s, key, 0, -1)
	if !bytes.Equal(got, want) {
		t.Fatalf("Get(%q) = %d bytes (sha256 %s), want %d bytes (sha256 %s)", key, len(got), sum(got), len(want), sum(want))
	}
}

// checkAbsent fails unless Stat and Get of key return ErrNotExist.
func checkAbsent(t *testing.T, s storage.Store, key string) {
	t.Helper()
	if info, err := s.Stat(context.Background(), key); !errors.Is(err, storage.ErrNotExist) {
		t.Fatalf("Stat(%q) = %+v, %v; want ErrNotExist", key, info, err)
	}
	if rc, err := s.Get(context.Background(), key, 0, -1); !errors.Is(err, storage.ErrNotExist) {
		if rc != nil {
			rc.Close()
		}
		t.Fatalf("Get(%q) error = %v; want ErrNotExist", key, err)
	}
}

func testPutGetKnownSize(t *testing.T, s storage.Store) {
	b := Data(1, 100_000)
	put(t, s, "a/b/known", b, int64(len(b)), storage.PutOptions{})
	checkContent(t, s, "a/b/known", b)
}

func testPutGetUnknownSize(t *testing.T, s storage.Store) {
	b := Data(2, 100_000)
	put(t, s, "unknown", b, -1, storage.PutOptions{})
	checkContent(t, s, "unknown", b)
}

func testEmptyObject(t *testing.T, s storage.Store) {
	put(t, s, "empty-known", nil, 0, storage.PutOptions{})
	put(t, s, "empty-unknown", nil, -1, storage.PutOptions{})
	for _, k := range []string{"empty-known", "empty-unknown"} {
		checkContent(t, s, k, []byte{})
		info, err := s.Stat(context.Background(), k)
		if err != nil || info.Size != 0 {
			t.Fatalf("Stat(%q) = %+v, %v; want size 0", k, info, err)
		}
	}
}

func testLargeObject(t *testing.T, s storage.Store) {
	b := Data(3, LargeSize+12345)
	put(t, s, "large/known", b, int64(len(b)), storage.PutOptions{})
	checkContent(t, s, "large/known", b)
	put(t, s, "large/unknown", b, -1, storage.PutOptions{})
	checkContent(t, s, "large/unknown", b)
	got := get(t, s, "large/known", LargeSize-100, 1000)
	if !bytes.Equal(got, b[LargeSize-100:LargeSize+900]) {
		t.Fatalf("range Get across a part boundary returned wrong bytes")
	}
}

func testOverwrite(t *testing.T, s storage.Store) {
	put(t, s, "k", []byte("first version"), -1, storage.PutOptions{})
	put(t, s, "k", []byte("second"), 6, storage.PutOptions{})
	checkContent(t, s, "k", []byte("second"))
}

func testRangeGet(t *testing.T, s storage.Store) {
	b := Data(4, 10_000)
	put(t, s, "r", b, int64(len(b)), storage.PutOptions{})
	n := int64(len(b))
	for _, tc := range []struct{ off, length int64 }{
		{0, -1}, {0, 10}, {5, -1}, {5, 10}, {n - 1, 1}, {n - 1, -1}, {0, n}, {1234, 4321}, {0, 1},
	} {
		want := b[tc.off:]
		if tc.length >= 0 {
			want = b[tc.off : tc.off+tc.length]
		}
		if got := get(t, s, "r", tc.off, tc.length); !bytes.Equal(got, want) {
			t.Errorf("Get(r, %d, %d) = %d bytes, want %d", tc.off, tc.length, len(got), len(want))
		}
	}
}

func testStat(t *testing.T, s storage.Store) {
	b := Data(5, 4321)
	put(t, s, "dir/stat", b, int64(len(b)), storage.PutOptions{})
	info, err := s.Stat(context.Background(), "dir/stat")
	if err != nil {
		t.Fatalf("Stat: %v", err)
	}
	if info.Key != "dir/stat" || info.Size != int64(len(b)) || info.ModTime.IsZero() {
		t.Fatalf("Stat = %+v, want key dir/stat, size %d, a ModTime", info, len(b))
	}
	if info.SHA256 != "" && info.SHA256 != sum(b) {
		t.Fatalf("Stat SHA256 = %q, want %q or empty", info.SHA256, sum(b))
	}
}

func testNotExist(t *testing.T, s storage.Store) {
	checkAbsent(t, s, "missing")
	checkAbsent(t, s, "no/such/dir/key")
	put(t, s, "file", []byte("x"), 1, storage.PutOptions{})
	checkAbsent(t, s, "fil")
	// "dir" is only a prefix of an object, not an object.
	put(t, s, "dir/obj", []byte("x"), 1, storage.PutOptions{})
	checkAbsent(t, s, "dir")
}

// list collects the keys List returns.
func list(t *testing.T, s storage.Store, prefix string) []string {
	t.Helper()
	var keys []string
	err := s.List(context.Background(), prefix, func(info storage.ObjectInfo) error {
		keys = append(keys, info.Key)
		return nil
	})
	if err != nil {
		t.Fatalf("List(%q): %v", prefix, err)
	}
	return keys
}

func testList(t *testing.T, s storage.Store) {
	// Chosen so that a per-directory walk sorted by names gets the order
	// wrong: '-' and '.' sort before '/', '0' after.
	keys := []string{"a-c", "a.x", "a/b", "a/c/d", "a/c/e", "a0", "ab", "b", "manifests/000100-0.json", "manifests/000200-0.json"}
	perm := rand.Perm(len(keys))
	sizes := map[string]int64{}
	for _, i := range perm {
		b := Data(uint64(i), i*10)
		sizes[keys[i]] = int64(len(b))
		put(t, s, keys[i], b, int64(len(b)), storage.PutOptions{})
	}
	for _, tc := range []struct {
		prefix string
		want   []string
	}{
		{"", keys},
		{"a", keys[:7]},
		{"a/", []string{"a/b", "a/c/d", "a/c/e"}},
		{"a/c", []string{"a/c/d", "a/c/e"}},
		{"a/c/", []string{"a/c/d", "a/c/e"}},
		{"manifests/0002", []string{"manifests/000200-0.json"}},
		{"zzz", nil},
		{"no/such/dir/", nil},
	} {
		if got := list(t, s, tc.prefix); !slices.Equal(got, tc.want) {
			t.Errorf("List(%q) = %q, want %q", tc.prefix, got, tc.want)
		}
	}
	err := s.List(context.Background(), "", func(info storage.ObjectInfo) error {
		if info.Size != sizes[info.Key] || info.ModTime.IsZero() {
			return fmt.Errorf("List info %+v: want size %d and a ModTime", info, sizes[info.Key])
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// testListDirs: storage.ListDirs gives the objects directly under a
// prefix and each folder beneath it once, in lexical order, whether the
// store lists one level itself (storage.DirLister) or in full, and so
// does the store wrapped as commands wrap it.
func testListDirs(t *testing.T, s storage.Store) {
	keys := []string{"a-c", "a.x", "a/b", "a/c/d", "a/c/e", "a0", "ab", "b", "manifests/000100-0.json", "manifests/000200-0.json"}
	for i, k := range keys {
		put(t, s, k, Data(uint64(i), i+1), int64(i+1), storage.PutOptions{})
	}
	wrapped := storage.Retry(storage.Recover(storage.Limit(s, 1<<30)), storage.RetryPolicy{})
	for _, tc := range []struct {
		prefix string
		want   []string
	}{
		{"", []string{"a-c", "a.x", "a/", "a0", "ab", "b", "manifests/"}},
		{"a", []string{"a-c", "a.x", "a/", "a0", "ab"}},
		{"a/", []string{"a/b", "a/c/"}},
		{"a/c/", []string{"a/c/d", "a/c/e"}},
		{"manifests/", []string{"manifests/000100-0.json", "manifests/000200-0.json"}},
		{"zzz", nil},
	} {
		for name, st := range map[string]storage.Store{"store": s, "wrapped": wrapped} {
			var got []string
			err := storage.ListDirs(context.Background(), st, tc.prefix, func(oi storage.ObjectInfo) error {
				got = append(got, oi.Key)
				if folder := storage.IsFolder(oi); !folder && (oi.Size == 0 || oi.ModTime.IsZero()) {
					return fmt.Errorf("object %+v: want its size and time", oi)
				}
				return nil
			})
			if err != nil || !slices.Equal(got, tc.want) {
				t.Errorf("ListDirs(%q) of the %s = %q, %v; want %q", tc.prefix, name, got, err, tc.want)
			}
		}
	}
}

func testListStops(t *testing.T, s storage.Store) {
	for i := range 5 {
		put(t, s, fmt.Sprintf("k%d", i), []byte("x"), 1, storage.PutOptions{})
	}
	stop := errors.New("stop here")
	n := 0
	err := s.List(context.Background(), "", func(storage.ObjectInfo) error {
		n++
		if n == 2 {
			return stop
		}
		return nil
	})
	if !errors.Is(err, stop) || n != 2 {
		t.Fatalf("List with fn failing on the 2nd call: err %v after %d calls; want the fn error after 2", err, n)
	}
}

func testDelete(t *testing.T, s storage.Store) {
	ctx := context.Background()
	put(t, s, "d/k", []byte("x"), 1, storage.PutOptions{})
	put(t, s, "d/keep", []byte("y"), 1, storage.PutOptions{})
	for range 2 {
		if err := s.Delete(ctx, "d/k"); err != nil {
			t.Fatalf("Delete(d/k): %v", err)
		}
	}
	checkAbsent(t, s, "d/k")
	if err := s.Delete(ctx, "never/existed"); err != nil {
		t.Fatalf("Delete of a missing key: %v", err)
	}
	if got := list(t, s, ""); !slices.Equal(got, []string{"d/keep"}) {
		t.Fatalf("List after Delete = %q, want [d/keep]", got)
	}
}

func testCreateOnly(t *testing.T, s storage.Store) {
	ctx := context.Background()
	put(t, s, "commit", []byte("one"), 3, storage.PutOptions{IfNotExists: true})
	_, err := s.Put(ctx, "commit", bytes.NewReader([]byte("two")), 3, storage.PutOptions{IfNotExists: true})
	if !errors.Is(err, storage.ErrExists) {
		t.Fatalf("second create-only Put: %v, want ErrExists", err)
	}
	if !storage.IsPermanent(err) {
		t.Errorf("ErrExists error %v is not permanent", err)
	}
	checkContent(t, s, "commit", []byte("one"))
	// Unknown size and large objects take other paths in some backends.
	_, err = s.Put(ctx, "commit", bytes.NewReader([]byte("three")), -1, storage.PutOptions{IfNotExists: true})
	if !errors.Is(err, storage.ErrExists) {
		t.Fatalf("create-only Put of unknown size over an existing key: %v, want ErrExists", err)
	}
	big := Data(6, LargeSize)
	_, err = s.Put(ctx, "commit", bytes.NewReader(big), int64(len(big)), storage.PutOptions{IfNotExists: true})
	if !errors.Is(err, storage.ErrExists) {
		t.Fatalf("large create-only Put over an existing key: %v, want ErrExists", err)
	}
	checkContent(t, s, "commit", []byte("one"))
	// A plain Put still replaces.
	put(t, s, "commit", []byte("four"), 4, storage.PutOptions{})
	checkContent(t, s, "commit", []byte("four"))
}

func testCreateOnlyConcurrent(t *testing.T, s storage.Store) {
	const n = 8
	for round := range 3 {
		key := fmt.Sprintf("race/%d", round)
		var wg sync.WaitGroup
		errs := make([]error, n)
		for i := range n {
			wg.Go(func() {
				b := []byte(fmt.Sprintf("writer %d", i))
				_, errs[i] = s.Put(context.Background(), key, bytes.NewReader(b), int64(len(b)), storage.PutOptions{IfNotExists: true})
			})
		}
		wg.Wait()
		winner := -1
		for i, err := range errs {
			switch {
			case err == nil:
				if winner >= 0 {
					t.Fatalf("%s: writers %d and %d both won a create-only Put", key, winner, i)
				}
				winner = i
			case !errors.Is(err, storage.ErrExists):
				t.Fatalf("%s: writer %d: %v, want nil or ErrExists", key, i, err)
			}
		}
		if winner < 0 {
			t.Fatalf("%s: no writer won", key)
		}
		checkContent(t, s, key, []byte(fmt.Sprintf("writer %d", winner)))
	}
}

// InvalidKeys are keys every backend must refuse with storage.ErrInvalidKey.
var InvalidKeys = []string{"", "/abs", "a//b", "a/", "./a", "a/./b", "../a", "a/..", "a/../b", "a\\b", "a\x00b"}

func testInvalidKeys(t *testing.T, s storage.Store) {
	ctx := context.Background()
	for _, k := range InvalidKeys {
		if _, err := s.Put(ctx, k, bytes.NewReader([]byte("x")), 1, storage.PutOptions{}); !errors.Is(err, storage.ErrInvalidKey) {
			t.Errorf("Put(%q): %v, want ErrInvalidKey", k, err)
		}
		if rc, err := s.Get(ctx, k, 0, -1); !errors.Is(err, storage.ErrInvalidKey) {
			if rc != nil {
				rc.Close()
			}
			t.Errorf("Get(%q): %v, want ErrInvalidKey", k, err)
		}
		if _, err := s.Stat(ctx, k); !errors.Is(err, storage.ErrInvalidKey) {
			t.Errorf("Stat(%q): %v, want ErrInvalidKey", k, err)
		}
		if err := s.Delete(ctx, k); !errors.Is(err, storage.ErrInvalidKey) {
			t.Errorf("Delete(%q): %v, want ErrInvalidKey", k, err)
		}
	}
	if got := list(t, s, ""); len(got) != 0 {
		t.Fatalf("invalid keys stored something: %q", got)
	}
}

func testSHA256(t *testing.T, s storage.Store) {
	for i, size := range []int{0, 1, 1000, 1 << 20} {
		b := Data(uint64(10+i), size)
		key := fmt.Sprintf("sha/%d", size)
		info := put(t, s, key, b, int64(len(b)), storage.PutOptions{SHA256: sum(b)})
		if info.SHA256 != sum(b) {
			t.Errorf("Put with SHA256 given: info.SHA256 = %q, want %q", info.SHA256, sum(b))
		}
		checkContent(t, s, key, b)
	}
	b := Data(20, LargeSize+1)
	put(t, s, "sha/large", b, int64(len(b)), storage.PutOptions{SHA256: sum(b)})
	put(t, s, "sha/large-unknown", b, -1, storage.PutOptions{SHA256: sum(b)})
	checkContent(t, s, "sha/large", b)
}

func checkMismatch(t *testing.T, s storage.Store, key string, b []byte, size int64) {
	t.Helper()
	wrong := sum(append([]byte("not "), b...))
	_, err := s.Put(context.Background(), key, bytes.NewReader(b), size, storage.PutOptions{SHA256: wrong})
	if !errors.Is(err, storage.ErrChecksum) {
		t.Fatalf("Put(%q, size %d) with a wrong SHA256: %v, want ErrChecksum", key, size, err)
	}
	if !storage.IsPermanent(err) {
		t.Errorf("checksum error %v is not permanent", err)
	}
	checkAbsent(t, s, key)
}

func testSHA256Mismatch(t *testing.T, s storage.Store) {
	b := Data(30, 5000)
	checkMismatch(t, s, "bad/known", b, int64(len(b)))
	checkMismatch(t, s, "bad/unknown", b, -1)
	checkMismatch(t, s, "bad/empty", nil, 0)
	// A mismatch on an overwrite keeps the old object.
	put(t, s, "bad/old", []byte("old"), 3, storage.PutOptions{})
	_, err := s.Put(context.Background(), "bad/old", bytes.NewReader(b), int64(len(b)), storage.PutOptions{SHA256: sum(nil)})
	if !errors.Is(err, storage.ErrChecksum) {
		t.Fatalf("overwrite with a wrong SHA256: %v, want ErrChecksum", err)
	}
	checkContent(t, s, "bad/old", []byte("old"))
}

func testSHA256MismatchLarge(t *testing.T, s storage.Store) {
	b := Data(31, LargeSize+7)
	checkMismatch(t, s, "bad/large", b, int64(len(b)))
	checkMismatch(t, s, "bad/large-unknown", b, -1)
}

// shortReader yields fewer bytes than the size its Put claims.
func testShortRead(t *testing.T, s storage.Store) {
	b := Data(32, 1000)
	_, err := s.Put(context.Background(), "short", bytes.NewReader(b), 2000, storage.PutOptions{})
	if err == nil {
		t.Fatalf("Put with size 2000 of a 1000-byte reader succeeded")
	}
	checkAbsent(t, s, "short")
}

func testContextCancelled(t *testing.T, s storage.Store) {
	put(t, s, "exists", []byte("x"), 1, storage.PutOptions{})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := s.Put(ctx, "new", bytes.NewReader([]byte("x")), 1, storage.PutOptions{}); err == nil {
		t.Errorf("Put with a cancelled context succeeded")
	}
	if rc, err := s.Get(ctx, "exists", 0, -1); err == nil {
		_, rerr := io.ReadAll(rc)
		rc.Close()
		if rerr == nil {
			t.Errorf("Get with a cancelled context succeeded")
		}
	}
	if _, err := s.Stat(ctx, "exists"); err == nil {
		t.Errorf("Stat with a cancelled context succeeded")
	}
	if err := s.List(ctx, "", func(storage.ObjectInfo) error { return nil }); err == nil {
		t.Errorf("List with a cancelled context succeeded")
	}
	if err := s.Delete(ctx, "exists"); err == nil {
		t.Errorf("Delete with a cancelled context succeeded")
	}
	checkAbsent(t, s, "new")
	checkContent(t, s, "exists", []byte("x"))
}

// cancelReader cancels its context once it has handed out after bytes, then
// keeps reading, as a producer would that does not watch ctx itself.
type cancelReader struct {
	r      io.Reader
	after  int
	read   int
	cancel context.CancelFunc
}

func (c *cancelReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.read += n
	if c.read >= c.after {
		c.cancel()
	}
	return n, err
}

func testContextCancelledMidPut(t *testing.T, s storage.Store) {
	for _, size := range []int{1 << 20, LargeSize + 1} {
		for _, known := range []bool{true, false} {
			key := fmt.Sprintf("cancel/%d-%v", size, known)
			b := Data(40, size)
			ctx, cancel := context.WithCancel(context.Background())
			r := &cancelReader{r: bytes.NewReader(b), after: size / 2, cancel: cancel}
			n := int64(-1)
			if known {
				n = int64(size)
			}
			_, err := s.Put(ctx, key, r, n, storage.PutOptions{})
			cancel()
			if err == nil {
				t.Fatalf("Put(%q) cancelled half way succeeded", key)
			}
			checkAbsent(t, s, key)
		}
	}
}

func testConcurrentPuts(t *testing.T, s storage.Store) {
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			b := Data(uint64(50+i), 50_000)
			key := fmt.Sprintf("par/%d", i)
			if _, err := s.Put(context.Background(), key, bytes.NewReader(b), int64(len(b)), storage.PutOptions{}); err != nil {
				t.Errorf("Put(%q): %v", key, err)
			}
		})
	}
	wg.Wait()
	if got := list(t, s, "par/"); len(got) != 8 {
		t.Fatalf("List(par/) after 8 concurrent Puts = %q", got)
	}
}

// testSweep: Puts that finished, and Puts that failed (which remove what
// they wrote), leave nothing for a Sweeper to offer, and a sweep that
// accepts whatever it is offered removes no object. A store that is not a
// Sweeper passes as it is.
func testSweep(t *testing.T, s storage.Store) {
	ctx := context.Background()
	small, large := Data(60, 1000), Data(61, LargeSize+1)
	put(t, s, "sweep/a", small, int64(len(small)), storage.PutOptions{})
	put(t, s, "sweep/dir/b", large, int64(len(large)), storage.PutOptions{})
	if _, err := s.Put(ctx, "sweep/short", bytes.NewReader(small), 2000, storage.PutOptions{}); err == nil {
		t.Fatal("Put with size 2000 of a 1000-byte reader succeeded")
	}
	if _, err := s.Put(ctx, "sweep/bad", bytes.NewReader(large), int64(len(large)), storage.PutOptions{SHA256: sum(small)}); err == nil {
		t.Fatal("Put with a wrong SHA256 succeeded")
	}
	var offered []storage.Leftover
	err := storage.Sweep(ctx, s, "", func(l storage.Leftover) (bool, error) {
		offered = append(offered, l)
		return true, nil
	})
	if err != nil {
		t.Fatalf("Sweep: %v", err)
	}
	if len(offered) > 0 {
		t.Errorf("Sweep offered %+v after Puts that all finished or failed", offered)
	}
	if got := list(t, s, "sweep/"); !slices.Equal(got, []string{"sweep/a", "sweep/dir/b"}) {
		t.Errorf("List(sweep/) after a sweep = %q", got)
	}
	checkContent(t, s, "sweep/a", small)
	checkContent(t, s, "sweep/dir/b", large)
	ctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, ok := s.(storage.Sweeper); ok {
		if err := storage.Sweep(ctx, s, "", func(storage.Leftover) (bool, error) { return true, nil }); err == nil {
			t.Errorf("Sweep with a cancelled context succeeded")
		}
	}
}
