package watch

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/lifeboat-project/lifeboat/internal/mountinfo"
	"github.com/lifeboat-project/lifeboat/setting"
)

// TrainerProcesses returns the processes of the trainer that a sidecar
// serves, as far as it can see them: the processes in ProcRoot, other
// than lifeboat and its ancestors, that live in another mount namespace
// (another container of the pod) and have the volume Dir is on mounted
// (the same device and the same root, or one beneath the other: a
// subPath). Other containers of the pod (a service mesh proxy, a log
// shipper) do not mount the checkpoint volume and are not counted; nor is
// a process in lifeboat's own mount namespace (its own container), nor
// one whose namespace or mounts lifeboat may not read. It returns nil
// when Dir's mount cannot be found, and when lifeboat runs in the
// machine's initial PID namespace (not in a pod): it then sees every
// process of the machine, and services with mount namespaces of their
// own cannot be told from a trainer.
func (w *Watcher) TrainerProcesses() []int {
	if ns, err := os.Readlink(filepath.Join(w.cfg.ProcRoot, "self", "ns", "pid")); err != nil || ns == initialPIDNamespace {
		return nil
	}
	vol, ok := volumeOf(filepath.Join(w.cfg.ProcRoot, "self", "mountinfo"), w.cfg.Dir)
	if !ok {
		return nil
	}
	own, err := os.Readlink(filepath.Join(w.cfg.ProcRoot, "self", "ns", "mnt"))
	if err != nil {
		return nil
	}
	ents, err := os.ReadDir(w.cfg.ProcRoot)
	if err != nil {
		return nil
	}
	skip := ancestors(w.cfg.ProcRoot, w.self)
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || skip[pid] {
			continue
		}
		ns, err := os.Readlink(filepath.Join(w.cfg.ProcRoot, e.Name(), "ns", "mnt"))
		if err != nil || ns == own {
			continue
		}
		if mounts(filepath.Join(w.cfg.ProcRoot, e.Name(), "mountinfo"), vol) {
			out = append(out, pid)
		}
	}
	return out
}

// initialPIDNamespace is how /proc/PID/ns/pid names the machine's
// initial PID namespace: its inode is fixed by the kernel
// (PROC_PID_INIT_INO).
const initialPIDNamespace = "pid:[4026531836]"

// volumeOf returns the mount that dir is on, from a mountinfo file: the
// one with the longest mount point that holds dir (the last such line,
// which is on top of any earlier one at the same point).
func volumeOf(file, dir string) (mountinfo.Entry, bool) {
	if d, err := filepath.EvalSymlinks(dir); err == nil {
		dir = d
	}
	dir, _ = filepath.Abs(dir)
	var best mountinfo.Entry
	found := false
	for _, m := range readMounts(file) {
		if within(dir, m.Point) && (!found || len(m.Point) >= len(best.Point)) {
			best, found = m, true
		}
	}
	return best, found
}

// mounts reports whether the mountinfo file lists vol's file system: the
// same device, and a root that is vol's or holds it or lies beneath it.
func mounts(file string, vol mountinfo.Entry) bool {
	for _, m := range readMounts(file) {
		if m.Dev == vol.Dev && (within(m.Root, vol.Root) || within(vol.Root, m.Root)) {
			return true
		}
	}
	return false
}

// within reports whether path is dir or lies beneath it.
func within(path, dir string) bool {
	return path == dir || dir == "/" || strings.HasPrefix(path, dir+"/")
}

// readMounts reads a mountinfo file; one that cannot be read or parsed
// gives no mounts.
func readMounts(file string) []mountinfo.Entry {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil
	}
	ms, err := mountinfo.Parse(b)
	if err != nil {
		return nil
	}
	return ms
}

// Writing reports whether the trainer may still be writing a checkpoint,
// and why (naming Settle as a setting.Name): with its processes visible (TrainerProcesses), while one of
// them runs; with Config.WritersInvisible, while some file under Dir has
// changed within Settle. A sidecar's final upload waits for it to turn
// false (agent.Agent.FlushWhenWritten). It reads the directory and ProcRoot
// and touches no state of the Watcher: it is safe to call while another
// goroutine scans.
func (w *Watcher) Writing() (bool, setting.Text) {
	if !w.cfg.WritersInvisible {
		if pids := w.TrainerProcesses(); len(pids) > 0 {
			return true, setting.Textf("%d processes of the trainer's container still run (pid %d)", len(pids), pids[0])
		}
		return false, setting.Text{}
	}
	l, err := scanDir(w.cfg.Dir, w.cfg.Marker, w.cfg.Exclude)
	if err != nil {
		return false, setting.Text{}
	}
	var last time.Time
	for _, f := range l.files {
		last = maxTime(last, f.ModTime, f.ChangeTime)
	}
	if age := w.cfg.Clock().Sub(last); !last.IsZero() && age < w.cfg.Settle {
		return true, setting.Textf("a file changed %s ago, less than %s %s (the trainer's processes are not visible)", age.Round(time.Millisecond), setting.Settle, w.cfg.Settle)
	}
	return false, setting.Text{}
}

func maxTime(t time.Time, ts ...time.Time) time.Time {
	for _, u := range ts {
		if u.After(t) {
			t = u
		}
	}
	return t
}
