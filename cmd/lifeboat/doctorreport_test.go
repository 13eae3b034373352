package main

import (
	"encoding/json"
	"regexp"
	"testing"

	"github.com/lifeboat-project/lifeboat/limits/gpu"
	"github.com/lifeboat-project/lifeboat/limits/memory"
)

var snakeKey = regexp.MustCompile(`^[a-z][a-z0-9_]*$`)

// jsonKeys returns every object key in v, at any depth, with its path.
func jsonKeys(v any, path string, out map[string]string) {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			out[path+"."+k] = k
			jsonKeys(e, path+"."+k, out)
		}
	case []any:
		for _, e := range x {
			jsonKeys(e, path+"[]", out)
		}
	}
}

func assertSnakeCase(t *testing.T, data []byte) {
	t.Helper()
	var v any
	if err := json.Unmarshal(data, &v); err != nil {
		t.Fatalf("%v\n%s", err, data)
	}
	keys := map[string]string{}
	jsonKeys(v, "", keys)
	for path, k := range keys {
		if !snakeKey.MatchString(k) {
			t.Errorf("JSON key %s is not snake_case", path)
		}
	}
}

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
	assertSnakeCase(t, data)
}
