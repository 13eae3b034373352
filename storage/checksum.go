package storage

import (
	"crypto/sha256"
	"encoding/hex"
	"hash"
	"hash/crc32"
)

// CRC32CTable is the Castagnoli table, the CRC32C of S3's
// x-amz-checksum-crc32c.
var CRC32CTable = crc32.MakeTable(crc32.Castagnoli)

// Checksums returns b's lower-case hex SHA-256 and its CRC32C, computed in
// one pass (WriteSums). A caller that passes both in PutOptions vouches, by
// using this, that they describe the same bytes.
func Checksums(b []byte) (sha256Hex string, crc32c uint32) {
	h := sha256.New()
	crc32c = WriteSums(h, 0, b)
	return hex.EncodeToString(h.Sum(nil)), crc32c
}

// WriteSums writes b into h and returns crc updated with b (CRC32C), block
// by block, so that each block is read from memory once for both: the
// CRC32C then reads what the hash has just pulled into the cache, and costs
// next to nothing, where a second pass over a large buffer would be bound
// by memory bandwidth.
func WriteSums(h hash.Hash, crc uint32, b []byte) uint32 {
	const block = 64 << 10
	for len(b) > 0 {
		n := min(len(b), block)
		h.Write(b[:n])
		crc = crc32.Update(crc, CRC32CTable, b[:n])
		b = b[n:]
	}
	return crc
}
