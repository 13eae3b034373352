package checkpoint

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash"
	"hash/crc32"

	"github.com/lifeboat-project/lifeboat/storage"
)

// Check is how a restore checks each chunk's bytes as they are downloaded
// (docs/FORMAT.md, "Checking a restore").
type Check int

const (
	// CheckCRC32C checks each chunk against the CRC32C its manifest
	// records: the uploader computed it from the bytes it read, in the
	// pass that computed their SHA-256, so whatever the store or another
	// writer did to them since (on the way, at rest, another tool
	// writing the chunk's key) is found, at a fraction of SHA-256's cost;
	// what it does not find is bytes chosen on purpose to have the same
	// CRC32C. A chunk whose manifest records none (written before they
	// were recorded) is checked by SHA-256. The default.
	CheckCRC32C Check = iota
	// CheckSHA256 recomputes every chunk's SHA-256, its content address,
	// and checks the CRC32C its manifest records as well: the bytes are
	// the ones the manifest names, even if someone who can write chunks
	// but not manifests chose them. For stores that others can write.
	CheckSHA256
)

// ParseCheck parses a Check's name: "crc32c" or "sha256".
func ParseCheck(s string) (Check, error) {
	switch s {
	case "sha256":
		return CheckSHA256, nil
	case "crc32c":
		return CheckCRC32C, nil
	}
	return 0, fmt.Errorf("unknown check %q; want crc32c or sha256", s)
}

func (c Check) String() string {
	if c == CheckCRC32C {
		return "crc32c"
	}
	return "sha256"
}

// chunkSum is one chunk's check while its bytes arrive: its SHA-256, its
// CRC32C, or both.
type chunkSum struct {
	h      hash.Hash // SHA-256; nil when only the CRC32C is checked
	crc    uint32
	want   uint32 // the CRC32C the manifest records
	hasCRC bool   // the manifest records one
}

// newChunkSum chooses the check of chunk c under check.
func newChunkSum(check Check, c Chunk) *chunkSum {
	s := &chunkSum{}
	s.want, s.hasCRC = c.recordedCRC32C()
	if check == CheckSHA256 || !s.hasCRC {
		s.h = sha256.New()
	}
	return s
}

func (s *chunkSum) write(b []byte) {
	switch {
	case s.h == nil:
		s.crc = crc32.Update(s.crc, storage.CRC32CTable, b)
	case s.hasCRC:
		s.crc = storage.WriteSums(s.h, s.crc, b)
	default:
		s.h.Write(b)
	}
}

// used is the check that ran: CheckSHA256 or CheckCRC32C.
func (s *chunkSum) used() Check {
	if s.h != nil {
		return CheckSHA256
	}
	return CheckCRC32C
}

// verify is nil when the bytes written match, else what is wrong.
func (s *chunkSum) verify(c Chunk) error {
	if s.h != nil {
		if got := hex.EncodeToString(s.h.Sum(nil)); got != c.SHA256 {
			return fmt.Errorf("chunk %s has sha256 %s: %w", chunkKey(c.SHA256), got, ErrCorrupt)
		}
	}
	if s.hasCRC && s.crc != s.want {
		return fmt.Errorf("chunk %s has CRC32C %s, its manifest records %s: %w", chunkKey(c.SHA256), crc32cHex(s.crc), c.CRC32C, ErrCorrupt)
	}
	return nil
}
