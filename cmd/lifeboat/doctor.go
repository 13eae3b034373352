package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/lifeboat-project/lifeboat/checkpoint"
	"github.com/lifeboat-project/lifeboat/limits/gpu"
	"github.com/lifeboat-project/lifeboat/limits/memory"
	"github.com/lifeboat-project/lifeboat/storage"
)

// doctorOptions are the flags of `lifeboat doctor`.
type doctorOptions struct {
	common  commonOptions
	store   storeOptions
	gpu     gpuOptions
	memory  memoryOptions // mode and oomScore; the reserve is reserve
	reserve string
	json    bool
}

// doctorReport is what `lifeboat doctor` found. It holds no credentials.
type doctorReport struct {
	Version     string       `json:"version"`
	Flavour     string       `json:"flavour"` // static or gpu (version.go)
	PID1        bool         `json:"pid1"`
	GPU         *gpu.Setup   `json:"gpu"`
	GPUError    string       `json:"gpu_error,omitempty"`
	Memory      memory.Plan  `json:"memory"`
	Protections []protection `json:"protections"`
	Store       *storeReport `json:"store,omitempty"`
	// Failed is true when a check failed: the store does not answer, the
	// GPU request cannot be met, or a protection that was asked for
	// cannot be enforced. doctor then exits 1.
	Failed bool `json:"failed"`
}

// protection is whether one protection lifeboat run would give applies here.
type protection struct {
	Name string `json:"name"`
	// State is "enforced", "not_enforceable" (wanted, but this container
	// does not allow it; Detail says why and what to do) or "off" (not
	// asked for, or not needed).
	State  string `json:"state"`
	Detail string `json:"detail"`
	// Failed: asked for explicitly and not enforceable; lifeboat run
	// refuses to start.
	Failed bool `json:"failed,omitempty"`
}

const (
	stateEnforced       = "enforced"
	stateNotEnforceable = "not_enforceable"
	stateOff            = "off"
)

type storeReport struct {
	Store       string `json:"store"`
	Reachable   bool   `json:"reachable"`
	Error       string `json:"error,omitempty"`
	Checkpoints int    `json:"checkpoints"`
	Latest      int64  `json:"latest_complete_step"`
	// ConditionalWrites is the conditional-write probe's answer for an
	// S3 store: "enforced", "NOT enforced: ..." (a failed check unless
	// --s3-unsafe-no-conditional-writes), or the probe's error.
	ConditionalWrites string `json:"conditional_writes,omitempty"`
}

func doctorCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	o := &doctorOptions{}
	fs := newFlagSet("doctor", stderr)
	o.common.register(fs)
	o.store.register(fs)
	o.store.registerWriter(fs)
	o.gpu.register(fs)
	o.gpu.registerWatchdog(fs)
	fs.StringVar(&o.reserve, "memory-reserve", "64MiB", "memory kept for lifeboat out of the container's limit")
	fs.StringVar(&o.memory.mode, "memory-cgroup", "auto", "as lifeboat run's: auto (when lifeboat is PID 1), on or off")
	o.memory.oomScore = memory.MaxOOMScoreAdj
	fs.Var(&o.memory.oomScore, "trainer-oom-score-adj", "as lifeboat run's: the trainer's oom_score_adj (0..1000) where its memory cgroup cannot be made")
	fs.BoolVar(&o.json, "json", false, "print JSON")
	fs.Usage = flagUsage(fs, stderr, "lifeboat doctor [--store URL] [--json]")
	check := func() error {
		o.withDefaults()
		return firstErr(o.validate(), o.gpu.validate(true), o.memory.validate())
	}
	if code := setup(fs, args, &o.common, stdout, stderr, check); code >= 0 {
		return code
	}
	return exitCode("doctor", runDoctor(ctx, o), 1, stderr)
}

// withDefaults fills the memory options from doctor's own flag: the reserve
// is --memory-reserve, as for lifeboat run.
func (o *doctorOptions) withDefaults() {
	o.memory.reserve = o.reserve
}

// probeReport is the conditional-write probe's line of the store report;
// a store that fails it fails the check unless unsafe (lifeboat run would
// run on it).
func probeReport(ctx context.Context, s storage.Store, unsafe bool, failed *bool) string {
	p, err := storage.ProbeConditionalWrites(ctx, s, time.Now)
	switch {
	case errors.Is(err, storage.ErrNoConditionalWrites) && unsafe:
		return "NOT enforced (accepted by --s3-unsafe-no-conditional-writes): " + named(err).Error()
	case err != nil:
		*failed = true
		return "NOT enforced or not checked (lifeboat run refuses the store): " + named(err).Error()
	case p.Cached:
		return fmt.Sprintf("enforced (probed at %s)", p.Checked.UTC().Format(time.RFC3339))
	}
	return "enforced (probed now: a second create-only write of one key was refused)"
}

// runDoctor reports what lifeboat run would find here; a failed check
// makes it exit 1 after the report.
func runDoctor(ctx context.Context, o *doctorOptions) error {
	log, stdout := o.common.log, o.common.stdout
	rep := doctorReport{Version: version, Flavour: flavour(), PID1: os.Getpid() == 1}
	gp, gpuErr := o.gpu.plan(os.Environ(), slog.New(slog.DiscardHandler))
	if gpuErr != nil {
		rep.GPUError, rep.Failed = gpuErr.Error(), true
	}
	defer gp.Close()
	rep.GPU = gp
	reserve, err := parseBytes(o.reserve)
	if err != nil || reserve < 0 {
		return usageError{fmt.Errorf("--memory-reserve (LIFEBOAT_MEMORY_RESERVE) is %q; give a size such as 64MiB", o.reserve)}
	}
	m, err := memory.New(memory.Config{Reserve: reserve, Log: log})
	if err != nil {
		return usageError{fmt.Errorf("--memory-reserve (LIFEBOAT_MEMORY_RESERVE): %v", err)}
	}
	rep.Memory = m.Plan()
	rep.Protections = o.protections(gp, gpuErr, rep.Memory, rep.PID1)
	for _, p := range rep.Protections {
		rep.Failed = rep.Failed || p.Failed
	}
	if o.store.url != "" {
		sr := &storeReport{Store: o.store.url, Latest: -1}
		rep.Store = sr
		if s, err := o.store.open(ctx); err != nil {
			sr.Error, rep.Failed = err.Error(), true
		} else {
			sr.Store = s.String()
			snaps, err := checkpoint.List(ctx, s)
			if err != nil {
				sr.Error, rep.Failed = named(err).Error(), true
			} else {
				sr.Reachable, sr.Checkpoints = true, len(snaps)
				// What a restore of any world size would take.
				if n := checkpoint.Newest(snaps, 0); n != nil {
					sr.Latest = n.Step
				}
				if o.store.scheme() == "s3" {
					sr.ConditionalWrites = probeReport(ctx, s, o.store.unsafeNoConditionalWrites, &rep.Failed)
				}
			}
		}
	}
	// A failed check is in the report; the exit code says so.
	var failed error
	if rep.Failed {
		failed = &codeError{code: 1}
	}
	if o.json {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(rep); err != nil {
			return err
		}
		return failed
	}
	w := &strings.Builder{}
	fmt.Fprintf(w, "lifeboat %s, %s flavour (PID 1: %v)\n\nGPUs\n", rep.Version, rep.Flavour, rep.PID1)
	if rep.GPUError != "" {
		fmt.Fprintf(w, "  FAILED: %s\n", rep.GPUError)
	} else if gp == nil {
		fmt.Fprintln(w, "  none given (no NVIDIA_VISIBLE_DEVICES, --gpus or --gpu-memory-limit): the trainer's GPU environment is left as it is")
	} else {
		fmt.Fprintf(w, "  given: %s %q\n  NVML: %s\n", gp.Source, gp.Request, gp.NVML)
		for _, d := range gp.Inventory {
			fmt.Fprintf(w, "  seen: %d %s %s, %d MiB, MIG %v (%d instances)\n", d.Index, d.UUID, d.Name, d.MemoryTotal>>20, d.MIGEnabled, len(d.MIG))
		}
		fmt.Fprintf(w, "  trainer gets (checked by NVML: %v):\n", gp.Checked)
		for _, kv := range gp.Env {
			fmt.Fprintf(w, "    %s\n", kv)
		}
		for _, n := range gp.Notes {
			fmt.Fprintf(w, "  note: %s\n", n)
		}
		for _, c := range gp.Conflicts {
			fmt.Fprintf(w, "  conflict: %s\n", c)
		}
	}
	fmt.Fprintf(w, "\nMemory\n  %s\n", rep.Memory.String())
	fmt.Fprintf(w, "\nProtections\n")
	for _, p := range rep.Protections {
		state := strings.ToUpper(strings.ReplaceAll(p.State, "_", " "))
		if p.Failed {
			state += " (asked for: lifeboat run refuses to start)"
		}
		fmt.Fprintf(w, "  %s: %s: %s\n", p.Name, state, p.Detail)
	}
	if sr := rep.Store; sr != nil {
		fmt.Fprintf(w, "\nStore\n  %s: ", sr.Store)
		if sr.Reachable {
			fmt.Fprintf(w, "reachable, %d checkpoints, latest complete step %d\n", sr.Checkpoints, sr.Latest)
			if sr.ConditionalWrites != "" {
				fmt.Fprintf(w, "  conditional writes: %s\n", sr.ConditionalWrites)
			}
		} else {
			fmt.Fprintf(w, "NOT reachable: %s\n", sr.Error)
		}
	}
	fmt.Fprint(stdout, w.String())
	return failed
}

// protections says, for each protection lifeboat run would give with these
// flags, whether this container allows it.
func (o *doctorOptions) protections(gp *gpu.Setup, gpuErr error, mp memory.Plan, pid1 bool) []protection {
	var out []protection
	add := func(name, state, detail string, failed bool) {
		out = append(out, protection{Name: name, State: state, Detail: detail, Failed: failed})
	}
	policy, _ := gpu.ParsePolicy(o.gpu.memoryPolicy)

	// GPUs.
	switch {
	case gpuErr != nil && errors.Is(gpuErr, gpu.ErrNVMLNeeded):
		add("device_visibility", stateNotEnforceable, "set from what was given, unverified: "+gpu.ErrNVMLNeeded.Error(), false)
		add("gpu_memory_limit", stateNotEnforceable, gpuErr.Error(), true)
	case gpuErr != nil:
		add("device_visibility", stateNotEnforceable, gpuErr.Error(), true)
		add("gpu_memory_limit", stateOff, "the GPU request cannot be met", false)
	case gp == nil:
		add("device_visibility", stateOff, "no NVIDIA_VISIBLE_DEVICES, --gpus or --gpu-memory-limit: the trainer's GPU environment is left as it is", false)
		add("gpu_memory_limit", stateOff, "no --gpu-memory-limit", false)
	default:
		switch {
		case !gp.Visible:
			add("device_visibility", stateOff, "no GPU is visible (request "+strconvQuote(gp.Request)+", no /dev/nvidiaN node)", false)
		case gp.Checked:
			add("device_visibility", stateEnforced, "the trainer gets "+strings.Join(gp.Env, " ")+", checked against what NVML sees", false)
		default:
			add("device_visibility", stateNotEnforceable, "set from "+gp.Source+" as given, unverified: NVML is not available ("+gp.NVML+")", false)
		}
		switch {
		case gp.LimitMiB > 0:
			add("gpu_memory_limit", stateEnforced, fmt.Sprintf("Paddle's pool: %s=%d", gpu.EnvMemoryLimitMB, gp.LimitMiB), false)
		case gp.LimitSkipped != "":
			add("gpu_memory_limit", stateOff, gp.LimitSkipped, false)
		default:
			add("gpu_memory_limit", stateOff, "no --gpu-memory-limit", false)
		}
	}
	switch runs, why := watchdogState(gp); {
	case gpuErr != nil:
		add("gpu_memory_watchdog", stateOff, "the GPU plan failed", false)
	case runs:
		add("gpu_memory_watchdog", stateEnforced, fmt.Sprintf("policy %s at %d MiB (the limit plus %d MiB) per device, every %s, from NVML's device memory",
			policy, gp.LimitMiB+gpu.AutoMarginMiB, gpu.AutoMarginMiB, o.gpu.watchInterval), false)
	case gp != nil && gp.Visible && gp.LimitMiB > 0:
		add("gpu_memory_watchdog", stateNotEnforceable, why+"; lifeboat run refuses --gpu-memory-policy term or kill here, warn runs without it", policy != gpu.PolicyWarn)
	default:
		add("gpu_memory_watchdog", stateOff, why, false)
	}

	// Memory. doctor is usually run beside lifeboat run (kubectl exec), so
	// --memory-cgroup auto is reported as for lifeboat run as PID 1.
	cgroupOn := o.memory.mode != "off"
	split := cgroupOn && mp.Available
	auto := ""
	if o.memory.mode == "auto" && !pid1 {
		auto = " (--memory-cgroup auto: when lifeboat run is PID 1)"
	}
	switch {
	case !cgroupOn:
		add("trainer_memory_cgroup", stateOff, "--memory-cgroup off", false)
	case split:
		add("trainer_memory_cgroup", stateEnforced, mp.String()+auto, false)
	default:
		add("trainer_memory_cgroup", stateNotEnforceable, mp.Reason+auto, false)
	}
	own := "unknown"
	if b, err := os.ReadFile("/proc/self/oom_score_adj"); err == nil {
		own = strings.TrimSpace(string(b))
	}
	switch {
	case split:
		add("oom_score_adj", stateOff, "not needed: the trainer has its own memory cgroup", false)
	case !cgroupOn:
		add("oom_score_adj", stateOff, "--memory-cgroup off", false)
	case o.memory.oomScore == 0:
		add("oom_score_adj", stateOff, "--trainer-oom-score-adj 0: the trainer keeps lifeboat's ("+own+")", false)
	case mp.OOMGroup:
		add("oom_score_adj", stateNotEnforceable, fmt.Sprintf("the trainer would start with %d (lifeboat's is %s), but memory.oom.group=1 kills the whole container whichever process the kernel picks", o.memory.oomScore, own), false)
	default:
		add("oom_score_adj", stateEnforced, fmt.Sprintf("the trainer starts with %d, lifeboat keeps %s (or -999 where CAP_SYS_RESOURCE allows): the OOM killer of the shared cgroup takes the trainer", o.memory.oomScore, own), false)
	}
	switch {
	case mp.OOMGroup && split:
		add("oom_group", stateEnforced, "memory.oom.group=1 on "+mp.Cgroup+", but the trainer's own cgroup keeps lifeboat out of an OOM in it", false)
	case mp.OOMGroup:
		add("oom_group", stateNotEnforceable, "memory.oom.group=1 on "+mp.Cgroup+": an OOM kill takes the whole container, lifeboat too; only what was uploaded before survives (the kubelet's singleProcessOOMKill turns this off)", false)
	case mp.Mode == memory.ModeV2:
		add("oom_group", stateEnforced, "memory.oom.group is 0: an OOM kill takes one process", false)
	default:
		add("oom_group", stateOff, "cgroup "+string(mp.Mode)+" has no memory.oom.group: an OOM kill takes one process", false)
	}
	return out
}

func strconvQuote(s string) string { return fmt.Sprintf("%q", s) }
