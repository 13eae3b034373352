package supervisor

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
)

// proc is one process as read from /proc/PID/stat.
type proc struct {
	pid, ppid int
	state     byte // R, S, D, Z, ...
}

// readProcs lists the processes visible under procRoot ("/proc"). Processes
// that vanish while being read are skipped.
func readProcs(procRoot string) ([]proc, error) {
	entries, err := os.ReadDir(procRoot)
	if err != nil {
		return nil, fmt.Errorf("list processes in %s: %w", procRoot, err)
	}
	var out []proc
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join(procRoot, e.Name(), "stat"))
		if err != nil {
			continue // exited meanwhile
		}
		p, ok := parseStat(b)
		if !ok || p.pid != pid {
			continue
		}
		out = append(out, p)
	}
	return out, nil
}

// parseStat reads pid, state and ppid from the contents of /proc/PID/stat.
// The command name is in parentheses and may itself contain ") ", so the
// fields after it are found from the last ')'.
func parseStat(b []byte) (proc, bool) {
	open := bytes.IndexByte(b, '(')
	end := bytes.LastIndexByte(b, ')')
	if open < 1 || end < open {
		return proc{}, false
	}
	pid, err := strconv.Atoi(string(bytes.TrimSpace(b[:open])))
	if err != nil {
		return proc{}, false
	}
	rest := bytes.Fields(b[end+1:])
	if len(rest) < 2 || len(rest[0]) != 1 {
		return proc{}, false
	}
	ppid, err := strconv.Atoi(string(rest[1]))
	if err != nil {
		return proc{}, false
	}
	return proc{pid: pid, ppid: ppid, state: rest[0][0]}, true
}

// Parent returns pid's parent as seen under procRoot ("/proc"); ok is false
// when pid's stat file cannot be read or parsed (the process is gone).
// The watcher uses it to tell lifeboat's own ancestors from a trainer.
func Parent(procRoot string, pid int) (ppid int, ok bool) {
	b, err := os.ReadFile(filepath.Join(procRoot, strconv.Itoa(pid), "stat"))
	if err != nil {
		return 0, false
	}
	p, ok := parseStat(b)
	if !ok {
		return 0, false
	}
	return p.ppid, true
}

// descendants returns the live (non-zombie) descendants of root, parents
// before children.
func descendants(procs []proc, root int) []int {
	kids := make(map[int][]proc)
	for _, p := range procs {
		kids[p.ppid] = append(kids[p.ppid], p)
	}
	var out []int
	queue := []int{root}
	seen := map[int]bool{root: true}
	for len(queue) > 0 {
		pid := queue[0]
		queue = queue[1:]
		for _, k := range kids[pid] {
			if seen[k.pid] {
				continue
			}
			seen[k.pid] = true
			queue = append(queue, k.pid)
			if k.state != 'Z' && k.state != 'X' {
				out = append(out, k.pid)
			}
		}
	}
	return out
}

// Descendants lists the live descendants of pid as seen under procRoot
// ("/proc"): the trainer's tree when pid is lifeboat's. Watchers that act on
// the trainer's processes (the GPU memory watchdog) use it so that they
// never touch a process outside the tree.
func Descendants(procRoot string, pid int) ([]int, error) {
	procs, err := readProcs(procRoot)
	if err != nil {
		return nil, err
	}
	return descendants(procs, pid), nil
}
