package checkpoint

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"hash/crc32"
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
	if (RestoreOptions{}).Check != CheckCRC32C {
		t.Error("the zero RestoreOptions does not check by CRC32C")
	}
}

// flipBody flips one byte of a Get's body on its way: corruption in
// transit.
type flipBody struct {
	io.ReadCloser
	at int64 // the byte to flip, counted from the first read
	n  int64
}

func (f *flipBody) Read(p []byte) (int, error) {
	k, err := f.ReadCloser.Read(p)
	if f.at >= f.n && f.at < f.n+int64(k) {
		p[f.at-f.n] ^= 0x01
	}
	f.n += int64(k)
	return k, err
}

// flipping returns an OnGet of a mem.FaultStore over s that flips the
// byte at of each Get of key on its way.
func flipping(s storage.Store, key string, at int64) func(ctx context.Context, k string, off, n int64) (io.ReadCloser, error) {
	return func(ctx context.Context, k string, off, n int64) (io.ReadCloser, error) {
		rc, err := s.Get(ctx, k, off, n)
		if err != nil || k != key {
			return rc, err
		}
		return &flipBody{ReadCloser: rc, at: at}, nil
	}
}

// checkStores runs fn against a fresh prefix of the test MinIO server, a
// directory store and the in-memory store: what a restore checks comes
// from the manifest, whatever the store keeps.
func checkStores(t *testing.T, fn func(t *testing.T, s storage.Store)) {
	t.Helper()
	t.Run("s3", func(t *testing.T) { fn(t, newS3Store(t)) })
	t.Run("fs", func(t *testing.T) {
		s, err := fsNew(t)
		if err != nil {
			t.Fatal(err)
		}
		fn(t, s)
	})
	t.Run("mem", func(t *testing.T) { fn(t, mem.New()) })
}

// bigChunk is the second chunk of a file of res with more than two chunks.
func bigChunk(res *UploadResult) Chunk {
	return res.Manifest.Files[slices.IndexFunc(res.Manifest.Files, func(f File) bool { return len(f.Chunks) > 2 })].Chunks[1]
}

// rewriteManifest replaces the manifest of res in s with what edit makes
// of it, as a manifest written by another lifeboat would be.
func rewriteManifest(t *testing.T, s storage.Store, res *UploadResult, edit func(m *Manifest)) {
	t.Helper()
	m, err := DecodeManifest(getBytes(t, s, res.Key))
	if err != nil {
		t.Fatal(err)
	}
	edit(m)
	b, err := m.Encode()
	if err != nil {
		t.Fatal(err)
	}
	putBytes(t, s, res.Key, b)
}

// withoutCRC32C removes every chunk's CRC32C from m: a manifest written
// before they were recorded.
func withoutCRC32C(m *Manifest) {
	for i := range m.Files {
		for j := range m.Files[i].Chunks {
			m.Files[i].Chunks[j].CRC32C = ""
		}
	}
}

// TestRestoreChecksEachChunk: a restore counts every chunk under the
// check that ran, on every store alike: by default the CRC32C the
// manifest records, with CheckSHA256 the SHA-256 (and the recorded CRC32C
// as well); a manifest that records no CRC32C (written before they were)
// has its chunks checked by SHA-256 under either.
func TestRestoreChecksEachChunk(t *testing.T) {
	checkStores(t, func(t *testing.T, s storage.Store) {
		tr := sampleTree(41)
		res := upload(t, newUploader(s, nil), 1, 0, 1, tr)
		res2 := upload(t, newUploader(s, nil), 2, 0, 1, sampleTree(44))
		rewriteManifest(t, s, res2, withoutCRC32C)
		for _, tc := range []struct {
			step  int64
			tr    tree
			check Check
			want  Checked
		}{
			{1, tr, CheckCRC32C, Checked{CRC32C: res.Chunks}},
			{1, tr, CheckSHA256, Checked{SHA256: res.Chunks}},
			{2, sampleTree(44), CheckCRC32C, Checked{SHA256: res2.Chunks}},
			{2, sampleTree(44), CheckSHA256, Checked{SHA256: res2.Chunks}},
		} {
			t.Run(fmt.Sprintf("step %d %v", tc.step, tc.check), func(t *testing.T) {
				dir := t.TempDir()
				got, err := Restore(context.Background(), retried(s), tc.step, 0, dir, RestoreOptions{Check: tc.check})
				if err != nil {
					t.Fatal(err)
				}
				checkTree(t, dir, tc.tr)
				if got.Checked != tc.want {
					t.Errorf("Checked = %+v, want %+v", got.Checked, tc.want)
				}
			})
		}
	})
}

// TestRestoreRefusesBadChunk damages one chunk of a snapshot, or what its
// manifest records of it, in each way a check must find, and restores it
// with each check: every restore fails with ErrCorrupt and leaves the
// directory as it was (a user's file, no partial file moved into place,
// no temporary directory).
func TestRestoreRefusesBadChunk(t *testing.T) {
	defer verifyNone(t)
	type damage struct {
		name string
		// store damages the chunk at key in s, or the manifest of res;
		// flip, when not 0, flips that byte of each Get of the chunk.
		store func(t *testing.T, s storage.Store, res *UploadResult, key string, b []byte)
		flip  int64
	}
	damages := []damage{
		{name: "flipped in transit", flip: testChunk / 3},
		// Another writer stores other bytes of the same length under
		// the key, with their own checksums (as any S3 client does):
		// the server's CRC32C matches them, the manifest's does not.
		{name: "other bytes under the key", store: func(t *testing.T, s storage.Store, _ *UploadResult, key string, b []byte) {
			b = bytes.Clone(b)
			b[len(b)/2] ^= 0x10
			putBytes(t, s, key, b)
		}},
		// A manifest written before CRC32Cs were recorded: the SHA-256
		// finds the flipped byte.
		{name: "no CRC32C recorded, flipped in transit", flip: 5, store: func(t *testing.T, s storage.Store, res *UploadResult, _ string, _ []byte) {
			rewriteManifest(t, s, res, withoutCRC32C)
		}},
		// The bytes are right; what the manifest records of them is not.
		{name: "the manifest's CRC32C is wrong", store: func(t *testing.T, s storage.Store, res *UploadResult, key string, _ []byte) {
			rewriteManifest(t, s, res, func(m *Manifest) {
				for i := range m.Files {
					for j, c := range m.Files[i].Chunks {
						if chunkKey(c.SHA256) == key {
							crc, _ := c.recordedCRC32C()
							m.Files[i].Chunks[j].CRC32C = crc32cHex(crc ^ 0x100)
						}
					}
				}
			})
		}},
	}
	checkStores(t, func(t *testing.T, s storage.Store) {
		tr := sampleTree(42)
		res := upload(t, newUploader(s, nil), 1, 0, 1, tr)
		key := chunkKey(bigChunk(res).SHA256)
		good, manifest := getBytes(t, s, key), getBytes(t, s, res.Key)
		for _, d := range damages {
			t.Run(d.name, func(t *testing.T) {
				putBytes(t, s, key, good)
				putBytes(t, s, res.Key, manifest)
				if d.store != nil {
					d.store(t, s, res, key, good)
				}
				fs := &mem.FaultStore{Inner: s}
				if d.flip != 0 {
					fs.OnGet = flipping(s, key, d.flip)
				}
				for _, check := range []Check{CheckCRC32C, CheckSHA256} {
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
		putBytes(t, s, res.Key, manifest)
	})
}

// TestCRC32CDoesNotTrustTheWriter: a writer of the bucket that stores other
// bytes under a chunk's key and declares the chunk's SHA-256 with them
// (and their own CRC32C, which the server checks and keeps) is found by
// either check: the CRC32C a restore compares with is the one lifeboat
// recorded in the manifest from the trainer's bytes, not the server's.
func TestCRC32CDoesNotTrustTheWriter(t *testing.T) {
	s := newS3Store(t)
	res := upload(t, newUploader(s, nil), 1, 0, 1, sampleTree(43))
	c := bigChunk(res)
	key := chunkKey(c.SHA256)
	other := bytes.Clone(getBytes(t, s, key))
	other[7] ^= 0x40
	_, crc := storage.Checksums(other)
	if _, err := s.Put(context.Background(), key, bytes.NewReader(other), int64(len(other)), storage.PutOptions{SHA256: c.SHA256, CRC32C: crc}); err != nil {
		t.Fatal(err)
	}
	for _, check := range []Check{CheckCRC32C, CheckSHA256} {
		got, err := Restore(context.Background(), s, 1, 0, t.TempDir(), RestoreOptions{Check: check})
		if !errors.Is(err, ErrCorrupt) {
			t.Errorf("Restore with %v = %+v, %v; want ErrCorrupt", check, got, err)
		}
	}
}

// TestSHA256FindsChosenBytes pins what docs/FORMAT.md says CheckCRC32C does
// not find: bytes chosen on purpose to have the CRC32C the manifest
// records. CheckSHA256 finds them.
func TestSHA256FindsChosenBytes(t *testing.T) {
	s := mem.New()
	res := upload(t, newUploader(s, nil), 1, 0, 1, sampleTree(45))
	key := chunkKey(bigChunk(res).SHA256)
	good := getBytes(t, s, key)
	chosen := sameCRC32C(good, 100, 1000)
	if bytes.Equal(chosen, good) || crc32.Checksum(chosen, storage.CRC32CTable) != crc32.Checksum(good, storage.CRC32CTable) {
		t.Fatal("sameCRC32C did not make other bytes with the same CRC32C")
	}
	putBytes(t, s, key, chosen)
	if _, err := Restore(context.Background(), s, 1, 0, t.TempDir(), RestoreOptions{Check: CheckCRC32C}); err != nil {
		t.Errorf("Restore with crc32c = %v; want the chosen bytes to pass it", err)
	}
	if _, err := Restore(context.Background(), s, 1, 0, t.TempDir(), RestoreOptions{Check: CheckSHA256}); !errors.Is(err, ErrCorrupt) {
		t.Errorf("Restore with sha256 = %v; want ErrCorrupt", err)
	}
}

// sameCRC32C returns a copy of b with byte at changed and the 4 bytes at
// fix chosen so that its CRC32C is b's. A CRC is affine in its input: the
// change of a same-length input's CRC is linear in the bits changed, and
// the 32 bits of any 4 bytes in a row map onto all 32 bits of it, so the
// change at fix that cancels the one at at is solved for.
func sameCRC32C(b []byte, at, fix int) []byte {
	zero := crc32.Checksum(make([]byte, len(b)), storage.CRC32CTable)
	delta := func(set func(d []byte)) uint32 { // the CRC change of d's bits
		d := make([]byte, len(b))
		set(d)
		return crc32.Checksum(d, storage.CRC32CTable) ^ zero
	}
	target := delta(func(d []byte) { d[at] = 0x5a })
	// Gaussian elimination over GF(2): basis[k] is a sum of the CRC
	// changes of some bits at fix (which: its combo) whose highest set
	// bit is k.
	var basis [32]struct{ v, combo uint32 }
	for i := range 32 {
		v, combo := delta(func(d []byte) { d[fix+i/8] = 1 << (i % 8) }), uint32(1)<<i
		for k := 31; k >= 0 && v != 0; k-- {
			switch {
			case v>>k&1 == 0:
			case basis[k].v == 0:
				basis[k].v, basis[k].combo, v = v, combo, 0
			default:
				v, combo = v^basis[k].v, combo^basis[k].combo
			}
		}
	}
	var bits uint32
	for k := 31; k >= 0; k-- {
		if target>>k&1 == 1 {
			target, bits = target^basis[k].v, bits^basis[k].combo
		}
	}
	out := bytes.Clone(b)
	out[at] ^= 0x5a
	for i := range 32 {
		if bits>>i&1 == 1 {
			out[fix+i/8] ^= 1 << (i % 8)
		}
	}
	return out
}
