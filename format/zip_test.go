package format

import (
	"archive/zip"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// buildZip writes files with archive/zip, in order, with an optional
// archive comment.
func buildZip(t testing.TB, comment string, method uint16, files ...string) []byte {
	t.Helper()
	var buf bytes.Buffer
	w := zip.NewWriter(&buf)
	for i, name := range files {
		f, err := w.CreateHeader(&zip.FileHeader{Name: name, Method: method})
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(f, "%s %d %s", name, i, strings.Repeat(".PK\x05\x06", i))
	}
	if comment != "" {
		if err := w.SetComment(comment); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// zipFixtures are the zips Python wrote (testdata/gen.py: a torch.save-like
// archive, numpy.savez and savez_compressed) and some archive/zip writes.
func zipFixtures(t testing.TB) map[string][]byte {
	t.Helper()
	out := map[string][]byte{
		"empty.zip":        buildZip(t, "", zip.Store),
		"stored.zip":       buildZip(t, "", zip.Store, "a", "b/c", "d"),
		"deflated.zip":     buildZip(t, "", zip.Deflate, "a", "b"),
		"comment.zip":      buildZip(t, "a comment PK\x05\x06 with a signature", zip.Store, "a"),
		"comment-only.zip": buildZip(t, "x", zip.Store),
	}
	for _, name := range []string{"torch_like.pt", "arrays.npz", "arrays_z.npz"} {
		b, err := os.ReadFile(filepath.Join("testdata", name))
		if err != nil {
			t.Fatalf("%v; run testdata/gen.py", err)
		}
		out[name] = b
	}
	return out
}

// checkBytes runs the check of the format name's extension announces
// (zip, or safetensors), whatever b's first bytes say.
func checkBytes(name string, b []byte) error {
	if strings.HasSuffix(name, ".safetensors") {
		return checkSafetensors(bytes.NewReader(b), int64(len(b)))
	}
	return checkZip(bytes.NewReader(b), int64(len(b)))
}

func TestZipWholeFilesPass(t *testing.T) {
	for name, b := range zipFixtures(t) {
		t.Run(name, func(t *testing.T) {
			if err := checkBytes(name, b); err != nil {
				t.Error(err)
			}
		})
	}
}

// TestZipEveryCutFails cuts every zip at every byte, and appends bytes.
func TestZipEveryCutFails(t *testing.T) {
	for name, b := range zipFixtures(t) {
		t.Run(name, func(t *testing.T) {
			for cut := range len(b) {
				if err := checkBytes(name, b[:cut]); !errors.Is(err, ErrTorn) {
					t.Fatalf("cut at %d of %d: got %v, want ErrTorn", cut, len(b), err)
				}
			}
			for _, extra := range []string{"\x00", "PK", strings.Repeat("\x00", 100)} {
				if err := checkBytes(name, append(bytes.Clone(b), extra...)); !errors.Is(err, ErrTorn) {
					t.Errorf("%d bytes appended: got %v, want ErrTorn", len(extra), err)
				}
			}
		})
	}
}

func TestZipVerdicts(t *testing.T) {
	b := buildZip(t, "", zip.Store, "a", "b")
	eocd := len(b) - eocdLen
	patch := func(off int, v ...byte) []byte {
		c := bytes.Clone(b)
		copy(c[off:], v)
		return c
	}
	for _, tc := range []struct {
		name string
		in   []byte
		want string
	}{
		{"too short", b[:10], "10 bytes is too short"},
		{"cut", b[:len(b)-1], "no end-of-central-directory record ends the archive at byte"},
		{"directory offset moved", patch(eocd+16, b[eocd+16]+1), "puts the central directory at byte"},
		{"directory size grown", patch(eocd+12, b[eocd+12]+1), "puts the central directory at byte"},
		{"second archive cut", append(bytes.Clone(b), b[:len(b)-3]...), "no end-of-central-directory record ends the archive"},
		{"no local header", patch(0, 'X'), "no local file header at byte 0"},
		{"no directory header", patch(eocd-46*2-2, 'X'), "no central directory header at byte"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := checkBytes("a.zip", tc.in)
			if !errors.Is(err, ErrTorn) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v, want ErrTorn saying %q", err, tc.want)
			}
		})
	}
}

// TestZipBackToBack: archives back to back (torch's .distcp shards) are
// whole; bytes before an archive that are no archive are ErrUnchecked, not
// torn.
func TestZipBackToBack(t *testing.T) {
	a := buildZip(t, "", zip.Store, "a", "b")
	c := buildZip(t, "comment", zip.Deflate, "c")
	if err := checkBytes("x.distcp", slices.Concat(a, c, a)); err != nil {
		t.Errorf("three archives: %v", err)
	}
	for _, in := range [][]byte{append([]byte("#!/bin/sh\n"), a...), slices.Concat(a[:len(a)-5], a)} {
		if err := checkBytes("x.distcp", in); !errors.Is(err, ErrUnchecked) || errors.Is(err, ErrTorn) {
			t.Errorf("unknown bytes before a whole archive: got %v, want ErrUnchecked", err)
		}
	}
}

// TestZip64 checks an archive/zip file with more entries than the 16-bit
// count holds, which it writes with zip64 end records.
func TestZip64(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a 65536-entry zip")
	}
	names := make([]string, 0x10000)
	for i := range names {
		names[i] = fmt.Sprint(i)
	}
	var buf bytes.Buffer
	w := zip.NewWriter(&buf)
	for _, name := range names {
		if _, err := w.CreateHeader(&zip.FileHeader{Name: name, Method: zip.Store}); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	b := buf.Bytes()
	if !bytes.Contains(b[len(b)-eocdLen-zip64LocLen-zip64EOCDLen:], []byte("PK\x06\x06")) {
		t.Fatal("archive/zip wrote no zip64 record")
	}
	if err := checkBytes("many.zip", b); err != nil {
		t.Fatal(err)
	}
	// Every cut in the end records and the directory's last entries.
	for cut := len(b) - 1; cut >= len(b)-1000; cut-- {
		if err := checkBytes("many.zip", b[:cut]); !errors.Is(err, ErrTorn) {
			t.Fatalf("cut at %d of %d: got %v, want ErrTorn", cut, len(b), err)
		}
	}
	// The zip64 record's directory offset, moved.
	c := bytes.Clone(b)
	c[len(b)-eocdLen-zip64LocLen-8]++
	if err := checkBytes("many.zip", c); !errors.Is(err, ErrTorn) || !strings.Contains(err.Error(), "zip64") {
		t.Errorf("moved zip64 directory offset: got %v", err)
	}
	// Back to back, as torch.save writes large items into a .distcp
	// shard: the second archive's zip64 locator gives offsets within it,
	// and the first archive's record lies at the same offset of the file.
	if err := checkBytes("x.distcp", slices.Concat(b, b)); err != nil {
		t.Errorf("two zip64 archives back to back: %v", err)
	}
}

// failingReaderAt fails every read: the error is returned as it is, not as
// ErrTorn.
type failingReaderAt struct{ err error }

func (f failingReaderAt) ReadAt([]byte, int64) (int, error) { return 0, f.err }

func TestHeaderReadErrorsAreNotTorn(t *testing.T) {
	injected := errors.New("injected EIO")
	for _, name := range []string{"a.pt", "a.safetensors"} {
		t.Run(name, func(t *testing.T) {
			_, _, err := Begin(failingReaderAt{injected}, 4096)
			if !errors.Is(err, injected) || errors.Is(err, ErrTorn) {
				t.Errorf("got %v, want the read error and not ErrTorn", err)
			}
			// A file shorter than the size given: the reader's EOF.
			_, _, err = Begin(failingReaderAt{io.EOF}, 4096)
			if !errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, ErrTorn) {
				t.Errorf("got %v, want io.ErrUnexpectedEOF and not ErrTorn", err)
			}
		})
	}
}
