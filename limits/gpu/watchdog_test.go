package gpu

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
)

// fakeDriver is an in-memory Driver for logic tests; nvml_test.go drives the
// real implementation with go-nvml's mocks.
type fakeDriver struct {
	inv   Inventory
	procs map[string][]Process
	mem   map[string]MemoryInfo
}

var _ Driver = (*fakeDriver)(nil)

func (f *fakeDriver) DeviceCount() (int, error) { return len(f.inv.Devices), nil }
func (f *fakeDriver) Device(i int) (Device, error) {
	if i < 0 || i >= len(f.inv.Devices) {
		return Device{}, fmt.Errorf("device %d: %w", i, ErrDeviceNotFound)
	}
	return f.inv.Devices[i], nil
}
func (f *fakeDriver) ComputeProcesses(uuid string) ([]Process, error) {
	p, ok := f.procs[uuid]
	if !ok {
		return nil, fmt.Errorf("device %s: %w", uuid, ErrDeviceNotFound)
	}
	return p, nil
}
func (f *fakeDriver) DeviceMemory(uuid string) (MemoryInfo, error) {
	m, ok := f.mem[uuid]
	if !ok {
		return MemoryInfo{}, fmt.Errorf("device %s: %w", uuid, ErrDeviceNotFound)
	}
	return m, nil
}
func (f *fakeDriver) Close() error { return nil }

const mb = 1 << 20

// TestMeasure: NVML's per-process figures count only when every pid it
// lists is a process of the trainer's tree; otherwise (host pids inside a
// container) the device's memory is the measure.
func TestMeasure(t *testing.T) {
	tree := []int{100, 101, 102, 103}
	for _, tc := range []struct {
		name  string
		procs []Process
		want  Sample
	}{
		{name: "pids are the container's own", procs: []Process{
			{PID: 100, UsedMemory: 3000 * mb}, // trainer
			{PID: 101, UsedMemory: 1000 * mb}, // dataloader worker
			{PID: 102, UsedMemory: MemoryUnknown},
		}, want: Sample{Device: "GPU-0000", Used: 4500 * mb, Total: 80 * gib, PerProcess: true, ByPID: map[int]uint64{100: 3000 * mb, 101: 1000 * mb}}},
		{name: "host pids (a pod)", procs: []Process{
			{PID: 183342, UsedMemory: 3000 * mb},
			{PID: 183350, UsedMemory: 1000 * mb},
		}, want: Sample{Device: "GPU-0000", Used: 4500 * mb, Total: 80 * gib}},
		{name: "one host pid equal to a tree pid by chance", procs: []Process{
			{PID: 101, UsedMemory: 10 * mb},
			{PID: 183350, UsedMemory: 4000 * mb},
		}, want: Sample{Device: "GPU-0000", Used: 4500 * mb, Total: 80 * gib}},
		{name: "no process listed", want: Sample{Device: "GPU-0000", Used: 4500 * mb, Total: 80 * gib}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := &fakeDriver{procs: map[string][]Process{"GPU-0000": tc.procs}, mem: map[string]MemoryInfo{"GPU-0000": {Total: 80 * gib, Used: 4500 * mb}}}
			got, err := Measure(d, "GPU-0000", tree)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("Measure = %+v, want %+v", got, tc.want)
			}
		})
	}
	d := &fakeDriver{mem: map[string]MemoryInfo{}}
	if _, err := Measure(d, "GPU-9999", tree); !errors.Is(err, ErrDeviceNotFound) {
		t.Fatalf("Measure of an unknown device: err = %v, want ErrDeviceNotFound", err)
	}
}

func TestDecide(t *testing.T) {
	tree := []int{100, 101, 102}
	per := func(u map[int]uint64) Sample { return Sample{PerProcess: true, ByPID: u} }
	dev := func(used uint64) Sample { return Sample{Used: used} }
	tests := []struct {
		name   string
		policy Policy
		sample Sample
		limit  uint64
		margin uint64
		action Action
		pids   []int
	}{
		{name: "no limit", policy: PolicyKill, sample: per(map[int]uint64{100: 9000 * mb}), action: ActionNone},
		{name: "under", policy: PolicyKill, sample: per(map[int]uint64{100: 1000 * mb}), limit: 8000 * mb, margin: 500 * mb, action: ActionNone},
		{name: "near: warn whatever the policy", policy: PolicyKill, sample: per(map[int]uint64{100: 7000 * mb, 101: 600 * mb}), limit: 8000 * mb, margin: 500 * mb, action: ActionWarn, pids: []int{100, 101}},
		{name: "at the limit is not over", policy: PolicyKill, sample: per(map[int]uint64{100: 8000 * mb}), limit: 8000 * mb, action: ActionNone},
		{name: "over, warn", policy: PolicyWarn, sample: per(map[int]uint64{100: 9000 * mb}), limit: 8000 * mb, action: ActionWarn, pids: []int{100}},
		{name: "over, term", policy: PolicyTerm, sample: per(map[int]uint64{100: 5000 * mb, 101: 4000 * mb}), limit: 8000 * mb, action: ActionTerm, pids: []int{100, 101}},
		{name: "over, kill, biggest first", policy: PolicyKill, sample: per(map[int]uint64{101: 5000 * mb, 100: 4000 * mb, 102: 4000 * mb}), limit: 8000 * mb, action: ActionKill, pids: []int{101, 100, 102}},
		{name: "foreign pids never count", policy: PolicyKill, sample: per(map[int]uint64{100: 1000 * mb, 555: 60000 * mb, 1: 100 * mb}), limit: 8000 * mb, margin: 500 * mb, action: ActionNone},
		{name: "foreign pids never signalled", policy: PolicyKill, sample: per(map[int]uint64{100: 9000 * mb, 555: 60000 * mb}), limit: 8000 * mb, action: ActionKill, pids: []int{100}},
		{name: "unknown usage ignored", policy: PolicyKill, sample: per(map[int]uint64{100: MemoryUnknown}), limit: 8000 * mb, action: ActionNone},
		{name: "huge margin does not overflow", policy: PolicyKill, sample: per(map[int]uint64{100: 1 * mb}), limit: 8000 * mb, margin: ^uint64(0), action: ActionWarn, pids: []int{100}},
		{name: "invalid policy only warns", policy: Policy(42), sample: per(map[int]uint64{100: 9000 * mb}), limit: 8000 * mb, action: ActionWarn, pids: []int{100}},
		{name: "device: under", policy: PolicyKill, sample: dev(7000 * mb), limit: 8000 * mb, action: ActionNone},
		{name: "device: over, the whole tree", policy: PolicyTerm, sample: dev(9000 * mb), limit: 8000 * mb, action: ActionTerm, pids: []int{100, 101, 102}},
		{name: "device: near", policy: PolicyKill, sample: dev(7800 * mb), limit: 8000 * mb, margin: 500 * mb, action: ActionWarn, pids: []int{100, 101, 102}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := Decide(tt.policy, tt.sample, tree, tt.limit, tt.margin)
			if v.Action != tt.action {
				t.Fatalf("Action = %v, want %v (%+v)", v.Action, tt.action, v)
			}
			if !reflect.DeepEqual(v.PIDs, tt.pids) {
				t.Fatalf("PIDs = %v, want %v", v.PIDs, tt.pids)
			}
			for _, pid := range v.PIDs {
				if pid != 100 && pid != 101 && pid != 102 {
					t.Fatalf("verdict names pid %d outside the tree", pid)
				}
			}
			if (v.Action == ActionNone) != (v.Reason == "") {
				t.Fatalf("Reason = %q with action %v", v.Reason, v.Action)
			}
		})
	}
}

func TestParsePolicy(t *testing.T) {
	for s, want := range map[string]Policy{"warn": PolicyWarn, "TERM": PolicyTerm, " kill ": PolicyKill} {
		got, err := ParsePolicy(s)
		if err != nil || got != want {
			t.Errorf("ParsePolicy(%q) = %v, %v; want %v", s, got, err, want)
		}
		if strings.TrimSpace(strings.ToLower(s)) != got.String() {
			t.Errorf("%v.String() = %q", got, got.String())
		}
	}
	if _, err := ParsePolicy("stop"); err == nil || !strings.Contains(err.Error(), "warn, term or kill") {
		t.Errorf("ParsePolicy(stop): err = %v", err)
	}
}

func TestInspect(t *testing.T) {
	d := &fakeDriver{inv: *inventory(2, 2)}
	inv, err := Inspect(d)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(inv, &d.inv) {
		t.Fatalf("Inspect = %+v, want %+v", inv, d.inv)
	}
}
