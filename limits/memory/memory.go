package memory

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// ErrUnavailable is wrapped by Setup's error when the kernel or the
// container does not allow the split (read-only cgroupfs in an unprivileged
// pod, no memory controller, a limit too small for the reserve). The trainer
// then shares lifeboat's cgroup as it would without this package.
var ErrUnavailable = errors.New("trainer memory cgroup unavailable")

// DefaultReserve is the memory kept for lifeboat when Config.Reserve is 0.
const DefaultReserve = 64 << 20

// Config says where the kernel's files are and how much memory lifeboat
// keeps for itself. The zero value is the production configuration.
type Config struct {
	// Root is where cgroupfs is mounted. Default DefaultRoot
	// (/sys/fs/cgroup). Mount points under /sys/fs/cgroup named by
	// mountinfo are looked up under Root instead (tests pass a temporary
	// directory).
	Root string
	// ProcSelf is where "cgroup" and "mountinfo" are read. Default
	// /proc/self.
	ProcSelf string
	// Reserve is the memory, in bytes, kept for lifeboat out of the
	// container's limit: the trainer's limit is the container's limit less
	// Reserve. Default DefaultReserve (64 MiB).
	Reserve int64
	// Log receives the OOM kill reports and warnings. Default: discard.
	Log *slog.Logger
	// OOMScoreAdj is the trainer's oom_score_adj where its cgroup cannot be
	// made (Protect): the kernel's OOM killer then prefers the trainer to
	// lifeboat within the container's cgroup. 0 leaves the trainer with
	// lifeboat's own value. At most 1000.
	OOMScoreAdj int
}

// Plan is what New found and what Setup does, for `lifeboat doctor` and the
// start-up log.
type Plan struct {
	Mode      Mode   `json:"mode"`
	Available bool   `json:"available"`        // Setup can create the trainer's cgroup
	Reason    string `json:"reason,omitempty"` // why not, when !Available
	ReadOnly  bool   `json:"read_only"`        // cgroupfs is read-only here

	Cgroup         string `json:"cgroup,omitempty"`          // lifeboat's cgroup directory, split by Setup
	LifeboatCgroup string `json:"lifeboat_cgroup,omitempty"` // the leaf lifeboat moves into
	TrainerCgroup  string `json:"trainer_cgroup,omitempty"`  // the leaf the trainer starts in

	ContainerLimit int64 `json:"container_limit"` // bytes; 0: no limit
	TrainerLimit   int64 `json:"trainer_limit"`   // ContainerLimit - Reserve; 0: no limit
	Reserve        int64 `json:"reserve"`

	// OOMGroup is cgroup v2's memory.oom.group=1 on lifeboat's cgroup (the
	// kubelet sets it on every container unless singleProcessOOMKill is
	// on): an OOM kill there kills every process of the cgroup, lifeboat
	// too, whatever oom_score_adj says. Only the trainer's own cgroup
	// (Setup) keeps lifeboat out of it.
	OOMGroup bool `json:"oom_group"`
	// OOMCounter is the file of lifeboat's own cgroup that counts its OOM
	// kills (v1 memory.oom_control, v2 memory.events), read by Protect.
	OOMCounter string `json:"oom_counter,omitempty"`
}

// String is one line for a log or `lifeboat doctor`.
func (p Plan) String() string {
	if !p.Available {
		return fmt.Sprintf("memory (%s): unavailable: %s", p.Mode, p.Reason)
	}
	return fmt.Sprintf("memory (%s): trainer cgroup %s, limit %s = container %s - reserve %s",
		p.Mode, p.TrainerCgroup, bytesString(p.TrainerLimit), bytesString(p.ContainerLimit), bytesString(p.Reserve))
}

func bytesString(n int64) string {
	switch {
	case n <= 0:
		return "none"
	case n%(1<<30) == 0:
		return fmt.Sprintf("%dGiB", n>>30)
	case n%(1<<20) == 0:
		return fmt.Sprintf("%dMiB", n>>20)
	default:
		return fmt.Sprintf("%dB", n)
	}
}

// Manager owns the trainer's memory cgroup: it creates it (Setup), starts
// trainers in it (Spawn), reports OOM kills in it (OOMKills, OOMKillCount)
// and removes it (Close). Its methods are safe for concurrent use.
type Manager struct {
	cfg  Config
	plan Plan
	lay  layout

	mu    sync.Mutex // serializes Setup, Protect, Spawn and Close
	b     backend    // nil unless Setup succeeded and Close has not run
	w     *watcher
	score *oomScore // set by Protect
}

// New inspects lifeboat's cgroup: which hierarchy holds the memory
// controller (v1, hybrid or v2), the container's limit (the tightest on
// lifeboat's cgroup and the ancestors visible to it) and whether cgroupfs
// is writable. It changes nothing. An environment where the split is not
// possible is not an error: Plan says why and Setup returns ErrUnavailable.
// New fails only for an invalid Config.
func New(cfg Config) (*Manager, error) {
	if cfg.Reserve < 0 {
		return nil, fmt.Errorf("memory: the reserve is %d bytes; it must not be negative", cfg.Reserve)
	}
	if cfg.Root == "" {
		cfg.Root = DefaultRoot
	}
	if cfg.ProcSelf == "" {
		cfg.ProcSelf = "/proc/self"
	}
	if cfg.Reserve == 0 {
		cfg.Reserve = DefaultReserve
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	m := &Manager{cfg: cfg}
	m.plan, m.lay = inspect(cfg)
	return m, nil
}

// inspect works out the plan; every problem ends up in Plan.Reason.
func inspect(cfg Config) (Plan, layout) {
	p := Plan{Mode: ModeNone, Reserve: cfg.Reserve}
	cg, err := os.ReadFile(filepath.Join(cfg.ProcSelf, "cgroup"))
	if err != nil {
		p.Reason = fmt.Sprintf("cannot read lifeboat's cgroup: %v", err)
		return p, layout{mode: ModeNone}
	}
	mi, err := os.ReadFile(filepath.Join(cfg.ProcSelf, "mountinfo"))
	if err != nil {
		p.Reason = fmt.Sprintf("cannot read the mount table: %v", err)
		return p, layout{mode: ModeNone}
	}
	lay, err := detect(cg, mi, cfg.Root)
	if err != nil {
		p.Reason = err.Error()
		return p, layout{mode: ModeNone}
	}
	p.Mode = lay.mode
	if lay.mode == ModeNone {
		p.Reason = lay.reason
		return p, lay
	}
	p.Cgroup = lay.dir
	p.LifeboatCgroup = filepath.Join(lay.dir, leafLifeboat)
	p.TrainerCgroup = filepath.Join(lay.dir, leafTrainer)
	if p.ContainerLimit, err = containerLimit(lay.mode, lay.mount, lay.dir); err != nil {
		p.Reason = fmt.Sprintf("cannot read the container's memory limit: %v", err)
		return p, lay
	}
	if p.ContainerLimit > 0 {
		p.TrainerLimit = max(p.ContainerLimit-cfg.Reserve, 0)
	}
	if lay.mode.v1() {
		p.OOMCounter = filepath.Join(lay.dir, "memory.oom_control")
	} else {
		p.OOMCounter = filepath.Join(lay.dir, "memory.events")
		if b, err := os.ReadFile(filepath.Join(lay.dir, "memory.oom.group")); err == nil && strings.TrimSpace(string(b)) == "1" {
			p.OOMGroup = true
		}
	}
	switch {
	case lay.mode.v1() && filepath.Base(lay.mount) != "memory":
		p.Reason = fmt.Sprintf("the cgroup v1 memory hierarchy is mounted at %s; containerd/cgroups needs it at a directory named memory", lay.mount)
	case lay.readOnly:
		p.ReadOnly = true
		p.Reason = fmt.Sprintf("cgroupfs is mounted read-only at %s (an unprivileged container); the trainer shares lifeboat's memory cgroup and an OOM kill may hit lifeboat", lay.mount)
	case unix.Access(lay.dir, unix.W_OK) != nil:
		p.ReadOnly = true
		p.Reason = fmt.Sprintf("lifeboat's cgroup %s is not writable (%v); the trainer shares lifeboat's memory cgroup and an OOM kill may hit lifeboat", lay.dir, unix.Access(lay.dir, unix.W_OK))
	case p.ContainerLimit > 0 && p.TrainerLimit == 0:
		p.Reason = fmt.Sprintf("the container's memory limit %s is not above lifeboat's reserve %s; lower the reserve", bytesString(p.ContainerLimit), bytesString(cfg.Reserve))
	default:
		p.Available = true
	}
	return p, lay
}

// Plan returns what New found.
func (m *Manager) Plan() Plan { return m.plan }

// Setup splits lifeboat's cgroup: it creates the leaf "lifeboat" and moves
// lifeboat into it (on cgroup v2 with every other process of its cgroup,
// which may not hold processes once its children get the memory
// controller), then creates the leaf "trainer" with the memory limit
// Plan().TrainerLimit, or none when the container has none (the separate
// cgroup still attributes OOM kills), and starts counting OOM kills there.
//
// Where the split is not possible it returns an error wrapping
// ErrUnavailable that says why; the caller logs it once and runs without.
// On any error nothing is left behind. A second call does nothing.
func (m *Manager) Setup() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.b != nil {
		return nil
	}
	if !m.plan.Available {
		return fmt.Errorf("memory: %s: %w", m.plan.Reason, ErrUnavailable)
	}
	var b backend
	if m.lay.mode.v1() {
		rel, err := filepath.Rel(m.lay.mount, m.lay.dir)
		if err != nil {
			return fmt.Errorf("memory: %s is not under %s: %w", m.lay.dir, m.lay.mount, err)
		}
		b = &v1Backend{mount: m.lay.mount, rel: filepath.Join("/", rel)}
	} else {
		b = &v2Backend{dir: m.lay.dir}
	}
	if err := b.setup(m.plan.TrainerLimit); err != nil {
		if terr := b.teardown(); terr != nil {
			m.cfg.Log.Warn("memory.cleanup_failed", "err", terr)
		}
		if denied(err) && !errors.Is(err, ErrUnavailable) {
			return fmt.Errorf("memory: split %s: %w (%w)", m.lay.dir, ErrUnavailable, err)
		}
		return fmt.Errorf("memory: split %s: %w", m.lay.dir, err)
	}
	path, key := b.counter()
	ev, err := b.events()
	if err != nil {
		m.cfg.Log.Warn("memory.events_unavailable", "err", err, "effect", "OOM kills are noticed by polling every "+pollInterval.String())
		ev = nil
	}
	w, err := startWatcher(path, key, ev, m.plan.TrainerLimit, m.cfg.Log)
	if err != nil {
		if terr := b.teardown(); terr != nil {
			m.cfg.Log.Warn("memory.cleanup_failed", "err", terr)
		}
		return fmt.Errorf("memory: read the OOM kill counter: %w", err)
	}
	m.b, m.w = b, w
	m.cfg.Log.Info("memory.setup", "mode", string(m.plan.Mode), "trainer_cgroup", m.plan.TrainerCgroup,
		"trainer_limit", m.plan.TrainerLimit, "container_limit", m.plan.ContainerLimit, "reserve", m.plan.Reserve)
	return nil
}

// denied reports whether err is the kernel refusing a cgroup change.
func denied(err error) bool {
	return errors.Is(err, unix.EROFS) || errors.Is(err, unix.EACCES) || errors.Is(err, unix.EPERM)
}

// Spawn calls start, which forks and execs the trainer and returns its pid,
// with lifeboat moved into the trainer's cgroup for the duration, so the
// child is in that cgroup from its first instruction (a child inherits its
// parent's cgroup at fork); lifeboat then moves back into its own leaf.
// After Protect instead, lifeboat's own oom_score_adj is raised to the
// trainer's for the duration, for the same reason (see Protect).
//
// Spawn holds the Manager's lock throughout: while lifeboat is in the
// trainer's cgroup, anything else it forks lands there too, so start must
// be the only fork in flight (in lifeboat the supervisor is the only code
// that forks). Spawn calls start exactly once. Before Setup, after Close, or
// if lifeboat cannot enter the trainer's cgroup (logged), start runs as is
// and the trainer shares lifeboat's cgroup. A failure to move back is
// logged, not returned: the trainer runs either way.
func (m *Manager) Spawn(start func() (int, error)) (int, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.b == nil && m.score != nil {
		return m.score.spawn(start)
	}
	if m.b == nil {
		return start()
	}
	if err := m.b.enter(true); err != nil {
		m.cfg.Log.Warn("memory.spawn_outside_cgroup", "err", err,
			"effect", "the trainer shares lifeboat's memory cgroup; an OOM kill may hit lifeboat")
		return start()
	}
	pid, err := start()
	if berr := m.b.enter(false); berr != nil {
		m.cfg.Log.Error("memory.return_failed", "err", berr,
			"effect", "lifeboat stays in the trainer's memory cgroup and may be OOM-killed with it")
	}
	return pid, err
}

// OOMKills delivers one value per process the kernel OOM-killed in the
// trainer's cgroup (the trainer or any of its descendants), in order,
// without losing any while nobody receives. It is nil before Setup
// succeeds (a nil channel never fires in a select) and closed by Close.
// Delivery can lag the kill by up to a second; to classify a trainer's
// exit, compare OOMKillCount before and after instead.
func (m *Manager) OOMKills() <-chan struct{} {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.w == nil {
		return nil
	}
	return m.w.out
}

// OOMKillCount reads the number of OOM kills in the trainer's cgroup since
// Setup, straight from the kernel. The kernel counts a kill before it sends
// the SIGKILL, so once the trainer has been reaped with SIGKILL the count
// already includes its kill. It returns 0 before Setup and after Close.
func (m *Manager) OOMKillCount() (uint64, error) {
	m.mu.Lock()
	w := m.w
	m.mu.Unlock()
	if w == nil {
		return 0, nil
	}
	n, err := w.count()
	if err != nil {
		return 0, fmt.Errorf("memory: read %s: %w", w.path, err)
	}
	return n, nil
}

// Close stops counting OOM kills (OOMKills is closed), moves lifeboat back
// into the cgroup it started in and removes both leaves. Call it once the
// trainer and its descendants are gone: while the trainer's cgroup still
// holds processes, Close removes nothing and says so. Close without Setup,
// or a second Close, does nothing.
func (m *Manager) Close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.w != nil {
		m.w.close()
		m.w = nil
	}
	m.score = nil
	if m.b == nil {
		return nil
	}
	if err := m.b.teardown(); err != nil {
		return fmt.Errorf("memory: %w", err)
	}
	m.b = nil
	return nil
}
