//go:build cgo

package gpu

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxa100"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxh100"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxh200"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
)

func open(t *testing.T, lib nvml.Interface) Driver {
	t.Helper()
	d, err := OpenLibrary(lib)
	if err != nil {
		t.Fatalf("OpenLibrary: %v", err)
	}
	t.Cleanup(func() {
		if err := d.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return d
}

func inspect(t *testing.T, d Driver) *Inventory {
	t.Helper()
	inv, err := Inspect(d)
	if err != nil {
		t.Fatalf("Inspect: %v", err)
	}
	return inv
}

// enableMIG turns MIG on for dev and creates one GPU instance per profile,
// each with one compute instance, through the mock's own MIG API. go-nvml's
// mock does not hand out MIG device handles; this gives dev the ones a real
// driver would (UUID, instance ids, the instance's memory).
func enableMIG(t *testing.T, dev *server.Device, profiles ...int) []*mock.Device {
	t.Helper()
	if ret, _ := dev.SetMigMode(nvml.DEVICE_MIG_ENABLE); ret != nvml.SUCCESS {
		t.Fatalf("SetMigMode: %v", ret)
	}
	var migs []*mock.Device
	for j, p := range profiles {
		gip, ret := dev.GetGpuInstanceProfileInfo(p)
		if ret != nvml.SUCCESS {
			t.Fatalf("GPU instance profile %d: %v", p, ret)
		}
		gi, ret := dev.CreateGpuInstance(&gip)
		if ret != nvml.SUCCESS {
			t.Fatalf("CreateGpuInstance: %v", ret)
		}
		cip, ret := gi.GetComputeInstanceProfileInfo(nvml.COMPUTE_INSTANCE_PROFILE_1_SLICE, nvml.COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED)
		if ret != nvml.SUCCESS {
			t.Fatalf("compute instance profile: %v", ret)
		}
		ci, ret := gi.CreateComputeInstance(&cip)
		if ret != nvml.SUCCESS {
			t.Fatalf("CreateComputeInstance: %v", ret)
		}
		giInfo, _ := gi.GetInfo()
		ciInfo, _ := ci.GetInfo()
		uuid := fmt.Sprintf("MIG-%s-%04x-4000-8000-%012x", dev.UUID[4:12], j, j)
		mem := gip.MemorySizeMB << 20
		migs = append(migs, &mock.Device{
			GetUUIDFunc:              func() (string, nvml.Return) { return uuid, nvml.SUCCESS },
			GetGpuInstanceIdFunc:     func() (int, nvml.Return) { return int(giInfo.Id), nvml.SUCCESS },
			GetComputeInstanceIdFunc: func() (int, nvml.Return) { return int(ciInfo.Id), nvml.SUCCESS },
			GetMemoryInfoFunc:        func() (nvml.Memory, nvml.Return) { return nvml.Memory{Total: mem}, nvml.SUCCESS },
		})
	}
	dev.GetMaxMigDeviceCountFunc = func() (int, nvml.Return) { return 7, nvml.SUCCESS }
	dev.GetMigDeviceHandleByIndexFunc = func(j int) (nvml.Device, nvml.Return) {
		if j < 0 || j >= len(migs) {
			return nil, nvml.ERROR_NOT_FOUND
		}
		return migs[j], nvml.SUCCESS
	}
	return migs
}

func processes(ps ...Process) func() ([]nvml.ProcessInfo, nvml.Return) {
	return func() ([]nvml.ProcessInfo, nvml.Return) {
		out := make([]nvml.ProcessInfo, len(ps))
		for i, p := range ps {
			out[i] = nvml.ProcessInfo{Pid: uint32(p.PID), UsedGpuMemory: p.UsedMemory, GpuInstanceId: 0xFFFFFFFF, ComputeInstanceId: 0xFFFFFFFF}
		}
		return out, nvml.SUCCESS
	}
}

// TestOpenHere runs the real opener: on this machine and in CI there is no
// driver, and Open must say so with ErrNoNVML, not fail otherwise.
func TestOpenHere(t *testing.T) {
	d, err := Open()
	if err != nil {
		if !errors.Is(err, ErrNoNVML) {
			t.Fatalf("Open without a driver: err = %v, want ErrNoNVML", err)
		}
		t.Logf("no NVML here, as expected without a driver: %v", err)
		return
	}
	defer d.Close()
	inv, err := Inspect(d)
	if err != nil {
		t.Fatalf("Inspect a real machine: %v", err)
	}
	t.Logf("real NVML sees %d GPU(s): %+v", len(inv.Devices), inv.Devices)
}

func TestNoLibrary(t *testing.T) {
	lib := &mock.Interface{InitFunc: func() nvml.Return { return nvml.ERROR_LIBRARY_NOT_FOUND }}
	_, err := OpenLibrary(lib)
	if !errors.Is(err, ErrNoNVML) || !strings.Contains(err.Error(), "ERROR_LIBRARY_NOT_FOUND") {
		t.Fatalf("err = %v, want ErrNoNVML naming ERROR_LIBRARY_NOT_FOUND", err)
	}
	// The caller logs one line and plans unchecked: nothing fails.
	req := mustParse(t, "GPU-5d1f6a7e-3b2c-4c8a-9e1f-0a1b2c3d4e5f")
	v, err := Plan(req, nil)
	if err != nil {
		t.Fatalf("Plan unchecked: %v", err)
	}
	if v.Checked || !reflect.DeepEqual(v.Env, []string{"CUDA_VISIBLE_DEVICES=GPU-5d1f6a7e-3b2c-4c8a-9e1f-0a1b2c3d4e5f", "FLAGS_selected_gpus=0"}) {
		t.Fatalf("Plan = %+v", v)
	}

	lib.InitFunc = func() nvml.Return { return nvml.ERROR_UNKNOWN }
	if _, err := OpenLibrary(lib); err == nil || errors.Is(err, ErrNoNVML) {
		t.Fatalf("an unknown init failure: err = %v, want a real error", err)
	}
}

func TestDGXA100(t *testing.T) {
	srv := dgxa100.New()
	inv := inspect(t, open(t, srv))
	if len(inv.Devices) != 8 {
		t.Fatalf("%d devices, want 8", len(inv.Devices))
	}
	for i, d := range inv.Devices {
		want := srv.Devices[i].(*server.Device)
		if d.Index != i || d.UUID != want.UUID || !strings.Contains(d.Name, "A100") || d.MemoryTotal != 40960<<20 || d.MIGEnabled || d.MIG != nil {
			t.Fatalf("device %d = %+v", i, d)
		}
	}

	v, err := Plan(mustParse(t, "all"), inv)
	if err != nil {
		t.Fatal(err)
	}
	if !v.Checked || len(v.Devices) != 8 || v.Env[1] != "FLAGS_selected_gpus=0,1,2,3,4,5,6,7" {
		t.Fatalf("all: %+v", v)
	}
	assertAgree(t, v.Env)

	u3 := inv.Devices[3].UUID
	v, err = Plan(mustParse(t, "3,"+inv.Devices[5].UUID), inv)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"CUDA_VISIBLE_DEVICES=" + u3 + "," + inv.Devices[5].UUID, "FLAGS_selected_gpus=0,1"}; !reflect.DeepEqual(v.Env, want) {
		t.Fatalf("Env = %q, want %q", v.Env, want)
	}

	// "auto" on a 40 GB card.
	vars, _, err := MemoryPlan("auto", v.MemoryTotal(), nil)
	if err != nil || !reflect.DeepEqual(vars, []string{"FLAGS_allocator_strategy=auto_growth", "FLAGS_gpu_memory_limit_mb=38912"}) {
		t.Fatalf("MemoryPlan(auto) = %q, %v", vars, err)
	}
}

func TestMissingUUID(t *testing.T) {
	inv := inspect(t, open(t, dgxa100.New()))
	const missing = "GPU-deadbeef-0000-4000-8000-000000000000"
	_, err := Plan(mustParse(t, "0,"+missing), inv)
	if !errors.Is(err, ErrDeviceNotFound) || !strings.Contains(err.Error(), missing) {
		t.Fatalf("err = %v, want ErrDeviceNotFound naming %s", err, missing)
	}
	if !strings.Contains(err.Error(), inv.Devices[0].UUID) {
		t.Errorf("the error does not list what NVML sees: %v", err)
	}
}

func TestHopperMachines(t *testing.T) {
	for _, tt := range []struct {
		name string
		srv  *server.Server
		want string
		mib  uint64
	}{
		{"dgxh100", dgxh100.New(), "H100", 81920},
		{"dgxh200", dgxh200.New(), "H200", 144384},
	} {
		t.Run(tt.name, func(t *testing.T) {
			inv := inspect(t, open(t, tt.srv))
			if len(inv.Devices) != 8 || !strings.Contains(inv.Devices[7].Name, tt.want) || inv.Devices[7].MemoryTotal != tt.mib<<20 {
				t.Fatalf("devices: %+v", inv.Devices)
			}
			v, err := Plan(mustParse(t, "count=4"), inv)
			if err != nil || len(v.Devices) != 4 || v.Devices[3].UUID != inv.Devices[3].UUID {
				t.Fatalf("count=4: %+v, %v", v, err)
			}
		})
	}
}

func TestMIG(t *testing.T) {
	srv := dgxa100.New()
	gpu0 := srv.Devices[0].(*server.Device)
	migs := enableMIG(t, gpu0, nvml.GPU_INSTANCE_PROFILE_1_SLICE, nvml.GPU_INSTANCE_PROFILE_2_SLICE, nvml.GPU_INSTANCE_PROFILE_3_SLICE)
	d := open(t, srv)
	inv := inspect(t, d)

	dev := inv.Devices[0]
	if !dev.MIGEnabled || len(dev.MIG) != 3 || inv.Devices[1].MIGEnabled {
		t.Fatalf("device 0 = %+v, device 1 MIG = %v", dev, inv.Devices[1].MIGEnabled)
	}
	uuid1, _ := migs[1].GetUUID()
	if m := dev.MIG[1]; m.Index != 1 || m.UUID != uuid1 || m.GPUInstance != 1 || m.MemoryTotal != 9856<<20 {
		t.Fatalf("MIG device 1 = %+v", m)
	}

	t.Run("one instance", func(t *testing.T) {
		v, err := Plan(mustParse(t, uuid1), inv)
		if err != nil {
			t.Fatal(err)
		}
		want := []string{"CUDA_VISIBLE_DEVICES=" + uuid1, "FLAGS_selected_gpus=0"}
		if !v.Checked || !reflect.DeepEqual(v.Env, want) || !v.Devices[0].MIG {
			t.Fatalf("Plan = %+v, want Env %q", v, want)
		}
		// auto: the instance's memory, not the card's.
		vars, _, err := MemoryPlan("auto", v.MemoryTotal(), nil)
		if err != nil || vars[1] != "FLAGS_gpu_memory_limit_mb=9344" {
			t.Fatalf("MemoryPlan(auto) on a 2g.10gb instance = %q, %v", vars, err)
		}
	})
	t.Run("by indices and in the legacy form", func(t *testing.T) {
		for _, s := range []string{"0:1", fmt.Sprintf("MIG-%s/%d/%d", dev.UUID, dev.MIG[1].GPUInstance, dev.MIG[1].ComputeInstance)} {
			v, err := Plan(mustParse(t, s), inv)
			if err != nil || v.Devices[0].UUID != uuid1 {
				t.Fatalf("Plan(%s) = %+v, %v; want %s", s, v, err, uuid1)
			}
		}
	})
	t.Run("two instances", func(t *testing.T) {
		uuid2, _ := migs[2].GetUUID()
		_, err := Plan(mustParse(t, uuid1+","+uuid2), inv)
		if !errors.Is(err, ErrMultipleMIG) || !strings.Contains(err.Error(), "one trainer per MIG device") {
			t.Fatalf("err = %v, want ErrMultipleMIG with advice", err)
		}
	})
	t.Run("the whole MIG GPU", func(t *testing.T) {
		_, err := Plan(mustParse(t, dev.UUID), inv)
		if !errors.Is(err, ErrMultipleMIG) || !strings.Contains(err.Error(), uuid1) {
			t.Fatalf("err = %v, want ErrMultipleMIG listing the MIG devices", err)
		}
	})
	t.Run("missing instance", func(t *testing.T) {
		const missing = "MIG-00000000-0000-4000-8000-000000000000"
		_, err := Plan(mustParse(t, missing), inv)
		if !errors.Is(err, ErrDeviceNotFound) || !strings.Contains(err.Error(), missing) {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("usage on the instance", func(t *testing.T) {
		migs[1].GetMemoryInfoFunc = func() (nvml.Memory, nvml.Return) {
			return nvml.Memory{Total: 9856 << 20, Used: 8400 * mb, Free: 1456 * mb}, nvml.SUCCESS
		}
		tree := []int{4242, 4243, 4244}
		// Host pids, as NVML reports them to a container: the instance's
		// memory is the measure and the whole tree is named.
		migs[1].GetComputeRunningProcessesFunc = processes(
			Process{PID: 918273, UsedMemory: 6000 * mb},
			Process{PID: 918280, UsedMemory: 2000 * mb},
		)
		s, err := Measure(d, uuid1, tree)
		if err != nil {
			t.Fatal(err)
		}
		if s.PerProcess || s.Used != 8400*mb || s.Total != 9856<<20 {
			t.Fatalf("Measure with host pids = %+v, want the instance's 8400 MiB", s)
		}
		verdict := Decide(PolicyTerm, s, tree, 7000*mb, 512*mb)
		if verdict.Action != ActionTerm || !reflect.DeepEqual(verdict.PIDs, tree) {
			t.Fatalf("Decide = %+v", verdict)
		}
		// The container's own pids: per process, a foreign one spoils it.
		migs[1].GetComputeRunningProcessesFunc = processes(
			Process{PID: 4242, UsedMemory: 6000 * mb},     // the trainer
			Process{PID: 4243, UsedMemory: 2000 * mb},     // its worker
			Process{PID: 4244, UsedMemory: MemoryUnknown}, // not readable
		)
		if s, err = Measure(d, uuid1, tree); err != nil || !s.PerProcess || !reflect.DeepEqual(s.ByPID, map[int]uint64{4242: 6000 * mb, 4243: 2000 * mb}) {
			t.Fatalf("Measure with the container's pids = %+v, %v", s, err)
		}
		if verdict = Decide(PolicyKill, s, tree, 7000*mb, 512*mb); verdict.Action != ActionKill || !reflect.DeepEqual(verdict.PIDs, []int{4242, 4243}) {
			t.Fatalf("Decide = %+v", verdict)
		}
	})
}

func TestUsageOnAGPU(t *testing.T) {
	srv := dgxh200.New()
	gpu2 := srv.Devices[2].(*server.Device)
	gpu2.MemoryInfo.Used = 130 * 1024 * mb
	d := open(t, srv)
	for _, tc := range []struct {
		name  string
		procs []Process
		per   bool
		total uint64
	}{
		{"the container's pids", []Process{{PID: 11, UsedMemory: 30 * 1024 * mb}}, true, 30 * 1024 * mb},
		{"host pids", []Process{{PID: 2000011, UsedMemory: 30 * 1024 * mb}, {PID: 2000012, UsedMemory: 100 * 1024 * mb}}, false, 130 * 1024 * mb},
		{"a pid outside the tree", []Process{{PID: 10, UsedMemory: 100 * 1024 * mb}, {PID: 11, UsedMemory: 30 * 1024 * mb}}, false, 130 * 1024 * mb},
	} {
		t.Run(tc.name, func(t *testing.T) {
			gpu2.GetComputeRunningProcessesFunc = processes(tc.procs...)
			s, err := Measure(d, gpu2.UUID, []int{11})
			if err != nil || s.PerProcess != tc.per || s.Total != 144384<<20 {
				t.Fatalf("Measure = %+v, %v", s, err)
			}
			v := Decide(PolicyKill, s, []int{11}, 120*1024*mb, 0)
			if v.Total != tc.total {
				t.Fatalf("Total = %d MiB, want %d", v.Total/mb, tc.total/mb)
			}
			if want := v.Total > 120*1024*mb; (v.Action == ActionKill) != want || (want && !reflect.DeepEqual(v.PIDs, []int{11})) {
				t.Fatalf("Decide = %+v", v)
			}
		})
	}
	if _, err := Measure(d, "GPU-00000000", []int{11}); !errors.Is(err, ErrDeviceNotFound) {
		t.Fatalf("unknown device: err = %v", err)
	}
}

func TestCloseIdempotent(t *testing.T) {
	calls := 0
	srv := dgxa100.New()
	srv.ShutdownFunc = func() nvml.Return { calls++; return nvml.SUCCESS }
	d, err := OpenLibrary(srv)
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if err := d.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if calls != 1 {
		t.Fatalf("Shutdown called %d times, want 1", calls)
	}
}
