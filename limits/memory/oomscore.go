package memory

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// LifeboatOOMScoreAdj is what Protect lowers lifeboat's own oom_score_adj
// to where the kernel allows it (CAP_SYS_RESOURCE): as unlikely a victim as
// can be while staying killable, so a container whose only process left is
// lifeboat never hangs in an OOM.
const LifeboatOOMScoreAdj = -999

// MaxOOMScoreAdj is the kernel's highest oom_score_adj: always the victim
// first.
const MaxOOMScoreAdj = 1000

// Protect is the protection where the trainer's cgroup cannot be made
// (Setup returned ErrUnavailable, as in an unprivileged pod with a
// read-only cgroupfs). Within a cgroup the kernel's OOM killer takes the
// process with the highest badness, its memory plus oom_score_adj in
// thousandths of the cgroup's limit; so from then on every trainer Spawn
// starts has oom_score_adj Config.OOMScoreAdj, which any process may set
// for itself and its children, and lifeboat lowers its own to
// LifeboatOOMScoreAdj where it is allowed to (refused without
// CAP_SYS_RESOURCE: logged at Debug, lifeboat keeps its value). OOM kills
// are counted on lifeboat's own cgroup (Plan.OOMCounter, readable in a
// read-only cgroupfs), so that a trainer killed by SIGKILL with the count
// risen is reported as an OOM kill; lifeboat being alive to see it, the
// victim was not lifeboat.
//
// With cgroup v2's memory.oom.group=1 on lifeboat's cgroup (Plan.OOMGroup)
// the kernel kills the whole cgroup, lifeboat included: Protect says so in
// one warning, since then only what was uploaded before survives.
//
// Protect after a successful Setup, or a second time, does nothing. It
// fails only when lifeboat's own oom_score_adj cannot be read.
func (m *Manager) Protect() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.b != nil || m.score != nil {
		return nil
	}
	log := m.cfg.Log
	path := filepath.Join(m.cfg.ProcSelf, "oom_score_adj")
	own, err := readAdj(path)
	if err != nil {
		return fmt.Errorf("memory: read lifeboat's oom_score_adj: %w", err)
	}
	s := &oomScore{path: path, lifeboat: own, trainer: own, log: log}
	if own > LifeboatOOMScoreAdj {
		switch err := writeAdj(path, LifeboatOOMScoreAdj); {
		case err == nil:
			s.lifeboat = LifeboatOOMScoreAdj
		case denied(err):
			log.Debug("memory.oom_score_kept", "oom_score_adj", own, "err", err,
				"effect", "lifeboat cannot lower its own oom_score_adj without CAP_SYS_RESOURCE; the trainer's is raised instead")
		default:
			log.Debug("memory.oom_score_kept", "oom_score_adj", own, "err", err)
		}
	}
	if m.cfg.OOMScoreAdj != 0 && m.cfg.OOMScoreAdj > s.lifeboat {
		s.trainer = min(m.cfg.OOMScoreAdj, MaxOOMScoreAdj)
	}
	if m.plan.OOMCounter != "" {
		w, err := startWatcher(m.plan.OOMCounter, "oom_kill", nil, m.plan.ContainerLimit, log)
		if err != nil {
			log.Debug("memory.oom_count_unavailable", "path", m.plan.OOMCounter, "err", err,
				"effect", "a trainer killed by SIGKILL is not told apart from one OOM-killed")
		} else {
			m.w = w
		}
	}
	if m.plan.OOMGroup {
		log.Warn("memory.oom_group", "cgroup", m.plan.Cgroup,
			"effect", "memory.oom.group=1: an OOM kill takes the whole container, lifeboat too; only what was uploaded before survives",
			"hint", "give lifeboat a writable cgroup (the trainer then gets its own) or turn on the kubelet's singleProcessOOMKill")
	}
	m.score = s
	log.Info("memory.oom_score", "trainer", s.trainer, "lifeboat", s.lifeboat, "container_limit", m.plan.ContainerLimit)
	return nil
}

// Describe says how the trainer's memory is kept from taking lifeboat
// down, for the log and the termination message.
func (m *Manager) Describe() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.b != nil || m.score == nil {
		return m.plan.String()
	}
	d := fmt.Sprintf("memory (%s): the trainer shares lifeboat's cgroup, limit %s, with oom_score_adj %d (lifeboat %d)",
		m.plan.Mode, bytesString(m.plan.ContainerLimit), m.score.trainer, m.score.lifeboat)
	if m.plan.OOMGroup {
		d += "; memory.oom.group=1: an OOM kill takes the whole container"
	}
	return d
}

// OOMScores returns the trainer's and lifeboat's oom_score_adj after
// Protect; ok is false before it.
func (m *Manager) OOMScores() (trainer, lifeboat int, ok bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.score == nil {
		return 0, 0, false
	}
	return m.score.trainer, m.score.lifeboat, true
}

// oomScore starts trainers with a higher oom_score_adj than lifeboat's.
type oomScore struct {
	path     string // lifeboat's /proc/self/oom_score_adj
	trainer  int
	lifeboat int
	log      *slog.Logger
}

// spawn raises lifeboat's own oom_score_adj to the trainer's, calls start
// and lowers it back. oom_score_adj belongs to the process (every thread
// shares it) and a child copies it at fork, so the trainer has its value
// from its first instruction. Writing /proc/<pid>/oom_score_adj after
// start instead would leave a window: start returns once exec has
// succeeded, with the trainer already running (and allocating) at
// lifeboat's value. The price is that lifeboat itself is the likelier
// victim for the duration of one fork and exec, while nothing of the
// trainer's runs yet; the caller (Manager.Spawn, under its lock) is the
// only code in lifeboat that forks, so no other child inherits the
// raised value.
func (s *oomScore) spawn(start func() (int, error)) (int, error) {
	if s.trainer == s.lifeboat {
		return start()
	}
	if err := writeAdj(s.path, s.trainer); err != nil {
		s.log.Warn("memory.oom_score_failed", "oom_score_adj", s.trainer, "err", err,
			"effect", "the trainer starts with lifeboat's oom_score_adj; an OOM kill may hit lifeboat")
		return start()
	}
	pid, err := start()
	if rerr := writeAdj(s.path, s.lifeboat); rerr != nil {
		s.log.Error("memory.oom_score_restore_failed", "oom_score_adj", s.trainer, "err", rerr,
			"effect", "lifeboat keeps the trainer's oom_score_adj and is as likely an OOM victim")
	}
	return pid, err
}

func readAdj(path string) (int, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return 0, fmt.Errorf("%s: %w", path, err)
	}
	return n, nil
}

func writeAdj(path string, v int) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		return err
	}
	_, err = f.WriteString(strconv.Itoa(v))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return err
}
