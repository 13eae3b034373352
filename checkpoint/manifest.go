package checkpoint

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// FormatVersion is the version of the store layout and manifest encoding
// this package writes and the only one it reads (docs/FORMAT.md).
const FormatVersion = 1

// Limits a manifest must respect. They bound what a garbled or hostile
// manifest can make a reader allocate.
const (
	MaxManifestSize = 64 << 20 // encoded bytes
	MaxFiles        = 1 << 20
	MaxChunkSize    = 64 << 20 // bytes in one chunk
	MaxPathLen      = 4096
	MaxWorldSize    = 65536
	maxProducerLen  = 256
	// MaxGenerationLen bounds Manifest.Generation and Target.Generation.
	MaxGenerationLen = 256
)

// ErrCorrupt marks data that cannot be a valid snapshot: a garbled or
// invalid manifest, a missing chunk, a chunk whose length or hash is wrong.
// RestoreLatest falls back to an older snapshot on such errors, and only on
// them.
var ErrCorrupt = errors.New("checkpoint is corrupt")

// Manifest describes the snapshot of one rank at one step. It is stored as
// JSON at snapshots/<step>/rank-<r>-of-<n>.json (revision 0) or
// snapshots/<step>/rank-<r>-of-<n>-rev-<k>.json (revision k) after all its
// chunks.
type Manifest struct {
	Format    int    `json:"format"`     // FormatVersion
	ID        string `json:"id"`         // 16 lower-case hex digits, random per upload
	Step      int64  `json:"step"`       // training step, >= 0
	Rank      int    `json:"rank"`       // 0 <= Rank < WorldSize
	WorldSize int    `json:"world_size"` // ranks that make the step complete
	// Revision numbers the snapshots of one rank at one step: 0 is the
	// first committed, each later one with other files is one more. The
	// highest is the rank's snapshot of the step. It matches the key.
	Revision int `json:"revision,omitempty"`
	// Counter: the trainer did not number this checkpoint; it follows the
	// named step Step (Target.Counter).
	Counter bool `json:"counter,omitempty"`
	// Generation names a job-wide save that every rank took part in
	// (Target.Generation); empty when there was none. A multi-rank step
	// whose ranks include a counter checkpoint is complete only when all
	// its ranks carry the same non-empty generation (docs/FORMAT.md).
	Generation string `json:"generation,omitempty"`
	// Line names the line of work the snapshot belongs to: the run that
	// wrote it continued that line (it restored a checkpoint of it) or
	// started it (a fresh start). Empty in manifests written before lines
	// existed: those are the legacy line (docs/FORMAT.md).
	Line      string    `json:"line,omitempty"`
	Created   time.Time `json:"created"`    // when the upload started, by the uploader's clock
	Producer  string    `json:"producer"`   // "lifeboat <version>"
	ChunkSize int64     `json:"chunk_size"` // the uploader's chunk size; informative
	Files     []File    `json:"files"`      // sorted by Path, no duplicates
}

// File is one regular file of a snapshot.
type File struct {
	// Path is slash-separated, relative to the checkpoint directory: the
	// names' bytes as the file system gave them, which need not be UTF-8.
	// The manifest's JSON holds it as EscapePath writes it.
	Path   string  `json:"path"`
	Size   int64   `json:"size"`   // bytes; the sum of Chunks' sizes
	Mode   uint32  `json:"mode"`   // permission bits only (0o777)
	Chunks []Chunk `json:"chunks"` // the file's bytes, in order
}

// Chunk is a run of a file's bytes, stored under chunks/ by its hash.
type Chunk struct {
	SHA256 string `json:"sha256"` // lower-case hex
	Size   int64  `json:"size"`   // 1..MaxChunkSize
	// CRC32C is the CRC32C (Castagnoli) of the chunk's bytes, 8
	// lower-case hex digits, computed by the uploader from the bytes it
	// read, in the pass that computed their SHA-256; empty in manifests
	// written before it was recorded. A restore checks the bytes it
	// downloads against it (CheckCRC32C, docs/FORMAT.md "Checking a
	// restore").
	CRC32C string `json:"crc32c,omitempty"`
}

// crc32cHex is how a manifest writes a CRC32C.
func crc32cHex(crc uint32) string {
	return fmt.Sprintf("%08x", crc)
}

// recordedCRC32C returns the CRC32C c records, if it records one. It
// parses only what Validate accepted.
func (c Chunk) recordedCRC32C() (uint32, bool) {
	if c.CRC32C == "" {
		return 0, false
	}
	v, err := strconv.ParseUint(c.CRC32C, 16, 32)
	return uint32(v), err == nil
}

// sameBytes reports whether a and b name the same bytes: the CRC32C one
// of them may lack (written before it was recorded) does not tell them
// apart.
func (c Chunk) sameBytes(o Chunk) bool {
	return c.SHA256 == o.SHA256 && c.Size == o.Size
}

// Bytes returns the total size of the snapshot's files.
func (m *Manifest) Bytes() int64 {
	var n int64
	for _, f := range m.Files {
		n += f.Size
	}
	return n
}

// target is the Target m was committed as.
func (m *Manifest) target() Target {
	return Target{Step: m.Step, Rank: m.Rank, WorldSize: m.WorldSize, Counter: m.Counter, Generation: m.Generation, Line: m.Line}
}

// Encode validates m and returns its JSON encoding.
func (m *Manifest) Encode() ([]byte, error) {
	if err := m.Validate(); err != nil {
		return nil, err
	}
	enc, cloned := *m, false // m's paths are the names' bytes; JSON gets them escaped
	for i, f := range m.Files {
		if e := EscapePath(f.Path); e != f.Path {
			if !cloned {
				enc.Files, cloned = slices.Clone(m.Files), true
			}
			enc.Files[i].Path = e
		}
	}
	b, err := json.Marshal(&enc)
	if err != nil {
		return nil, fmt.Errorf("checkpoint: encode manifest: %w", err)
	}
	b = append(b, '\n')
	if len(b) > MaxManifestSize {
		return nil, fmt.Errorf("checkpoint: manifest of step %d rank %d is %d bytes, over the %d limit; use a larger chunk size", m.Step, m.Rank, len(b), MaxManifestSize)
	}
	return b, nil
}

// DecodeManifest parses and validates a manifest. It is strict: unknown
// fields, trailing data, an unknown format version and every rule of
// Validate are errors wrapping ErrCorrupt.
func DecodeManifest(data []byte) (*Manifest, error) {
	if len(data) > MaxManifestSize {
		return nil, fmt.Errorf("checkpoint: manifest is %d bytes, over the %d limit: %w", len(data), MaxManifestSize, ErrCorrupt)
	}
	return decodeManifest(bytes.NewReader(data))
}

// readManifestFrom decodes the manifest r holds, as DecodeManifest does,
// as it reads it: the only copy of its bytes is the JSON decoder's. More
// than MaxManifestSize bytes is an error wrapping ErrCorrupt; an error
// of r is returned as it is.
func readManifestFrom(r io.Reader) (*Manifest, error) {
	c := &countingReader{r: io.LimitReader(r, MaxManifestSize+1)}
	m, err := decodeManifest(c)
	switch {
	case c.err != nil:
		return nil, c.err
	case c.n > MaxManifestSize:
		return nil, fmt.Errorf("checkpoint: manifest is more than %d bytes, over the limit: %w", MaxManifestSize, ErrCorrupt)
	}
	return m, err
}

// countingReader counts the bytes read through it and keeps the first
// error other than io.EOF.
type countingReader struct {
	r   io.Reader
	n   int64
	err error
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	if err != nil && err != io.EOF && c.err == nil {
		c.err = err
	}
	return n, err
}

// decodeManifest parses and validates the manifest r holds, to its end.
func decodeManifest(r io.Reader) (*Manifest, error) {
	dec := json.NewDecoder(r)
	dec.DisallowUnknownFields()
	var m Manifest
	if err := dec.Decode(&m); err != nil {
		return nil, fmt.Errorf("checkpoint: decode manifest: %v: %w", err, ErrCorrupt)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, fmt.Errorf("checkpoint: decode manifest: data after the manifest object: %w", ErrCorrupt)
	}
	for i := range m.Files {
		p, err := UnescapePath(m.Files[i].Path)
		if err != nil {
			return nil, fmt.Errorf("checkpoint: invalid manifest: %v: %w", err, ErrCorrupt)
		}
		m.Files[i].Path = p
	}
	if err := m.Validate(); err != nil {
		return nil, err
	}
	return &m, nil
}

// Validate checks every rule of the format; errors wrap ErrCorrupt.
func (m *Manifest) Validate() error {
	if err := m.validate(); err != nil {
		return fmt.Errorf("checkpoint: invalid manifest: %v: %w", err, ErrCorrupt)
	}
	return nil
}

func (m *Manifest) validate() error {
	if m.Format != FormatVersion {
		return fmt.Errorf("format version %d, this lifeboat reads %d", m.Format, FormatVersion)
	}
	if len(m.ID) != 16 || !isHex(m.ID) {
		return fmt.Errorf("id %q is not 16 lower-case hex digits", m.ID)
	}
	if m.Step < 0 {
		return fmt.Errorf("step %d is negative", m.Step)
	}
	if m.WorldSize < 1 || m.WorldSize > MaxWorldSize {
		return fmt.Errorf("world size %d outside 1..%d", m.WorldSize, MaxWorldSize)
	}
	if m.Rank < 0 || m.Rank >= m.WorldSize {
		return fmt.Errorf("rank %d outside 0..%d", m.Rank, m.WorldSize-1)
	}
	if m.Revision < 0 || m.Revision > MaxRevision {
		return fmt.Errorf("revision %d outside 0..%d", m.Revision, MaxRevision)
	}
	if err := checkGeneration(m.Generation); err != nil {
		return err
	}
	if err := CheckLine(m.Line); err != nil {
		return err
	}
	if m.Created.IsZero() {
		return errors.New("created time is missing")
	}
	if len(m.Producer) > maxProducerLen || !utf8.ValidString(m.Producer) {
		return errors.New("producer is not valid UTF-8 of at most 256 bytes")
	}
	if m.ChunkSize < 0 || m.ChunkSize > MaxChunkSize {
		return fmt.Errorf("chunk size %d outside 0..%d", m.ChunkSize, MaxChunkSize)
	}
	if len(m.Files) > MaxFiles {
		return fmt.Errorf("%d files, over the %d limit", len(m.Files), MaxFiles)
	}
	files := make(map[string]bool, len(m.Files))
	for i, f := range m.Files {
		if err := CheckPath(f.Path); err != nil {
			return err
		}
		if i > 0 && m.Files[i-1].Path >= f.Path {
			return fmt.Errorf("file %q: paths are not sorted or are duplicated", f.Path)
		}
		files[f.Path] = true
		if f.Mode&^0o777 != 0 {
			return fmt.Errorf("file %q: mode %#o has bits other than permissions (only regular files are allowed)", f.Path, f.Mode)
		}
		var sum int64
		for _, c := range f.Chunks {
			if !isHexSHA256(c.SHA256) {
				return fmt.Errorf("file %q: chunk hash %q is not 64 lower-case hex digits", f.Path, c.SHA256)
			}
			if c.Size < 1 || c.Size > MaxChunkSize {
				return fmt.Errorf("file %q: chunk size %d outside 1..%d", f.Path, c.Size, MaxChunkSize)
			}
			if c.CRC32C != "" && (len(c.CRC32C) != 8 || !isHex(c.CRC32C)) {
				return fmt.Errorf("file %q: chunk CRC32C %q is not 8 lower-case hex digits", f.Path, c.CRC32C)
			}
			sum += c.Size
		}
		if f.Size != sum {
			return fmt.Errorf("file %q: size %d, chunks add up to %d", f.Path, f.Size, sum)
		}
	}
	// A path cannot be both a file and a directory of another file.
	for _, f := range m.Files {
		for dir := path.Dir(f.Path); dir != "."; dir = path.Dir(dir) {
			if files[dir] {
				return fmt.Errorf("file %q is inside %q, which is a file", f.Path, dir)
			}
		}
	}
	return nil
}

// checkGeneration reports a save generation no manifest may carry.
func checkGeneration(g string) error {
	if len(g) > MaxGenerationLen || !utf8.ValidString(g) {
		return fmt.Errorf("generation is not valid UTF-8 of at most %d bytes", MaxGenerationLen)
	}
	return nil
}

// CheckPath returns an error unless p is a clean, relative, slash-separated
// path that stays inside the directory it is joined to: no leading "/", no
// "", "." or ".." segment, no NUL, at most MaxPathLen bytes. Any other
// byte is allowed: a Linux file name is bytes, not text (EscapePath is how
// a manifest holds the ones JSON cannot).
func CheckPath(p string) error {
	switch {
	case p == "":
		return errors.New("empty file path")
	case len(p) > MaxPathLen:
		return fmt.Errorf("file path of %d bytes, over the %d limit", len(p), MaxPathLen)
	case strings.Contains(p, "\x00"):
		return fmt.Errorf("file path %q contains a NUL", p)
	case strings.HasPrefix(p, "/"):
		return fmt.Errorf("file path %q is absolute", p)
	}
	for _, seg := range strings.Split(p, "/") {
		if seg == "" || seg == "." || seg == ".." {
			return fmt.Errorf("file path %q has an empty, \".\" or \"..\" segment", p)
		}
	}
	return nil
}

// EscapePath writes a file path for a manifest, whose JSON strings hold
// only UTF-8: each byte that is not part of valid UTF-8, and each
// backslash, becomes \xHH (two lower-case hex digits); everything else is
// kept. A path that is valid UTF-8 without a backslash, as nearly all are,
// is written as it is. UnescapePath reverses it.
func EscapePath(p string) string {
	if utf8.ValidString(p) && !strings.Contains(p, "\\") {
		return p
	}
	var b strings.Builder
	for i := 0; i < len(p); {
		r, n := utf8.DecodeRuneInString(p[i:])
		if (r == utf8.RuneError && n == 1) || r == '\\' {
			fmt.Fprintf(&b, "\\x%02x", p[i])
		} else {
			b.WriteString(p[i : i+n])
		}
		i += n
	}
	return b.String()
}

// UnescapePath reads a path as EscapePath wrote it. A backslash not
// followed by x and two lower-case hex digits, or an escape EscapePath
// would not have written (of a byte that is part of valid UTF-8, other
// than the backslash), is an error: each path has exactly one spelling.
func UnescapePath(e string) (string, error) {
	if !strings.Contains(e, "\\") {
		return e, nil
	}
	b := make([]byte, 0, len(e))
	for i := 0; i < len(e); i++ {
		if e[i] != '\\' {
			b = append(b, e[i])
			continue
		}
		if i+4 > len(e) || e[i+1] != 'x' || !isHex(e[i+2:i+4]) {
			return "", fmt.Errorf("file path %q: a backslash must start \\xHH", e)
		}
		v, _ := strconv.ParseUint(e[i+2:i+4], 16, 8)
		b = append(b, byte(v))
		i += 3
	}
	p := string(b)
	if EscapePath(p) != e {
		return "", fmt.Errorf("file path %q: escapes a byte that needs none", e)
	}
	return p, nil
}

func isHex(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}
