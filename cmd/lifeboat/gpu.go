package main

import (
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"strings"

	"github.com/lifeboat-project/lifeboat/limits/gpu"
	"github.com/lifeboat-project/lifeboat/supervisor"
)

// gpuOptions say which GPUs the trainer sees and how much memory Paddle's
// pool may take.
type gpuOptions struct {
	gpus        string
	memoryLimit string
}

func (o *gpuOptions) register(fs *flag.FlagSet) {
	fs.StringVar(&o.gpus, "gpus", "", "GPUs for the trainer: indices, GPU-/MIG- UUIDs, all (default: what NVIDIA_VISIBLE_DEVICES gave the container)")
	fs.StringVar(&o.memoryLimit, "gpu-memory-limit", "", "Paddle memory pool limit per GPU: MiB (8192), a fraction (0.5) or auto; sets FLAGS_gpu_memory_limit_mb")
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
		defer d.Close()
		if inv, err = gpu.Inspect(d); err != nil {
			p.NVML = err.Error()
			log.Warn("gpu.nvml_failed", "err", err, "effect", "planning from what was given, unchecked")
			inv = nil
		} else {
			p.NVML, p.Inventory = "ok", inv.Devices
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
