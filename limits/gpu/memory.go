package gpu

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Paddle's allocator flags, read from its environment.
const (
	EnvMemoryLimitMB     = "FLAGS_gpu_memory_limit_mb"
	EnvAllocatorStrategy = "FLAGS_allocator_strategy"
	EnvFraction          = "FLAGS_fraction_of_gpu_memory_to_use"
	EnvInitialMB         = "FLAGS_initial_gpu_memory_in_mb"
)

// DefaultAllocatorStrategy is set when the environment names none: memory
// is taken as needed, so FLAGS_gpu_memory_limit_mb is what bounds it.
const DefaultAllocatorStrategy = "auto_growth"

// The "auto" limit is the device's memory minus the larger of these, left to
// the CUDA context, cuDNN/cuBLAS workspaces and NCCL buffers that Paddle's
// allocator does not count.
const (
	AutoMarginFraction = 0.05
	AutoMarginMiB      = 512
)

const mib = 1 << 20

// ErrMemoryUnknown marks a memory limit ("auto" or a fraction) that needs
// the device's memory when it is unknown (NVML not available).
var ErrMemoryUnknown = errors.New("device memory unknown")

// MemoryPlan turns a GPU memory limit into Paddle's allocator flags.
//
// limitSpec is "" (no limit from lifeboat), MiB ("8192"), a fraction of the
// device's memory with a decimal point ("0.5", in (0, 1]), or "auto" (the
// memory minus the larger of AutoMarginFraction and AutoMarginMiB).
// deviceMemory is the device's memory in bytes (Visibility.MemoryTotal: the
// MIG instance's, or the smallest card's), 0 when unknown; a fraction and
// "auto" then fail with ErrMemoryUnknown. env is the trainer's environment
// (KEY=VALUE, the last of a key wins). A bad limitSpec is a *FieldError of
// FieldMemoryLimit.
//
// vars are KEY=VALUE pairs to set over env. conflicts are sentences about
// values in env that disagree with the limit, each saying what was done;
// they call the limit DefaultMemoryLimitName (Resolve: its
// Options.MemoryLimitName). Precedence: the limit given to lifeboat > the
// user's FLAGS_ in env >
// lifeboat's defaults. So:
//   - FLAGS_gpu_memory_limit_mb is set to the limit; a different value in env
//     is a conflict and is overridden. Without a limit, env's stays.
//   - FLAGS_allocator_strategy is set to auto_growth only when env has none.
//   - A FLAGS_initial_gpu_memory_in_mb, or FLAGS_fraction_of_gpu_memory_to_use
//     times the memory, above the limit is a conflict: the first chunk could
//     never be allocated. With lifeboat's limit it is lowered to the limit;
//     with the user's own limit it is only reported.
//   - With the limit and naive_best_fit (which preallocates 92% of the card
//     by default) and neither set in env, the fraction is set to
//     limit/memory, or FLAGS_initial_gpu_memory_in_mb to the limit when the
//     memory is unknown. auto_growth preallocates nothing: they are left alone.
func MemoryPlan(limitSpec string, deviceMemory uint64, env []string) (vars []string, conflicts []string, err error) {
	p, err := PlanPool(limitSpec, deviceMemory, env)
	return p.Vars, p.Conflicts, err
}

// Pool is Paddle's memory pool as PlanPool decided it.
type Pool struct {
	Vars      []string // KEY=VALUE pairs to set over the trainer's environment
	Conflicts []string // sentences about the environment's values, each saying what was done
	// LimitMiB is the limit lifeboat set (FLAGS_gpu_memory_limit_mb), 0 when
	// no limit was given: what the GPU memory watchdog holds the trainer
	// to.
	LimitMiB uint64
}

// DefaultMemoryLimitName is what MemoryPlan's conflicts call the limit.
const DefaultMemoryLimitName = "the GPU memory limit"

// PlanPool is MemoryPlan returning the limit it set as well.
func PlanPool(limitSpec string, deviceMemory uint64, env []string) (Pool, error) {
	return planPool(limitSpec, DefaultMemoryLimitName, deviceMemory, env)
}

// planPool is PlanPool with the limit called name in the conflicts.
func planPool(limitSpec, name string, deviceMemory uint64, env []string) (Pool, error) {
	limit, err := parseLimit(limitSpec, deviceMemory)
	if err != nil {
		return Pool{}, &FieldError{Field: FieldMemoryLimit, Value: limitSpec, Err: err}
	}
	vars, conflicts := poolFlags(limit, name, deviceMemory, env)
	return Pool{Vars: vars, Conflicts: conflicts, LimitMiB: limit}, nil
}

// poolFlags is MemoryPlan's work once the limit (MiB, 0 for none), called
// name, is known.
func poolFlags(limit uint64, name string, deviceMemory uint64, env []string) (vars []string, conflicts []string) {
	user := lookup(env, EnvMemoryLimitMB, EnvAllocatorStrategy, EnvFraction, EnvInitialMB)
	set := func(k string, v string) { vars = append(vars, k+"="+v) }
	report := func(format string, a ...any) { conflicts = append(conflicts, fmt.Sprintf(format, a...)) }

	strategy, hasStrategy := user[EnvAllocatorStrategy]
	switch {
	case !hasStrategy || strategy == "":
		strategy = DefaultAllocatorStrategy
		set(EnvAllocatorStrategy, strategy)
	case strategy != "auto_growth" && strategy != "naive_best_fit" && strategy != "thread_local":
		report("%s=%q in the environment is not auto_growth, naive_best_fit or thread_local; left as set, Paddle will reject it.", EnvAllocatorStrategy, strategy)
	}

	ours := limit > 0
	if ours {
		if v, ok := user[EnvMemoryLimitMB]; ok && v != strconv.FormatUint(limit, 10) {
			report("%s=%s in the environment conflicts with %s (%d MiB), which wins.", EnvMemoryLimitMB, v, name, limit)
		}
		set(EnvMemoryLimitMB, strconv.FormatUint(limit, 10))
	} else if v, ok := user[EnvMemoryLimitMB]; ok {
		n, perr := strconv.ParseUint(strings.TrimSpace(v), 10, 64)
		if perr != nil {
			report("%s=%q in the environment is not a number of MiB; left as set.", EnvMemoryLimitMB, v)
		}
		limit = n
	}
	if limit == 0 {
		return vars, conflicts
	}

	who := name
	if !ours {
		who = EnvMemoryLimitMB + " in the environment"
	}
	if v, ok := user[EnvInitialMB]; ok {
		n, perr := strconv.ParseUint(strings.TrimSpace(v), 10, 64)
		switch {
		case perr != nil:
			report("%s=%q in the environment is not a number of MiB; left as set.", EnvInitialMB, v)
		case n > limit && ours:
			report("%s=%d in the environment is above %s (%d MiB): lowered to %d.", EnvInitialMB, n, who, limit, limit)
			set(EnvInitialMB, strconv.FormatUint(limit, 10))
		case n > limit:
			report("%s=%d in the environment is above %s (%d MiB): Paddle's first chunk will fail.", EnvInitialMB, n, who, limit)
		}
	}
	if v, ok := user[EnvFraction]; ok {
		f, perr := strconv.ParseFloat(strings.TrimSpace(v), 64)
		switch {
		case perr != nil || f <= 0 || f > 1:
			report("%s=%q in the environment is not a fraction in (0, 1]; left as set.", EnvFraction, v)
		case deviceMemory == 0:
			report("%s=%s in the environment cannot be checked against %s (%d MiB): the device's memory is unknown.", EnvFraction, v, who, limit)
		case f*float64(deviceMemory)/mib > float64(limit) && ours:
			nf := fraction(limit, deviceMemory)
			report("%s=%s in the environment is %.0f MiB of the device, above %s (%d MiB): lowered to %s.", EnvFraction, v, f*float64(deviceMemory)/mib, who, limit, nf)
			set(EnvFraction, nf)
		case f*float64(deviceMemory)/mib > float64(limit):
			report("%s=%s in the environment is %.0f MiB of the device, above %s (%d MiB): Paddle's first chunk will fail.", EnvFraction, v, f*float64(deviceMemory)/mib, who, limit)
		}
	}
	_, hasInitial := user[EnvInitialMB]
	_, hasFraction := user[EnvFraction]
	if ours && strategy == "naive_best_fit" && !hasInitial && !hasFraction {
		if deviceMemory > 0 {
			set(EnvFraction, fraction(limit, deviceMemory))
		} else {
			set(EnvInitialMB, strconv.FormatUint(limit, 10))
		}
	}
	return vars, conflicts
}

// fraction returns limit MiB as a fraction of memory bytes, rounded down to
// four digits so that the chunk stays under the limit.
func fraction(limitMiB, memory uint64) string {
	f := math.Floor(float64(limitMiB)*mib/float64(memory)*1e4) / 1e4
	return strconv.FormatFloat(min(f, 1), 'f', -1, 64)
}

// NeedsDeviceMemory reports whether limitSpec ("auto" or a fraction) can
// only be turned into MiB with the device's memory, which only NVML reports.
func NeedsDeviceMemory(limitSpec string) bool {
	s := strings.TrimSpace(limitSpec)
	return strings.EqualFold(s, "auto") || strings.Contains(s, ".")
}

// parseLimit returns the limit in MiB, 0 for none; its errors say what is
// wrong with spec, which the caller names.
func parseLimit(spec string, memory uint64) (uint64, error) {
	spec = strings.TrimSpace(spec)
	bad := func() error {
		return errors.New("want MiB (8192), a fraction of the device's memory (0.5) or auto")
	}
	unknown := func() error {
		return fmt.Errorf("it needs the device's memory, which NVML could not report; give MiB instead: %w", ErrMemoryUnknown)
	}
	switch {
	case spec == "":
		return 0, nil
	case strings.EqualFold(spec, "auto"):
		if memory == 0 {
			return 0, unknown()
		}
		margin := max(uint64(float64(memory)*AutoMarginFraction), AutoMarginMiB*mib)
		if memory <= margin+mib {
			return 0, fmt.Errorf("the device's %d MiB leave nothing after the %d MiB margin", memory/mib, margin/mib)
		}
		return (memory - margin) / mib, nil
	case strings.Contains(spec, "."):
		f, err := strconv.ParseFloat(spec, 64)
		if err != nil || !(f > 0 && f <= 1) {
			return 0, bad()
		}
		if memory == 0 {
			return 0, unknown()
		}
		n := uint64(f * float64(memory) / mib)
		if n == 0 {
			return 0, fmt.Errorf("it is less than 1 MiB of the device's %d MiB", memory/mib)
		}
		return n, nil
	}
	n, err := strconv.ParseUint(spec, 10, 64)
	if err != nil || n == 0 || n > 1<<40 {
		return 0, bad()
	}
	return n, nil
}

// lookup returns the last value of each key present in env.
func lookup(env []string, keys ...string) map[string]string {
	m := map[string]string{}
	for _, kv := range env {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			continue
		}
		for _, want := range keys {
			if k == want {
				m[k] = v
			}
		}
	}
	return m
}
