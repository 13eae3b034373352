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

func readFile(t *testing.T, file string) string {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// readOne decodes text, which must hold exactly one object, as a map (for
// the API server) and into typed (for the checks).
func readOne(t *testing.T, text string, typed any) map[string]any {
	t.Helper()
	var docs []string
	for _, doc := range docSeparator.Split(text, -1) {
		if strings.TrimSpace(stripComments(doc)) != "" {
			docs = append(docs, doc)
		}
	}
	if len(docs) != 1 {
		t.Fatalf("%d objects, want 1", len(docs))
	}
	var obj map[string]any
	if err := yaml.UnmarshalStrict([]byte(docs[0]), &obj); err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal([]byte(docs[0]), typed); err != nil {
		t.Fatal(err)
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

// runGangJobChecks runs the Job checks that apply to a gang's pod
// template.
func runGangJobChecks(t *testing.T, p *pod) {
	for _, c := range jobChecks {
		if gangSkips[c.name] {
			continue
		}
		t.Run(c.name, func(t *testing.T) {
			if err := c.check(p); err != nil {
				t.Error(err)
			}
		})
	}
}

// runAsPod runs the real lifeboat binary with the trainer container's
// environment as one pod has it (fieldRefs resolved from fields, as the
// kubelet does, and extra: what the engine adds), a store in a directory
// and a trainer that prints the rank and world size lifeboat hands it,
// and returns that line.
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
	rules:
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
			break rules // Count: the first matching rule decides; backoffLimit counts it
		}
	}
	if job.BackoffLimit != nil && *job.BackoffLimit == 0 {
		return jobFailure{batchv1.JobReasonBackoffLimitExceeded, "Job has reached the specified backoff limit"}, true
	}
	return jobFailure{}, false
}

// reporter is what the engine checks report to: a *testing.T, or a
// *findings in TestGangChecksCatch.
type reporter interface {
	Errorf(format string, args ...any)
}

// findings collects what the checks report.
type findings []string

func (f *findings) Errorf(format string, args ...any) { *f = append(*f, fmt.Sprintf(format, args...)) }

// jobSetGang is deploy/jobset's JobSet with its pod template resolved.
type jobSetGang struct {
	js      *jobSet
	rjName  string
	job     *batchv1.JobSpec
	pod     *pod
	trainer *lifeboatProc
}

// loadJobSet decodes text (a jobset.yaml) and resolves its pod template;
// obj is the object as the API server gets it.
func loadJobSet(t *testing.T, text string) (g *jobSetGang, obj map[string]any) {
	t.Helper()
	js := &jobSet{}
	obj = readOne(t, text, js)
	if obj["apiVersion"] != "jobset.x-k8s.io/v1alpha2" || obj["kind"] != "JobSet" {
		t.Fatalf("%v %v, want jobset.x-k8s.io/v1alpha2 JobSet", obj["apiVersion"], obj["kind"])
	}
	if len(js.Spec.ReplicatedJobs) != 1 || js.Spec.ReplicatedJobs[0].Replicas != 1 {
		t.Fatal("want one replicatedJob of one Indexed Job whose completion index is the rank")
	}
	rj := &js.Spec.ReplicatedJobs[0]
	p, err := newPod(&batchv1.Job{Spec: batchv1.JobSpec{Template: rj.Template.Spec.Template}}, loadManifests(t))
	if err != nil {
		t.Fatal(err)
	}
	if len(p.runProcs) != 1 {
		t.Fatalf("%d containers run `lifeboat run`, want exactly one, the trainer", len(p.runProcs))
	}
	return &jobSetGang{js: js, rjName: rj.Name, job: &rj.Template.Spec, pod: p, trainer: p.runProcs[0]}, obj
}

// checkJobSet checks the gang's pods, its coordinator, and what JobSet
// does when a pod ends, by the rules JobSet's controller (v0.10,
// pkg/controllers/failure_policy.go) applies to the messages the Job
// controller writes: the first rule whose reasons and message patterns
// match decides; none: RestartJobSet.
func checkJobSet(r reporter, g *jobSetGang) {
	js, job, trainer := g.js, g.job, g.trainer
	if job.CompletionMode == nil || *job.CompletionMode != batchv1.IndexedCompletion {
		r.Errorf("completionMode is not Indexed: the pods have no index to take as their rank")
	}
	if job.Parallelism == nil || job.Completions == nil || *job.Parallelism != *job.Completions {
		r.Errorf("parallelism and completions must be set and equal: every rank runs at once")
	} else {
		n := strconv.Itoa(int(*job.Completions))
		if v := trainer.env["WORLD_SIZE"]; v != n {
			r.Errorf("WORLD_SIZE is %q, want the Job's %s pods", v, n)
		}
		if v, ok := trainer.value("world-size"); ok && v != n {
			r.Errorf("LIFEBOAT_WORLD_SIZE is %q, want the Job's %s pods", v, n)
		}
	}
	if e := envVarNamed(trainer.c, "RANK"); e == nil || e.ValueFrom == nil || e.ValueFrom.FieldRef == nil ||
		e.ValueFrom.FieldRef.FieldPath != completionIndexField {
		r.Errorf("RANK does not come from %s: lifeboat and the trainer would not agree on the rank", completionIndexField)
	}

	if net := js.Spec.Network; net == nil || net.EnableDNSHostnames == nil || !*net.EnableDNSHostnames {
		r.Errorf("network.enableDNSHostnames is not true: the pods have no host names to reach rank 0 by")
	} else {
		sub := net.Subdomain
		if sub == "" {
			sub = js.Metadata.Name
		}
		// JobSet names the Jobs <jobset>-<replicatedJob>-<job index>; an
		// Indexed Job's pod's host name is <job>-<index>.<subdomain>.
		if want := fmt.Sprintf("%s-%s-0-0.%s", js.Metadata.Name, g.rjName, sub); trainer.env["MASTER_ADDR"] != want {
			r.Errorf("MASTER_ADDR is %q, want rank 0's host name %q", trainer.env["MASTER_ADDR"], want)
		}
	}
	port, _ := strconv.Atoi(trainer.env["MASTER_PORT"])
	if !slices.ContainsFunc(trainer.c.Ports, func(cp corev1.ContainerPort) bool { return int(cp.ContainerPort) == port }) {
		r.Errorf("MASTER_PORT %q is no containerPort of %s", trainer.env["MASTER_PORT"], trainer.c.Name)
	}

	fp := js.Spec.FailurePolicy
	if fp == nil {
		r.Errorf("no failurePolicy: the first failed pod fails the whole JobSet, a preemption too")
		return
	}
	if fp.RestartStrategy != "BlockingRecreate" {
		r.Errorf("restartStrategy is %q, want BlockingRecreate: a new rank could restore before an old rank's final upload is committed", fp.RestartStrategy)
	}
	if job.PodReplacementPolicy != nil && *job.PodReplacementPolicy != batchv1.Failed {
		r.Errorf("podReplacementPolicy %q: a replacement pod could start while the old one uploads", *job.PodReplacementPolicy)
	}
	action := func(f jobFailure) string {
		for _, rule := range fp.Rules {
			if len(rule.TargetReplicatedJobs) > 0 && !slices.Contains(rule.TargetReplicatedJobs, g.rjName) {
				continue
			}
			if len(rule.OnJobFailureReasons) > 0 && !slices.Contains(rule.OnJobFailureReasons, f.reason) {
				continue
			}
			match := len(rule.OnJobFailureMessagePatterns) == 0
			for _, pat := range rule.OnJobFailureMessagePatterns {
				re, err := regexp.Compile(pat)
				if err != nil {
					r.Errorf("rule %s: pattern %q: %v", rule.Name, pat, err)
					continue
				}
				match = match || re.MatchString(f.message)
			}
			if match {
				return rule.Action
			}
		}
		return "RestartJobSet"
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
		{"two pods of one rank", 78, false, "FailJobSet"},
		{"crash", 1, false, "RestartJobSet"},
		{"OOM kill", 137, false, "RestartJobSet"},
		{"exit 12", 12, false, "RestartJobSet"},
	} {
		f, ok := childJobFailure(job, trainer.c.Name, c.exit, c.disrupted)
		if !ok {
			r.Errorf("%s (exit %d, disrupted %v): the child Job does not fail, so JobSet never restarts the gang; the Job retries that pod alone", c.name, c.exit, c.disrupted)
			continue
		}
		if got := action(f); got != c.want {
			r.Errorf("%s (exit %d, disrupted %v): JobSet's action is %s on %s %q, want %s", c.name, c.exit, c.disrupted, got, f.reason, f.message, c.want)
		}
	}
	if v, ok := trainer.value("preempt-exit-code"); ok && v != "143" {
		r.Errorf("the trainer sets --preempt-exit-code %s; the failure policy restarts on 143", v)
	}
}

// completionIndexField is the downward API field of an Indexed Job pod's
// index.
const completionIndexField = "metadata.annotations['batch.kubernetes.io/job-completion-index']"

func envVarNamed(c *corev1.Container, name string) *corev1.EnvVar {
	for i := range c.Env {
		if c.Env[i].Name == name {
			return &c.Env[i]
		}
	}
	return nil
}

// TestJobSetManifest runs the plain Job's checks on deploy/jobset's pod
// template and checkJobSet: a preemption (exit 143 or DisruptionTarget)
// restarts the gang without counting, a configuration error (exit 2, 126,
// 127) fails it at once, anything else restarts it and counts. It runs the
// real lifeboat binary with each pod's environment to see the rank and
// world size it hands the trainer. TestEngineCRDs applies the file to
// JobSet's own CRD.
func TestJobSetManifest(t *testing.T) {
	g, _ := loadJobSet(t, readFile(t, filepath.Join("jobset", "jobset.yaml")))

	t.Run("pod template", func(t *testing.T) { runGangJobChecks(t, g.pod) })
	t.Run("gang and failure policy", func(t *testing.T) { checkJobSet(t, g) })
	t.Run("rank of each pod", func(t *testing.T) {
		if g.job.Completions == nil {
			t.Fatal("no completions")
		}
		for i := range *g.job.Completions {
			idx := strconv.Itoa(int(i))
			got := runAsPod(t, g.trainer.c, map[string]string{completionIndexField: idx}, []string{"JOB_COMPLETION_INDEX=" + idx})
			if want := fmt.Sprintf("rank=%d world=%d", i, *g.job.Completions); got != want {
				t.Errorf("pod of index %d: lifeboat gave the trainer %q, want %q", i, got, want)
			}
		}
	})
}

// volcanoGang is deploy/volcano's Job with its task's pod template resolved.
type volcanoGang struct {
	vj      *volcanoJob
	pod     *pod
	trainer *lifeboatProc
}

func loadVolcano(t *testing.T, text string) (*volcanoGang, map[string]any) {
	t.Helper()
	vj := &volcanoJob{}
	obj := readOne(t, text, vj)
	if obj["apiVersion"] != "batch.volcano.sh/v1alpha1" || obj["kind"] != "Job" {
		t.Fatalf("%v %v, want batch.volcano.sh/v1alpha1 Job", obj["apiVersion"], obj["kind"])
	}
	if len(vj.Spec.Tasks) != 1 {
		t.Fatalf("%d tasks, want one: VC_TASK_INDEX is the rank only in a job of one task", len(vj.Spec.Tasks))
	}
	p, err := newPod(&batchv1.Job{Spec: batchv1.JobSpec{Template: vj.Spec.Tasks[0].Template}}, loadManifests(t))
	if err != nil {
		t.Fatal(err)
	}
	if len(p.runProcs) != 1 {
		t.Fatalf("%d containers run `lifeboat run`, want exactly one, the trainer", len(p.runProcs))
	}
	return &volcanoGang{vj: vj, pod: p, trainer: p.runProcs[0]}, obj
}

// checkVolcano checks the gang's scheduling, ranks and coordinator, and
// its policies as Volcano's job controller (v1.10,
// pkg/controllers/job/job_controller_util.go, applyPolicies) applies
// them: the task's policies, then the job's; the first whose event, or
// exit code of the pod's first container, matches decides; none: nothing
// happens (SyncJob).
func checkVolcano(r reporter, g *volcanoGang) {
	vj, trainer := g.vj, g.trainer
	task := vj.Spec.Tasks[0]
	n := strconv.Itoa(int(task.Replicas))
	if vj.Spec.SchedulerName != "volcano" {
		r.Errorf("schedulerName is %q: only Volcano's scheduler places the gang together", vj.Spec.SchedulerName)
	}
	if vj.Spec.MinAvailable != task.Replicas {
		r.Errorf("minAvailable %d, want the %d ranks: a partial gang would block in its first collective, and a restart would start before every old pod's final upload", vj.Spec.MinAvailable, task.Replicas)
	}
	if _, ok := vj.Spec.Plugins["env"]; !ok {
		r.Errorf("no env plugin: the pods get no VC_TASK_INDEX to take as their rank")
	}
	if _, ok := vj.Spec.Plugins["svc"]; !ok {
		r.Errorf("no svc plugin: the pods have no host names to reach rank 0 by")
	}
	if vj.Spec.PriorityClassName != g.pod.spec.PriorityClassName {
		r.Errorf("the job's priorityClassName (its PodGroup's) is %q, its pods' %q: Volcano and the kube-scheduler would rank the gang differently",
			vj.Spec.PriorityClassName, g.pod.spec.PriorityClassName)
	}
	if v, _ := trainer.value("world-size"); v != n {
		r.Errorf("LIFEBOAT_WORLD_SIZE is %q, want the task's %s replicas", v, n)
	}

	// paddle.distributed.launch: the same rank (not one assigned by
	// arrival), the same number of nodes, rank 0's host as master.
	if !slices.Contains(trainer.trainer, "paddle.distributed.launch") {
		r.Errorf("the trainer command %q does not run paddle.distributed.launch", trainer.trainer)
	}
	launch := map[string]string{}
	for i, a := range trainer.trainer {
		if strings.HasPrefix(a, "--") && i+1 < len(trainer.trainer) {
			launch[a] = trainer.trainer[i+1]
		}
	}
	if launch["--rank"] != "$(VC_TASK_INDEX)" {
		r.Errorf("paddle.distributed.launch --rank is %q, want $(VC_TASK_INDEX), lifeboat's rank", launch["--rank"])
	}
	if launch["--nnodes"] != n {
		r.Errorf("paddle.distributed.launch --nnodes is %q, want the task's %s replicas", launch["--nnodes"], n)
	}
	if want := fmt.Sprintf("%s-%s-0.%s:", vj.Metadata.Name, task.Name, vj.Metadata.Name); !strings.HasPrefix(launch["--master"], want) {
		r.Errorf("paddle.distributed.launch --master is %q, want rank 0's host name and a port, %s<port>", launch["--master"], want)
	}

	if task.Template.Spec.Containers[0].Name != trainer.c.Name {
		r.Errorf("the first container is %q: Volcano's exit code policies read only the first container's code, and lifeboat runs in %q",
			task.Template.Spec.Containers[0].Name, trainer.c.Name)
	}
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
		{"two pods of one rank", "PodFailed", 78, "TerminateJob"},
	} {
		if got := action(c.event, c.exit); got != c.want {
			r.Errorf("%s (%s, exit %d): Volcano's action is %s, want %s", c.name, c.event, c.exit, got, c.want)
		}
	}
	if task.Template.Spec.RestartPolicy != corev1.RestartPolicyNever {
		r.Errorf("restartPolicy %q: the kubelet would restart the container in place and Volcano would never see the exit code", task.Template.Spec.RestartPolicy)
	}
	if vj.Spec.MaxRetry < 2 {
		r.Errorf("maxRetry %d: every restart counts against it in Volcano, preemptions too", vj.Spec.MaxRetry)
	}
}

// TestVolcanoManifest runs the plain Job's checks on deploy/volcano's task
// template and checkVolcano, and runs the real lifeboat binary with each
// pod's VC_TASK_INDEX to see the rank and world size it hands the trainer.
// TestEngineCRDs applies the file to Volcano's own Job CRD.
func TestVolcanoManifest(t *testing.T) {
	g, _ := loadVolcano(t, readFile(t, filepath.Join("volcano", "volcano.yaml")))

	t.Run("pod template", func(t *testing.T) { runGangJobChecks(t, g.pod) })
	t.Run("gang and policies", func(t *testing.T) { checkVolcano(t, g) })
	t.Run("rank of each pod", func(t *testing.T) {
		replicas := g.vj.Spec.Tasks[0].Replicas
		for i := range replicas {
			idx := strconv.Itoa(int(i))
			got := runAsPod(t, g.trainer.c, nil, []string{"VC_TASK_INDEX=" + idx, "VK_TASK_INDEX=" + idx})
			if want := fmt.Sprintf("rank=%d world=%d", i, replicas); got != want {
				t.Errorf("pod of index %d: lifeboat gave the trainer %q, want %q", i, got, want)
			}
		}
	})
}

// TestGangChecksCatch breaks the shipped JobSet and Volcano Job in the ways
// checkJobSet and checkVolcano exist for and expects each to be reported.
func TestGangChecksCatch(t *testing.T) {
	jobsetText := readFile(t, filepath.Join("jobset", "jobset.yaml"))
	volcanoText := readFile(t, filepath.Join("volcano", "volcano.yaml"))
	for _, c := range []struct {
		name, file, old, new, want string
	}{
		{"preemption counted", "jobset", "action: RestartJobSetAndIgnoreMaxRestarts", "action: RestartJobSet", "lifeboat's preemption exit (exit 143, disrupted false): JobSet's action is RestartJobSet"},
		{"143 retried by the Job alone", "jobset", "- action: FailJob\n                onExitCodes:\n                  containerName: trainer\n                  operator: In\n                  values: [143]",
			"- action: Ignore\n                onExitCodes:\n                  containerName: trainer\n                  operator: In\n                  values: [143]", "the child Job does not fail"},
		{"configuration error ahead of a disruption", "jobset", "values: [143]", "values: [2, 78, 126, 127]", "preempted, with a configuration error (exit 2, disrupted true): JobSet's action is FailJobSet"},
		{"config error restarted", "jobset", `"failed with exit code (2|78|126|127) matching FailJob rule"`, `"failed with exit code (78|126|127) matching FailJob rule"`, "bad flag (exit 2, disrupted false): JobSet's action is RestartJobSet"},
		{"Recreate", "jobset", "restartStrategy: BlockingRecreate", "restartStrategy: Recreate", "want BlockingRecreate"},
		{"world size", "jobset", "name: WORLD_SIZE\n                      value: \"2\"", "name: WORLD_SIZE\n                      value: \"3\"", `WORLD_SIZE is "3"`},
		{"coordinator", "jobset", "value: train-gang-node-0-0.train-gang", "value: train-gang-0.train-gang", "MASTER_ADDR"},
		{"rank", "jobset", "metadata.annotations['batch.kubernetes.io/job-completion-index']", "metadata.name", "RANK does not come from"},
		{"partial gang", "volcano", "minAvailable: 2", "minAvailable: 1", "minAvailable 1"},
		{"no env plugin", "volcano", "    env: []\n", "", "no env plugin"},
		{"143 not restarted", "volcano", "exitCode: 143", "exitCode: 142", "lifeboat's preemption exit (PodFailed, exit 143): Volcano's action is SyncJob"},
		{"bad flag restarted", "volcano", "- exitCode: 2\n      action: TerminateJob", "- exitCode: 2\n      action: RestartJob", "bad flag (PodFailed, exit 2): Volcano's action is RestartJob"},
		{"launcher's own rank", "volcano", `"--rank", "$(VC_TASK_INDEX)", `, "", "--rank is \"\""},
		{"eviction not restarted", "volcano", "event: PodEvicted", "event: PodFailed", "preempted: the pod is deleted (PodEvicted, exit 0): Volcano's action is SyncJob"},
	} {
		t.Run(c.name, func(t *testing.T) {
			text := map[string]string{"jobset": jobsetText, "volcano": volcanoText}[c.file]
			if !strings.Contains(text, c.old) {
				t.Fatalf("%s.yaml has no %q to break", c.file, c.old)
			}
			text = strings.Replace(text, c.old, c.new, 1)
			var got findings
			if c.file == "jobset" {
				g, _ := loadJobSet(t, text)
				checkJobSet(&got, g)
			} else {
				g, _ := loadVolcano(t, text)
				checkVolcano(&got, g)
			}
			if !slices.ContainsFunc(got, func(f string) bool { return strings.Contains(f, c.want) }) {
				t.Errorf("no finding contains %q; found:\n%s", c.want, strings.Join(got, "\n"))
			}
		})
	}
	// The shipped files have no findings.
	var got findings
	g, _ := loadJobSet(t, jobsetText)
	checkJobSet(&got, g)
	v, _ := loadVolcano(t, volcanoText)
	checkVolcano(&got, v)
	if len(got) > 0 {
		t.Errorf("the shipped manifests: %s", strings.Join(got, "; "))
	}
}

// TestEngineCRDs applies the manifests written for other engines' custom
// resources to one real kube-apiserver holding those engines' own CRDs,
// each from the engine's Go module at a pinned release, with strict field
// validation: an unknown or misspelt field, a wrong type or a value the
// CRD's schema refuses fails the test. One server for all: starting it is
// most of the time.
func TestEngineCRDs(t *testing.T) {
	api := testenv.StartKubeAPI(t, testenv.RequireKubeBinaries(t))
	t.Run("kueue", func(t *testing.T) { kueueManifests(t, api) })
	t.Run("jobset", func(t *testing.T) {
		// From the sigs.k8s.io/jobset module at jobsetVersion; the CRD
		// validates the pod template too (refusesUnknownField).
		_, obj := loadJobSet(t, readFile(t, filepath.Join("jobset", "jobset.yaml")))
		installCRD(t, api, filepath.Join(moduleDir(t, "sigs.k8s.io/jobset", jobsetVersion), "config", "components", "crd", "bases", "jobset.x-k8s.io_jobsets.yaml"), "JobSet")
		path := "/apis/jobset.x-k8s.io/v1alpha2/namespaces/" + api.Namespace + "/jobsets"
		applyStrict(t, api, path, obj)
		refusesUnknownField(t, api, path, obj, func(o map[string]any) map[string]any {
			rj := o["spec"].(map[string]any)["replicatedJobs"].([]any)[0].(map[string]any)
			pt := rj["template"].(map[string]any)["spec"].(map[string]any)["template"].(map[string]any)
			return pt["spec"].(map[string]any)["containers"].([]any)[0].(map[string]any)
		})
	})
	t.Run("volcano", func(t *testing.T) {
		// From the volcano.sh/volcano module at volcanoVersion.
		_, obj := loadVolcano(t, readFile(t, filepath.Join("volcano", "volcano.yaml")))
		installCRD(t, api, filepath.Join(moduleDir(t, "volcano.sh/volcano", volcanoVersion), "config", "crd", "volcano", "bases", "batch.volcano.sh_jobs.yaml"), "Volcano Job")
		path := "/apis/batch.volcano.sh/v1alpha1/namespaces/" + api.Namespace + "/jobs"
		applyStrict(t, api, path, obj)
		refusesUnknownField(t, api, path, obj, func(o map[string]any) map[string]any {
			task := o["spec"].(map[string]any)["tasks"].([]any)[0].(map[string]any)
			return task["template"].(map[string]any)["spec"].(map[string]any)["containers"].([]any)[0].(map[string]any)
		})
	})
}

// TestEngineBuildVersions: scripts/jobset-build.sh and
// scripts/volcano-build.sh build the engines that scripts/k8s-e2e.sh runs
// deploy/jobset and deploy/volcano with; each is the release whose CRDs
// TestEngineCRDs checks the manifest against.
func TestEngineBuildVersions(t *testing.T) {
	for _, c := range []struct{ script, env, engine, want string }{
		{"jobset-build.sh", "LIFEBOAT_JOBSET_VERSION", "JobSet", jobsetVersion},
		{"volcano-build.sh", "LIFEBOAT_VOLCANO_VERSION", "Volcano", volcanoVersion},
	} {
		b, err := os.ReadFile(filepath.Join("..", "scripts", c.script))
		if err != nil {
			t.Fatal(err)
		}
		m := regexp.MustCompile(`(?m)^VERSION=\$\{` + c.env + `:-([^}]+)\}$`).FindSubmatch(b)
		if m == nil {
			t.Errorf("scripts/%s has no line VERSION=${%s:-...}", c.script, c.env)
			continue
		}
		if got := string(m[1]); got != c.want {
			t.Errorf("scripts/%s builds %s %s; its manifest is checked against %s: change both together", c.script, c.engine, got, c.want)
		}
	}
}
