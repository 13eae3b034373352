//go:build cgo

package gpu

import (
	"fmt"
	"strings"
	"sync"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// Open loads libnvidia-ml and initialises NVML. Without the library or a
// loaded driver it returns an error wrapping ErrNoNVML.
func Open() (Driver, error) {
	return OpenLibrary(nvml.New())
}

// OpenLibrary initialises lib, a go-nvml Interface: the real library, or one
// of go-nvml's mock machines (pkg/nvml/mock/dgxa100, dgxh100, dgxh200, ...).
func OpenLibrary(lib nvml.Interface) (Driver, error) {
	switch ret := lib.Init(); ret {
	case nvml.SUCCESS:
		return &nvmlDriver{lib: lib}, nil
	case nvml.ERROR_LIBRARY_NOT_FOUND, nvml.ERROR_DRIVER_NOT_LOADED, nvml.ERROR_NO_PERMISSION:
		return nil, fmt.Errorf("gpu: initialise NVML: %v: %w", ret, ErrNoNVML)
	default:
		return nil, fmt.Errorf("gpu: initialise NVML: %w", ret)
	}
}

// nvmlDriver is the Driver on go-nvml.
type nvmlDriver struct {
	lib       nvml.Interface
	closeOnce sync.Once
	closeErr  error
}

var _ Driver = (*nvmlDriver)(nil)

func (d *nvmlDriver) DeviceCount() (int, error) {
	n, ret := d.lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		return 0, fmt.Errorf("gpu: device count: %w", ret)
	}
	return n, nil
}

func (d *nvmlDriver) Device(i int) (Device, error) {
	h, ret := d.lib.DeviceGetHandleByIndex(i)
	if ret != nvml.SUCCESS {
		return Device{}, fmt.Errorf("gpu: device %d: %w", i, ret)
	}
	dev := Device{Index: i}
	var err error
	if dev.UUID, ret = h.GetUUID(); ret != nvml.SUCCESS {
		return Device{}, fmt.Errorf("gpu: device %d: uuid: %w", i, ret)
	}
	if dev.Name, ret = h.GetName(); ret != nvml.SUCCESS {
		return Device{}, fmt.Errorf("gpu: device %d: name: %w", i, ret)
	}
	if dev.MemoryTotal, err = memoryTotal(h); err != nil {
		return Device{}, fmt.Errorf("gpu: device %d: %w", i, err)
	}
	current, _, ret := h.GetMigMode()
	switch ret {
	case nvml.SUCCESS:
		dev.MIGEnabled = current == nvml.DEVICE_MIG_ENABLE
	case nvml.ERROR_NOT_SUPPORTED:
	default:
		return Device{}, fmt.Errorf("gpu: device %d: MIG mode: %w", i, ret)
	}
	if !dev.MIGEnabled {
		return dev, nil
	}
	if dev.MIG, err = migDevices(h); err != nil {
		return Device{}, fmt.Errorf("gpu: device %d: %w", i, err)
	}
	return dev, nil
}

func memoryTotal(h nvml.Device) (uint64, error) {
	m, ret := h.GetMemoryInfo()
	if ret != nvml.SUCCESS {
		return 0, fmt.Errorf("memory: %w", ret)
	}
	return m.Total, nil
}

// migDevices lists the MIG devices of a MIG-enabled GPU. Indices without a
// device (ERROR_NOT_FOUND) are skipped.
func migDevices(h nvml.Device) ([]MIGDevice, error) {
	n, ret := h.GetMaxMigDeviceCount()
	if ret != nvml.SUCCESS {
		return nil, fmt.Errorf("MIG device count: %w", ret)
	}
	var out []MIGDevice
	for j := range n {
		mh, ret := h.GetMigDeviceHandleByIndex(j)
		if ret == nvml.ERROR_NOT_FOUND || ret == nvml.ERROR_INVALID_ARGUMENT {
			continue
		}
		if ret != nvml.SUCCESS {
			return nil, fmt.Errorf("MIG device %d: %w", j, ret)
		}
		m := MIGDevice{Index: j}
		var err error
		if m.UUID, ret = mh.GetUUID(); ret != nvml.SUCCESS {
			return nil, fmt.Errorf("MIG device %d: uuid: %w", j, ret)
		}
		if m.GPUInstance, ret = mh.GetGpuInstanceId(); ret != nvml.SUCCESS {
			return nil, fmt.Errorf("MIG device %d: GPU instance: %w", j, ret)
		}
		if m.ComputeInstance, ret = mh.GetComputeInstanceId(); ret != nvml.SUCCESS {
			return nil, fmt.Errorf("MIG device %d: compute instance: %w", j, ret)
		}
		if m.MemoryTotal, err = memoryTotal(mh); err != nil {
			return nil, fmt.Errorf("MIG device %d: %w", j, err)
		}
		out = append(out, m)
	}
	return out, nil
}

// handle finds the GPU or MIG device with that UUID by walking the devices,
// which works for MIG UUIDs on every driver and in go-nvml's mocks.
func (d *nvmlDriver) handle(uuid string) (nvml.Device, error) {
	n, err := d.DeviceCount()
	if err != nil {
		return nil, err
	}
	for i := range n {
		h, ret := d.lib.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			return nil, fmt.Errorf("gpu: device %d: %w", i, ret)
		}
		u, ret := h.GetUUID()
		if ret != nvml.SUCCESS {
			return nil, fmt.Errorf("gpu: device %d: uuid: %w", i, ret)
		}
		if strings.EqualFold(u, uuid) {
			return h, nil
		}
		if mode, _, ret := h.GetMigMode(); ret != nvml.SUCCESS || mode != nvml.DEVICE_MIG_ENABLE {
			continue
		}
		max, ret := h.GetMaxMigDeviceCount()
		if ret != nvml.SUCCESS {
			continue
		}
		for j := range max {
			mh, ret := h.GetMigDeviceHandleByIndex(j)
			if ret != nvml.SUCCESS {
				continue
			}
			if mu, ret := mh.GetUUID(); ret == nvml.SUCCESS && strings.EqualFold(mu, uuid) {
				return mh, nil
			}
		}
	}
	return nil, fmt.Errorf("gpu: device %s: %w", uuid, ErrDeviceNotFound)
}

func (d *nvmlDriver) ComputeProcesses(uuid string) ([]Process, error) {
	h, err := d.handle(uuid)
	if err != nil {
		return nil, err
	}
	infos, ret := h.GetComputeRunningProcesses()
	if ret != nvml.SUCCESS {
		return nil, fmt.Errorf("gpu: device %s: compute processes: %w", uuid, ret)
	}
	out := make([]Process, 0, len(infos))
	for _, p := range infos {
		// NVML_VALUE_NOT_AVAILABLE is (unsigned long long)-1: MemoryUnknown.
		out = append(out, Process{PID: int(p.Pid), UsedMemory: p.UsedGpuMemory})
	}
	return out, nil
}

func (d *nvmlDriver) DeviceMemory(uuid string) (MemoryInfo, error) {
	h, err := d.handle(uuid)
	if err != nil {
		return MemoryInfo{}, err
	}
	m, ret := h.GetMemoryInfo()
	if ret != nvml.SUCCESS {
		return MemoryInfo{}, fmt.Errorf("gpu: device %s: memory: %w", uuid, ret)
	}
	return MemoryInfo{Total: m.Total, Used: m.Used}, nil
}

func (d *nvmlDriver) Close() error {
	d.closeOnce.Do(func() {
		if ret := d.lib.Shutdown(); ret != nvml.SUCCESS {
			d.closeErr = fmt.Errorf("gpu: shut NVML down: %w", ret)
		}
	})
	return d.closeErr
}
