// Package format recognises the file formats trainers save checkpoints in
// by their content, and says whether a file is a whole file of its format,
// reading as little as the format allows. A checkpoint holding a file that
// fails its check is an interrupted save: it is never committed, and after
// a restore it makes the snapshot corrupt.
//
// The first bytes of a file decide which check runs (Detect), whatever its
// name; a name never makes a file torn. Formats and what is checked:
//   - pickle (protocol 2 or later: PROTO first): the opcode stream is
//     walked without executing it, and the file must end exactly after a
//     STOP; several whole pickles back to back are whole. This reads every
//     byte, so it runs as a Stream fed by the upload's hashing pass.
//   - torch's legacy format (torch.save with
//     _use_new_zipfile_serialization=False): its five pickles are read and
//     interpreted without executing them; the fourth records each
//     storage's type and the fifth the order of the raw storages that
//     follow, each an 8-byte element count and its elements, which must
//     end exactly at the end of the file.
//   - zip (torch.save, np.savez, the items of PyTorch's distributed
//     checkpoint): the end-of-central-directory record ends the file, and
//     the central directory and first local header lie where it says;
//     archives back to back (a .distcp shard) are walked from the end, each
//     ending where the next begins.
//   - safetensors: the header length, the JSON header, and the last tensor's
//     end offset equal to the file's size.
//   - numpy's .npy: the header's shape and dtype give the file's size.
//   - JSON ('{' or '[' first, after an optional UTF-8 byte-order mark): one
//     or more whole values, as Python's json module writes them (NaN,
//     Infinity, -Infinity; JSON Lines), read as a stream; files up to 64
//     MiB (larger ones are left to the death rule).
//   - PyTorch's and Paddle's distributed layout: on the coordinator, every
//     *.distcp shard needs a *.metadata file beside it (CheckSet).
//
// A file whose content no check recognises (Unknown), an empty file
// (Empty), and a file whose structure a check recognises only in part
// (ErrUnchecked) pass every check: the death rule judges them (package
// agent).
package format

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/lifeboat-project/lifeboat/internal/beneath"
)

// ErrTorn marks a file that is not a whole file of its format: cut short,
// or garbled. Errors from this package wrap it, with what was found.
var ErrTorn = errors.New("not a whole file of its format")

// ErrUnchecked marks a file that a check recognises but cannot vouch for
// (a zip archive preceded by bytes no check recognises, a legacy torch
// storage of an unknown type): it is not torn, and the death rule judges
// it, as an Unknown file.
var ErrUnchecked = errors.New("its content is only partly recognised")

// Head reads the first bytes of a file of size bytes through r and says
// which format they announce.
func Head(r io.ReaderAt, size int64) (Kind, error) {
	head := make([]byte, min(size, HeadLen))
	if err := readFull(r, head, 0); err != nil {
		return Unknown, err
	}
	return Detect(head, size), nil
}

// Begin detects the format of the file of size bytes read through r and
// runs the checks that read its headers and tails. It returns the format
// and the Stream that every byte of the file, in order, must be fed to
// for the rest of the check (nil when none). An error wraps ErrTorn when
// the file is not whole, ErrUnchecked when the check cannot vouch for it
// (the caller treats it as Unknown); any other error is a failed read. The
// errors do not name the file; the caller adds the name.
func Begin(r io.ReaderAt, size int64) (Kind, Stream, error) {
	kind, err := Head(r, size)
	if err != nil {
		return kind, nil, err
	}
	switch kind {
	case Pickle:
		return kind, new(pickleStream), nil
	case JSON:
		if size > maxJSONChecked {
			return kind, nil, unchecked("json", "%d bytes, over the %d bytes checked (its check reads every byte)", size, maxJSONChecked)
		}
		return kind, new(jsonStream), nil
	case TorchLegacy:
		return kind, nil, checkTorchLegacy(r, size)
	case Zip:
		return kind, nil, checkZip(r, size)
	case Safetensors:
		return kind, nil, checkSafetensors(r, size)
	case NPY:
		return kind, nil, checkNPY(r, size)
	}
	return kind, nil, nil
}

// Stream is a check fed every byte of a file, in order, through Write;
// Close says whether what was written is a whole file. Write never fails;
// the verdict comes from Close. A stream's memory does not grow with the
// file: it never holds a payload or a line.
type Stream interface {
	io.Writer
	Close() error
}

// Skipper is a Stream that can say how many of the next bytes it will not
// look at (a pickle's payload), so that a caller that would have to read
// them only to feed it (a restore reading back what it wrote) can skip
// them instead. Skip(n), for n no more than Skippable(), is Write of n
// bytes whatever they are.
type Skipper interface {
	Stream
	Skippable() int64
	Skip(n int64)
}

// Inspect runs every check that applies to the file at path and returns
// its format with the verdict: nil when whole (or when no check applies:
// Unknown and Empty), an error wrapping ErrTorn when torn, ErrUnchecked
// when only partly recognised. A symlink or any other file that is not a
// regular file is an error, not ErrTorn. Errors name the path.
func Inspect(path string) (Kind, error) {
	// Lstat first: opening a FIFO would block.
	fi, err := os.Lstat(path)
	if err != nil {
		return Unknown, fmt.Errorf("format: check %s: %w", path, err)
	}
	if !fi.Mode().IsRegular() {
		return Unknown, fmt.Errorf("format: check %s: not a regular file (%s)", path, FileType(fi.Mode()))
	}
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		return Unknown, fmt.Errorf("format: check %s: %w", path, err)
	}
	defer f.Close()
	return inspect(f, path, true)
}

// InspectBeneath is Inspect for the file rel (slash-separated) under dir,
// opened without following a symlink in any component of rel.
func InspectBeneath(dir, rel string) (Kind, error) {
	f, err := openBeneath(dir, rel)
	if err != nil {
		return Unknown, err
	}
	defer f.Close()
	return inspect(f, f.Name(), true)
}

// HeadBeneath is InspectBeneath without the streamed checks: it runs only
// the checks that read headers and tails (cheap whatever the size), and a
// pickle or JSON file passes them; the reading pass of an upload, which
// feeds its stream, gives its verdict.
func HeadBeneath(dir, rel string) (Kind, error) {
	f, err := openBeneath(dir, rel)
	if err != nil {
		return Unknown, err
	}
	defer f.Close()
	return inspect(f, f.Name(), false)
}

// openBeneath opens rel under dir without following a symlink in any of
// its components, and without blocking on a FIFO.
func openBeneath(dir, rel string) (*os.File, error) {
	root, err := beneath.Open(dir)
	if err != nil {
		return nil, fmt.Errorf("format: check %s: %w", filepath.Join(dir, filepath.FromSlash(rel)), err)
	}
	defer root.Close()
	f, err := root.OpenFile(rel, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_NOCTTY, 0)
	if err != nil {
		return nil, fmt.Errorf("format: check: %w", err)
	}
	return f, nil
}

// inspect checks the open file f, named path in errors; the streamed
// checks only when stream is set.
func inspect(f *os.File, path string, stream bool) (Kind, error) {
	fi, err := f.Stat()
	if err != nil {
		return Unknown, fmt.Errorf("format: check %s: %w", path, err)
	}
	if !fi.Mode().IsRegular() {
		return Unknown, fmt.Errorf("format: check %s: not a regular file (%s)", path, FileType(fi.Mode()))
	}
	kind, s, err := Begin(f, fi.Size())
	if err != nil || s == nil || !stream {
		return kind, namePath(path, err)
	}
	buf := make([]byte, fileBuffer)
	for {
		n, err := f.Read(buf)
		s.Write(buf[:n])
		if err == io.EOF {
			break
		}
		if err != nil {
			return kind, fmt.Errorf("format: check %s: %w", path, err)
		}
	}
	return kind, namePath(path, s.Close())
}

// CheckFile runs every check that applies to the file at path: nil when
// it is whole or no check can tell (Inspect's Unknown, Empty and
// ErrUnchecked), an error wrapping ErrTorn when it is torn. A symlink or
// any other file that is not a regular file is an error, not ErrTorn.
// Errors name the path.
func CheckFile(path string) error {
	_, err := Inspect(path)
	if errors.Is(err, ErrUnchecked) {
		return nil
	}
	return err
}

// maxJSONChecked bounds the JSON files checked: the check reads every byte
// at about 100 MB/s, against 200 MB/s or more for an upload, which is
// nothing for the metadata trainers keep beside their weights (a few MB at
// most) but would double the time of a checkpoint made of JSON. A larger
// one is ErrUnchecked: the death rule judges it.
const maxJSONChecked = 64 << 20

// fileBuffer is CheckFile's read size for streamed checks.
const fileBuffer = 1 << 20

// tornError is every ErrTorn and ErrUnchecked this package returns: the
// format, what was found, and, from Inspect, the file's path.
type tornError struct {
	path      string // empty unless Inspect named it
	format    string // "pickle", "zip", "safetensors", "checkpoint", ...
	what      string
	unchecked bool // ErrUnchecked rather than ErrTorn
}

func torn(format, what string, args ...any) *tornError {
	return &tornError{format: format, what: fmt.Sprintf(what, args...)}
}

func unchecked(format, what string, args ...any) *tornError {
	return &tornError{format: format, what: fmt.Sprintf(what, args...), unchecked: true}
}

func (e *tornError) Error() string {
	if e.path != "" {
		return "format: " + e.path + ": " + e.format + ": " + e.what
	}
	return "format: " + e.format + ": " + e.what
}

func (e *tornError) Unwrap() error {
	if e.unchecked {
		return ErrUnchecked
	}
	return ErrTorn
}

// Reason is what a check found, without the "format: PATH: " prefix
// (for `lifeboat check`'s table): "zip: no end-of-central-directory ...".
func Reason(err error) string {
	var te *tornError
	if errors.As(err, &te) {
		return te.format + ": " + te.what
	}
	return err.Error()
}

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
