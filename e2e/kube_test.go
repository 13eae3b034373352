package e2e

// Lifeboat against a real kube-apiserver (with etcd, RBAC and the Role of
// deploy/k8s/rbac.yaml): events on its pod after a commit, a preemption
// and a restore, freshness annotations set and updated, --grace auto, and
// a service account without rights that changes nothing for training.

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/lifeboat-project/lifeboat/internal/testenv"
	"github.com/lifeboat-project/lifeboat/kube"
)

// kubeEvent is what the test reads of an Event.
type kubeEvent struct {
	Reason             string `json:"reason"`
	Message            string `json:"message"`
	Type               string `json:"type"`
	ReportingComponent string `json:"reportingComponent"`
	InvolvedObject     struct {
		Kind, Name, Namespace, UID string
	} `json:"involvedObject"`
}

// applyRBAC creates deploy/k8s/rbac.yaml's objects in k's namespace, as
// `kubectl apply -n NAMESPACE -f rbac.yaml` would.
func applyRBAC(t *testing.T, k *testenv.KubeAPI) {
	t.Helper()
	b, err := os.ReadFile("../deploy/k8s/rbac.yaml")
	if err != nil {
		t.Fatal(err)
	}
	paths := map[string]string{
		"ServiceAccount": "/api/v1/namespaces/%s/serviceaccounts",
		"Role":           "/apis/rbac.authorization.k8s.io/v1/namespaces/%s/roles",
		"RoleBinding":    "/apis/rbac.authorization.k8s.io/v1/namespaces/%s/rolebindings",
	}
	n := 0
	for _, doc := range strings.Split(string(b), "\n---\n") {
		j, err := yaml.YAMLToJSON([]byte(doc))
		if err != nil {
			t.Fatal(err)
		}
		var obj map[string]any
		if err := json.Unmarshal(j, &obj); err != nil || obj == nil {
			continue
		}
		p, ok := paths[fmt.Sprint(obj["kind"])]
		if !ok {
			t.Fatalf("rbac.yaml has a %v, which this test does not know how to create", obj["kind"])
		}
		if code := k.Do(t, http.MethodPost, fmt.Sprintf(p, k.Namespace), obj, nil); code != http.StatusCreated {
			t.Fatalf("create %v: status %d", obj["kind"], code)
		}
		n++
	}
	if n != 3 {
		t.Fatalf("rbac.yaml has %d objects, want the ServiceAccount, Role and RoleBinding", n)
	}
}

// createPod creates a pod bound to a node that does not exist (no kubelet
// runs it) and returns its uid.
func createPod(t *testing.T, k *testenv.KubeAPI, name string, grace int) string {
	t.Helper()
	pod := map[string]any{
		"apiVersion": "v1", "kind": "Pod",
		"metadata": map[string]any{"name": name},
		"spec": map[string]any{
			"nodeName": "fake-node", "terminationGracePeriodSeconds": grace, "serviceAccountName": "lifeboat",
			"containers": []any{map[string]any{"name": "trainer", "image": "lifeboat:dev"}},
		},
	}
	var out struct {
		Metadata struct{ UID string } `json:"metadata"`
	}
	if code := k.Do(t, http.MethodPost, "/api/v1/namespaces/"+k.Namespace+"/pods", pod, &out); code != http.StatusCreated {
		t.Fatalf("create pod %s: status %d", name, code)
	}
	return out.Metadata.UID
}

func podEvents(t *testing.T, k *testenv.KubeAPI, pod string) []kubeEvent {
	t.Helper()
	var list struct{ Items []kubeEvent }
	q := url.Values{"fieldSelector": {"involvedObject.name=" + pod}}
	k.Do(t, http.MethodGet, "/api/v1/namespaces/"+k.Namespace+"/events?"+q.Encode(), nil, &list)
	return list.Items
}

func podAnnotations(t *testing.T, k *testenv.KubeAPI, pod string) map[string]string {
	t.Helper()
	var p struct {
		Metadata struct{ Annotations map[string]string } `json:"metadata"`
	}
	k.Do(t, http.MethodGet, "/api/v1/namespaces/"+k.Namespace+"/pods/"+pod, nil, &p)
	return p.Metadata.Annotations
}

// waitEvent waits until pod has an event of reason whose message holds
// msg, and returns it.
func waitEvent(t *testing.T, k *testenv.KubeAPI, p *lb, pod, reason, msg string) kubeEvent {
	t.Helper()
	var seen []kubeEvent
	for deadline := time.Now().Add(hangLimit); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		seen = podEvents(t, k, pod)
		for _, e := range seen {
			if e.Reason == reason && strings.Contains(e.Message, msg) {
				return e
			}
		}
	}
	t.Fatalf("no %s event with %q on pod %s; events %+v\nlifeboat stderr:\n%s", reason, msg, pod, seen, tail(p.stderr.String()))
	return kubeEvent{}
}

// kubeEnv is the environment of a lifeboat in pod, with sa's token.
func kubeEnv(t *testing.T, k *testenv.KubeAPI, sa, pod string) []string {
	return []string{
		"KUBERNETES_SERVICE_HOST=" + k.Host, "KUBERNETES_SERVICE_PORT=" + k.Port,
		"LIFEBOAT_KUBE_SERVICE_ACCOUNT_DIR=" + k.ServiceAccountDir(t, sa),
		"LIFEBOAT_POD_NAME=" + pod, "LIFEBOAT_POD_NAMESPACE=" + k.Namespace,
	}
}

// saverScript saves step-000001, then waits; on TERM it saves
// step-000002 and exits 0. It is one process: no child of it dies by the
// TERM right before the save (which would make the save look interrupted).
const saverScript = `
import os, signal, sys, time
d = os.environ["LIFEBOAT_DIR"]
def save(n):
    p = os.path.join(d, "step-%06d" % n)
    os.makedirs(p, exist_ok=True)
    with open(os.path.join(p, "model.bin"), "w") as f:
        f.write("weights %d" % n)
def term(*_):
    save(2)
    sys.exit(0)
signal.signal(signal.SIGTERM, term)
save(1)
open(os.environ["READY"], "w").close()
while True:
    time.sleep(0.05)
`

func TestKubeAPI(t *testing.T) {
	b := testenv.RequireKubeBinaries(t)
	k := testenv.StartKubeAPI(t, b)
	applyRBAC(t, k)
	store := "file://" + filepath.Join(t.TempDir(), "store")

	t.Run("commit, preemption and grace auto", func(t *testing.T) {
		uid := createPod(t, k, "trainer-a", 47)
		dir, ready := t.TempDir(), filepath.Join(t.TempDir(), "ready")
		env := append(kubeEnv(t, k, "lifeboat", "trainer-a"), "READY="+ready)
		p := startEnv(t, "plain", env, "run", "--store", store, "--dir", dir, "--settle", "100ms", "--scan-interval", "100ms",
			"--grace", "auto", "--kube-deletion-cost", "--", "python3", "-c", saverScript)
		waitFile(t, p, ready)
		e := waitEvent(t, k, p, "trainer-a", kube.ReasonCommitted, "committed step 1 (")
		if e.Type != "Normal" || e.ReportingComponent != "lifeboat" || e.InvolvedObject.Kind != "Pod" || e.InvolvedObject.UID != uid {
			t.Errorf("commit event %+v, want Normal, by lifeboat, on pod uid %s", e, uid)
		}
		var a map[string]string
		for deadline := time.Now().Add(hangLimit); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
			if a = podAnnotations(t, k, "trainer-a"); a[kube.AnnotationStep] == "1" {
				break
			}
		}
		if a[kube.AnnotationStep] != "1" || a[kube.AnnotationTime] == "" || a[kube.AnnotationAtRisk] == "" || a[kube.AnnotationDeletionCost] == "" {
			t.Fatalf("annotations after the commit of step 1: %v", a)
		}
		firstTime := a[kube.AnnotationTime]
		time.Sleep(1100 * time.Millisecond) // the next commit's RFC 3339 time differs
		p.signal(syscall.SIGTERM)
		if code := p.wait(); code != 143 {
			t.Fatalf("exit %d, want 143; stderr:\n%s", code, tail(p.stderr.String()))
		}
		e = waitEvent(t, k, p, "trainer-a", kube.ReasonPreemptedCommitted, "preempted: committed step 2 (")
		if e.InvolvedObject.UID != uid || !strings.Contains(e.Message, "s after the stop began") {
			t.Errorf("preemption event %+v", e)
		}
		a = podAnnotations(t, k, "trainer-a")
		if a[kube.AnnotationStep] != "2" || a[kube.AnnotationTime] == firstTime || a[kube.AnnotationTime] == "" {
			t.Errorf("annotations after the preemption's commit: %v, want step 2 and a new time (was %s)", a, firstTime)
		}
		stderr := p.stderr.String()
		if g := logLines(stderr, "kube.grace"); len(g) != 1 || g[0]["grace"] != "47s" {
			t.Errorf("kube.grace lines %v, want one with grace 47s", g)
		}
		if !strings.Contains(stderr, "grace 47s = trainer") {
			t.Errorf("the stop's budget is not the pod's 47s:\n%s", tail(stderr))
		}
		for _, w := range []string{"kube.feature_off", "kube.request_failed", "kube.grace_default"} {
			if l := logLines(stderr, w); len(l) > 0 {
				t.Errorf("%s with the deploy Role's rights: %v", w, l)
			}
		}
	})

	t.Run("restore", func(t *testing.T) {
		createPod(t, k, "trainer-b", 30)
		p := startEnv(t, "plain", kubeEnv(t, k, "lifeboat", "trainer-b"), "run", "--store", store, "--dir", t.TempDir(), "--", "true")
		if code := p.wait(); code != 0 {
			t.Fatalf("exit %d; stderr:\n%s", code, tail(p.stderr.String()))
		}
		waitEvent(t, k, p, "trainer-b", kube.ReasonRestored, "restored step 2 from the store in ")
		if a := podAnnotations(t, k, "trainer-b"); a[kube.AnnotationStep] != "2" {
			t.Errorf("annotations after the restore: %v", a)
		}
	})

	t.Run("fresh start over progress", func(t *testing.T) {
		// The store holds step 2; with --restore never and no resume file
		// the trainer starts from scratch beside it: a Warning says so.
		createPod(t, k, "trainer-f", 30)
		p := startEnv(t, "plain", kubeEnv(t, k, "lifeboat", "trainer-f"), "run", "--store", store, "--dir", t.TempDir(),
			"--restore", "never", "--", "true")
		if code := p.wait(); code != 0 {
			t.Fatalf("exit %d; stderr:\n%s", code, tail(p.stderr.String()))
		}
		e := waitEvent(t, k, p, "trainer-f", kube.ReasonFreshStart, "training from scratch although the store holds complete step 2 (")
		if e.Type != "Warning" {
			t.Errorf("event %+v, want a Warning", e)
		}
	})

	t.Run("sidecar", func(t *testing.T) {
		createPod(t, k, "trainer-s", 30)
		dir := t.TempDir()
		p := startEnv(t, "plain", kubeEnv(t, k, "lifeboat", "trainer-s"), "sidecar", "--store", "file://"+filepath.Join(t.TempDir(), "store"),
			"--dir", dir, "--settle", "100ms", "--scan-interval", "100ms")
		if err := os.MkdirAll(filepath.Join(dir, "step-000030"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "step-000030", "model.bin"), []byte("w"), 0o644); err != nil {
			t.Fatal(err)
		}
		waitEvent(t, k, p, "trainer-s", kube.ReasonCommitted, "committed step 30 (")
		p.signal(syscall.SIGTERM)
		if code := p.wait(); code != 0 {
			t.Fatalf("exit %d; stderr:\n%s", code, tail(p.stderr.String()))
		}
		waitEvent(t, k, p, "trainer-s", kube.ReasonPreemptedCommitted, "nothing new to commit; step 30 stays the latest")
	})

	t.Run("no rights", func(t *testing.T) {
		createPod(t, k, "trainer-c", 30)
		dir := t.TempDir()
		script := `mkdir -p "$LIFEBOAT_DIR/step-000007" && echo w > "$LIFEBOAT_DIR/step-000007/model.bin"`
		p := startEnv(t, "plain", kubeEnv(t, k, "norights", "trainer-c"), "run", "--store", "file://"+filepath.Join(t.TempDir(), "store"),
			"--dir", dir, "--settle", "100ms", "--grace", "auto", "--", "sh", "-c", script)
		if code := p.wait(); code != 0 {
			t.Fatalf("exit %d, want 0: training must not notice; stderr:\n%s", code, tail(p.stderr.String()))
		}
		stderr := p.stderr.String()
		if c := logLines(stderr, "checkpoint.committed"); len(c) != 1 || c[0]["step"] != float64(7) {
			t.Errorf("checkpoint.committed lines %v, want step 7 committed", c)
		}
		off := logLines(stderr, "kube.feature_off")
		features := map[string]string{}
		for _, l := range off {
			features[fmt.Sprint(l["feature"])] = fmt.Sprint(l["permission"])
		}
		if len(off) != 2 || !strings.Contains(features["events"], "get pods") || !strings.Contains(features["annotations"], "patch pods") {
			t.Errorf("kube.feature_off lines %v, want one for events naming get pods and one for annotations naming patch pods", off)
		}
		if g := logLines(stderr, "kube.grace_default"); len(g) != 1 || !strings.Contains(fmt.Sprint(g[0]["permission"]), "get pods") || g[0]["grace"] != "30s" {
			t.Errorf("kube.grace_default lines %v, want one naming get pods, with the default 30s", g)
		}
		var warns []string
		for _, line := range strings.Split(stderr, "\n") {
			if strings.Contains(line, `"level":"WARN"`) && strings.Contains(line, `"msg":"kube.`) {
				warns = append(warns, line)
			}
		}
		if len(warns) != 3 {
			t.Errorf("%d kube warnings, want exactly 3 (one per feature):\n%s", len(warns), strings.Join(warns, "\n"))
		}
		if strings.Contains(stderr, k.Token("norights")) {
			t.Error("the token is in the log")
		}
		if ev := podEvents(t, k, "trainer-c"); len(ev) != 0 {
			t.Errorf("events on a pod whose lifeboat may not create them: %+v", ev)
		}
	})
}

// TestKubeOffOutsideCluster: without the in-cluster environment the
// Kubernetes features are off with one debug line and no warning; --grace
// auto warns once and takes the default.
func TestKubeOffOutsideCluster(t *testing.T) {
	env := []string{"KUBERNETES_SERVICE_HOST=", "KUBERNETES_SERVICE_PORT="}
	p := startEnv(t, "plain", env, "run", "--log-level", "debug", "--", "true")
	if code := p.wait(); code != 0 {
		t.Fatalf("exit %d; stderr:\n%s", code, p.stderr.String())
	}
	stderr := p.stderr.String()
	if off := logLines(stderr, "kube.off"); len(off) != 1 || off[0]["level"] != "DEBUG" {
		t.Errorf("kube.off lines %v, want one at DEBUG", off)
	}
	if strings.Contains(stderr, `"level":"WARN"`) {
		t.Errorf("a warning outside a cluster:\n%s", stderr)
	}
	p = startEnv(t, "plain", env, "run", "--grace", "auto", "--", "true")
	if code := p.wait(); code != 0 {
		t.Fatalf("exit %d; stderr:\n%s", code, p.stderr.String())
	}
	if g := logLines(p.stderr.String(), "kube.grace_default"); len(g) != 1 || g[0]["grace"] != "30s" {
		t.Errorf("kube.grace_default lines %v, want one with 30s", g)
	}
}
