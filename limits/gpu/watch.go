package gpu

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"golang.org/x/sys/unix"
)

// KillFunc sends sig to pid: unix.Kill in production, a recorder in tests.
type KillFunc func(pid int, sig unix.Signal) error

// TreeFunc lists the pids of the trainer's tree: every descendant of
// lifeboat, as lifeboat's PID namespace numbers them.
type TreeFunc func() ([]int, error)

// Watchdog samples the GPU memory of the trainer's devices and acts by
// Policy when it goes over Limit. It only ever signals pids its Tree
// returns.
type Watchdog struct {
	Driver  Driver
	Devices []string // UUIDs of the trainer's GPUs or MIG devices
	// Limit is the trip point in bytes per device: Paddle's pool limit plus
	// Margin, since NVML's figures include the CUDA context, cuDNN and NCCL
	// workspaces that the pool does not count. Above Limit-Margin (over
	// Paddle's own limit) it warns.
	Limit  uint64
	Margin uint64
	Policy Policy
	Tree   TreeFunc
	Kill   KillFunc
	Log    *slog.Logger

	acted map[string]bool // devices over the limit at the last check that were signalled
	warn  map[string]bool // devices that were warned about at the last check
}

// NewWatchdog returns the watchdog of the trainer's devices for a Paddle
// pool limit of limitMiB: it trips at the limit plus margin bytes.
func NewWatchdog(d Driver, devices []string, limitMiB, margin uint64, policy Policy, tree TreeFunc, log *slog.Logger) *Watchdog {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Watchdog{Driver: d, Devices: devices, Limit: limitMiB*mib + margin, Margin: margin,
		Policy: policy, Tree: tree, Kill: unix.Kill, Log: log}
}

// Check samples every device once and acts on what it finds. One episode
// over the limit is logged once and, with PolicyTerm, signalled once; with
// PolicyKill the signal is repeated at every check until the device is
// under the limit again. Check is not safe for concurrent use.
func (w *Watchdog) Check() {
	if w.acted == nil {
		w.acted, w.warn = map[string]bool{}, map[string]bool{}
	}
	tree, err := w.Tree()
	if err != nil || len(tree) == 0 {
		return
	}
	for _, uuid := range w.Devices {
		s, err := Measure(w.Driver, uuid, tree)
		if err != nil {
			w.Log.Debug("gpu.usage_failed", "device", uuid, "err", err)
			continue
		}
		v := Decide(w.Policy, s, tree, w.Limit, w.Margin)
		measure := "device"
		if v.PerProcess {
			measure = "per_process"
		}
		switch v.Action {
		case ActionNone:
			w.acted[uuid], w.warn[uuid] = false, false
		case ActionWarn:
			if !w.warn[uuid] {
				w.Log.Warn("gpu.memory_warn", "device", uuid, "bytes", v.Total, "measure", measure, "reason", v.Reason)
			}
			w.acted[uuid], w.warn[uuid] = false, true
		default:
			sig := unix.SIGTERM
			if v.Action == ActionKill {
				sig = unix.SIGKILL
			}
			if w.acted[uuid] && sig == unix.SIGTERM {
				continue
			}
			if !w.acted[uuid] {
				w.Log.Error("gpu.memory_over", "device", uuid, "bytes", v.Total, "measure", measure, "reason", v.Reason,
					"policy", v.Action.String(), "pids", v.PIDs)
			}
			w.acted[uuid] = true
			for _, pid := range v.PIDs {
				if err := w.Kill(pid, sig); err != nil && !errors.Is(err, unix.ESRCH) {
					w.Log.Warn("gpu.signal_failed", "pid", pid, "err", err)
				}
			}
		}
	}
}

// Run calls Check every interval until ctx ends.
func (w *Watchdog) Run(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			w.Check()
		}
	}
}
