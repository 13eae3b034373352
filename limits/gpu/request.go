package gpu

import (
	"encoding/csv"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Mode says what kind of device request a value makes.
type Mode int

const (
	// Unset: the value was empty, nothing was said. Plan changes nothing.
	Unset Mode = iota
	// All: every device the container sees ("all").
	All
	// None: the driver is mounted but no device is given ("none").
	None
	// Void: no GPU support at all ("void").
	Void
	// List: the devices in Request.Devices.
	List
	// Count: the first Request.Count devices (docker's --gpus count=N).
	Count
)

func (m Mode) String() string {
	switch m {
	case Unset:
		return "unset"
	case All:
		return "all"
	case None:
		return "none"
	case Void:
		return "void"
	case List:
		return "list"
	case Count:
		return "count"
	}
	return "Mode(" + strconv.Itoa(int(m)) + ")"
}

// Ref names one device the way NVIDIA_VISIBLE_DEVICES does. Exactly one form is
// used: an index (Index >= 0, MIGIndex < 0), a MIG device by indices
// ("0:1": Index and MIGIndex >= 0), or a UUID (Index < 0): "GPU-...",
// "MIG-...", or the pre-R470 "MIG-GPU-<uuid>/<gi>/<ci>" form.
type Ref struct {
	Index    int
	MIGIndex int
	UUID     string
}

// IndexRef returns the Ref of GPU i.
func IndexRef(i int) Ref { return Ref{Index: i, MIGIndex: -1} }

// UUIDRef returns the Ref of the device with that UUID.
func UUIDRef(uuid string) Ref { return Ref{Index: -1, MIGIndex: -1, UUID: uuid} }

// IsMIG reports whether r names a MIG device (by UUID or by "gpu:mig" indices).
func (r Ref) IsMIG() bool {
	return r.MIGIndex >= 0 || strings.HasPrefix(r.UUID, "MIG-")
}

// legacyMIG splits "MIG-GPU-<uuid>/<gi>/<ci>" into the parent's "GPU-<uuid>"
// and the instance ids; ok is false for any other form.
func (r Ref) legacyMIG() (gpu string, gi, ci int, ok bool) {
	rest, found := strings.CutPrefix(r.UUID, "MIG-GPU-")
	if !found {
		return "", 0, 0, false
	}
	parts := strings.Split(rest, "/")
	if len(parts) != 3 {
		return "", 0, 0, false
	}
	gi, err1 := strconv.Atoi(parts[1])
	ci, err2 := strconv.Atoi(parts[2])
	if err1 != nil || err2 != nil {
		return "", 0, 0, false
	}
	return "GPU-" + parts[0], gi, ci, true
}

// String writes r as NVIDIA_VISIBLE_DEVICES does.
func (r Ref) String() string {
	switch {
	case r.Index < 0:
		return r.UUID
	case r.MIGIndex >= 0:
		return strconv.Itoa(r.Index) + ":" + strconv.Itoa(r.MIGIndex)
	default:
		return strconv.Itoa(r.Index)
	}
}

// Request is a parsed device request: what the container was given
// (NVIDIA_VISIBLE_DEVICES) or what lifeboat's --gpus asks for.
type Request struct {
	Mode    Mode
	Devices []Ref // Mode == List
	Count   int   // Mode == Count

	// Applied says the container runtime has already applied this request,
	// so the container sees only the requested GPUs, renumbered from 0 in the
	// host's order (what nvidia-smi in the container prints). ParseDevices
	// leaves it false; the caller sets it for NVIDIA_VISIBLE_DEVICES, an
	// instruction to the runtime whose indices are the host's, and leaves it
	// false for --gpus, whose indices are the container's own.
	Applied bool
}

// String writes r in the NVIDIA_VISIBLE_DEVICES syntax (count=N for Count).
// ParseDevices(r.String()) returns r again, Applied aside.
func (r Request) String() string {
	switch r.Mode {
	case Unset:
		return ""
	case All, None, Void:
		return r.Mode.String()
	case Count:
		return "count=" + strconv.Itoa(r.Count)
	}
	s := make([]string, len(r.Devices))
	for i, d := range r.Devices {
		s[i] = d.String()
	}
	return strings.Join(s, ",")
}

// maxIndex bounds device indices so that a typo cannot allocate or overflow.
const maxIndex = 1 << 16

// ParseDevices parses a device request in the NVIDIA_VISIBLE_DEVICES syntax:
// "" (Unset), "all", "none", "void", or a comma list of GPU indices ("0,1"),
// MIG devices by indices ("0:1"), GPU UUIDs ("GPU-..."), MIG UUIDs ("MIG-...")
// and the pre-R470 MIG form ("MIG-GPU-<uuid>/<gi>/<ci>").
//
// It also accepts docker's --gpus syntax when the value has keys: "device=0,1"
// (quoted or not), "count=2", "all,capabilities=compute", "2,driver=nvidia"
// (a bare leading number is a count, as in docker); capabilities, driver and
// options are ignored. A bare "2" without keys is GPU index 2, as in
// NVIDIA_VISIBLE_DEVICES, not docker's count.
//
// Device-plugin volume-mounts paths and CDI names are refused with an error
// that says so: lifeboat cannot tell from them which devices were given.
func ParseDevices(s string) (Request, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return Request{Mode: Unset}, nil
	}
	if m, ok := keyword(s); ok {
		return Request{Mode: m}, nil
	}
	if strings.HasPrefix(s, "/") {
		return Request{}, fmt.Errorf("gpu: device list %q is a device plugin's volume-mounts path, not a list; lifeboat cannot read devices from it", s)
	}
	if strings.Contains(s, "nvidia.com/") {
		return Request{}, fmt.Errorf("gpu: device list %q names CDI devices; lifeboat understands indices and UUIDs only", s)
	}
	if strings.ContainsAny(s, "=\"") {
		return parseDocker(s)
	}
	refs, err := parseList(strings.Split(s, ","))
	if err != nil {
		return Request{}, err
	}
	return Request{Mode: List, Devices: refs}, nil
}

// parseDocker parses docker's --gpus value: CSV fields of key=value.
func parseDocker(s string) (Request, error) {
	r := csv.NewReader(strings.NewReader(s))
	fields, err := r.Read()
	if err != nil {
		return Request{}, fmt.Errorf("gpu: device request %q: %w", s, err)
	}
	if _, err := r.Read(); err == nil {
		return Request{}, fmt.Errorf("gpu: device request %q spans several lines", s)
	}
	var (
		req     Request
		devices []string
		inDev   bool // bare fields after device= continue its list
		seen    = map[string]bool{}
	)
	for i, f := range fields {
		f = strings.TrimSpace(f)
		key, val, hasVal := strings.Cut(f, "=")
		if !hasVal {
			switch {
			case inDev:
				devices = append(devices, f)
				continue
			case i == 0 && strings.EqualFold(f, "all"):
				req.Mode = All
				seen["count"] = true
				continue
			case i == 0:
				n, err := parseCount(f)
				if err != nil {
					return Request{}, fmt.Errorf("gpu: device request %q: %w", s, err)
				}
				req.Mode, req.Count = Count, n
				seen["count"] = true
				continue
			}
			return Request{}, fmt.Errorf("gpu: device request %q: field %q is not key=value", s, f)
		}
		inDev = false
		key = strings.ToLower(strings.TrimSpace(key))
		val = strings.TrimSpace(val)
		if seen[key] || (key == "device" && seen["count"]) || (key == "count" && seen["device"]) {
			return Request{}, fmt.Errorf("gpu: device request %q: %s given twice or with both count and device", s, key)
		}
		seen[key] = true
		switch key {
		case "count":
			if strings.EqualFold(val, "all") {
				req.Mode = All
				continue
			}
			n, err := parseCount(val)
			if err != nil {
				return Request{}, fmt.Errorf("gpu: device request %q: %w", s, err)
			}
			req.Mode, req.Count = Count, n
		case "device":
			devices = append(devices, strings.Split(val, ",")...)
			inDev = true
		case "capabilities", "driver", "options":
		default:
			return Request{}, fmt.Errorf("gpu: device request %q: unknown key %q (want device, count, capabilities, driver or options)", s, key)
		}
	}
	if seen["device"] {
		if len(devices) == 1 {
			if m, ok := keyword(devices[0]); ok {
				return Request{Mode: m}, nil
			}
		}
		refs, err := parseList(devices)
		if err != nil {
			return Request{}, err
		}
		return Request{Mode: List, Devices: refs}, nil
	}
	if !seen["count"] {
		return Request{}, fmt.Errorf("gpu: device request %q names neither devices nor a count", s)
	}
	return req, nil
}

// keyword reads the device requests that are words: "all", "none" and
// "void", in any case.
func keyword(s string) (Mode, bool) {
	for _, m := range []Mode{All, None, Void} {
		if strings.EqualFold(strings.TrimSpace(s), m.String()) {
			return m, true
		}
	}
	return Unset, false
}

func isKeyword(s string) bool { _, ok := keyword(s); return ok }

func parseCount(s string) (int, error) {
	n, err := strconv.Atoi(s)
	if err != nil || n <= 0 || n > maxIndex {
		return 0, fmt.Errorf("count %q is not a positive number", s)
	}
	return n, nil
}

// parseList parses the entries of a device list.
func parseList(items []string) ([]Ref, error) {
	refs := make([]Ref, 0, len(items))
	seen := make(map[string]bool, len(items))
	for _, it := range items {
		it = strings.TrimSpace(it)
		ref, err := parseRef(it)
		if err != nil {
			return nil, err
		}
		key := strings.ToLower(ref.String())
		if seen[key] {
			return nil, fmt.Errorf("gpu: device %s is listed twice", ref)
		}
		seen[key] = true
		refs = append(refs, ref)
	}
	return refs, nil
}

func parseRef(s string) (Ref, error) {
	switch {
	case s == "":
		return Ref{}, errors.New("gpu: empty entry in device list")
	case isKeyword(s):
		return Ref{}, fmt.Errorf("gpu: %q cannot be combined with other devices", s)
	case isDigits(s):
		i, err := parseIndex(s)
		return IndexRef(i), err
	case strings.Contains(s, ":"):
		g, m, _ := strings.Cut(s, ":")
		if !isDigits(g) || !isDigits(m) {
			return Ref{}, fmt.Errorf("gpu: device %q is not GPU:MIG indices such as 0:1", s)
		}
		gi, err := parseIndex(g)
		if err != nil {
			return Ref{}, err
		}
		mi, err := parseIndex(m)
		if err != nil {
			return Ref{}, err
		}
		return Ref{Index: gi, MIGIndex: mi}, nil
	case strings.HasPrefix(s, "MIG-GPU-"):
		r := UUIDRef(s)
		if g, _, _, ok := r.legacyMIG(); !ok || !isUUIDBody(strings.TrimPrefix(g, "GPU-")) {
			return Ref{}, fmt.Errorf("gpu: device %q is not a MIG device in the MIG-GPU-<uuid>/<gi>/<ci> form", s)
		}
		return r, nil
	case strings.HasPrefix(s, "GPU-"), strings.HasPrefix(s, "MIG-"):
		if !isUUIDBody(s[4:]) {
			return Ref{}, fmt.Errorf("gpu: device %q is not a UUID (hex digits and dashes after %s)", s, s[:4])
		}
		return UUIDRef(s), nil
	}
	return Ref{}, fmt.Errorf("gpu: device %q is not an index, GPU:MIG indices, GPU-<uuid> or MIG-<uuid>", s)
}

func parseIndex(s string) (int, error) {
	i, err := strconv.Atoi(s)
	if err != nil || i >= maxIndex {
		return 0, fmt.Errorf("gpu: device index %q is out of range", s)
	}
	return i, nil
}

func isDigits(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range s {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// isUUIDBody reports whether s is made of hex digits and dashes, with at
// least one digit (CUDA accepts unique UUID prefixes, so no length is fixed).
func isUUIDBody(s string) bool {
	digits := 0
	for _, c := range s {
		switch {
		case c >= '0' && c <= '9', c >= 'a' && c <= 'f', c >= 'A' && c <= 'F':
			digits++
		case c == '-':
		default:
			return false
		}
	}
	return digits > 0
}
