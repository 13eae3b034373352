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
//   - Paddle's save_state_dict layout: every *.distcp shard needs a
//     *.metadata file beside it (CheckSet).
//
// Unknown formats pass every check.
package format

import (
	"errors"
	"io"
)

// Kind is a checked file format.
type Kind int

// The kinds of file that are checked.
const (
	Unknown Kind = iota
	Pickle
	Zip
	Safetensors
)

// ErrTorn marks a file that is not a whole file of its format: cut short,
// or garbled. Errors from this package wrap it, with what was found.
var ErrTorn = errors.New("not a whole file of its format")

// KindOf says which format a file's name (base name or path) announces.
func KindOf(name string) Kind { return Unknown }

// Known reports whether a format check covers a file of this name.
func Known(name string) bool { return KindOf(name) != Unknown }

// CheckHeader checks what can be checked from the headers and tails of a
// file of size bytes read through r: zip and safetensors. It returns nil for
// pickle (see NewStream) and unknown formats.
func CheckHeader(name string, r io.ReaderAt, size int64) error { return nil }

// Stream is a check fed every byte of a file, in order, through Write;
// Close says whether what was written is a whole file. Write never fails;
// the verdict comes from Close.
type Stream interface {
	io.Writer
	Close() error
}

// NewStream returns the streaming check for a file of this name, or nil
// when its format needs none.
func NewStream(name string) Stream { return nil }

// CheckFile runs every check that applies to the file at path.
func CheckFile(path string) error { return nil }

// CheckSet checks the rules that span the files of one checkpoint, given as
// slash-separated paths relative to the checkpoint: each *.distcp shard's
// directory holds a *.metadata file.
func CheckSet(paths []string) error { return nil }
