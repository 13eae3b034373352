package deploy

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lifeboat-project/lifeboat/internal/testenv"
	"sigs.k8s.io/yaml"
)

// kueueVersion is the Kueue release whose CRDs deploy/kueue is written for.
const kueueVersion = "v0.17.0"

// kueueKinds maps the kinds deploy/kueue may hold to their CRD file and
// resource (plural) name; namespaced says where they live.
var kueueKinds = map[string]struct {
	resource   string
	namespaced bool
}{
	"ResourceFlavor":        {"resourceflavors", false},
	"ClusterQueue":          {"clusterqueues", false},
	"LocalQueue":            {"localqueues", true},
	"WorkloadPriorityClass": {"workloadpriorityclasses", false},
}

// kueueManifests applies deploy/kueue to api after installing Kueue's own
// CRDs (from the sigs.k8s.io/kueue module at kueueVersion),
// with strict field validation: an unknown or misspelt field, a wrong type
// or a value the CRD's schema refuses fails the test. It also checks that
// the WorkloadPriorityClasses are the PriorityClass tiers of deploy/k8s.
func kueueManifests(t *testing.T, api *testenv.KubeAPI) {
	crds := kueueCRDs(t)
	for kind, k := range kueueKinds {
		installCRD(t, api, filepath.Join(crds, "kueue.x-k8s.io_"+k.resource+".yaml"), kind)
	}

	b, err := os.ReadFile(filepath.Join("kueue", "kueue.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	wpc := map[string]int64{}
	for i, doc := range docSeparator.Split(string(b), -1) {
		if strings.TrimSpace(stripComments(doc)) == "" {
			continue
		}
		var obj map[string]any
		if err := yaml.UnmarshalStrict([]byte(doc), &obj); err != nil {
			t.Fatalf("kueue.yaml#%d: %v", i+1, err)
		}
		kind, _ := obj["kind"].(string)
		k, ok := kueueKinds[kind]
		if !ok {
			t.Fatalf("kueue.yaml#%d: kind %q is not one this test knows; add it to kueueKinds", i+1, kind)
		}
		if obj["apiVersion"] != "kueue.x-k8s.io/v1beta2" {
			t.Errorf("kueue.yaml#%d: apiVersion %v, want kueue.x-k8s.io/v1beta2", i+1, obj["apiVersion"])
		}
		path := kueuePath(api, k.resource, k.namespaced)
		// Do fails the test with the API server's answer on a refusal.
		if code := api.Do(t, http.MethodPost, path+"?fieldValidation=Strict", obj, nil); code != http.StatusCreated {
			t.Errorf("kueue.yaml#%d (%s): status %d, want 201", i+1, kind, code)
		}
		if kind == "WorkloadPriorityClass" {
			meta, _ := obj["metadata"].(map[string]any)
			v, _ := obj["value"].(float64)
			wpc[fmt.Sprint(meta["name"])] = int64(v)
		}
	}

	// Strictness is real: one unknown field is refused.
	bad := map[string]any{
		"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
		"metadata": map[string]any{"name": "typo", "namespace": api.Namespace},
		"spec":     map[string]any{"clusterQueue": "gpu-training", "clusterQeue": "x"},
	}
	var reply map[string]any
	if code := api.Do(t, http.MethodPost, kueuePath(api, "localqueues", true)+"?fieldValidation=Strict", bad, &reply); code/100 == 2 {
		t.Errorf("a LocalQueue with an unknown field was accepted (status %d): the validation is not strict", code)
	}

	// The tiers are deploy/k8s's PriorityClasses, except the non-preempting
	// twin of long-training, which Kueue expresses per ClusterQueue.
	for _, pc := range loadManifests(t).priorities {
		if pc.PreemptionPolicy != nil && *pc.PreemptionPolicy == "Never" {
			continue
		}
		if v, ok := wpc[pc.Name]; !ok || v != int64(pc.Value) {
			t.Errorf("WorkloadPriorityClass %s = %d (present: %v), want the PriorityClass's value %d", pc.Name, v, ok, pc.Value)
		}
		delete(wpc, pc.Name)
	}
	for name := range wpc {
		t.Errorf("WorkloadPriorityClass %s has no PriorityClass in deploy/k8s", name)
	}
}

func kueuePath(api *testenv.KubeAPI, resource string, namespaced bool) string {
	if namespaced {
		return "/apis/kueue.x-k8s.io/v1beta2/namespaces/" + api.Namespace + "/" + resource
	}
	return "/apis/kueue.x-k8s.io/v1beta2/" + resource
}

// kueueCRDs returns the directory of Kueue's CRDs in the module cache.
func kueueCRDs(t *testing.T) string {
	t.Helper()
	return filepath.Join(moduleDir(t, "sigs.k8s.io/kueue", kueueVersion), "config", "components", "crd", "bases")
}

// moduleDir returns the directory of module at version in the module
// cache, downloading it from the Go module proxy when it is not there.
func moduleDir(t *testing.T, module, version string) string {
	t.Helper()
	cmd := exec.Command("go", "mod", "download", "-json", module+"@"+version)
	cmd.Dir = t.TempDir() // outside this module: nothing is added to go.mod
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go mod download %s@%s: %v\n%s", module, version, err, out)
	}
	var mod struct{ Dir string }
	if err := json.Unmarshal(out, &mod); err != nil || mod.Dir == "" {
		t.Fatalf("go mod download %s@%s: no module directory in %s (%v)", module, version, out, err)
	}
	return mod.Dir
}

// installCRD creates the CRD in file and waits until it is established.
func installCRD(t *testing.T, api *testenv.KubeAPI, file, kind string) {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatalf("the CRD for %s: %v", kind, err)
	}
	var crd map[string]any
	if err := yaml.Unmarshal(b, &crd); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	if code := api.Do(t, http.MethodPost, "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", crd, nil); code != http.StatusCreated {
		t.Fatalf("create the CRD of %s: status %d", kind, code)
	}
	name := crd["metadata"].(map[string]any)["name"].(string)
	deadline := time.Now().Add(time.Minute)
	for {
		var got struct {
			Status struct {
				Conditions []struct{ Type, Status string }
			}
		}
		api.Do(t, http.MethodGet, "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/"+name, nil, &got)
		for _, c := range got.Status.Conditions {
			if c.Type == "Established" && c.Status == "True" {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the CRD %s was not established within a minute", name)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
