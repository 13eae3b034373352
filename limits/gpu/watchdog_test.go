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
func (f *fakeDriver) Close() error { return nil }

const mb = 1 << 20

func TestUsageOnlyTree(t *testing.T) {
	d := &fakeDriver{procs: map[string][]Process{
		"GPU-0000": {
			{PID: 100, UsedMemory: 3000 * mb}, // trainer
			{PID: 101, UsedMemory: 1000 * mb}, // dataloader worker
			{PID: 555, UsedMemory: 9000 * mb}, // another container's process
			{PID: 102, UsedMemory: MemoryUnknown},
			{PID: 1, UsedMemory: 10 * mb}, // lifeboat itself is not in the tree
		},
	}}
	got, err := Usage(d, "GPU-0000", []int{100, 101, 102, 103})
	if err != nil {
		t.Fatal(err)
	}
	want := map[int]uint64{100: 3000 * mb, 101: 1000 * mb}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Usage = %v, want %v", got, want)
	}
	if _, err := Usage(d, "GPU-9999", []int{100}); !errors.Is(err, ErrDeviceNotFound) {
		t.Fatalf("Usage of an unknown device: err = %v, want ErrDeviceNotFound", err)
	}
}

func TestDecide(t *testing.T) {
	tree := []int{100, 101, 102}
	tests := []struct {
		name   string
		policy Policy
		usage  map[int]uint64
		limit  uint64
		margin uint64
		action Action
		pids   []int
	}{
		{name: "no limit", policy: PolicyKill, usage: map[int]uint64{100: 9000 * mb}, action: ActionNone},
		{name: "under", policy: PolicyKill, usage: map[int]uint64{100: 1000 * mb}, limit: 8000 * mb, margin: 500 * mb, action: ActionNone},
		{name: "near: warn whatever the policy", policy: PolicyKill, usage: map[int]uint64{100: 7000 * mb, 101: 600 * mb}, limit: 8000 * mb, margin: 500 * mb, action: ActionWarn, pids: []int{100, 101}},
		{name: "at the limit is not over", policy: PolicyKill, usage: map[int]uint64{100: 8000 * mb}, limit: 8000 * mb, action: ActionNone},
		{name: "over, warn", policy: PolicyWarn, usage: map[int]uint64{100: 9000 * mb}, limit: 8000 * mb, action: ActionWarn, pids: []int{100}},
		{name: "over, term", policy: PolicyTerm, usage: map[int]uint64{100: 5000 * mb, 101: 4000 * mb}, limit: 8000 * mb, action: ActionTerm, pids: []int{100, 101}},
		{name: "over, kill, biggest first", policy: PolicyKill, usage: map[int]uint64{101: 5000 * mb, 100: 4000 * mb, 102: 4000 * mb}, limit: 8000 * mb, action: ActionKill, pids: []int{101, 100, 102}},
		{name: "foreign pids never count", policy: PolicyKill, usage: map[int]uint64{100: 1000 * mb, 555: 60000 * mb, 1: 100 * mb}, limit: 8000 * mb, margin: 500 * mb, action: ActionNone},
		{name: "foreign pids never signalled", policy: PolicyKill, usage: map[int]uint64{100: 9000 * mb, 555: 60000 * mb}, limit: 8000 * mb, action: ActionKill, pids: []int{100}},
		{name: "unknown usage ignored", policy: PolicyKill, usage: map[int]uint64{100: MemoryUnknown}, limit: 8000 * mb, action: ActionNone},
		{name: "huge margin does not overflow", policy: PolicyKill, usage: map[int]uint64{100: 1 * mb}, limit: 8000 * mb, margin: ^uint64(0), action: ActionWarn, pids: []int{100}},
		{name: "invalid policy only warns", policy: Policy(42), usage: map[int]uint64{100: 9000 * mb}, limit: 8000 * mb, action: ActionWarn, pids: []int{100}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := Decide(tt.policy, tt.usage, tree, tt.limit, tt.margin)
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
