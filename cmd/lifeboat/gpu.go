package main

import (
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
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

// plan resolves the trainer's GPU environment from the flags and env (the
// trainer's environment as it would be): gpu.Resolve, with its errors
// named by the flags the user gave. It returns nil when nothing about GPUs
// was asked or given. A bad --gpus or --gpu-memory-limit, and a
// --gpu-memory-limit auto or fraction where a GPU is visible but NVML is
// not available (wrapping gpu.ErrNVMLNeeded), are usageErrors.
func (o *gpuOptions) plan(env []string, log *slog.Logger) (*gpu.Setup, error) {
	s, err := gpu.Resolve(gpu.Options{Devices: o.gpus, DevicesName: "--gpus", MemoryLimit: o.memoryLimit, MemoryLimitName: "--gpu-memory-limit"}, env, log)
	var fe *gpu.FieldError
	switch {
	case !errors.As(err, &fe):
		return s, err
	case fe.Field == gpu.FieldDevices:
		return nil, usageError{fmt.Errorf("--gpus (LIFEBOAT_GPUS): %w", fe.Err)}
	case errors.Is(fe.Err, gpu.ErrNVMLNeeded):
		return nil, usageError{fmt.Errorf("--gpu-memory-limit (LIFEBOAT_GPU_MEMORY_LIMIT) %q %w: give the limit in MiB, such as --gpu-memory-limit 8192, or run a lifeboat built with cgo where libnvidia-ml.so.1 loads",
			o.memoryLimit, fe.Err)}
	default:
		return nil, usageError{fmt.Errorf("--gpu-memory-limit (LIFEBOAT_GPU_MEMORY_LIMIT) %q: %w", o.memoryLimit, fe.Err)}
	}
}

// watchdogState says whether the GPU memory watchdog can run for p, and
// why not.
func watchdogState(p *gpu.Setup) (runs bool, why string) {
	switch {
	case p == nil || !p.Visible:
		return false, "no GPU is visible"
	case p.LimitMiB == 0:
		return false, "no --gpu-memory-limit to hold the trainer to"
	case p.Driver() == nil:
		return false, "it measures GPU memory through NVML, which is not available here (" + p.NVML + ")"
	case len(p.Devices()) == 0:
		return false, "lifeboat does not know the trainer's devices (CUDA_VISIBLE_DEVICES was set for it and --gpus was not given)"
	}
	return true, ""
}

// newWatchdog returns the watchdog for p, or nil when there is nothing to
// watch (no visible GPU or no memory limit). Where a limit is set on a
// visible GPU and NVML cannot measure it, --gpu-memory-policy term or kill
// is refused (a usageError): the user asked for an
// enforcement lifeboat cannot give; warn logs that once and goes on.
func (o *gpuOptions) newWatchdog(p *gpu.Setup, log *slog.Logger) (*gpu.Watchdog, error) {
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
		log.Info("gpu.watchdog", "policy", policy.String(), "limit_mib", p.LimitMiB, "margin_mib", gpu.AutoMarginMiB, "devices", strings.Join(p.Devices(), ","))
		return gpu.NewWatchdog(p.Driver(), p.Devices(), p.LimitMiB, gpu.AutoMarginMiB<<20, policy,
			func() ([]int, error) { return supervisor.Descendants("/proc", os.Getpid()) }, log), nil
	case p == nil || !p.Visible || p.LimitMiB == 0:
		if policy != gpu.PolicyWarn && p != nil && p.Visible {
			log.Warn("gpu.watchdog_off", "policy", policy.String(), "reason", why, "effect", "GPU memory is not watched; give --gpu-memory-limit to enforce a limit")
		}
		return nil, nil
	case policy != gpu.PolicyWarn:
		fix := "Run a lifeboat built with cgo where libnvidia-ml.so.1 loads"
		if p.Driver() != nil {
			fix = "Name the trainer's GPUs with --gpus (LIFEBOAT_GPUS)"
		}
		return nil, usageError{fmt.Errorf("--gpu-memory-policy (LIFEBOAT_GPU_MEMORY_POLICY) %s cannot be enforced: %s. %s, or set --gpu-memory-policy warn to run without the GPU memory watchdog",
			policy, why, fix)}
	}
	log.Warn("gpu.watchdog_unavailable", "reason", why, "effect", "the trainer's GPU memory is not watched; Paddle's own limit (FLAGS_gpu_memory_limit_mb) still applies")
	return nil, nil
}
