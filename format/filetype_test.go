package format

import (
	"io/fs"
	"testing"
)

func TestFileType(t *testing.T) {
	for _, tc := range []struct {
		mode fs.FileMode
		want string
	}{
		{fs.ModeSymlink | 0o777, "symlink"},
		{fs.ModeNamedPipe | 0o600, "fifo"},
		{fs.ModeSocket | 0o755, "socket"},
		{fs.ModeDevice | fs.ModeCharDevice | 0o666, "char device"},
		{fs.ModeDevice | 0o660, "block device"},
		{fs.ModeDir | 0o755, "directory"},
		{fs.ModeIrregular, "irregular file"},
	} {
		if got := FileType(tc.mode); got != tc.want {
			t.Errorf("FileType(%v) = %q, want %q", tc.mode, got, tc.want)
		}
	}
}
