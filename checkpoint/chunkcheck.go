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
	// CheckSHA256 recomputes every chunk's SHA-256, its content address:
	// the bytes are the ones the manifest names, whoever wrote the
	// object. The default.
	CheckSHA256 Check = iota
	// CheckCRC32C checks a chunk against the CRC32C the server checked
	// when it stored the object and returns with it, when the object's
	// writer declared the chunk's SHA-256 with it (as lifeboat's uploads
	// do, computing both in one pass): corruption on the way and at rest
	// is found at a fraction of SHA-256's cost. A chunk the server
	// returns no such CRC32C for (a store that keeps none, a file://
	// store, a chunk stored before CRC32Cs were, another writer's object)
	// is checked by SHA-256. It trusts whoever can write the store: a
	// writer that declares a chunk's SHA-256 over other bytes is not
	// found. For stores only this job's uploads write.
	CheckCRC32C
)

// ParseCheck parses a Check's name: "sha256" or "crc32c".
func ParseCheck(s string) (Check, error) {
	switch s {
	case "sha256":
		return CheckSHA256, nil
	case "crc32c":
		return CheckCRC32C, nil
	}
	return 0, fmt.Errorf("unknown check %q; want sha256 or crc32c", s)
}

func (c Check) String() string {
	if c == CheckCRC32C {
		return "crc32c"
	}
	return "sha256"
}

// chunkSum is one chunk's check while its bytes arrive: its SHA-256, or
// its CRC32C against the one the store returned.
type chunkSum struct {
	h      hash.Hash // SHA-256; nil when the CRC32C is checked
	crc    uint32
	stored uint32 // the CRC32C the store returned
}

// newChunkSum chooses the check of chunk c whose object the store
// described with sums, under check.
func newChunkSum(check Check, c Chunk, sums storage.StoredSums) *chunkSum {
	if check == CheckCRC32C && sums.HasCRC32C && sums.SHA256 == c.SHA256 {
		return &chunkSum{stored: sums.CRC32C}
	}
	return &chunkSum{h: sha256.New()}
}

func (s *chunkSum) write(b []byte) {
	if s.h != nil {
		s.h.Write(b)
		return
	}
	s.crc = crc32.Update(s.crc, storage.CRC32CTable, b)
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
		return nil
	}
	if s.crc != s.stored {
		return fmt.Errorf("chunk %s has CRC32C %08x, the store keeps %08x for it: %w", chunkKey(c.SHA256), s.crc, s.stored, ErrCorrupt)
	}
	return nil
}
