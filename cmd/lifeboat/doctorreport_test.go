package main

import (
	"encoding/json"
	"testing"

	"github.com/lifeboat-project/lifeboat/internal/testenv"
	"github.com/lifeboat-project/lifeboat/limits/gpu"
	"github.com/lifeboat-project/lifeboat/limits/memory"
)

// TestDoctorReportJSONKeys: every key of doctor --json is snake_case in a
// report with every part filled in (GPUs with MIG devices, the memory plan,
// the store), which no machine of the tests gives the real binary (e2e's
// TestDoctorJSONKeys).
func TestDoctorReportJSONKeys(t *testing.T) {
	rep := doctorReport{
		GPU: &gpu.Setup{Inventory: []gpu.Device{{UUID: "GPU-1", MIGEnabled: true, MIG: []gpu.MIGDevice{{UUID: "MIG-1"}}}}},
		Memory: memory.Plan{Mode: memory.ModeV2, Reason: "x", Cgroup: "/c", LifeboatCgroup: "/c/l", TrainerCgroup: "/c/t",
			OOMCounter: "/c/memory.events"},
		Protections: []protection{{Name: "n", State: stateEnforced, Detail: "d", Failed: true}},
		Store:       &storeReport{Error: "e"},
		GPUError:    "e",
	}
	data, err := json.Marshal(rep)
	if err != nil {
		t.Fatal(err)
	}
	testenv.AssertSnakeCase(t, data)
}
