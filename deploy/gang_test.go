package deploy

import (
	"bytes"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/lifeboat-project/lifeboat/internal/testenv"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

// The engine releases whose CRDs deploy/jobset and deploy/volcano are
// written for, from the Go module proxy.
const (
	jobsetVersion  = "v0.10.1"
	volcanoVersion = "v1.10.0"
)

// gangSkips are the jobChecks that are about a plain Job's own
// podFailurePolicy: a gang's pods fail their Job (JobSet) or have none
// (Volcano), and the engine's policy is checked below instead.
var gangSkips = map[string]bool{
	"backoffLimit":                        true,
	"podFailurePolicy ignores preemption": true,
	"podFailurePolicy fails the Job on configuration errors, never on a preemption": true,
}

// jobSet is the part of a JobSet (jobset.x-k8s.io/v1alpha2) these tests
// read. The API server checks the whole object against JobSet's CRD.
type jobSet struct {
	Metadata metav1.ObjectMeta `json:"metadata"`
	Spec     struct {
		Network *struct {
			EnableDNSHostnames *bool  `json:"enableDNSHostnames"`
			Subdomain          string `json:"subdomain"`
		} `json:"network"`
		FailurePolicy *struct {
			MaxRestarts     int32  `json:"maxRestarts"`
			RestartStrategy string `json:"restartStrategy"`
			Rules           []struct {
				Name                        string   `json:"name"`
				Action                      string   `json:"action"`
				OnJobFailureReasons         []string `json:"onJobFailureReasons"`
				OnJobFailureMessagePatterns []string `json:"onJobFailureMessagePatterns"`
				TargetReplicatedJobs        []string `json:"targetReplicatedJobs"`
			} `json:"rules"`
		} `json:"failurePolicy"`
		ReplicatedJobs []struct {
			Name     string                  `json:"name"`
			Replicas int32                   `json:"replicas"`
			Template batchv1.JobTemplateSpec `json:"template"`
		} `json:"replicatedJobs"`
	} `json:"spec"`
}

// volcanoJob is the part of a Volcano Job (batch.volcano.sh/v1alpha1)
// these tests read.
type volcanoJob struct {
	Metadata metav1.ObjectMeta `json:"metadata"`
	Spec     struct {
		SchedulerName     string              `json:"schedulerName"`
		PriorityClassName string              `json:"priorityClassName"`
		MinAvailable      int32               `json:"minAvailable"`
		MaxRetry          int32               `json:"maxRetry"`
		Plugins           map[string][]string `json:"plugins"`
		Policies          []volcanoPolicy     `json:"policies"`
		Tasks             []struct {
			Name     string                 `json:"name"`
			Replicas int32                  `json:"replicas"`
			Policies []volcanoPolicy        `json:"policies"`
			Template corev1.PodTemplateSpec `json:"template"`
		} `json:"tasks"`
	} `json:"spec"`
}

type volcanoPolicy struct {
	Event    string   `json:"event"`
	Events   []string `json:"events"`
	ExitCode *int32   `json:"exitCode"`
	Action   string   `json:"action"`
}

// readOne reads file, which must hold exactly one object, as a map (for
// the API server) and into typed (for the checks).
func readOne(t *testing.T, file string, typed any) map[string]any {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var docs []string
	for _, doc := range docSeparator.Split(string(b), -1) {
		if strings.TrimSpace(stripComments(doc)) != "" {
			docs = append(docs, doc)
		}
	}
	if len(docs) != 1 {
		t.Fatalf("%s holds %d objects, want 1", file, len(docs))
	}
	var obj map[string]any
	if err := yaml.UnmarshalStrict([]byte(docs[0]), &obj); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	if err := yaml.Unmarshal([]byte(docs[0]), typed); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	return obj
}

// applyStrict creates obj at path with strict field validation and fails
// the test with the API server's answer when it is refused.
func applyStrict(t *testing.T, api *testenv.KubeAPI, path string, obj map[string]any) {
	t.Helper()
	if code := api.Do(t, http.MethodPost, path+"?fieldValidation=Strict", obj, nil); code != http.StatusCreated {
		t.Errorf("create %s: status %d, want 201", path, code)
	}
}

// refusesUnknownField checks that the API server refuses obj with an
// unknown field added to its trainer container: the CRD validates the pod
// template, not only the engine's own fields.
func refusesUnknownField(t *testing.T, api *testenv.KubeAPI, path string, obj map[string]any, container func(map[string]any) map[string]any) {
	t.Helper()
	b, _ := yaml.Marshal(obj)
	var bad map[string]any
	if err := yaml.Unmarshal(b, &bad); err != nil {
		t.Fatal(err)
	}
	bad["metadata"].(map[string]any)["name"] = "typo"
	container(bad)["envv"] = []any{}
	var reply map[string]any
	if code := api.Do(t, http.MethodPost, path+"?fieldValidation=Strict", bad, &reply); code/100 == 2 {
		t.Errorf("an object with an unknown container field was accepted (status %d): the validation is not strict", code)
	}
}

// gangPod runs the Job checks that apply to a gang on its pod template.
func gangPod(t *testing.T, where string, tmpl corev1.PodTemplateSpec) *pod {
	t.Helper()
	m := loadManifests(t)
	p, err := newPod(&batchv1.Job{Spec: batchv1.JobSpec{Template: tmpl}}, m)
	if err != nil {
		t.Fatalf("%s: %v", where, err)
	}
	for _, c := range jobChecks {
		if gangSkips[c.name] {
			continue
		}
		t.Run(c.name, func(t *testing.T) {
			if err := c.check(p); err != nil {
				t.Errorf("%s: %v", where, err)
			}
		})
	}
	if len(p.runProcs) != 1 {
		t.Fatalf("%s: %d containers run `lifeboat run`, want exactly one, the trainer", where, len(p.runProcs))
	}
	return p
}

// runAsPod runs the real lifeboat binary with the trainer container's
// environment as a pod of index idx would have it (fieldRefs resolved as
// the kubelet does, from fields), a store in a directory and a trainer
// that prints the rank and world size lifeboat hands it, and returns
// that line.
func runAsPod(t *testing.T, c *corev1.Container, fields map[string]string, extra []string) string {
	t.Helper()
	dir := t.TempDir()
	env := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + dir}
	for _, e := range c.Env {
		switch {
		case podEnv[e.Name] != "", strings.HasPrefix(e.Name, "AWS_"):
			continue // no API server, no S3 here
		case e.Name == "LIFEBOAT_STORE":
			env = append(env, "LIFEBOAT_STORE=file://"+filepath.Join(dir, "store"))
		case e.Name == "LIFEBOAT_DIR":
			env = append(env, "LIFEBOAT_DIR="+filepath.Join(dir, "ckpt"))
		case e.ValueFrom != nil && e.ValueFrom.FieldRef != nil:
			v, ok := fields[e.ValueFrom.FieldRef.FieldPath]
			if !ok {
				t.Fatalf("container %s: %s comes from %s, which this test does not know", c.Name, e.Name, e.ValueFrom.FieldRef.FieldPath)
			}
			env = append(env, e.Name+"="+v)
		case e.ValueFrom != nil:
			t.Fatalf("container %s: %s comes from a source this test does not know", c.Name, e.Name)
		default:
			env = append(env, e.Name+"="+e.Value)
		}
	}
	env = append(env, extra...)
	cmd := exec.Command(lifeboatBin, "run", "--", "sh", "-c", `echo "rank=$LIFEBOAT_RANK world=$LIFEBOAT_WORLD_SIZE"`)
	cmd.Env = env
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("lifeboat run with the container's environment: %v\n%s", err, stderr.String())
	}
	return strings.TrimSpace(stdout.String())
}

// jobFailure is a child Job's failure as the Job controller reports it.
type jobFailure struct{ reason, message string }

// childJobFailure says how the Job controller (Kubernetes v1.34,
// pkg/controller/job/pod_failure_policy.go and job_controller.go) fails
// job when its pod ends with the trainer's exit code and, if disrupted,
// the DisruptionTarget condition; ok is false when the Job would not fail
// at once.
func childJobFailure(job *batchv1.JobSpec, container string, exit int32, disrupted bool) (f jobFailure, ok bool) {
	if pfp := job.PodFailurePolicy; pfp != nil {
		for i, r := range pfp.Rules {
			var msg string
			if ec := r.OnExitCodes; ec != nil && exit != 0 && (ec.ContainerName == nil || *ec.ContainerName == container) &&
				(ec.Operator == batchv1.PodFailurePolicyOnExitCodesOpIn) == slices.Contains(ec.Values, exit) {
				msg = fmt.Sprintf("Container %s for pod %s/%s failed with exit code %v matching %v rule at index %d", container, "ns", "pod", exit, r.Action, i)
			}
			for _, pc := range r.OnPodConditions {
				if disrupted && pc.Type == corev1.DisruptionTarget && pc.Status == corev1.ConditionTrue {
					msg = fmt.Sprintf("Pod %s/%s has condition %v matching %v rule at index %d", "ns", "pod", pc.Type, r.Action, i)
				}
			}
			if msg == "" {
				continue
			}
			switch r.Action {
			case batchv1.PodFailurePolicyActionFailJob:
				return jobFailure{batchv1.JobReasonPodFailurePolicy, msg}, true
			case batchv1.PodFailurePolicyActionIgnore:
				return jobFailure{}, false
			}
			break // Count: as if no rule matched
		}
	}
	if job.BackoffLimit != nil && *job.BackoffLimit == 0 {
		return jobFailure{batchv1.JobReasonBackoffLimitExceeded, "Job has reached the specified backoff limit"}, true
	}
	return jobFailure{}, false
}

// TestJobSetManifest applies deploy/jobset to a real kube-apiserver that
// has JobSet's own CRD (from the sigs.k8s.io/jobset module at
// jobsetVersion) with strict field validation, runs the plain Job's
// checks on its pod template, and checks what the gang does when a pod
// ends, by the rules JobSet's controller applies to the messages
// Kubernetes' Job controller writes: a preemption (exit 143 or
// DisruptionTarget) restarts the gang without counting, a configuration
// error (exit 2, 126, 127) fails it at once, anything else restarts it
// and counts. It runs the real lifeboat binary with rank 1's environment.
func TestJobSetManifest(t *testing.T) {
	file := filepath.Join("jobset", "jobset.yaml")
	var js jobSet
	obj := readOne(t, file, &js)
	if obj["apiVersion"] != "jobset.x-k8s.io/v1alpha2" || obj["kind"] != "JobSet" {
		t.Fatalf("%s: %v %v, want jobset.x-k8s.io/v1alpha2 JobSet", file, obj["apiVersion"], obj["kind"])
	}

	t.Run("CRD", func(t *testing.T) {
		api := testenv.StartKubeAPI(t, testenv.RequireKubeBinaries(t))
		installCRD(t, api, filepath.Join(moduleDir(t, "sigs.k8s.io/jobset", jobsetVersion), "config", "components", "crd", "bases", "jobset.x-k8s.io_jobsets.yaml"), "JobSet")
		path := "/apis/jobset.x-k8s.io/v1alpha2/namespaces/" + api.Namespace + "/jobsets"
		applyStrict(t, api, path, obj)
		refusesUnknownField(t, api, path, obj, func(o map[string]any) map[string]any {
			rj := o["spec"].(map[string]any)["replicatedJobs"].([]any)[0].(map[string]any)
			pt := rj["template"].(map[string]any)["spec"].(map[string]any)["template"].(map[string]any)
			return pt["spec"].(map[string]any)["containers"].([]any)[0].(map[string]any)
		})
	})

	if len(js.Spec.ReplicatedJobs) != 1 || js.Spec.ReplicatedJobs[0].Replicas != 1 {
		t.Fatalf("%s: want one replicatedJob of one Indexed Job whose completion index is the rank", file)
	}
	rj := js.Spec.ReplicatedJobs[0]
	job := &rj.Template.Spec
	p := gangPod(t, file, job.Template)
	trainer := p.runProcs[0]

	t.Run("one pod per rank", func(t *testing.T) {
		if job.CompletionMode == nil || *job.CompletionMode != batchv1.IndexedCompletion {
			t.Errorf("completionMode is not Indexed: the pods have no index to take as their rank")
		}
		if job.Parallelism == nil || job.Completions == nil || *job.Parallelism != *job.Completions {
			t.Fatalf("parallelism and completions must be set and equal: every rank runs at once")
		}
		n := strconv.Itoa(int(*job.Completions))
		if v := trainer.env["WORLD_SIZE"]; v != n {
			t.Errorf("WORLD_SIZE is %q, want the Job's %s pods", v, n)
		}
		if v, ok := trainer.value("world-size"); ok && v != n {
			t.Errorf("LIFEBOAT_WORLD_SIZE is %q, want the Job's %s pods", v, n)
		}
		for i := range *job.Completions {
			fields := map[string]string{"metadata.annotations['batch.kubernetes.io/job-completion-index']": strconv.Itoa(int(i))}
			got := runAsPod(t, trainer.c, fields, []string{"JOB_COMPLETION_INDEX=" + strconv.Itoa(int(i))})
			if want := fmt.Sprintf("rank=%d world=%s", i, n); got != want {
				t.Errorf("pod of index %d: lifeboat gave the trainer %q, want %q", i, got, want)
			}
		}
	})

	t.Run("coordinator", func(t *testing.T) {
		net := js.Spec.Network
		if net == nil || net.EnableDNSHostnames == nil || !*net.EnableDNSHostnames {
			t.Fatal("network.enableDNSHostnames is not true: the pods have no host names to reach rank 0 by")
		}
		sub := net.Subdomain
		if sub == "" {
			sub = js.Metadata.Name
		}
		// JobSet's pod host names: <jobset>-<replicatedJob>-<job index>-<pod index>.<subdomain>.
		if want := fmt.Sprintf("%s-%s-0-0.%s", js.Metadata.Name, rj.Name, sub); trainer.env["MASTER_ADDR"] != want {
			t.Errorf("MASTER_ADDR is %q, want rank 0's host name %q", trainer.env["MASTER_ADDR"], want)
		}
		port, _ := strconv.Atoi(trainer.env["MASTER_PORT"])
		if !slices.ContainsFunc(trainer.c.Ports, func(cp corev1.ContainerPort) bool { return int(cp.ContainerPort) == port }) {
			t.Errorf("MASTER_PORT %q is no containerPort of %s", trainer.env["MASTER_PORT"], trainer.c.Name)
		}
	})

	t.Run("failure policy", func(t *testing.T) {
		fp := js.Spec.FailurePolicy
		if fp == nil {
			t.Fatal("no failurePolicy: the first failed pod fails the whole JobSet, a preemption too")
		}
		if fp.RestartStrategy != "BlockingRecreate" {
			t.Errorf("restartStrategy is %q, want BlockingRecreate: a new rank could restore before an old rank's final upload is committed", fp.RestartStrategy)
		}
		if job.PodReplacementPolicy != nil && *job.PodReplacementPolicy != batchv1.Failed {
			t.Errorf("podReplacementPolicy %q: a replacement pod could start while the old one uploads", *job.PodReplacementPolicy)
		}
		action := func(f jobFailure) string {
			for _, r := range fp.Rules {
				if len(r.TargetReplicatedJobs) > 0 && !slices.Contains(r.TargetReplicatedJobs, rj.Name) {
					continue
				}
				if len(r.OnJobFailureReasons) > 0 && !slices.Contains(r.OnJobFailureReasons, f.reason) {
					continue
				}
				match := len(r.OnJobFailureMessagePatterns) == 0
				for _, pat := range r.OnJobFailureMessagePatterns {
					re, err := regexp.Compile(pat)
					if err != nil {
						t.Fatalf("rule %s: pattern %q: %v", r.Name, pat, err)
					}
					match = match || re.MatchString(f.message)
				}
				if match {
					return r.Action
				}
			}
			return "RestartJobSet" // JobSet's default when no rule matches
		}
		for _, c := range []struct {
			name      string
			exit      int32
			disrupted bool
			want      string
		}{
			{"lifeboat's preemption exit", 143, false, "RestartJobSetAndIgnoreMaxRestarts"},
			{"preempted, lifeboat's exit", 143, true, "RestartJobSetAndIgnoreMaxRestarts"},
			{"preempted, SIGKILLed at the deadline", 137, true, "RestartJobSetAndIgnoreMaxRestarts"},
			{"preempted, with a configuration error", 2, true, "RestartJobSetAndIgnoreMaxRestarts"},
			{"bad flag", 2, false, "FailJobSet"},
			{"not executable", 126, false, "FailJobSet"},
			{"not found", 127, false, "FailJobSet"},
			{"crash", 1, false, "RestartJobSet"},
			{"OOM kill", 137, false, "RestartJobSet"},
			{"exit 12", 12, false, "RestartJobSet"},
		} {
			f, ok := childJobFailure(job, trainer.c.Name, c.exit, c.disrupted)
			if !ok {
				t.Errorf("%s (exit %d, disrupted %v): the child Job does not fail, so JobSet restarts only that pod, not the gang", c.name, c.exit, c.disrupted)
				continue
			}
			if got := action(f); got != c.want {
				t.Errorf("%s (exit %d, disrupted %v): JobSet's action is %s on %s %q, want %s", c.name, c.exit, c.disrupted, got, f.reason, f.message, c.want)
			}
		}
		if v, ok := trainer.value("preempt-exit-code"); ok && v != "143" {
			t.Errorf("the trainer sets --preempt-exit-code %s; the failure policy restarts on 143", v)
		}
	})
}

// TestVolcanoManifest applies deploy/volcano to a real kube-apiserver that
// has Volcano's own Job CRD (from the volcano.sh/volcano module at
// volcanoVersion) with strict field validation, runs the plain Job's
// checks on its task's pod template, and checks the gang's policies as
// Volcano's job controller applies them (the first matching policy, by
// event or by the exit code of the pod's first container) and the rank
// the real lifeboat binary takes from VC_TASK_INDEX.
func TestVolcanoManifest(t *testing.T) {
	file := filepath.Join("volcano", "volcano.yaml")
	var vj volcanoJob
	obj := readOne(t, file, &vj)
	if obj["apiVersion"] != "batch.volcano.sh/v1alpha1" || obj["kind"] != "Job" {
		t.Fatalf("%s: %v %v, want batch.volcano.sh/v1alpha1 Job", file, obj["apiVersion"], obj["kind"])
	}

	t.Run("CRD", func(t *testing.T) {
		api := testenv.StartKubeAPI(t, testenv.RequireKubeBinaries(t))
		installCRD(t, api, filepath.Join(moduleDir(t, "volcano.sh/volcano", volcanoVersion), "config", "crd", "volcano", "bases", "batch.volcano.sh_jobs.yaml"), "Volcano Job")
		path := "/apis/batch.volcano.sh/v1alpha1/namespaces/" + api.Namespace + "/jobs"
		applyStrict(t, api, path, obj)
		refusesUnknownField(t, api, path, obj, func(o map[string]any) map[string]any {
			task := o["spec"].(map[string]any)["tasks"].([]any)[0].(map[string]any)
			return task["template"].(map[string]any)["spec"].(map[string]any)["containers"].([]any)[0].(map[string]any)
		})
	})

	if len(vj.Spec.Tasks) != 1 {
		t.Fatalf("%s: %d tasks, want one: VC_TASK_INDEX is the rank only in a job of one task", file, len(vj.Spec.Tasks))
	}
	task := vj.Spec.Tasks[0]
	p := gangPod(t, file, task.Template)
	trainer := p.runProcs[0]
	n := strconv.Itoa(int(task.Replicas))

	t.Run("gang", func(t *testing.T) {
		if vj.Spec.SchedulerName != "volcano" {
			t.Errorf("schedulerName is %q: only Volcano's scheduler places the gang together", vj.Spec.SchedulerName)
		}
		if vj.Spec.MinAvailable != task.Replicas {
			t.Errorf("minAvailable %d, want the %d ranks: a partial gang would block in its first collective, and a restart would start before every old pod's final upload", vj.Spec.MinAvailable, task.Replicas)
		}
		if _, ok := vj.Spec.Plugins["env"]; !ok {
			t.Error("no env plugin: the pods get no VC_TASK_INDEX to take as their rank")
		}
		if _, ok := vj.Spec.Plugins["svc"]; !ok {
			t.Error("no svc plugin: the pods have no host names to reach rank 0 by")
		}
		if vj.Spec.PriorityClassName != p.spec.PriorityClassName {
			t.Errorf("the job's priorityClassName (its PodGroup's) is %q, its pods' %q: Volcano and the kube-scheduler would rank the gang differently",
				vj.Spec.PriorityClassName, p.spec.PriorityClassName)
		}
	})

	t.Run("rank", func(t *testing.T) {
		if v, _ := trainer.value("world-size"); v != n {
			t.Errorf("LIFEBOAT_WORLD_SIZE is %q, want the task's %s replicas", v, n)
		}
		for i := range task.Replicas {
			got := runAsPod(t, trainer.c, nil, []string{"VC_TASK_INDEX=" + strconv.Itoa(int(i)), "VK_TASK_INDEX=" + strconv.Itoa(int(i))})
			if want := fmt.Sprintf("rank=%d world=%s", i, n); got != want {
				t.Errorf("pod of index %d: lifeboat gave the trainer %q, want %q", i, got, want)
			}
		}
		// paddle.distributed.launch: the same rank (not one assigned by
		// arrival), the same number of nodes, rank 0's host as master.
		if !slices.Contains(trainer.trainer, "paddle.distributed.launch") {
			t.Fatalf("the trainer command %q does not run paddle.distributed.launch", trainer.trainer)
		}
		launch := map[string]string{}
		for i, a := range trainer.trainer {
			if strings.HasPrefix(a, "--") && i+1 < len(trainer.trainer) {
				launch[a] = trainer.trainer[i+1]
			}
		}
		if launch["--rank"] != "$(VC_TASK_INDEX)" {
			t.Errorf("paddle.distributed.launch --rank is %q, want $(VC_TASK_INDEX), lifeboat's rank", launch["--rank"])
		}
		if launch["--nnodes"] != n {
			t.Errorf("paddle.distributed.launch --nnodes is %q, want the task's %s replicas", launch["--nnodes"], n)
		}
		if want := fmt.Sprintf("%s-%s-0.%s:", vj.Metadata.Name, task.Name, vj.Metadata.Name); !strings.HasPrefix(launch["--master"], want) {
			t.Errorf("paddle.distributed.launch --master is %q, want rank 0's host name and a port, %s<port>", launch["--master"], want)
		}
	})

	t.Run("policies", func(t *testing.T) {
		if task.Template.Spec.Containers[0].Name != trainer.c.Name {
			t.Errorf("the first container is %q: Volcano's exit code policies read only the first container's code, and lifeboat runs in %q",
				task.Template.Spec.Containers[0].Name, trainer.c.Name)
		}
		// Volcano v1.10 (pkg/controllers/job/job_controller_util.go,
		// applyPolicies): the task's policies, then the job's; the first
		// whose event or exit code matches decides; none: nothing happens.
		action := func(event string, exit int32) string {
			for _, ps := range [][]volcanoPolicy{task.Policies, vj.Spec.Policies} {
				for _, pol := range ps {
					events := pol.Events
					if pol.Event != "" {
						events = append(events, pol.Event)
					}
					if len(events) > 0 && (slices.Contains(events, event) || slices.Contains(events, "*")) {
						return pol.Action
					}
					if pol.ExitCode != nil && event == "PodFailed" && *pol.ExitCode == exit {
						return pol.Action
					}
				}
			}
			return "SyncJob"
		}
		for _, c := range []struct {
			name, event string
			exit        int32
			want        string
		}{
			{"preempted: the pod is deleted", "PodEvicted", 0, "RestartJob"},
			{"lifeboat's preemption exit", "PodFailed", 143, "RestartJob"},
			{"bad flag", "PodFailed", 2, "TerminateJob"},
			{"not executable", "PodFailed", 126, "TerminateJob"},
			{"not found", "PodFailed", 127, "TerminateJob"},
		} {
			if got := action(c.event, c.exit); got != c.want {
				t.Errorf("%s (%s, exit %d): Volcano's action is %s, want %s", c.name, c.event, c.exit, got, c.want)
			}
		}
		if task.Template.Spec.RestartPolicy != corev1.RestartPolicyNever {
			t.Errorf("restartPolicy %q: the kubelet would restart the container in place and Volcano would never see the exit code", task.Template.Spec.RestartPolicy)
		}
		if vj.Spec.MaxRetry < 2 {
			t.Errorf("maxRetry %d: every restart counts against it in Volcano, preemptions too", vj.Spec.MaxRetry)
		}
	})
}
