// Package format recognises the file formats trainers save checkpoints in
// and says whether a file is a whole file of its format, reading as little
// as the format allows. A checkpoint holding a file that fails its check is
// an interrupted save: it is never committed, and after a restore it makes
// the snapshot corrupt.
//
// Formats and what is checked:
//   - pickle (.pdparams, .pdopt, .pkl, .pickle, .distcp, .metadata): the
//     opcode stream is walked without executing it, and STOP must be the
//     last byte of the file. This reads every byte, so it runs as a Stream
//     fed by the upload's hashing pass.
//   - zip (.pt, .pth, .npz, .zip): the end-of-central-directory record and
//     the central directory's extent.
//   - safetensors: the header length, the JSON header, and the last tensor's
//     end offset equal to the file's size.
//   - JSON (.json, the metadata trainers keep beside their weights): one
//     whole value and nothing after it, read as a stream of tokens.
//   - Paddle's save_state_dict layout: every *.distcp shard needs a
//     *.metadata file beside it (CheckSet).
//
// Unknown formats pass every check.
package format

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// Kind is a checked file format.
type Kind int

// The kinds of file that are checked.
const (
	Unknown Kind = iota
	Pickle
	Zip
	Safetensors
	// JSON is the metadata trainers keep beside their weights
	// (trainer_state.json, state.json): checked, but not a checkpoint on
	// its own.
	JSON
)

// ErrTorn marks a file that is not a whole file of its format: cut short,
// or garbled. Errors from this package wrap it, with what was found.
var ErrTorn = errors.New("not a whole file of its format")

// KindOf says which format a file's name (base name or path) announces.
func KindOf(name string) Kind {
	switch strings.ToLower(filepath.Ext(name)) {
	case ".pdparams", ".pdopt", ".pkl", ".pickle", ".distcp", ".metadata":
		return Pickle
	case ".pt", ".pth", ".npz", ".zip":
		return Zip
	case ".safetensors":
		return Safetensors
	case ".json":
		return JSON
	}
	return Unknown
}

// Known reports whether a format check covers a file of this name.
func Known(name string) bool { return KindOf(name) != Unknown }

// CheckHeader checks what can be checked from the headers and tails of a
// file of size bytes read through r: zip, safetensors and JSON (which is
// read whole, as a stream). It returns nil for
// pickle (see NewStream) and unknown formats. Its errors do not name the
// file; the caller adds the name.
func CheckHeader(name string, r io.ReaderAt, size int64) error {
	switch KindOf(name) {
	case Zip:
		return checkZip(r, size)
	case Safetensors:
		return checkSafetensors(r, size)
	case JSON:
		return checkJSON(r, size)
	}
	return nil
}

// Stream is a check fed every byte of a file, in order, through Write;
// Close says whether what was written is a whole file. Write never fails;
// the verdict comes from Close.
type Stream interface {
	io.Writer
	Close() error
}

// NewStream returns the streaming check for a file of this name, or nil
// when its format needs none. A stream's memory does not grow with the
// file: it never holds a payload or a line.
func NewStream(name string) Stream {
	if KindOf(name) == Pickle {
		return new(pickleStream)
	}
	return nil
}

// CheckFile runs every check that applies to the file at path. It reads
// nothing for unknown formats. A symlink or any other file that is not a
// regular file is an error, not ErrTorn. Errors name the path.
func CheckFile(path string) error {
	kind := KindOf(path)
	if kind == Unknown {
		return nil
	}
	// Lstat first: opening a FIFO would block.
	fi, err := os.Lstat(path)
	if err != nil {
		return fmt.Errorf("format: check %s: %w", path, err)
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("format: check %s: not a regular file (%s)", path, fi.Mode().Type())
	}
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return fmt.Errorf("format: check %s: %w", path, err)
	}
	defer f.Close()
	if fi, err = f.Stat(); err != nil {
		return fmt.Errorf("format: check %s: %w", path, err)
	}
	if err := CheckHeader(path, f, fi.Size()); err != nil {
		return namePath(path, err)
	}
	s := NewStream(path)
	if s == nil {
		return nil
	}
	buf := make([]byte, fileBuffer)
	for {
		n, err := f.Read(buf)
		s.Write(buf[:n])
		if err == io.EOF {
			break
		}
		if err != nil {
			return fmt.Errorf("format: check %s: %w", path, err)
		}
	}
	return namePath(path, s.Close())
}

// fileBuffer is CheckFile's read size for streamed checks.
const fileBuffer = 1 << 20

// tornError is every ErrTorn this package returns: the format, what was
// found, and, from CheckFile, the file's path.
type tornError struct {
	path   string // empty unless CheckFile named it
	format string // "pickle", "zip", "safetensors", "checkpoint"
	what   string
}

func torn(format, what string, args ...any) *tornError {
	return &tornError{format: format, what: fmt.Sprintf(what, args...)}
}

func (e *tornError) Error() string {
	if e.path != "" {
		return "format: " + e.path + ": " + e.format + ": " + e.what
	}
	return "format: " + e.format + ": " + e.what
}

func (e *tornError) Unwrap() error { return ErrTorn }

// namePath adds path to a torn error, and says the operation and the path
// of any other.
func namePath(path string, err error) error {
	if err == nil {
		return nil
	}
	var te *tornError
	if errors.As(err, &te) {
		named := *te
		named.path = path
		return &named
	}
	return fmt.Errorf("format: check %s: %w", path, err)
}

// CheckSet checks the rules that span the files of one checkpoint, given as
// slash-separated paths relative to the checkpoint: each *.distcp shard's
// directory holds a *.metadata file.
func CheckSet(paths []string) error { return checkSet(paths) }
