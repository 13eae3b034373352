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
	"time"

	"golang.org/x/sys/unix"

	"github.com/lifeboat-project/lifeboat/limits/gpu"
	"github.com/lifeboat-project/lifeboat/supervisor"
)

// gpuOptions say which GPUs the trainer sees and how much memory Paddle's
// pool may take.
type gpuOptions struct {
	gpus          string
	memoryLimit   string
	memoryPolicy  string
	watchInterval time.Duration
}

func (o *gpuOptions) register(fs *flag.FlagSet) {
	fs.StringVar(&o.gpus, "gpus", "", "GPUs for the trainer: indices, GPU-/MIG- UUIDs, all (default: what NVIDIA_VISIBLE_DEVICES gave the container)")
	fs.StringVar(&o.memoryLimit, "gpu-memory-limit", "", "Paddle memory pool limit per GPU: MiB (8192), a fraction (0.5) or auto; sets FLAGS_gpu_memory_limit_mb")
}

// registerWatchdog adds the flags of the GPU memory watchdog (run only).
func (o *gpuOptions) registerWatchdog(fs *flag.FlagSet) {
	fs.StringVar(&o.memoryPolicy, "gpu-memory-policy", "warn",
		"when the trainer's processes use more GPU memory than the limit plus a margin (NVML): warn, term or kill them")
	fs.DurationVar(&o.watchInterval, "gpu-watch-interval", 10*time.Second, "how often the GPU memory watchdog samples NVML")
}

// gpuPlan is what lifeboat found and decided about GPUs.
type gpuPlan struct {
	Request   string       `json:"request"`
	Source    string       `json:"source"` // --gpus, NVIDIA_VISIBLE_DEVICES or none
	NVML      string       `json:"nvml"`   // "ok" or why not
	Inventory []gpu.Device `json:"devices_seen"`
	Checked   bool         `json:"checked"`
	Env       []string     `json:"trainer_env"`
	Notes     []string     `json:"notes,omitempty"`
	Conflicts []string     `json:"conflicts,omitempty"`

	driver  gpu.Driver // open when Checked, for the watchdog; Close it
	devices []string   // UUIDs of the trainer's devices
	limitMB uint64     // FLAGS_gpu_memory_limit_mb, 0 if none
}

// close releases NVML.
func (p *gpuPlan) close() {
	if p != nil && p.driver != nil {
		_ = p.driver.Close()
	}
}

// plan computes the trainer's GPU environment from the flags and env (the
// trainer's environment as it would be). It returns nil when nothing about
// GPUs was asked or given. Errors are the user's: a bad --gpus, a device
// NVML does not see, two MIG devices.
func (o *gpuOptions) plan(env []string, log *slog.Logger) (*gpuPlan, error) {
	get := func(k string) (string, bool) {
		for i := len(env) - 1; i >= 0; i-- {
			if v, ok := strings.CutPrefix(env[i], k+"="); ok {
				return v, true
			}
		}
		return "", false
	}
	p := &gpuPlan{Source: "none"}
	var req gpu.Request
	var err error
	nvd, hasNVD := get("NVIDIA_VISIBLE_DEVICES")
	switch {
	case o.gpus != "":
		if req, err = gpu.ParseDevices(o.gpus); err != nil {
			return nil, usageError{fmt.Errorf("--gpus (LIFEBOAT_GPUS): %w", err)}
		}
		p.Source = "--gpus"
	case hasNVD:
		if req, err = gpu.ParseDevices(nvd); err != nil {
			log.Warn("gpu.devices_unparsed", "NVIDIA_VISIBLE_DEVICES", nvd, "err", err, "effect", "the trainer's GPU environment is left as it is")
			return nil, nil
		}
		req.Applied = true
		p.Source = "NVIDIA_VISIBLE_DEVICES"
	case o.memoryLimit == "":
		return nil, nil
	}
	if _, set := get("CUDA_VISIBLE_DEVICES"); set && o.gpus == "" {
		log.Info("gpu.keep_cuda_visible_devices", "effect", "CUDA_VISIBLE_DEVICES is already set for the trainer and --gpus is not given: left as it is")
		req = gpu.Request{}
	}
	p.Request = req.String()
	var inv *gpu.Inventory
	d, err := gpu.Open()
	switch {
	case err == nil:
		if inv, err = gpu.Inspect(d); err != nil {
			p.NVML = err.Error()
			log.Warn("gpu.nvml_failed", "err", err, "effect", "planning from what was given, unchecked")
			inv = nil
			_ = d.Close()
		} else {
			p.NVML, p.Inventory, p.driver = "ok", inv.Devices, d
		}
	case errors.Is(err, gpu.ErrNoNVML):
		p.NVML = err.Error()
		log.Info("gpu.nvml_unavailable", "err", err, "effect", "the trainer's GPU environment is set from what was given, unchecked")
	default:
		p.NVML = err.Error()
		log.Warn("gpu.nvml_failed", "err", err, "effect", "planning from what was given, unchecked")
	}
	var v gpu.Visibility
	if req.Mode != gpu.Unset {
		if v, err = gpu.Plan(req, inv); err != nil {
			return nil, fmt.Errorf("GPUs (%s %q): %w", p.Source, p.Request, err)
		}
	}
	p.Checked, p.Env, p.Notes = v.Checked, v.Env, v.Notes
	for _, a := range v.Devices {
		if a.UUID != "" {
			p.devices = append(p.devices, a.UUID)
		}
	}
	if o.memoryLimit != "" {
		vars, conflicts, err := gpu.MemoryPlan(o.memoryLimit, v.MemoryTotal(), supervisor.MergeEnv(env, v.Env))
		switch {
		case errors.Is(err, gpu.ErrMemoryUnknown) && o.memoryLimit == "auto":
			log.Warn("gpu.memory_limit_skipped", "err", err, "effect", "no FLAGS_gpu_memory_limit_mb; give --gpu-memory-limit in MiB where NVML is not available")
		case err != nil:
			return nil, usageError{fmt.Errorf("--gpu-memory-limit (LIFEBOAT_GPU_MEMORY_LIMIT) %q: %w", o.memoryLimit, err)}
		default:
			p.Env = append(p.Env, vars...)
			p.Conflicts = conflicts
			for _, kv := range vars {
				if v, ok := strings.CutPrefix(kv, gpu.EnvMemoryLimitMB+"="); ok {
					p.limitMB, _ = strconv.ParseUint(v, 10, 64)
				}
			}
		}
	}
	log.Info("gpu.plan", "source", p.Source, "request", p.Request, "checked", p.Checked, "env", strings.Join(p.Env, " "))
	for _, n := range p.Notes {
		log.Info("gpu.note", "note", n)
	}
	for _, c := range p.Conflicts {
		log.Warn("gpu.conflict", "conflict", c)
	}
	return p, nil
}

// usageError is a bad flag value: exit 2 rather than 125.
type usageError struct{ error }

func (e usageError) Unwrap() error { return e.error }

// gpuWatchdog samples the GPU memory the trainer's processes use and, past
// the Paddle limit plus a margin (NVML's per-process figure includes the
// CUDA context), warns or signals them by policy. It only ever looks at and
// signals processes of lifeboat's own tree.
type gpuWatchdog struct {
	driver  gpu.Driver
	devices []string
	limit   uint64 // bytes
	margin  uint64
	policy  gpu.Policy
	tree    func() ([]int, error)
	kill    func(pid int, sig unix.Signal) error
	log     *slog.Logger
}

// newWatchdog returns the watchdog for p, or nil when there is nothing to
// watch (no NVML, no devices or no memory limit).
func (o *gpuOptions) newWatchdog(p *gpuPlan, log *slog.Logger) (*gpuWatchdog, error) {
	policy, err := gpu.ParsePolicy(o.memoryPolicy)
	if err != nil {
		return nil, usageError{fmt.Errorf("--gpu-memory-policy (LIFEBOAT_GPU_MEMORY_POLICY): %w", err)}
	}
	if o.watchInterval <= 0 {
		return nil, usageError{fmt.Errorf("--gpu-watch-interval (LIFEBOAT_GPU_WATCH_INTERVAL) is %s; it must be positive", o.watchInterval)}
	}
	if p == nil || p.driver == nil || len(p.devices) == 0 || p.limitMB == 0 {
		return nil, nil
	}
	return &gpuWatchdog{
		driver: p.driver, devices: p.devices, limit: p.limitMB << 20, margin: gpu.AutoMarginMiB << 20, policy: policy,
		tree: func() ([]int, error) { return supervisor.Descendants("/proc", os.Getpid()) },
		kill: unix.Kill, log: log,
	}, nil
}

// check samples once and acts on what it finds.
func (w *gpuWatchdog) check() {
	tree, err := w.tree()
	if err != nil || len(tree) == 0 {
		return
	}
	for _, uuid := range w.devices {
		usage, err := gpu.Usage(w.driver, uuid, tree)
		if err != nil {
			w.log.Debug("gpu.usage_failed", "device", uuid, "err", err)
			continue
		}
		v := gpu.Decide(w.policy, usage, tree, w.limit, w.margin)
		switch v.Action {
		case gpu.ActionNone:
		case gpu.ActionWarn:
			w.log.Warn("gpu.memory_warn", "device", uuid, "bytes", v.Total, "reason", v.Reason)
		default:
			sig := unix.SIGTERM
			if v.Action == gpu.ActionKill {
				sig = unix.SIGKILL
			}
			w.log.Error("gpu.memory_over", "device", uuid, "bytes", v.Total, "reason", v.Reason,
				"action", v.Action.String(), "pids", fmt.Sprint(v.PIDs))
			for _, pid := range v.PIDs {
				if err := w.kill(pid, sig); err != nil && !errors.Is(err, unix.ESRCH) {
					w.log.Warn("gpu.signal_failed", "pid", pid, "err", err)
				}
			}
		}
	}
}

// run checks every interval until ctx ends.
func (w *gpuWatchdog) run(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			w.check()
		}
	}
}
