package storage

import (
	"crypto/sha256"
	"encoding/hex"
	"hash/crc32"
)

// CRC32CTable is the Castagnoli table, the CRC32C of S3's
// x-amz-checksum-crc32c.
var CRC32CTable = crc32.MakeTable(crc32.Castagnoli)

// Checksums returns b's lower-case hex SHA-256 and its CRC32C, computed in
// one pass: block by block, each block read from memory once for both. A
// caller that passes both in PutOptions vouches, by using this, that they
// describe the same bytes.
func Checksums(b []byte) (sha256Hex string, crc32c uint32) {
	const block = 64 << 10
	h := sha256.New()
	for len(b) > 0 {
		n := min(len(b), block)
		h.Write(b[:n])
		crc32c = crc32.Update(crc32c, CRC32CTable, b[:n])
		b = b[n:]
	}
	return hex.EncodeToString(h.Sum(nil)), crc32c
}
