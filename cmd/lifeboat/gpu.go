package main

import (
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

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
	// Visible says the container has a GPU to protect: the request gives
	// one (not none or void) and it names devices or /dev has an NVIDIA
	// device node. Without one, protections that need NVML are moot.
	Visible bool `json:"gpu_visible"`
	// LimitMiB is the Paddle pool limit lifeboat set, 0 if none.
	LimitMiB uint64 `json:"memory_limit_mib"`
	// LimitSkipped says why --gpu-memory-limit was not applied, "" if it was.
	LimitSkipped string `json:"memory_limit_skipped,omitempty"`

	driver  gpu.Driver // open when Checked, for the watchdog; Close it
	devices []string   // UUIDs of the trainer's devices
}

// close releases NVML.
func (p *gpuPlan) close() {
	if p != nil && p.driver != nil {
		_ = p.driver.Close()
	}
}

// devDir holds the NVIDIA device nodes (nvidia0, nvidia1, ...).
var devDir = "/dev"

// deviceNodes reports whether a /dev/nvidiaN node exists: a GPU the
// container can use, whatever NVML says.
func deviceNodes() bool {
	m, _ := filepath.Glob(filepath.Join(devDir, "nvidia[0-9]*"))
	return len(m) > 0
}

// errNeedsNVML marks a protection the user asked for that needs NVML where
// NVML is not available.
var errNeedsNVML = errors.New("NVML is not available")

// plan computes the trainer's GPU environment from the flags and env (the
// trainer's environment as it would be). It returns nil when nothing about
// GPUs was asked or given. Errors are the user's: a bad --gpus, a device
// NVML does not see, two MIG devices, and --gpu-memory-limit auto or a
// fraction where a GPU is visible but NVML is not available (a usageError
// wrapping errNeedsNVML).
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
	switch req.Mode {
	case gpu.None, gpu.Void:
	case gpu.List, gpu.Count:
		p.Visible = true
	default:
		p.Visible = deviceNodes()
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
			p.Visible = p.Visible || len(inv.Devices) > 0
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
			p.close()
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
		pool, err := gpu.PlanPool(o.memoryLimit, v.MemoryTotal(), supervisor.MergeEnv(env, v.Env))
		switch {
		case errors.Is(err, gpu.ErrMemoryUnknown) && p.Visible:
			p.close()
			return nil, usageError{fmt.Errorf("--gpu-memory-limit (LIFEBOAT_GPU_MEMORY_LIMIT) %q needs the GPU's memory and %w here (%s): give the limit in MiB, such as --gpu-memory-limit 8192, or run a lifeboat built with cgo where libnvidia-ml.so.1 loads",
				o.memoryLimit, errNeedsNVML, p.NVML)}
		case errors.Is(err, gpu.ErrMemoryUnknown):
			p.LimitSkipped = "no GPU is visible, so there is no device memory to take " + o.memoryLimit + " of"
			log.Warn("gpu.memory_limit_skipped", "limit", o.memoryLimit, "reason", p.LimitSkipped, "effect", "no FLAGS_gpu_memory_limit_mb")
		case err != nil:
			p.close()
			return nil, usageError{fmt.Errorf("--gpu-memory-limit (LIFEBOAT_GPU_MEMORY_LIMIT) %q: %w", o.memoryLimit, err)}
		default:
			p.Env = append(p.Env, pool.Vars...)
			p.Conflicts = pool.Conflicts
			p.LimitMiB = pool.LimitMiB
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

// watchdogState says whether the GPU memory watchdog can run for p, and
// why not.
func watchdogState(p *gpuPlan) (runs bool, why string) {
	switch {
	case p == nil || !p.Visible:
		return false, "no GPU is visible"
	case p.LimitMiB == 0:
		return false, "no --gpu-memory-limit to hold the trainer to"
	case p.driver == nil:
		return false, "it measures GPU memory through NVML, which is not available here (" + p.NVML + ")"
	case len(p.devices) == 0:
		return false, "lifeboat does not know the trainer's devices (CUDA_VISIBLE_DEVICES was set for it and --gpus was not given)"
	}
	return true, ""
}

// newWatchdog returns the watchdog for p, or nil when there is nothing to
// watch (no visible GPU or no memory limit). Where a limit is set on a
// visible GPU and NVML cannot measure it, --gpu-memory-policy term or kill
// is refused (a usageError): the user asked for an
// enforcement lifeboat cannot give; warn logs that once and goes on.
func (o *gpuOptions) newWatchdog(p *gpuPlan, log *slog.Logger) (*gpu.Watchdog, error) {
	policy, err := gpu.ParsePolicy(o.memoryPolicy)
	if err != nil {
		return nil, usageError{fmt.Errorf("--gpu-memory-policy (LIFEBOAT_GPU_MEMORY_POLICY): %w", err)}
	}
	if o.watchInterval <= 0 {
		return nil, usageError{fmt.Errorf("--gpu-watch-interval (LIFEBOAT_GPU_WATCH_INTERVAL) is %s; it must be positive", o.watchInterval)}
	}
	runs, why := watchdogState(p)
	switch {
	case runs:
		log.Info("gpu.watchdog", "policy", policy.String(), "limit_mib", p.LimitMiB, "margin_mib", gpu.AutoMarginMiB, "devices", strings.Join(p.devices, ","))
		return gpu.NewWatchdog(p.driver, p.devices, p.LimitMiB, gpu.AutoMarginMiB<<20, policy,
			func() ([]int, error) { return supervisor.Descendants("/proc", os.Getpid()) }, log), nil
	case p == nil || !p.Visible || p.LimitMiB == 0:
		if policy != gpu.PolicyWarn && p != nil && p.Visible {
			log.Warn("gpu.watchdog_off", "policy", policy.String(), "reason", why, "effect", "GPU memory is not watched; give --gpu-memory-limit to enforce a limit")
		}
		return nil, nil
	case policy != gpu.PolicyWarn:
		fix := "Run a lifeboat built with cgo where libnvidia-ml.so.1 loads"
		if p.driver != nil {
			fix = "Name the trainer's GPUs with --gpus (LIFEBOAT_GPUS)"
		}
		return nil, usageError{fmt.Errorf("--gpu-memory-policy (LIFEBOAT_GPU_MEMORY_POLICY) %s cannot be enforced: %s. %s, or set --gpu-memory-policy warn to run without the GPU memory watchdog",
			policy, why, fix)}
	}
	log.Warn("gpu.watchdog_unavailable", "reason", why, "effect", "the trainer's GPU memory is not watched; Paddle's own limit (FLAGS_gpu_memory_limit_mb) still applies")
	return nil, nil
}
