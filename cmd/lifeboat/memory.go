package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"

	"github.com/lifeboat-project/lifeboat/limits/memory"
)

// memoryOptions say whether the trainer gets its own memory cgroup.
type memoryOptions struct {
	mode    string
	reserve string
}

func (o *memoryOptions) register(fs *flag.FlagSet) {
	fs.StringVar(&o.mode, "memory-cgroup", "auto",
		"put the trainer in its own memory cgroup (container limit minus --memory-reserve) so an OOM kills the trainer, not lifeboat: auto (when lifeboat is PID 1), on or off")
	fs.StringVar(&o.reserve, "memory-reserve", "64MiB", "memory kept for lifeboat out of the container's limit")
}

// trainerMemory is limits/memory as the supervisor sees it.
type trainerMemory struct{ *memory.Manager }

func (m trainerMemory) Describe() string { return m.Plan().String() }

// setup creates the trainer's memory cgroup when asked to. It returns nil
// (and logs one warning) where that is not possible, such as a read-only
// cgroupfs in an unprivileged pod: lifeboat then runs as before. The
// caller closes the result after the trainer's tree is gone.
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
	m, err := memory.New(memory.Config{Reserve: reserve, Log: log})
	if err != nil {
		return nil, fmt.Errorf("--memory-reserve (LIFEBOAT_MEMORY_RESERVE): %w", err)
	}
	if err := m.Setup(); err != nil {
		lvl := slog.LevelWarn
		if !errors.Is(err, memory.ErrUnavailable) {
			lvl = slog.LevelError
		}
		log.Log(context.Background(), lvl, "memory.unavailable", "err", err, "effect", "the trainer shares lifeboat's memory cgroup")
		_ = m.Close()
		return nil, nil
	}
	log.Info("memory.cgroup", "plan", m.Plan().String())
	return &trainerMemory{m}, nil
}
