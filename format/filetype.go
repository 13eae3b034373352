package format

import "io/fs"

// FileType names the type of a file that is not a regular file, for logs
// and errors ("symlink", "fifo", "socket", "char device", "block device",
// "directory"): such a file is never part of a checkpoint, and the user is
// told which kind was met.
func FileType(m fs.FileMode) string {
	switch {
	case m&fs.ModeSymlink != 0:
		return "symlink"
	case m&fs.ModeNamedPipe != 0:
		return "fifo"
	case m&fs.ModeSocket != 0:
		return "socket"
	case m&fs.ModeCharDevice != 0:
		return "char device"
	case m&fs.ModeDevice != 0:
		return "block device"
	case m.IsDir():
		return "directory"
	}
	return "irregular file"
}
