package gpu

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Environment variables Plan sets for the trainer.
const (
	EnvCUDAVisibleDevices = "CUDA_VISIBLE_DEVICES"
	EnvCUDADeviceOrder    = "CUDA_DEVICE_ORDER"
	EnvSelectedGPUs       = "FLAGS_selected_gpus"
)

// Assigned is one device the trainer gets, in CUDA's order.
type Assigned struct {
	Ref         string // how CUDA_VISIBLE_DEVICES names it: a UUID, or an index when unchecked
	UUID        string // "" when unchecked and named by index
	Name        string // "" when unchecked
	MemoryTotal uint64 // bytes, 0 when unknown
	MIG         bool
}

// Visibility is the trainer's GPU environment computed by Plan.
type Visibility struct {
	// Checked is true when every device was found by NVML (Plan had an
	// Inventory): Devices carry UUIDs, names and memory. False means NVML
	// was not available (ErrNoNVML) and the plan was made from the request
	// alone, as given: nothing was verified and memory is unknown. An
	// unchecked plan is not an error.
	Checked bool
	Devices []Assigned
	// Env holds KEY=VALUE pairs to set over the trainer's environment, in
	// order. Empty means: change nothing.
	Env []string
	// Notes says, in sentences, what Plan assumed or chose; the caller logs them.
	Notes []string
}

// MemoryTotal returns the smallest memory among the devices (Paddle's limit
// is per device), or 0 when there is none or it is unknown.
func (v Visibility) MemoryTotal() uint64 {
	var m uint64
	for i, d := range v.Devices {
		if d.MemoryTotal == 0 {
			return 0
		}
		if i == 0 || d.MemoryTotal < m {
			m = d.MemoryTotal
		}
	}
	return m
}

// ErrMultipleMIG marks a request for more than one device when one of them
// is a MIG device: CUDA enumerates only one MIG device per process.
var ErrMultipleMIG = errors.New("CUDA enumerates only one MIG device per process")

// Plan computes the trainer's CUDA_VISIBLE_DEVICES and FLAGS_selected_gpus
// for req. seen is what NVML reported (Inspect); nil means NVML was not
// available, and the plan is made from req alone with Checked false.
//
// The two variables always agree: CUDA_VISIBLE_DEVICES lists the devices in
// the request's order and FLAGS_selected_gpus is 0..n-1, because Paddle
// numbers devices relative to CUDA_VISIBLE_DEVICES. When checked, devices are
// named by UUID, which holds however the runtime renumbered them and whatever
// CUDA_DEVICE_ORDER is; when an index is written, CUDA_DEVICE_ORDER=PCI_BUS_ID
// is set too, so CUDA's index is NVML's and nvidia-smi's.
//
// A MIG device is named by its MIG UUID (the only way CUDA accepts one) with
// FLAGS_selected_gpus=0: CUDA then enumerates exactly that instance as device
// 0, so Paddle's card 0 is the instance. NVIDIA_VISIBLE_DEVICES is left as the
// runtime set it. A request that yields more than one device with a MIG device
// among them is an error wrapping ErrMultipleMIG; a device NVML does not see
// is an error wrapping ErrDeviceNotFound that names it.
//
// Unset, None and Void change nothing.
func Plan(req Request, seen *Inventory) (Visibility, error) {
	v := Visibility{Checked: seen != nil}
	var (
		devs []Assigned
		err  error
	)
	switch req.Mode {
	case Unset:
		v.Notes = append(v.Notes, "No device request: the trainer's GPU environment is left as it is.")
		return v, nil
	case None, Void:
		v.Notes = append(v.Notes, fmt.Sprintf("Device request %q gives the trainer no GPU: its environment is left as it is.", req.Mode))
		return v, nil
	}
	if seen == nil {
		devs, err = planUnchecked(req, &v)
	} else {
		devs, err = planChecked(req, seen, &v)
	}
	if err != nil {
		return Visibility{}, err
	}
	if len(devs) > 1 {
		for _, d := range devs {
			if d.MIG {
				return Visibility{}, fmt.Errorf("gpu: request %q yields %d devices (%s) and %s is a MIG device: %w; run one trainer per MIG device",
					req, len(devs), refs(devs), d.Ref, ErrMultipleMIG)
			}
		}
	}
	v.Devices = devs
	v.Env = envFor(devs)
	if len(devs) == 1 && devs[0].MIG {
		v.Notes = append(v.Notes, fmt.Sprintf("MIG device %s: CUDA_VISIBLE_DEVICES names it by UUID and FLAGS_selected_gpus=0, so Paddle's device 0 is this instance; NVIDIA_VISIBLE_DEVICES is unchanged.", devs[0].Ref))
	}
	return v, nil
}

func refs(devs []Assigned) string {
	s := make([]string, len(devs))
	for i, d := range devs {
		s[i] = d.Ref
	}
	return strings.Join(s, ",")
}

func envFor(devs []Assigned) []string {
	if len(devs) == 0 {
		return nil
	}
	sel := make([]string, len(devs))
	byIndex := false
	for i, d := range devs {
		sel[i] = strconv.Itoa(i)
		if isDigits(d.Ref) {
			byIndex = true
		}
	}
	env := []string{EnvCUDAVisibleDevices + "=" + refs(devs)}
	if byIndex {
		env = append(env, EnvCUDADeviceOrder+"=PCI_BUS_ID")
	}
	return append(env, EnvSelectedGPUs+"="+strings.Join(sel, ","))
}

// planUnchecked plans from the request alone.
func planUnchecked(req Request, v *Visibility) ([]Assigned, error) {
	switch req.Mode {
	case All:
		v.Notes = append(v.Notes, "NVML not available: all devices the container has stay visible, CUDA_VISIBLE_DEVICES is not set.")
		return nil, nil
	case Count:
		devs := make([]Assigned, req.Count)
		for i := range devs {
			devs[i] = Assigned{Ref: strconv.Itoa(i)}
		}
		v.Notes = append(v.Notes, fmt.Sprintf("NVML not available: count=%d taken as the container's devices 0..%d, unverified.", req.Count, req.Count-1))
		return devs, nil
	}
	var (
		devs    []Assigned
		indices []int
		others  int
	)
	for _, r := range req.Devices {
		if r.Index >= 0 && r.MIGIndex < 0 {
			indices = append(indices, r.Index)
		} else {
			others++
		}
	}
	renumber := req.Applied && len(indices) > 0
	if renumber && others > 0 {
		return nil, fmt.Errorf("gpu: request %q mixes indices with UUIDs; without NVML lifeboat cannot tell where the indices land once the runtime renumbered them: list UUIDs only", req)
	}
	sorted := slices.Sorted(slices.Values(indices))
	for _, r := range req.Devices {
		switch {
		case r.Index < 0:
			devs = append(devs, Assigned{Ref: r.UUID, UUID: r.UUID, MIG: r.IsMIG()})
		case r.MIGIndex >= 0:
			if !req.Applied || len(req.Devices) != 1 {
				return nil, fmt.Errorf("gpu: MIG device %s can be named to CUDA only by its MIG UUID and NVML is not available to look it up: give MIG-<uuid> instead", r)
			}
			// The runtime gave the container this one MIG device: CUDA's device 0.
			devs = append(devs, Assigned{Ref: "0", MIG: true})
			v.Notes = append(v.Notes, fmt.Sprintf("NVML not available: MIG device %s taken as the container's only device, CUDA device 0.", r))
		case renumber:
			devs = append(devs, Assigned{Ref: strconv.Itoa(slices.Index(sorted, r.Index))})
		default:
			devs = append(devs, Assigned{Ref: strconv.Itoa(r.Index)})
		}
	}
	if renumber && !slices.Equal(sorted, seq(len(sorted))) {
		v.Notes = append(v.Notes, fmt.Sprintf("NVML not available: assumed the container runtime applied %q, so the container sees those GPUs renumbered from 0; unverified.", req))
	} else {
		v.Notes = append(v.Notes, fmt.Sprintf("NVML not available: devices %q taken as given, unverified.", req))
	}
	return devs, nil
}

func seq(n int) []int {
	s := make([]int, n)
	for i := range s {
		s[i] = i
	}
	return s
}

// planChecked resolves the request against what NVML sees.
func planChecked(req Request, seen *Inventory, v *Visibility) ([]Assigned, error) {
	switch req.Mode {
	case All, Count:
		var devs []Assigned
		for _, d := range seen.Devices {
			if d.MIGEnabled {
				for _, m := range d.MIG {
					devs = append(devs, migAssigned(d, m))
				}
				continue
			}
			devs = append(devs, gpuAssigned(d))
		}
		if req.Mode == Count {
			if len(devs) < req.Count {
				return nil, fmt.Errorf("gpu: request count=%d, but NVML sees %d usable devices (%s): %w", req.Count, len(devs), describe(seen), ErrDeviceNotFound)
			}
			devs = devs[:req.Count]
		}
		if len(devs) == 0 {
			v.Notes = append(v.Notes, "NVML sees no usable GPU: CUDA_VISIBLE_DEVICES is not set.")
		}
		return devs, nil
	}

	// Under Applied, host indices were renumbered by the runtime when the
	// container sees exactly the requested GPUs.
	var indices []int
	for _, r := range req.Devices {
		if r.Index >= 0 {
			indices = append(indices, r.Index)
		}
	}
	indices = slices.Compact(slices.Sorted(slices.Values(indices)))
	renumber := req.Applied && len(indices) > 0 && len(indices) == len(seen.Devices) && !slices.Equal(indices, seq(len(indices)))
	if renumber {
		v.Notes = append(v.Notes, fmt.Sprintf("The container runtime applied %q: NVML sees exactly those GPUs, renumbered from 0 in the same order.", req))
	}

	var devs []Assigned
	used := map[string]Ref{}
	for _, r := range req.Devices {
		a, err := resolve(r, req, seen, renumber, indices, v)
		if err != nil {
			return nil, err
		}
		key := strings.ToLower(a.UUID)
		if prev, dup := used[key]; dup {
			return nil, fmt.Errorf("gpu: request %q names %s twice (as %s and %s)", req, a.UUID, prev, r)
		}
		used[key] = r
		devs = append(devs, a)
	}
	return devs, nil
}

func resolve(r Ref, req Request, seen *Inventory, renumber bool, indices []int, v *Visibility) (Assigned, error) {
	notFound := func() error {
		return fmt.Errorf("gpu: requested device %s is not visible to NVML, which sees %s: %w", r, describe(seen), ErrDeviceNotFound)
	}
	if r.Index >= 0 {
		i := r.Index
		if renumber {
			i = slices.Index(indices, r.Index)
		}
		if i < 0 || i >= len(seen.Devices) {
			return Assigned{}, notFound()
		}
		d := seen.Devices[i]
		if r.MIGIndex < 0 {
			return wholeGPU(d, r, v)
		}
		for _, m := range d.MIG {
			if m.Index == r.MIGIndex {
				return migAssigned(d, m), nil
			}
		}
		if req.Applied && len(d.MIG) == 1 {
			v.Notes = append(v.Notes, fmt.Sprintf("MIG device %s taken as %s, the only MIG device the container sees on GPU %d.", r, d.MIG[0].UUID, i))
			return migAssigned(d, d.MIG[0]), nil
		}
		return Assigned{}, notFound()
	}
	if gpuUUID, gi, ci, ok := r.legacyMIG(); ok {
		for _, d := range seen.Devices {
			if !strings.EqualFold(d.UUID, gpuUUID) {
				continue
			}
			for _, m := range d.MIG {
				if m.GPUInstance == gi && m.ComputeInstance == ci {
					return migAssigned(d, m), nil
				}
			}
		}
		return Assigned{}, notFound()
	}
	for _, d := range seen.Devices {
		if strings.EqualFold(d.UUID, r.UUID) {
			return wholeGPU(d, r, v)
		}
		for _, m := range d.MIG {
			if strings.EqualFold(m.UUID, r.UUID) {
				return migAssigned(d, m), nil
			}
		}
	}
	return Assigned{}, notFound()
}

// wholeGPU assigns GPU d, requested as r. A MIG-enabled GPU cannot run CUDA
// work itself: its single MIG device stands in for it, more is ambiguous.
func wholeGPU(d Device, r Ref, v *Visibility) (Assigned, error) {
	if !d.MIGEnabled {
		return gpuAssigned(d), nil
	}
	switch len(d.MIG) {
	case 0:
		return Assigned{}, fmt.Errorf("gpu: requested GPU %s (%s) has MIG enabled but no MIG device: create one or disable MIG", r, d.UUID)
	case 1:
		v.Notes = append(v.Notes, fmt.Sprintf("GPU %s has MIG enabled: its only MIG device %s is used.", r, d.MIG[0].UUID))
		return migAssigned(d, d.MIG[0]), nil
	}
	uuids := make([]string, len(d.MIG))
	for i, m := range d.MIG {
		uuids[i] = m.UUID
	}
	return Assigned{}, fmt.Errorf("gpu: requested GPU %s (%s) has MIG enabled with %d MIG devices (%s): %w; request one of them by its MIG UUID",
		r, d.UUID, len(d.MIG), strings.Join(uuids, ", "), ErrMultipleMIG)
}

func gpuAssigned(d Device) Assigned {
	return Assigned{Ref: d.UUID, UUID: d.UUID, Name: d.Name, MemoryTotal: d.MemoryTotal}
}

func migAssigned(d Device, m MIGDevice) Assigned {
	return Assigned{Ref: m.UUID, UUID: m.UUID, Name: d.Name + " MIG", MemoryTotal: m.MemoryTotal, MIG: true}
}

// describe lists what NVML sees, for error messages.
func describe(seen *Inventory) string {
	if len(seen.Devices) == 0 {
		return "no GPU"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%d GPU(s): ", len(seen.Devices))
	for i, d := range seen.Devices {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%d %s", d.Index, d.UUID)
		if d.MIGEnabled {
			b.WriteString(" [MIG:")
			for _, m := range d.MIG {
				fmt.Fprintf(&b, " %d:%d %s", d.Index, m.Index, m.UUID)
			}
			b.WriteString("]")
		}
	}
	return b.String()
}
