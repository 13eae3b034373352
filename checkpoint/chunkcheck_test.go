package checkpoint

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/lifeboat-project/lifeboat/storage"
	"github.com/lifeboat-project/lifeboat/storage/mem"
)

func TestParseCheck(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Check
		ok   bool
	}{
		{"sha256", CheckSHA256, true},
		{"crc32c", CheckCRC32C, true},
		{"", 0, false},
		{"SHA256", 0, false},
		{"crc32", 0, false},
		{"none", 0, false},
	} {
		got, err := ParseCheck(tc.in)
		if (err == nil) != tc.ok || (tc.ok && got != tc.want) {
			t.Errorf("ParseCheck(%q) = %v, %v; want %v (ok %v)", tc.in, got, err, tc.want, tc.ok)
		}
		if tc.ok && got.String() != tc.in {
			t.Errorf("%v.String() = %q, want %q", got, got.String(), tc.in)
		}
	}
	if (RestoreOptions{}).Check != CheckSHA256 {
		t.Error("the zero RestoreOptions does not check by SHA-256")
	}
}

// flipBody flips one byte of a Get's body on its way and passes on what
// the store said of the object: corruption in transit.
type flipBody struct {
	io.ReadCloser
	at   int64 // the byte to flip, counted from the first read
	n    int64
	sums storage.StoredSums
}

func (f *flipBody) Read(p []byte) (int, error) {
	k, err := f.ReadCloser.Read(p)
	if f.at >= f.n && f.at < f.n+int64(k) {
		p[f.at-f.n] ^= 0x01
	}
	f.n += int64(k)
	return k, err
}

func (f *flipBody) StoredSums() storage.StoredSums { return f.sums }

// checkStores runs fn against a fresh prefix of the test MinIO server
// (whose chunks carry a CRC32C the server checked), a directory store and
// the in-memory store (whose chunks carry none).
func checkStores(t *testing.T, fn func(t *testing.T, s storage.Store, crcs bool)) {
	t.Helper()
	t.Run("s3", func(t *testing.T) { fn(t, newS3Store(t), true) })
	t.Run("fs", func(t *testing.T) {
		s, err := fsNew(t)
		if err != nil {
			t.Fatal(err)
		}
		fn(t, s, false)
	})
	t.Run("mem", func(t *testing.T) { fn(t, mem.New(), false) })
}

// TestRestoreChecksEachChunk: with either check, a restore counts every
// chunk under the check that ran: CRC32C where the store returned one the
// chunk's writer declared its SHA-256 with (MinIO), SHA-256 elsewhere (a
// directory store, the in-memory store: no stored CRC32C), and always
// SHA-256 with CheckSHA256.
func TestRestoreChecksEachChunk(t *testing.T) {
	checkStores(t, func(t *testing.T, s storage.Store, crcs bool) {
		tr := sampleTree(41)
		res := upload(t, newUploader(s, nil), 1, 0, 1, tr)
		for _, check := range []Check{CheckSHA256, CheckCRC32C} {
			t.Run(check.String(), func(t *testing.T) {
				dir := t.TempDir()
				got, err := Restore(context.Background(), retried(s), 1, 0, dir, RestoreOptions{Check: check})
				if err != nil {
					t.Fatal(err)
				}
				checkTree(t, dir, tr)
				want := Checked{SHA256: res.Chunks}
				if check == CheckCRC32C && crcs {
					want = Checked{CRC32C: res.Chunks}
				}
				if got.Checked != want {
					t.Errorf("Checked = %+v, want %+v", got.Checked, want)
				}
			})
		}
	})
}

// TestRestoreRefusesBadChunk damages one chunk of a snapshot, in each way
// a check must find, and restores it with each check: every restore fails
// with ErrCorrupt and leaves the directory as it was (a user's file, no
// partial file moved into place, no temporary directory).
func TestRestoreRefusesBadChunk(t *testing.T) {
	defer verifyNone(t)
	type damage struct {
		name string
		// store damages the chunk at key in s; get, when set, wraps the
		// store's Gets instead.
		store func(t *testing.T, s storage.Store, key string, b []byte)
		get   func(key string) func(ctx context.Context, s storage.Store, k string, off, n int64) (io.ReadCloser, error)
	}
	damages := []damage{
		{name: "flipped in transit", get: func(key string) func(ctx context.Context, s storage.Store, k string, off, n int64) (io.ReadCloser, error) {
			return func(ctx context.Context, s storage.Store, k string, off, n int64) (io.ReadCloser, error) {
				rc, err := s.Get(ctx, k, off, n)
				if err != nil || k != key {
					return rc, err
				}
				return &flipBody{ReadCloser: rc, at: testChunk / 3, sums: storage.BodySums(rc)}, nil
			}
		}},
		// Another writer stores other bytes of the same length under
		// the key, with their own checksums (as any S3 client does):
		// the server's CRC32C matches them, but the SHA-256 they were
		// declared with is not the chunk's.
		{name: "other bytes under the key", store: func(t *testing.T, s storage.Store, key string, b []byte) {
			b = bytes.Clone(b)
			b[len(b)/2] ^= 0x10
			putBytes(t, s, key, b)
		}},
		// An older client's PUT: the SHA-256 declared and checked by the
		// server, no CRC32C kept. (Bytes that do not match it cannot be
		// stored, so the bytes flip on their way back.)
		{name: "stored without a CRC32C, flipped in transit", store: func(t *testing.T, s storage.Store, key string, b []byte) {
			sum, _ := storage.Checksums(b)
			if _, err := s.Put(context.Background(), key, bytes.NewReader(b), int64(len(b)), storage.PutOptions{SHA256: sum}); err != nil {
				t.Fatal(err)
			}
		}, get: func(key string) func(ctx context.Context, s storage.Store, k string, off, n int64) (io.ReadCloser, error) {
			return func(ctx context.Context, s storage.Store, k string, off, n int64) (io.ReadCloser, error) {
				rc, err := s.Get(ctx, k, off, n)
				if err != nil || k != key {
					return rc, err
				}
				if storage.BodySums(rc).HasCRC32C {
					t.Errorf("the store returned a CRC32C for %s, stored without one", k)
				}
				return &flipBody{ReadCloser: rc, at: 5, sums: storage.BodySums(rc)}, nil
			}
		}},
	}
	checkStores(t, func(t *testing.T, s storage.Store, crcs bool) {
		tr := sampleTree(42)
		res := upload(t, newUploader(s, nil), 1, 0, 1, tr)
		c := res.Manifest.Files[slices.IndexFunc(res.Manifest.Files, func(f File) bool { return len(f.Chunks) > 2 })].Chunks[1]
		key := chunkKey(c.SHA256)
		good := getBytes(t, s, key)
		for _, d := range damages {
			t.Run(d.name, func(t *testing.T) {
				putBytes(t, s, key, good)
				if d.store != nil {
					d.store(t, s, key, good)
				}
				fs := &mem.FaultStore{Inner: s}
				if d.get != nil {
					get := d.get(key)
					fs.OnGet = func(ctx context.Context, k string, off, n int64) (io.ReadCloser, error) {
						return get(ctx, s, k, off, n)
					}
				}
				for _, check := range []Check{CheckSHA256, CheckCRC32C} {
					t.Run(check.String(), func(t *testing.T) {
						dir := t.TempDir()
						user := filepath.Join(dir, "notes.txt")
						if err := os.WriteFile(user, []byte("mine"), 0o644); err != nil {
							t.Fatal(err)
						}
						_, err := Restore(context.Background(), retried(fs), 1, 0, dir, RestoreOptions{Check: check})
						if !errors.Is(err, ErrCorrupt) {
							t.Fatalf("Restore = %v, want ErrCorrupt", err)
						}
						checkTree(t, dir, tree{"notes.txt": []byte("mine")})
					})
				}
			})
		}
		putBytes(t, s, key, good)
	})
}

// TestCRC32CTrustsTheWriter pins what docs/FORMAT.md says CheckCRC32C
// trusts: a writer that declares a chunk's SHA-256 over other bytes (and
// their CRC32C, which the server checks) is found by CheckSHA256 only.
func TestCRC32CTrustsTheWriter(t *testing.T) {
	s := newS3Store(t)
	tr := sampleTree(43)
	res := upload(t, newUploader(s, nil), 1, 0, 1, tr)
	c := res.Manifest.Files[slices.IndexFunc(res.Manifest.Files, func(f File) bool { return len(f.Chunks) > 2 })].Chunks[1]
	key := chunkKey(c.SHA256)
	other := bytes.Clone(getBytes(t, s, key))
	other[7] ^= 0x40
	_, crc := storage.Checksums(other)
	if _, err := s.Put(context.Background(), key, bytes.NewReader(other), int64(len(other)), storage.PutOptions{SHA256: c.SHA256, CRC32C: crc}); err != nil {
		t.Fatal(err)
	}
	if _, err := Restore(context.Background(), s, 1, 0, t.TempDir(), RestoreOptions{Check: CheckSHA256}); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Restore with sha256 = %v, want ErrCorrupt", err)
	}
	got, err := Restore(context.Background(), s, 1, 0, t.TempDir(), RestoreOptions{Check: CheckCRC32C})
	if err != nil || got.Checked.SHA256 != 0 {
		t.Fatalf("Restore with crc32c = %+v, %v; want the writer's bytes taken on its word", got, err)
	}
}
