package memory

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/containerd/cgroups/v3"

	"github.com/lifeboat-project/lifeboat/internal/mountinfo"
)

// Mode says which cgroup hierarchy holds the memory controller for
// lifeboat's process.
type Mode string

const (
	// ModeNone: no usable memory cgroup was found.
	ModeNone Mode = "none"
	// ModeV1: the memory controller is on a cgroup v1 hierarchy and no
	// cgroup2 hierarchy is mounted (legacy).
	ModeV1 Mode = "v1"
	// ModeHybrid: the memory controller is on a cgroup v1 hierarchy while a
	// cgroup2 hierarchy is mounted as well (usually /sys/fs/cgroup/unified,
	// without the memory controller). The v1 memory hierarchy is used.
	ModeHybrid Mode = "hybrid"
	// ModeV2: the unified cgroup v2 hierarchy.
	ModeV2 Mode = "v2"
)

// v1 reports whether the memory controller is on a cgroup v1 hierarchy.
func (m Mode) v1() bool { return m == ModeV1 || m == ModeHybrid }

// DefaultRoot is where cgroupfs is mounted.
const DefaultRoot = "/sys/fs/cgroup"

// unlimitedV1 is the smallest memory.limit_in_bytes read as "no limit":
// cgroup v1 shows an unlimited cgroup as a huge page-aligned number
// (9223372036854771712 on 4 KiB pages), never as "max".
const unlimitedV1 = int64(1) << 62

// layout is where lifeboat's memory cgroup is, as read from
// /proc/self/cgroup and /proc/self/mountinfo.
type layout struct {
	mode     Mode
	mount    string // the memory hierarchy's mount point, under Config.Root
	dir      string // lifeboat's cgroup directory, under mount
	readOnly bool   // the mount is read-only
	reason   string // why mode is ModeNone
}

// detect finds lifeboat's memory cgroup from the contents of
// /proc/self/cgroup and /proc/self/mountinfo. Mount points under
// /sys/fs/cgroup are rebased onto root, so tests can point it at a tree in a
// temporary directory.
func detect(cgroupFile, mountTable []byte, root string) (layout, error) {
	v1paths, unified, err := cgroups.ParseCgroupFromReaderUnified(bytes.NewReader(cgroupFile))
	if err != nil {
		return layout{}, fmt.Errorf("parse /proc/self/cgroup: %w", err)
	}
	hasUnified := false
	for _, line := range strings.Split(string(cgroupFile), "\n") {
		if strings.HasPrefix(line, "0::") {
			hasUnified = true
		}
	}
	mounts, err := mountinfo.Parse(mountTable)
	if err != nil {
		return layout{}, fmt.Errorf("parse /proc/self/mountinfo: %w", err)
	}
	var v1mem, v2 *mountinfo.Entry
	for i := range mounts {
		e := &mounts[i]
		switch {
		case e.FSType == "cgroup" && v1mem == nil && contains(e.Super, "memory"):
			v1mem = e
		case e.FSType == "cgroup2" && (v2 == nil || under(e.Point, DefaultRoot) && !under(v2.Point, DefaultRoot)):
			v2 = e
		}
	}
	memPath, inV1 := v1paths["memory"]
	switch {
	case inV1 && v1mem != nil:
		mode := ModeV1
		if v2 != nil {
			mode = ModeHybrid
		}
		return place(mode, v1mem, memPath, root), nil
	case inV1 || v1mem != nil:
		// Half of the v1 picture: say what is missing rather than fall
		// through to v2, whose hierarchy has no memory controller then.
		if v1mem == nil {
			return layout{mode: ModeNone, reason: "/proc/self/cgroup names a v1 memory cgroup but no cgroup v1 memory hierarchy is mounted"}, nil
		}
		return layout{mode: ModeNone, reason: fmt.Sprintf("a cgroup v1 memory hierarchy is mounted at %s but /proc/self/cgroup has no memory line", v1mem.Point)}, nil
	case hasUnified && v2 != nil:
		return place(ModeV2, v2, unified, root), nil
	case hasUnified:
		return layout{mode: ModeNone, reason: "/proc/self/cgroup names a cgroup v2 cgroup but no cgroup2 filesystem is mounted"}, nil
	default:
		return layout{mode: ModeNone, reason: "no memory cgroup: /proc/self/cgroup names neither a v1 memory cgroup nor a v2 cgroup"}, nil
	}
}

// place turns the cgroup path from /proc/self/cgroup into a directory under
// the mount that shows it.
func place(mode Mode, m *mountinfo.Entry, cgPath, root string) layout {
	l := layout{mode: mode, mount: rebase(m.Point, root), readOnly: m.ReadOnly}
	rel, ok := strings.CutPrefix(cgPath, m.Root)
	if m.Root == "/" {
		rel, ok = cgPath, true
	}
	if !ok || (rel != "" && !strings.HasPrefix(rel, "/")) || strings.Contains(rel+"/", "/../") {
		return layout{mode: ModeNone, reason: fmt.Sprintf("lifeboat's %s cgroup %q is outside the subtree %q mounted at %s", mode, cgPath, m.Root, m.Point)}
	}
	l.dir = filepath.Join(l.mount, rel)
	return l
}

// rebase maps a mount point under /sys/fs/cgroup onto root.
func rebase(point, root string) string {
	if rest, ok := strings.CutPrefix(point, DefaultRoot); ok && (rest == "" || rest[0] == '/') {
		return filepath.Join(root, rest)
	}
	return point
}

func under(p, dir string) bool { return p == dir || strings.HasPrefix(p, dir+"/") }

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// parseLimit reads a memory limit file's content: v2 memory.max ("max" or
// bytes) or v1 memory.limit_in_bytes (bytes; huge means none). It returns 0
// for no limit.
func parseLimit(data string) (int64, error) {
	s := strings.TrimSpace(data)
	if s == "max" {
		return 0, nil
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		// Larger than int64 (some kernels print 2^64-1): no limit.
		if u, uerr := strconv.ParseUint(s, 10, 64); uerr == nil && u > 0 {
			return 0, nil
		}
		return 0, fmt.Errorf("not a memory limit: %q", s)
	}
	if v < 0 || v >= unlimitedV1 {
		return 0, nil
	}
	return v, nil
}

// containerLimit is the tightest memory limit on dir and its ancestors up
// to mount (a pod-level limit may sit above the container's own cgroup).
// It returns 0 when none of them has a limit.
func containerLimit(mode Mode, mount, dir string) (int64, error) {
	file := "memory.max"
	if mode.v1() {
		file = "memory.limit_in_bytes"
	}
	var limit int64
	for d := dir; ; d = filepath.Dir(d) {
		data, err := os.ReadFile(filepath.Join(d, file))
		switch {
		case errors.Is(err, os.ErrNotExist):
			// The root of a hierarchy has no limit file.
		case err != nil:
			return 0, fmt.Errorf("read %s: %w", filepath.Join(d, file), err)
		default:
			v, err := parseLimit(string(data))
			if err != nil {
				return 0, fmt.Errorf("read %s: %w", filepath.Join(d, file), err)
			}
			if v > 0 && (limit == 0 || v < limit) {
				limit = v
			}
		}
		if d == mount || len(d) <= len(mount) || d == filepath.Dir(d) {
			return limit, nil
		}
	}
}

// readCounter returns the value of key in a flat keyed file such as
// memory.events ("oom_kill 3") or v1 memory.oom_control. ok is false when
// the key is absent (a file caught while being rewritten, in tests).
func readCounter(path, key string) (n uint64, ok bool, err error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0, false, err
	}
	for _, line := range strings.Split(string(data), "\n") {
		k, v, found := strings.Cut(strings.TrimSpace(line), " ")
		if !found || k != key {
			continue
		}
		n, err := strconv.ParseUint(strings.TrimSpace(v), 10, 64)
		if err != nil {
			return 0, false, fmt.Errorf("%s: %s: %w", path, key, err)
		}
		return n, true, nil
	}
	return 0, false, nil
}
