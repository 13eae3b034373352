package gpu

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

const gib = 1 << 30

// inventory builds what NVML would report: n A100s, the first with MIG
// devices when mig > 0.
func inventory(n, mig int) *Inventory {
	inv := &Inventory{}
	for i := range n {
		d := Device{Index: i, UUID: "GPU-000" + string(rune('0'+i)), Name: "NVIDIA A100-SXM4-40GB", MemoryTotal: 40 * gib}
		if i == 0 && mig > 0 {
			d.MIGEnabled = true
			for j := range mig {
				d.MIG = append(d.MIG, MIGDevice{Index: j, UUID: "MIG-aaa" + string(rune('0'+j)), GPUInstance: j + 1, ComputeInstance: 0, MemoryTotal: 4864 << 20})
			}
		}
		inv.Devices = append(inv.Devices, d)
	}
	return inv
}

func mustParse(t *testing.T, s string) Request {
	t.Helper()
	r, err := ParseDevices(s)
	if err != nil {
		t.Fatalf("ParseDevices(%q): %v", s, err)
	}
	return r
}

func TestPlan(t *testing.T) {
	tests := []struct {
		name    string
		req     string
		applied bool
		seen    *Inventory
		env     []string
		checked bool
		wantErr error
		errText string
	}{
		// Nothing to do.
		{name: "unset", req: "", seen: inventory(2, 0), checked: true},
		{name: "none", req: "none", seen: nil},
		{name: "void", req: "void", seen: inventory(2, 0), checked: true},

		// Unchecked: no NVML, planned from the request as given.
		{name: "unchecked all", req: "all"},
		{name: "unchecked indices", req: "0,1",
			env: []string{"CUDA_VISIBLE_DEVICES=0,1", "CUDA_DEVICE_ORDER=PCI_BUS_ID", "FLAGS_selected_gpus=0,1"}},
		{name: "unchecked indices for lifeboat's --gpus", req: "2,3",
			env: []string{"CUDA_VISIBLE_DEVICES=2,3", "CUDA_DEVICE_ORDER=PCI_BUS_ID", "FLAGS_selected_gpus=0,1"}},
		{name: "unchecked indices applied by the runtime are renumbered", req: "3,2", applied: true,
			env: []string{"CUDA_VISIBLE_DEVICES=1,0", "CUDA_DEVICE_ORDER=PCI_BUS_ID", "FLAGS_selected_gpus=0,1"}},
		{name: "unchecked uuids", req: "GPU-0001,GPU-0000",
			env: []string{"CUDA_VISIBLE_DEVICES=GPU-0001,GPU-0000", "FLAGS_selected_gpus=0,1"}},
		{name: "unchecked MIG uuid", req: "MIG-aaa1",
			env: []string{"CUDA_VISIBLE_DEVICES=MIG-aaa1", "FLAGS_selected_gpus=0"}},
		{name: "unchecked legacy MIG", req: "MIG-GPU-0000/1/0",
			env: []string{"CUDA_VISIBLE_DEVICES=MIG-GPU-0000/1/0", "FLAGS_selected_gpus=0"}},
		{name: "unchecked two MIG", req: "MIG-aaa1,MIG-aaa2", wantErr: ErrMultipleMIG},
		{name: "unchecked MIG and GPU", req: "MIG-aaa1,GPU-0001", wantErr: ErrMultipleMIG},
		{name: "unchecked MIG by index applied", req: "0:1", applied: true,
			env: []string{"CUDA_VISIBLE_DEVICES=0", "CUDA_DEVICE_ORDER=PCI_BUS_ID", "FLAGS_selected_gpus=0"}},
		{name: "unchecked MIG by index", req: "0:1", errText: "only by its MIG UUID"},
		{name: "unchecked applied mixed", req: "0,GPU-0001", applied: true, errText: "mixes indices with UUIDs"},
		{name: "unchecked count", req: "count=2",
			env: []string{"CUDA_VISIBLE_DEVICES=0,1", "CUDA_DEVICE_ORDER=PCI_BUS_ID", "FLAGS_selected_gpus=0,1"}},

		// Checked against NVML: devices named by UUID.
		{name: "all", req: "all", seen: inventory(3, 0), checked: true,
			env: []string{"CUDA_VISIBLE_DEVICES=GPU-0000,GPU-0001,GPU-0002", "FLAGS_selected_gpus=0,1,2"}},
		{name: "all, no GPU seen", req: "all", seen: &Inventory{}, checked: true},
		{name: "indices keep the request's order", req: "2,0", seen: inventory(3, 0), checked: true,
			env: []string{"CUDA_VISIBLE_DEVICES=GPU-0002,GPU-0000", "FLAGS_selected_gpus=0,1"}},
		{name: "uuid", req: "GPU-0001", seen: inventory(3, 0), checked: true,
			env: []string{"CUDA_VISIBLE_DEVICES=GPU-0001", "FLAGS_selected_gpus=0"}},
		{name: "count", req: "count=2", seen: inventory(3, 0), checked: true,
			env: []string{"CUDA_VISIBLE_DEVICES=GPU-0000,GPU-0001", "FLAGS_selected_gpus=0,1"}},
		{name: "count too big", req: "count=4", seen: inventory(3, 0), wantErr: ErrDeviceNotFound},
		{name: "missing index", req: "0,5", seen: inventory(3, 0), wantErr: ErrDeviceNotFound, errText: "requested device 5 is not visible"},
		{name: "missing uuid", req: "GPU-0009", seen: inventory(3, 0), wantErr: ErrDeviceNotFound, errText: "GPU-0009"},
		{name: "same GPU twice", req: "0,GPU-0000", seen: inventory(3, 0), errText: "twice"},
		{name: "applied and renumbered", req: "6,7", applied: true, seen: inventory(2, 0), checked: true,
			env: []string{"CUDA_VISIBLE_DEVICES=GPU-0000,GPU-0001", "FLAGS_selected_gpus=0,1"}},
		{name: "applied but not isolated", req: "1", applied: true, seen: inventory(3, 0), checked: true,
			env: []string{"CUDA_VISIBLE_DEVICES=GPU-0001", "FLAGS_selected_gpus=0"}},

		// MIG.
		{name: "one MIG device", req: "MIG-aaa2", seen: inventory(2, 3), checked: true,
			env: []string{"CUDA_VISIBLE_DEVICES=MIG-aaa2", "FLAGS_selected_gpus=0"}},
		{name: "MIG by indices", req: "0:1", seen: inventory(2, 3), checked: true,
			env: []string{"CUDA_VISIBLE_DEVICES=MIG-aaa1", "FLAGS_selected_gpus=0"}},
		{name: "legacy MIG form resolved", req: "MIG-GPU-0000/3/0", seen: inventory(2, 3), checked: true,
			env: []string{"CUDA_VISIBLE_DEVICES=MIG-aaa2", "FLAGS_selected_gpus=0"}},
		{name: "two MIG devices", req: "MIG-aaa0,MIG-aaa1", seen: inventory(2, 3), wantErr: ErrMultipleMIG},
		{name: "MIG plus GPU", req: "MIG-aaa0,1", seen: inventory(2, 3), wantErr: ErrMultipleMIG},
		{name: "all on a MIG machine", req: "all", seen: inventory(1, 3), wantErr: ErrMultipleMIG},
		{name: "all, one MIG device", req: "all", seen: inventory(1, 1), checked: true,
			env: []string{"CUDA_VISIBLE_DEVICES=MIG-aaa0", "FLAGS_selected_gpus=0"}},
		{name: "MIG GPU as a whole", req: "0", seen: inventory(2, 3), wantErr: ErrMultipleMIG, errText: "request one of them"},
		{name: "MIG GPU with one MIG device", req: "GPU-0000", seen: inventory(2, 1), checked: true,
			env: []string{"CUDA_VISIBLE_DEVICES=MIG-aaa0", "FLAGS_selected_gpus=0"}},
		{name: "missing MIG uuid", req: "MIG-ffff", seen: inventory(2, 3), wantErr: ErrDeviceNotFound, errText: "MIG-ffff"},
		{name: "missing MIG index", req: "0:5", seen: inventory(2, 3), wantErr: ErrDeviceNotFound},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := mustParse(t, tt.req)
			req.Applied = tt.applied
			v, err := Plan(req, tt.seen)
			if tt.wantErr != nil || tt.errText != "" {
				if err == nil {
					t.Fatalf("Plan = %+v, want an error", v)
				}
				if tt.wantErr != nil && !errors.Is(err, tt.wantErr) {
					t.Fatalf("err = %v, want %v", err, tt.wantErr)
				}
				if !strings.Contains(err.Error(), tt.errText) {
					t.Fatalf("err = %v, want it to contain %q", err, tt.errText)
				}
				return
			}
			if err != nil {
				t.Fatalf("Plan: %v", err)
			}
			if v.Checked != tt.checked {
				t.Errorf("Checked = %v, want %v", v.Checked, tt.checked)
			}
			if !reflect.DeepEqual(v.Env, tt.env) {
				t.Errorf("Env = %q, want %q", v.Env, tt.env)
			}
			if len(v.Notes) == 0 && (!v.Checked || len(v.Env) == 0) {
				t.Errorf("no note explains an unchecked or empty plan: %+v", v)
			}
			assertAgree(t, v.Env)
		})
	}
}

// assertAgree checks that FLAGS_selected_gpus is 0..n-1 for the n devices
// of CUDA_VISIBLE_DEVICES.
func assertAgree(t *testing.T, env []string) {
	t.Helper()
	m := lookup(env, EnvCUDAVisibleDevices, EnvSelectedGPUs)
	cvd, ok1 := m[EnvCUDAVisibleDevices]
	sel, ok2 := m[EnvSelectedGPUs]
	if ok1 != ok2 {
		t.Fatalf("only one of CUDA_VISIBLE_DEVICES and FLAGS_selected_gpus is set: %q", env)
	}
	if !ok1 {
		return
	}
	n := len(strings.Split(cvd, ","))
	want := make([]string, n)
	for i := range want {
		want[i] = string(rune('0' + i))
	}
	if sel != strings.Join(want, ",") {
		t.Fatalf("FLAGS_selected_gpus=%s does not number CUDA_VISIBLE_DEVICES=%s from 0", sel, cvd)
	}
}

func TestPlanMemoryTotal(t *testing.T) {
	v, err := Plan(mustParse(t, "MIG-aaa1"), inventory(2, 3))
	if err != nil {
		t.Fatal(err)
	}
	if got := v.MemoryTotal(); got != 4864<<20 {
		t.Errorf("MIG MemoryTotal = %d, want the instance's %d", got, 4864<<20)
	}
	inv := inventory(2, 0)
	inv.Devices[1].MemoryTotal = 24 * gib
	v, _ = Plan(mustParse(t, "all"), inv)
	if got := v.MemoryTotal(); got != 24*gib {
		t.Errorf("MemoryTotal = %d, want the smallest card's %d", got, 24*gib)
	}
	v, _ = Plan(mustParse(t, "0"), nil)
	if got := v.MemoryTotal(); got != 0 {
		t.Errorf("unchecked MemoryTotal = %d, want 0 (unknown)", got)
	}
}

func TestPlanMIGNoteSaysWhy(t *testing.T) {
	v, err := Plan(mustParse(t, "MIG-aaa1"), inventory(1, 3))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(strings.Join(v.Notes, " "), "FLAGS_selected_gpus=0") {
		t.Errorf("notes do not explain the MIG choice: %q", v.Notes)
	}
}
