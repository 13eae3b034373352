package watch

import (
	"io/fs"
	"syscall"
	"time"
)

// changeTime is the inode's change time (ctime): it moves on every write,
// truncation, rename or chmod, and unlike the modification time no program
// can set it back.
func changeTime(fi fs.FileInfo) time.Time {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return time.Time{}
	}
	return time.Unix(int64(st.Ctim.Sec), int64(st.Ctim.Nsec))
}
