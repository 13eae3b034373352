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
