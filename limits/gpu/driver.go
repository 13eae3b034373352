package gpu

import (
	"errors"
	"fmt"
	"math"
)

// ErrNoNVML marks every error that means "NVML cannot be used here": the
// binary was built without cgo, or libnvidia-ml is not installed or no driver
// is loaded (no GPU, CI). It is not a failure: the caller logs one line and
// plans from what it was given, unchecked (Plan with a nil Inventory).
var ErrNoNVML = errors.New("NVML not available")

// ErrDeviceNotFound marks a request or lookup naming a device NVML does not see.
var ErrDeviceNotFound = errors.New("device not found")

// MemoryUnknown is a Process's UsedMemory when NVML cannot report it
// (NVML_VALUE_NOT_AVAILABLE, e.g. without the privilege to read it).
const MemoryUnknown = math.MaxUint64

// Device is what NVML reports about one GPU.
type Device struct {
	Index       int         `json:"index"`        // NVML's index in this container (what nvidia-smi prints)
	UUID        string      `json:"uuid"`         // "GPU-..."
	Name        string      `json:"name"`         // "NVIDIA A100-SXM4-40GB"
	MemoryTotal uint64      `json:"memory_total"` // bytes
	MIGEnabled  bool        `json:"mig_enabled"`  // current MIG mode
	MIG         []MIGDevice `json:"mig,omitempty"`
}

// MIGDevice is one MIG device (a compute instance of a GPU instance) on a GPU.
type MIGDevice struct {
	Index           int    `json:"index"` // MIG device index on its GPU ("0:Index")
	UUID            string `json:"uuid"`  // "MIG-..." (or the pre-R470 "MIG-GPU-<uuid>/<gi>/<ci>")
	GPUInstance     int    `json:"gpu_instance"`
	ComputeInstance int    `json:"compute_instance"`
	MemoryTotal     uint64 `json:"memory_total"` // bytes: the GPU instance's memory
}

// Process is one compute process on a GPU or MIG device, as NVML reports it.
type Process struct {
	PID        int
	UsedMemory uint64 // bytes, or MemoryUnknown
}

// MemoryInfo is a GPU's or MIG instance's memory as NVML reports it: every
// process's allocations and the driver's own, whoever made them.
type MemoryInfo struct {
	Total uint64 // bytes
	Used  uint64 // bytes
}

// Driver is the part of NVML this package uses. The cgo build implements it
// with go-nvml (Open, OpenLibrary); tests use go-nvml's mock machines or a fake.
// Methods may be called from one goroutine at a time.
type Driver interface {
	// DeviceCount returns how many GPUs NVML enumerates in this container.
	DeviceCount() (int, error)
	// Device describes GPU i, 0 <= i < DeviceCount(), with its MIG devices
	// when MIG mode is enabled.
	Device(i int) (Device, error)
	// ComputeProcesses lists the compute processes on the GPU or MIG device
	// with that UUID. An unknown UUID returns an error wrapping
	// ErrDeviceNotFound. The pids are NVML's: the host's where the driver
	// does not translate them into the container's PID namespace.
	ComputeProcesses(uuid string) ([]Process, error)
	// DeviceMemory returns the memory of the GPU or MIG device with that
	// UUID (a MIG device's is its GPU instance's). An unknown UUID returns
	// an error wrapping ErrDeviceNotFound. Unlike ComputeProcesses it needs
	// no PID translation: it is right inside any container.
	DeviceMemory(uuid string) (MemoryInfo, error)
	// Close releases NVML. It is idempotent.
	Close() error
}

// Inventory is what NVML saw when Inspect ran.
type Inventory struct {
	Devices []Device
}

// Inspect asks d for every device.
func Inspect(d Driver) (*Inventory, error) {
	n, err := d.DeviceCount()
	if err != nil {
		return nil, fmt.Errorf("gpu: count devices: %w", err)
	}
	inv := &Inventory{Devices: make([]Device, 0, n)}
	for i := range n {
		dev, err := d.Device(i)
		if err != nil {
			return nil, fmt.Errorf("gpu: describe device %d: %w", i, err)
		}
		inv.Devices = append(inv.Devices, dev)
	}
	return inv, nil
}
