package gpu

import (
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
)

// ErrNVMLNeeded marks a protection that was asked for and needs NVML
// where NVML cannot be used: a memory limit given as "auto" or a fraction
// on a container that has a GPU.
var ErrNVMLNeeded = errors.New("NVML is not available")

// Fields of a FieldError: which of Options was wrong.
const (
	FieldDevices     = "devices"
	FieldMemoryLimit = "memory_limit"
)

// FieldError says which of Options was wrong, and why. The caller names
// the field as its user gave it (a flag, a variable).
type FieldError struct {
	Field string // FieldDevices or FieldMemoryLimit
	Value string
	Err   error
}

func (e *FieldError) Error() string { return fmt.Sprintf("gpu: %s %q: %v", e.Field, e.Value, e.Err) }
func (e *FieldError) Unwrap() error { return e.Err }

// Options is what was asked about the trainer's GPUs.
type Options struct {
	// Devices are the trainer's GPUs in ParseDevices's syntax; empty for
	// what the container was given (NVIDIA_VISIBLE_DEVICES).
	Devices string
	// DevicesName names Devices in Setup.Source, as the user gave it.
	// Default "devices".
	DevicesName string
	// MemoryLimit is Paddle's pool limit per GPU (PlanPool's syntax);
	// empty for none.
	MemoryLimit string
	// MemoryLimitName names MemoryLimit in Setup.Conflicts, as the user
	// gave it. Default DefaultMemoryLimitName.
	MemoryLimitName string
	// Open opens NVML. Default Open.
	Open func() (Driver, error)
	// DevDir holds the NVIDIA device nodes (nvidia0, ...). Default /dev.
	DevDir string
}

// Setup is what Resolve found and decided about the trainer's GPUs.
type Setup struct {
	Request   string   `json:"request"`
	Source    string   `json:"source"` // Options.DevicesName, NVIDIA_VISIBLE_DEVICES or none
	NVML      string   `json:"nvml"`   // "ok" or why not
	Inventory []Device `json:"devices_seen"`
	Checked   bool     `json:"checked"`
	Env       []string `json:"trainer_env"`
	Notes     []string `json:"notes,omitempty"`
	Conflicts []string `json:"conflicts,omitempty"`
	// Visible says the container has a GPU to protect: the request gives
	// one (not none or void) and it names devices or DevDir has an NVIDIA
	// device node. Without one, protections that need NVML are moot.
	Visible bool `json:"gpu_visible"`
	// LimitMiB is the Paddle pool limit set, 0 if none.
	LimitMiB uint64 `json:"memory_limit_mib"`
	// LimitSkipped says why the memory limit was not applied, "" if it was.
	LimitSkipped string `json:"memory_limit_skipped,omitempty"`

	driver  Driver   // open when Checked, for the watchdog; Close it
	devices []string // UUIDs of the trainer's devices
}

// Driver is NVML, open when the plan was checked against it (for the
// memory watchdog); nil otherwise. Close releases it.
func (s *Setup) Driver() Driver {
	if s == nil {
		return nil
	}
	return s.driver
}

// Devices are the UUIDs of the trainer's devices, where known.
func (s *Setup) Devices() []string {
	if s == nil {
		return nil
	}
	return s.devices
}

// Close releases NVML. A nil Setup is fine.
func (s *Setup) Close() {
	if s != nil && s.driver != nil {
		_ = s.driver.Close()
		s.driver = nil
	}
}

// Resolve decides the trainer's GPU environment from o and env (the
// trainer's environment as it would be): which request counts (o.Devices,
// else NVIDIA_VISIBLE_DEVICES; nothing when CUDA_VISIBLE_DEVICES is set and
// o.Devices is not), what NVML sees (without it, the plan is made from the
// request as given, unverified), and Paddle's pool limit. It returns nil
// when nothing about GPUs was asked or given, and logs what it decided.
// The user's errors are a *FieldError (a bad Devices or MemoryLimit; a
// MemoryLimit that needs NVML where a GPU is visible and NVML is not
// available wraps ErrNVMLNeeded), or Plan's (a device NVML does not see,
// two MIG devices).
func Resolve(o Options, env []string, log *slog.Logger) (*Setup, error) {
	if o.DevicesName == "" {
		o.DevicesName = "devices"
	}
	if o.MemoryLimitName == "" {
		o.MemoryLimitName = DefaultMemoryLimitName
	}
	if o.Open == nil {
		o.Open = Open
	}
	if o.DevDir == "" {
		o.DevDir = "/dev"
	}
	get := func(k string) (string, bool) {
		for i := len(env) - 1; i >= 0; i-- {
			if v, ok := strings.CutPrefix(env[i], k+"="); ok {
				return v, true
			}
		}
		return "", false
	}
	s := &Setup{Source: "none"}
	var req Request
	var err error
	nvd, hasNVD := get("NVIDIA_VISIBLE_DEVICES")
	switch {
	case o.Devices != "":
		if req, err = ParseDevices(o.Devices); err != nil {
			return nil, &FieldError{Field: FieldDevices, Value: o.Devices, Err: err}
		}
		s.Source = o.DevicesName
	case hasNVD:
		if req, err = ParseDevices(nvd); err != nil {
			log.Warn("gpu.devices_unparsed", "NVIDIA_VISIBLE_DEVICES", nvd, "err", err, "effect", "the trainer's GPU environment is left as it is")
			return nil, nil
		}
		req.Applied = true
		s.Source = "NVIDIA_VISIBLE_DEVICES"
	case o.MemoryLimit == "":
		return nil, nil
	}
	switch req.Mode {
	case None, Void:
	case List, Count:
		s.Visible = true
	default:
		m, _ := filepath.Glob(filepath.Join(o.DevDir, "nvidia[0-9]*"))
		s.Visible = len(m) > 0
	}
	if _, set := get("CUDA_VISIBLE_DEVICES"); set && o.Devices == "" {
		log.Info("gpu.keep_cuda_visible_devices", "effect", "CUDA_VISIBLE_DEVICES is already set for the trainer and "+o.DevicesName+" is not given: left as it is")
		req = Request{}
	}
	s.Request = req.String()
	inv := s.inspect(o.Open, log)
	var v Visibility
	if req.Mode != Unset {
		if v, err = Plan(req, inv); err != nil {
			s.Close()
			return nil, fmt.Errorf("GPUs (%s %q): %w", s.Source, s.Request, err)
		}
	}
	s.Checked, s.Env, s.Notes = v.Checked, v.Env, v.Notes
	for _, a := range v.Devices {
		if a.UUID != "" {
			s.devices = append(s.devices, a.UUID)
		}
	}
	if o.MemoryLimit != "" {
		if err := s.pool(o.MemoryLimit, o.MemoryLimitName, v, env, log); err != nil {
			s.Close()
			return nil, err
		}
	}
	log.Info("gpu.plan", "source", s.Source, "request", s.Request, "checked", s.Checked, "env", strings.Join(s.Env, " "))
	for _, n := range s.Notes {
		log.Info("gpu.note", "note", n)
	}
	for _, c := range s.Conflicts {
		log.Warn("gpu.conflict", "conflict", c)
	}
	return s, nil
}

// inspect opens NVML and asks what it sees; nil when it cannot (s.NVML
// says why, and the plan is made unverified).
func (s *Setup) inspect(open func() (Driver, error), log *slog.Logger) *Inventory {
	d, err := open()
	switch {
	case err == nil:
		inv, err := Inspect(d)
		if err != nil {
			s.NVML = err.Error()
			log.Warn("gpu.nvml_failed", "err", err, "effect", "planning from what was given, unchecked")
			_ = d.Close()
			return nil
		}
		s.NVML, s.Inventory, s.driver = "ok", inv.Devices, d
		s.Visible = s.Visible || len(inv.Devices) > 0
		return inv
	case errors.Is(err, ErrNoNVML):
		s.NVML = err.Error()
		log.Info("gpu.nvml_unavailable", "err", err, "effect", "the trainer's GPU environment is set from what was given, unchecked")
	default:
		s.NVML = err.Error()
		log.Warn("gpu.nvml_failed", "err", err, "effect", "planning from what was given, unchecked")
	}
	return nil
}

// pool sets Paddle's pool limit: skipped (LimitSkipped) where a limit
// that needs the device's memory meets no visible GPU.
func (s *Setup) pool(limit, name string, v Visibility, env []string, log *slog.Logger) error {
	// The pool reads the environment as the trainer will get it: v.Env
	// set over env (the last value of a key counts).
	p, err := planPool(limit, name, v.MemoryTotal(), append(slices.Clip(env), v.Env...))
	switch {
	case errors.Is(err, ErrMemoryUnknown) && s.Visible:
		return &FieldError{Field: FieldMemoryLimit, Value: limit, Err: fmt.Errorf("needs the GPU's memory and %w here (%s)", ErrNVMLNeeded, s.NVML)}
	case errors.Is(err, ErrMemoryUnknown):
		s.LimitSkipped = "no GPU is visible, so there is no device memory to take " + limit + " of"
		log.Warn("gpu.memory_limit_skipped", "limit", limit, "reason", s.LimitSkipped, "effect", "no FLAGS_gpu_memory_limit_mb")
	case err != nil:
		return err // a *FieldError
	default:
		s.Env = append(s.Env, p.Vars...)
		s.Conflicts = p.Conflicts
		s.LimitMiB = p.LimitMiB
	}
	return nil
}
