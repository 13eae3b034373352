package memory

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/containerd/cgroups/v3/cgroup1"
	"github.com/containerd/cgroups/v3/cgroup2"
	"github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// Leaf names under lifeboat's cgroup.
const (
	leafLifeboat = "lifeboat"
	leafTrainer  = "trainer"
)

// backend does the kernel-facing steps for one cgroup version, through
// containerd/cgroups.
type backend interface {
	// setup creates both leaves, moves lifeboat into its own and sets the
	// trainer's limit (0: none). On error it leaves what it created for
	// teardown to remove.
	setup(limit int64) error
	// enter moves lifeboat into the trainer's leaf (trainer true) or back
	// into its own.
	enter(trainer bool) error
	// events returns a non-blocking file that becomes readable when the
	// trainer's cgroup reports memory events (v1: an OOM eventfd; v2:
	// inotify on memory.events).
	events() (*os.File, error)
	// counter names the file and key counting OOM kills in the trainer's
	// cgroup and its descendants.
	counter() (path, key string)
	// teardown moves lifeboat back into its original cgroup and removes the
	// leaves. It fails, changing nothing, while the trainer's leaf still
	// holds processes.
	teardown() error
}

var (
	_ backend = (*v1Backend)(nil)
	_ backend = (*v2Backend)(nil)
)

// self is lifeboat's pid as the cgroup libraries take it.
func self() uint64 { return uint64(os.Getpid()) }

// gone reports whether err says the process being moved has exited.
func gone(err error) bool { return errors.Is(err, unix.ESRCH) }

// v1Backend uses the cgroup v1 memory hierarchy (legacy and hybrid hosts).
// v1 allows processes in inner cgroups, so only lifeboat itself moves into
// its leaf; processes that shared its cgroup stay where they are.
type v1Backend struct {
	mount string // the memory hierarchy's mount point, always ".../memory"
	rel   string // lifeboat's cgroup, relative to mount ("/" or "/docker/abc")

	lifeboat, trainer cgroup1.Cgroup
}

func (b *v1Backend) opt() cgroup1.InitOpts {
	return cgroup1.WithHierarchy(func() ([]cgroup1.Subsystem, error) {
		// The library places the memory hierarchy at <root>/memory.
		return []cgroup1.Subsystem{cgroup1.NewMemory(filepath.Dir(b.mount))}, nil
	})
}

func (b *v1Backend) path(leaf string) string { return filepath.Join(b.mount, b.rel, leaf) }

func (b *v1Backend) setup(limit int64) error {
	lb, err := cgroup1.New(cgroup1.StaticPath(filepath.Join(b.rel, leafLifeboat)), &specs.LinuxResources{}, b.opt())
	if err != nil {
		return fmt.Errorf("create %s: %w", b.path(leafLifeboat), err)
	}
	b.lifeboat = lb
	if err := lb.AddProc(self()); err != nil {
		return fmt.Errorf("move lifeboat (pid %d) into %s: %w", os.Getpid(), b.path(leafLifeboat), err)
	}
	res := &specs.LinuxResources{}
	if limit > 0 {
		res.Memory = &specs.LinuxMemory{Limit: &limit}
	}
	tr, err := cgroup1.New(cgroup1.StaticPath(filepath.Join(b.rel, leafTrainer)), res, b.opt())
	if err != nil {
		// The library leaves the directory behind when the limit write fails.
		if l, lerr := cgroup1.Load(cgroup1.StaticPath(filepath.Join(b.rel, leafTrainer)), b.opt()); lerr == nil {
			b.trainer = l
		}
		return fmt.Errorf("create %s with memory.limit_in_bytes %d: %w", b.path(leafTrainer), limit, err)
	}
	b.trainer = tr
	return nil
}

func (b *v1Backend) enter(trainer bool) error {
	cg, leaf := b.lifeboat, leafLifeboat
	if trainer {
		cg, leaf = b.trainer, leafTrainer
	}
	if err := cg.AddProc(self()); err != nil {
		return fmt.Errorf("move lifeboat (pid %d) into %s: %w", os.Getpid(), b.path(leaf), err)
	}
	return nil
}

func (b *v1Backend) events() (*os.File, error) {
	fd, err := b.trainer.OOMEventFD()
	if err != nil {
		return nil, fmt.Errorf("register an OOM eventfd on %s: %w", b.path(leafTrainer), err)
	}
	return nonblockFile(int(fd), filepath.Join(b.path(leafTrainer), "memory.oom_control"))
}

func (b *v1Backend) counter() (string, string) {
	return filepath.Join(b.path(leafTrainer), "memory.oom_control"), "oom_kill"
}

func (b *v1Backend) teardown() error {
	if b.trainer != nil {
		if err := b.trainer.Delete(); err != nil {
			return fmt.Errorf("remove %s: %w", b.path(leafTrainer), err)
		}
		b.trainer = nil
	}
	if b.lifeboat == nil {
		return nil
	}
	own, err := cgroup1.Load(cgroup1.StaticPath(b.rel), b.opt())
	if err != nil {
		return fmt.Errorf("load %s: %w", filepath.Join(b.mount, b.rel), err)
	}
	if err := b.lifeboat.MoveTo(own); err != nil {
		return fmt.Errorf("move lifeboat back from %s to %s: %w", b.path(leafLifeboat), filepath.Join(b.mount, b.rel), err)
	}
	if err := b.lifeboat.Delete(); err != nil {
		return fmt.Errorf("remove %s: %w", b.path(leafLifeboat), err)
	}
	b.lifeboat = nil
	return nil
}

// v2Backend uses the unified hierarchy. A cgroup that hands the memory
// controller to its children may not hold processes itself (the "no
// internal processes" rule), so every process in lifeboat's cgroup moves
// into the lifeboat leaf before the controller is enabled; the root cgroup
// is exempt, and there only lifeboat moves.
//
// The library's managers are rooted at lifeboat's own cgroup (their
// "mountpoint"), so enabling or disabling the controller writes that
// cgroup's cgroup.subtree_control only, never an ancestor's.
type v2Backend struct {
	dir string // lifeboat's cgroup

	own, lifeboat, trainer *cgroup2.Manager
	enabled                bool // setup enabled memory in dir's cgroup.subtree_control
}

func (b *v2Backend) path(leaf string) string { return filepath.Join(b.dir, leaf) }

func (b *v2Backend) load(group string) (*cgroup2.Manager, error) {
	m, err := cgroup2.Load(group, cgroup2.WithMountpoint(b.dir))
	if err != nil {
		return nil, fmt.Errorf("load %s: %w", filepath.Join(b.dir, group), err)
	}
	return m, nil
}

func (b *v2Backend) setup(limit int64) error {
	own, err := b.load("/")
	if err != nil {
		return err
	}
	b.own = own
	ctrls, err := own.Controllers()
	if err != nil {
		return fmt.Errorf("read %s: %w", filepath.Join(b.dir, "cgroup.controllers"), err)
	}
	if !contains(ctrls, "memory") {
		return fmt.Errorf("the memory controller is not delegated to %s (cgroup.controllers: %q): %w",
			b.dir, strings.Join(ctrls, " "), ErrUnavailable)
	}
	sub, err := os.ReadFile(filepath.Join(b.dir, "cgroup.subtree_control"))
	if err != nil {
		return fmt.Errorf("read %s: %w", filepath.Join(b.dir, "cgroup.subtree_control"), err)
	}
	b.enabled = !contains(strings.Fields(string(sub)), "memory")

	lb, err := own.NewChild(leafLifeboat, nil)
	if err != nil {
		return fmt.Errorf("create %s: %w", b.path(leafLifeboat), err)
	}
	b.lifeboat = lb
	pids := []uint64{self()}
	if _, err := os.Stat(filepath.Join(b.dir, "cgroup.type")); err == nil {
		// Not the root cgroup: everything here must move out.
		if pids, err = own.Procs(false); err != nil {
			return fmt.Errorf("list the processes in %s: %w", b.dir, err)
		}
	}
	for _, pid := range pids {
		if err := lb.AddProc(pid); err != nil && !(gone(err) && pid != self()) {
			return fmt.Errorf("move pid %d from %s into %s: %w", pid, b.dir, b.path(leafLifeboat), err)
		}
	}
	if err := lb.AddProc(self()); err != nil { // in case the list missed it
		return fmt.Errorf("move lifeboat (pid %d) into %s: %w", os.Getpid(), b.path(leafLifeboat), err)
	}

	res := &cgroup2.Resources{Memory: &cgroup2.Memory{}} // enables the controller even without a limit
	if limit > 0 {
		res.Memory.Max = &limit
	}
	tr, err := own.NewChild(leafTrainer, res)
	if err != nil {
		return fmt.Errorf("create %s with memory.max %d: %w", b.path(leafTrainer), limit, err)
	}
	b.trainer = tr
	return nil
}

func (b *v2Backend) enter(trainer bool) error {
	m, leaf := b.lifeboat, leafLifeboat
	if trainer {
		m, leaf = b.trainer, leafTrainer
	}
	if err := m.AddProc(self()); err != nil {
		return fmt.Errorf("move lifeboat (pid %d) into %s: %w", os.Getpid(), b.path(leaf), err)
	}
	return nil
}

func (b *v2Backend) events() (*os.File, error) {
	fd, _, err := b.trainer.MemoryEventFD()
	if err != nil {
		return nil, fmt.Errorf("watch %s: %w", filepath.Join(b.path(leafTrainer), "memory.events"), err)
	}
	return nonblockFile(fd, filepath.Join(b.path(leafTrainer), "memory.events"))
}

func (b *v2Backend) counter() (string, string) {
	return filepath.Join(b.path(leafTrainer), "memory.events"), "oom_kill"
}

func (b *v2Backend) teardown() error {
	if b.trainer != nil {
		if err := b.trainer.Delete(); err != nil {
			return fmt.Errorf("remove %s: %w", b.path(leafTrainer), err)
		}
		b.trainer = nil
	}
	if b.lifeboat == nil {
		return nil
	}
	if b.enabled {
		// Processes may live in dir again only once it stops handing the
		// controller down. A manager rooted at dir writes dir's
		// cgroup.subtree_control and nothing above it.
		h, err := b.load("/" + leafLifeboat)
		if err != nil {
			return err
		}
		if err := h.ToggleControllers([]string{"memory"}, cgroup2.Disable); err != nil {
			return fmt.Errorf("disable the memory controller for the children of %s: %w", b.dir, err)
		}
		b.enabled = false
	}
	if err := b.own.AddProc(self()); err != nil {
		return fmt.Errorf("move lifeboat (pid %d) back into %s: %w", os.Getpid(), b.dir, err)
	}
	if err := b.lifeboat.MoveTo(b.own); err != nil {
		return fmt.Errorf("move the processes in %s back into %s: %w", b.path(leafLifeboat), b.dir, err)
	}
	if err := b.lifeboat.Delete(); err != nil {
		return fmt.Errorf("remove %s: %w", b.path(leafLifeboat), err)
	}
	b.lifeboat = nil
	return nil
}

// nonblockFile wraps fd so that reads go through the runtime's poller and
// Close wakes a blocked Read.
func nonblockFile(fd int, name string) (*os.File, error) {
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("set %s non-blocking: %w", name, err)
	}
	return os.NewFile(uintptr(fd), name), nil
}
