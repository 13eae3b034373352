package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"

	"github.com/lifeboat-project/lifeboat/limits/memory"
)

// memoryOptions say whether the trainer gets its own memory cgroup.
type memoryOptions struct {
	mode     string
	reserve  string
	oomScore oomScoreAdj
}

func (o *memoryOptions) register(fs *flag.FlagSet) {
	fs.StringVar(&o.mode, "memory-cgroup", "auto",
		"put the trainer in its own memory cgroup (container limit minus --memory-reserve) so an OOM kills the trainer, not lifeboat: auto (when lifeboat is PID 1), on or off")
	fs.StringVar(&o.reserve, "memory-reserve", "64MiB", "memory kept for lifeboat out of the container's limit")
	o.oomScore = memory.MaxOOMScoreAdj
	fs.Var(&o.oomScore, "trainer-oom-score-adj",
		"where the trainer's memory cgroup cannot be made (an unprivileged pod), the trainer's oom_score_adj (0..1000), so the kernel's OOM killer takes it rather than lifeboat; 0 leaves lifeboat's")
}

// oomScoreAdj is --trainer-oom-score-adj: a whole number 0..1000.
type oomScoreAdj int

func (v *oomScoreAdj) String() string { return strconv.Itoa(int(*v)) }
func (v *oomScoreAdj) Get() any       { return int(*v) }
func (v *oomScoreAdj) Set(s string) error {
	n, err := strconv.Atoi(strings.TrimSpace(s))
	if err != nil || n < 0 || n > memory.MaxOOMScoreAdj {
		return fmt.Errorf("--trainer-oom-score-adj (LIFEBOAT_TRAINER_OOM_SCORE_ADJ) is %q; give a whole number from 0 to 1000", s)
	}
	*v = oomScoreAdj(n)
	return nil
}

// trainerMemory is limits/memory as the supervisor sees it.
type trainerMemory struct{ *memory.Manager }

// setup creates the trainer's memory cgroup when asked to. Where that is
// not possible, such as a read-only cgroupfs in an unprivileged pod, it
// logs one warning and falls back to oom_score_adj (memory.Manager's
// Protect): the trainer starts with --trainer-oom-score-adj. It returns nil
// only when neither applies. The caller closes the result after the
// trainer's tree is gone.
func (o *memoryOptions) setup(log *slog.Logger) (*trainerMemory, error) {
	switch o.mode {
	case "off":
		return nil, nil
	case "auto":
		if os.Getpid() != 1 {
			return nil, nil
		}
	case "on":
	default:
		return nil, fmt.Errorf("--memory-cgroup (LIFEBOAT_MEMORY_CGROUP) is %q; use auto, on or off", o.mode)
	}
	reserve, err := parseBytes(o.reserve)
	if err != nil || reserve < 0 {
		return nil, fmt.Errorf("--memory-reserve (LIFEBOAT_MEMORY_RESERVE) is %q; give a size such as 64MiB", o.reserve)
	}
	m, err := memory.New(memory.Config{Reserve: reserve, Log: log, OOMScoreAdj: int(o.oomScore)})
	if err != nil {
		return nil, fmt.Errorf("--memory-reserve (LIFEBOAT_MEMORY_RESERVE): %w", err)
	}
	if err := m.Setup(); err != nil {
		lvl := slog.LevelWarn
		if !errors.Is(err, memory.ErrUnavailable) {
			lvl = slog.LevelError
		}
		log.Log(context.Background(), lvl, "memory.unavailable", "err", err, "effect", "the trainer shares lifeboat's memory cgroup; oom_score_adj makes it the OOM killer's choice")
		if perr := m.Protect(); perr != nil {
			log.Warn("memory.unprotected", "err", perr, "effect", "an OOM kill may hit lifeboat")
			_ = m.Close()
			return nil, nil
		}
		return &trainerMemory{m}, nil
	}
	log.Info("memory.cgroup", "plan", m.Plan().String())
	return &trainerMemory{m}, nil
}
