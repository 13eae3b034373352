package watch

import (
	"bufio"
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/lifeboat-project/lifeboat/supervisor"
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

// OpenForWrite returns the files under Dir (slash-separated, relative to
// it) that some process other than lifeboat holds open for writing now.
// A file still open for writing when its writer is killed is an interrupted
// save.
func (w *Watcher) OpenForWrite() map[string]bool {
	return openForWrite(w.cfg.ProcRoot, w.cfg.Dir, w.self)
}

// WritersVisible reports whether processes that could write checkpoints
// can be seen at all: whether ProcRoot shows a process, other than
// lifeboat and its ancestors (the launcher: a shell, tini, the pause
// process), whose open files (its fd directory) lifeboat may read.
// It is false for a sidecar in its own PID namespace, and for an
// unprivileged lifeboat next to a trainer of another user; a file open for
// writing then cannot be told, and the caller should set
// Config.WritersInvisible. It says what is true now: while no trainer runs
// (before it starts, after it ended) it is false as well.
func (w *Watcher) WritersVisible() bool {
	ents, err := os.ReadDir(w.cfg.ProcRoot)
	if err != nil {
		return false
	}
	skip := ancestors(w.cfg.ProcRoot, w.self)
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || skip[pid] {
			continue
		}
		if _, err := os.ReadDir(filepath.Join(w.cfg.ProcRoot, e.Name(), "fd")); err == nil {
			return true
		}
	}
	return false
}

// ancestors returns pid and the pids of its parents as ProcRoot shows them.
func ancestors(procRoot string, pid int) map[int]bool {
	out := map[int]bool{}
	for pid > 0 && !out[pid] {
		out[pid] = true
		pid, _ = supervisor.Parent(procRoot, pid) // 0 when unknown
	}
	return out
}
