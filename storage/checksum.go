package storage

import (
	"crypto/sha256"
	"encoding/hex"
	"hash"
	"hash/crc32"
	"io"
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

// StoredSums is what a store said, with a Get's bytes, about the object
// those bytes come from: the checksums it keeps with it. The zero value
// says nothing.
type StoredSums struct {
	// SHA256 is the lower-case hex SHA-256 the object's writer declared
	// (PutOptions.SHA256, kept as metadata), "" when none. The store did
	// not check it against the bytes: it is the writer's word.
	SHA256 string
	// CRC32C is the CRC32C of the whole object that the server checked
	// against the bytes it received when the object was written, and
	// keeps with it; valid when HasCRC32C. A server answers it to a Get of
	// the whole object only (S3's x-amz-checksum-mode: ENABLED), and only
	// for an object written in one request with that checksum (a
	// multipart upload's is a checksum of its parts' checksums).
	CRC32C    uint32
	HasCRC32C bool
}

// SumsReader is a Get's body that knows the object's StoredSums. Wrappers
// of a Store pass it on (BodySums).
type SumsReader interface {
	io.Reader
	StoredSums() StoredSums
}

// BodySums returns the StoredSums of a body that Get returned, or the zero
// StoredSums when the store said nothing.
func BodySums(r io.Reader) StoredSums {
	if sr, ok := r.(SumsReader); ok {
		return sr.StoredSums()
	}
	return StoredSums{}
}
