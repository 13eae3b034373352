package storage

import (
	"crypto/sha256"
	"encoding/hex"
	"hash/crc32"
	"math/rand/v2"
	"testing"
)

// TestChecksums checks the one-pass SHA-256 and CRC32C against the standard
// library's separate sums, across block boundaries.
func TestChecksums(t *testing.T) {
	for _, n := range []int{0, 1, 64<<10 - 1, 64 << 10, 64<<10 + 1, 3<<20 + 7} {
		b := make([]byte, n)
		rand.NewChaCha8([32]byte{byte(n), byte(n >> 8), byte(n >> 16)}).Read(b)
		sum, crc := Checksums(b)
		want := sha256.Sum256(b)
		wantCRC := crc32.Checksum(b, crc32.MakeTable(crc32.Castagnoli))
		if sum != hex.EncodeToString(want[:]) || crc != wantCRC {
			t.Errorf("Checksums(%d bytes) = %s %08x, want %x %08x", n, sum, crc, want, wantCRC)
		}
	}
}

// TestWriteSums checks that sums written part by part equal the sums of
// the whole, as a multipart upload uses them.
func TestWriteSums(t *testing.T) {
	b := make([]byte, 5<<20+3)
	rand.NewChaCha8([32]byte{9}).Read(b)
	h := sha256.New()
	for _, part := range [][]byte{b[:1], b[1 : 2<<20], b[2<<20:]} {
		if got, want := WriteSums(h, 0, part), crc32.Checksum(part, crc32.MakeTable(crc32.Castagnoli)); got != want {
			t.Errorf("part CRC32C %08x, want %08x", got, want)
		}
	}
	if want := sha256.Sum256(b); hex.EncodeToString(h.Sum(nil)) != hex.EncodeToString(want[:]) {
		t.Errorf("running SHA-256 %x, want %x", h.Sum(nil), want)
	}
}
