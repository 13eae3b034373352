package s3

import (
	"bytes"
	"context"
	"hash/crc32"
	"io"
	"testing"

	"github.com/minio/minio-go/v7"

	"github.com/lifeboat-project/lifeboat/storage"
	"github.com/lifeboat-project/lifeboat/storage/storagetest"
)

// TestGetStoredSums: a Get of a whole object says the CRC32C the server
// checked and keeps for it, and the SHA-256 its writer declared; a ranged
// Get, a multipart object (a checksum of part checksums) and an object
// stored without a checksum say no CRC32C; the wrappers pass it on.
func TestGetStoredSums(t *testing.T) {
	s := newTestStore(t, testConfig(t))
	ctx := context.Background()
	b := storagetest.Data(5, 3000)
	hexSum, crc := storage.Checksums(b)
	if _, err := s.Put(ctx, "one", bytes.NewReader(b), int64(len(b)), storage.PutOptions{SHA256: hexSum, CRC32C: crc}); err != nil {
		t.Fatal(err)
	}
	big := storagetest.Data(6, 2*MinPartSize+1)
	if _, err := s.Put(ctx, "multi", bytes.NewReader(big), -1, storage.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	// Another writer's PUT with no checksum at all (minio-go's low-level
	// call adds none).
	if _, err := s.core.PutObject(ctx, s.cfg.Bucket, s.prefix+"bare", bytes.NewReader(b), int64(len(b)), "", "",
		minio.PutObjectOptions{}); err != nil { // signed payload, over http: no trailing CRC
		t.Fatal(err)
	}
	sums := func(st storage.Store, key string, off, n int64) storage.StoredSums {
		t.Helper()
		rc, err := st.Get(ctx, key, off, n)
		if err != nil {
			t.Fatal(err)
		}
		defer rc.Close()
		if _, err := io.Copy(io.Discard, rc); err != nil {
			t.Fatal(err)
		}
		return storage.BodySums(rc)
	}
	wrapped := storage.Retry(storage.Recover(s), storage.RetryPolicy{})
	for name, st := range map[string]storage.Store{"bare": s, "wrapped": wrapped} {
		if got := sums(st, "one", 0, -1); !got.HasCRC32C || got.CRC32C != crc || got.SHA256 != hexSum {
			t.Errorf("%s: Get(one) sums = %+v, want CRC32C %08x and SHA-256 %s", name, got, crc, hexSum)
		}
		if got := sums(st, "one", 10, -1); got.HasCRC32C {
			t.Errorf("%s: ranged Get(one) sums = %+v, want no CRC32C", name, got)
		}
		if got := sums(st, "multi", 0, -1); got.HasCRC32C {
			t.Errorf("%s: Get(multi) sums = %+v, want no CRC32C (composite)", name, got)
		}
		if got := sums(st, "bare", 0, -1); got.HasCRC32C || got.SHA256 != "" {
			t.Errorf("%s: Get(bare) sums = %+v, want none", name, got)
		}
	}
	if crc32.Checksum(b, storage.CRC32CTable) != crc {
		t.Fatal("Checksums' CRC32C is not Castagnoli's")
	}
}
