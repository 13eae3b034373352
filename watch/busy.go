package watch

import (
	"bufio"
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// openForWrite returns the set of files under dir that some process visible
// in procRoot holds open for writing (O_WRONLY or O_RDWR), as paths relative
// to dir. self is skipped (lifeboat reads checkpoints, it never writes
// them). Processes or descriptors that vanish while being read are skipped;
// a process whose fds cannot be read (another user's, without privilege)
// cannot be checked, and the settle time then has to cover it.
func openForWrite(procRoot, dir string, self int) map[string]bool {
	busy := map[string]bool{}
	dir = filepath.Clean(dir)
	ents, err := os.ReadDir(procRoot)
	if err != nil {
		return busy
	}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		fdDir := filepath.Join(procRoot, e.Name(), "fd")
		fds, err := os.ReadDir(fdDir)
		if err != nil {
			continue
		}
		for _, fd := range fds {
			target, err := os.Readlink(filepath.Join(fdDir, fd.Name()))
			if err != nil || !strings.HasPrefix(target, dir+"/") {
				continue
			}
			if !writable(filepath.Join(procRoot, e.Name(), "fdinfo", fd.Name())) {
				continue
			}
			busy[strings.TrimSuffix(strings.TrimPrefix(target, dir+"/"), " (deleted)")] = true
		}
	}
	return busy
}

// writable reports whether the fdinfo file says the descriptor was opened
// for writing. An unreadable fdinfo counts as writable: better to wait.
func writable(fdinfo string) bool {
	b, err := os.ReadFile(fdinfo)
	if err != nil {
		return !os.IsNotExist(err)
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok || k != "flags" {
			continue
		}
		flags, err := strconv.ParseUint(strings.TrimSpace(v), 8, 64)
		if err != nil {
			return true
		}
		return flags&0o3 != 0 // O_WRONLY (1) or O_RDWR (2)
	}
	return true
}
