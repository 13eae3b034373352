package deploy

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	"sigs.k8s.io/yaml"
)

const manifestDir = "k8s"

// object is one decoded YAML document.
type object struct {
	file string
	doc  int // 1-based index in its file
	kind string
	name string
	obj  any // a pointer to the concrete k8s.io/api type
}

func (o object) String() string { return fmt.Sprintf("%s#%d (%s %s)", o.file, o.doc, o.kind, o.name) }

// kinds maps apiVersion/kind to a new value of its type; other kinds fail.
var kinds = map[string]func() any{
	"batch/v1/Job":                             func() any { return &batchv1.Job{} },
	"v1/Secret":                                func() any { return &corev1.Secret{} },
	"scheduling.k8s.io/v1/PriorityClass":       func() any { return &schedulingv1.PriorityClass{} },
	"v1/ServiceAccount":                        func() any { return &corev1.ServiceAccount{} },
	"rbac.authorization.k8s.io/v1/Role":        func() any { return &rbacv1.Role{} },
	"rbac.authorization.k8s.io/v1/RoleBinding": func() any { return &rbacv1.RoleBinding{} },
}

var docSeparator = regexp.MustCompile(`(?m)^---[ \t]*$`)

// decodeManifest decodes every document of a YAML file strictly: duplicate
// keys, unknown fields, keys in the wrong case, trailing data and unknown
// kinds are errors naming the file and document.
func decodeManifest(file string, b []byte) ([]object, error) {
	var objs []object
	for i, doc := range docSeparator.Split(string(b), -1) {
		where := fmt.Sprintf("%s#%d", file, i+1)
		if strings.TrimSpace(stripComments(doc)) == "" {
			continue
		}
		j, err := yaml.YAMLToJSONStrict([]byte(doc))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", where, err)
		}
		var tm struct {
			APIVersion string `json:"apiVersion"`
			Kind       string `json:"kind"`
		}
		if err := json.Unmarshal(j, &tm); err != nil {
			return nil, fmt.Errorf("%s: %w", where, err)
		}
		newObj, ok := kinds[tm.APIVersion+"/"+tm.Kind]
		if !ok {
			return nil, fmt.Errorf("%s: apiVersion %q kind %q is not one this test knows; add its type to kinds", where, tm.APIVersion, tm.Kind)
		}
		obj := newObj()
		dec := json.NewDecoder(bytes.NewReader(j))
		dec.DisallowUnknownFields()
		if err := dec.Decode(obj); err != nil {
			return nil, fmt.Errorf("%s: %s: %w", where, tm.Kind, err)
		}
		if dec.More() {
			return nil, fmt.Errorf("%s: data after the object", where)
		}
		// encoding/json matches keys case-insensitively; the API server
		// does not.
		var raw any
		if err := json.Unmarshal(j, &raw); err != nil {
			return nil, fmt.Errorf("%s: %w", where, err)
		}
		if err := exactKeys(raw, reflect.TypeOf(obj).Elem(), tm.Kind); err != nil {
			return nil, fmt.Errorf("%s: %w", where, err)
		}
		name := reflect.ValueOf(obj).Elem().FieldByName("ObjectMeta").FieldByName("Name").String()
		objs = append(objs, object{file: file, doc: i + 1, kind: tm.Kind, name: name, obj: obj})
	}
	return objs, nil
}

func stripComments(doc string) string {
	var b strings.Builder
	for _, l := range strings.Split(doc, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(l), "#") {
			b.WriteString(l + "\n")
		}
	}
	return b.String()
}

// exactKeys checks that every key in v is spelled exactly as a JSON field
// of t (following inline structs, maps, slices and pointers; types with
// their own UnmarshalJSON, such as resource.Quantity, are leaves).
func exactKeys(v any, t reflect.Type, where string) error {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if reflect.PointerTo(t).Implements(reflect.TypeOf((*json.Unmarshaler)(nil)).Elem()) {
		return nil
	}
	switch x := v.(type) {
	case map[string]any:
		switch t.Kind() {
		case reflect.Map:
			for k, e := range x {
				if err := exactKeys(e, t.Elem(), where+"."+k); err != nil {
					return err
				}
			}
		case reflect.Struct:
			fields := jsonFields(t)
			for k, e := range x {
				ft, ok := fields[k]
				if !ok {
					return fmt.Errorf("%s: field %q is not spelled as in the API (keys are case-sensitive)", where, k)
				}
				if err := exactKeys(e, ft, where+"."+k); err != nil {
					return err
				}
			}
		}
	case []any:
		if t.Kind() == reflect.Slice || t.Kind() == reflect.Array {
			for i, e := range x {
				if err := exactKeys(e, t.Elem(), fmt.Sprintf("%s[%d]", where, i)); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// jsonFields maps the JSON names of t's fields, inline structs included,
// to their types.
func jsonFields(t reflect.Type) map[string]reflect.Type {
	m := map[string]reflect.Type{}
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		name, opts, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" {
			continue
		}
		if name == "" && (f.Anonymous || strings.Contains(opts, "inline")) {
			for k, v := range jsonFields(f.Type) {
				m[k] = v
			}
			continue
		}
		if name == "" {
			name = f.Name
		}
		m[name] = f.Type
	}
	return m
}

// manifests is every object in deploy/k8s, by kind.
type manifests struct {
	jobs            []object
	secrets         map[string]*corev1.Secret
	priorities      map[string]*schedulingv1.PriorityClass
	serviceAccounts map[string]*corev1.ServiceAccount
	roles           map[string]*rbacv1.Role
	roleBindings    map[string]*rbacv1.RoleBinding
}

func loadManifests(t *testing.T) *manifests {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(manifestDir, "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifests in %s: %v", manifestDir, err)
	}
	m := &manifests{secrets: map[string]*corev1.Secret{}, priorities: map[string]*schedulingv1.PriorityClass{},
		serviceAccounts: map[string]*corev1.ServiceAccount{}, roles: map[string]*rbacv1.Role{}, roleBindings: map[string]*rbacv1.RoleBinding{}}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		objs, err := decodeManifest(f, b)
		if err != nil {
			t.Fatalf("decode: %v", err)
		}
		for _, o := range objs {
			switch x := o.obj.(type) {
			case *batchv1.Job:
				m.jobs = append(m.jobs, o)
			case *corev1.Secret:
				put(t, m.secrets, o, x)
			case *schedulingv1.PriorityClass:
				put(t, m.priorities, o, x)
			case *corev1.ServiceAccount:
				put(t, m.serviceAccounts, o, x)
			case *rbacv1.Role:
				put(t, m.roles, o, x)
			case *rbacv1.RoleBinding:
				put(t, m.roleBindings, o, x)
			}
		}
	}
	return m
}

// put adds x, the object o decoded, under o's name: the manifests hold
// one object of each kind and name.
func put[T any](t *testing.T, byName map[string]*T, o object, x *T) {
	t.Helper()
	if byName[o.name] != nil {
		t.Fatalf("%s: a second %s %q", o, o.kind, o.name)
	}
	byName[o.name] = x
}

func TestManifestFiles(t *testing.T) {
	m := loadManifests(t)
	var jobs []string
	for _, j := range m.jobs {
		jobs = append(jobs, filepath.Base(j.file))
	}
	sort.Strings(jobs)
	if want := []string{"job-init-restore.yaml", "job-sidecar.yaml", "job.yaml"}; !reflect.DeepEqual(jobs, want) {
		t.Errorf("Jobs are in %v, want one in each of %v", jobs, want)
	}
	if s := m.secrets["lifeboat-s3"]; s == nil {
		t.Errorf("secret.example.yaml: no Secret lifeboat-s3")
	}
	if m.serviceAccounts["lifeboat"] == nil || m.roles["lifeboat"] == nil || m.roleBindings["lifeboat"] == nil {
		t.Errorf("rbac.yaml: want a ServiceAccount, a Role and a RoleBinding named lifeboat")
	}
}

// lifeboatRules is what lifeboat does with the Kubernetes API from its
// pod, as group/resource/verb: Events on its own pod, reading it (grace)
// and annotating it.
var lifeboatRules = []string{"/events/create", "events.k8s.io/events/create", "/pods/get", "/pods/patch"}

// ruleTriples flattens RBAC rules to group/resource/verb, or says why a
// rule grants more than its triples (names, URLs, wildcards).
func ruleTriples(rules []rbacv1.PolicyRule) ([]string, error) {
	var got []string
	for i, r := range rules {
		if len(r.ResourceNames) > 0 || len(r.NonResourceURLs) > 0 {
			return nil, fmt.Errorf("rule %d names resources or URLs; lifeboat's rules are by resource and verb", i)
		}
		for _, g := range r.APIGroups {
			for _, res := range r.Resources {
				for _, v := range r.Verbs {
					if g == "*" || res == "*" || v == "*" {
						return nil, fmt.Errorf("rule %d has a wildcard (%s/%s/%s)", i, g, res, v)
					}
					got = append(got, g+"/"+res+"/"+v)
				}
			}
		}
	}
	sort.Strings(got)
	return got, nil
}

func TestRBAC(t *testing.T) {
	m := loadManifests(t)
	role := m.roles["lifeboat"]
	if role == nil {
		t.Fatal("rbac.yaml: no Role lifeboat")
	}
	got, err := ruleTriples(role.Rules)
	if err != nil {
		t.Fatalf("Role lifeboat: %v", err)
	}
	want := slices.Clone(lifeboatRules)
	sort.Strings(want)
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Role lifeboat grants %v, want exactly %v", got, want)
	}
	if err := checkBinding(m, "lifeboat"); err != nil {
		t.Error(err)
	}
	// Every Job's pod runs as that ServiceAccount (TestJobs checks each).
	_, err = ruleTriples([]rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"*"}}})
	if err == nil {
		t.Error("ruleTriples accepts a wildcard verb")
	}
}

// checkBinding says whether a RoleBinding in rbac.yaml gives the
// ServiceAccount sa (in the binding's own namespace) the Role lifeboat.
func checkBinding(m *manifests, sa string) error {
	if m.serviceAccounts[sa] == nil {
		return fmt.Errorf("serviceAccountName %q is not a ServiceAccount in rbac.yaml", sa)
	}
	for _, rb := range m.roleBindings {
		if rb.RoleRef.Kind != "Role" || rb.RoleRef.APIGroup != rbacv1.GroupName || m.roles[rb.RoleRef.Name] == nil {
			continue
		}
		for _, s := range rb.Subjects {
			if s.Kind == rbacv1.ServiceAccountKind && s.Name == sa && s.Namespace == "" && rb.RoleRef.Name == "lifeboat" {
				return nil
			}
		}
	}
	return fmt.Errorf("no RoleBinding in rbac.yaml binds ServiceAccount %s (in its own namespace) to Role lifeboat", sa)
}

func TestDecodeManifestRejects(t *testing.T) {
	job := "apiVersion: batch/v1\nkind: Job\nmetadata:\n  name: j\nspec:\n  template:\n    spec:\n      restartPolicy: Never\n"
	for _, tc := range []struct{ name, text, want string }{
		{"unknown field", job + "      terminationGracePeriod: 30\n", "unknown field"},
		{"wrong case", job + "      terminationgraceperiodseconds: 30\n", "case-sensitive"},
		{"duplicate key", job + "      restartPolicy: Never\n", "already set"},
		{"unknown kind", "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c\n", "not one this test knows"},
		{"wrong version", "apiVersion: batch/v1beta1\nkind: Job\n", "not one this test knows"},
		{"wrong type", job + "      terminationGracePeriodSeconds: \"30\"\n", "cannot unmarshal"},
		{"second document", "apiVersion: v1\nkind: Secret\nmetadata:\n  name: s\n---\n" + job + "      priorityclassname: x\n", "#2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := decodeManifest("test.yaml", []byte(tc.text))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("decodeManifest = %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

func TestPriorityClasses(t *testing.T) {
	m := loadManifests(t)
	want := []struct {
		name   string
		value  int32
		policy corev1.PreemptionPolicy
	}{
		{"urgent-debugging", 1000000, corev1.PreemptLowerPriority},
		{"online-serving", 900000, corev1.PreemptLowerPriority},
		{"normal-experiments", 500000, corev1.PreemptLowerPriority},
		{"long-training", 300000, corev1.PreemptLowerPriority},
		{"long-training-nonpreempting", 300000, corev1.PreemptNever},
		{"batch-training", 100000, corev1.PreemptLowerPriority},
	}
	if len(m.priorities) != len(want) {
		t.Errorf("priorityclasses.yaml has %d PriorityClasses, want %d", len(m.priorities), len(want))
	}
	for _, w := range want {
		t.Run(w.name, func(t *testing.T) {
			pc := m.priorities[w.name]
			if pc == nil {
				t.Fatalf("no PriorityClass %s", w.name)
			}
			if pc.Value != w.value {
				t.Errorf("value is %d, want %d", pc.Value, w.value)
			}
			if pc.GlobalDefault {
				t.Errorf("globalDefault is true; no tier may be the default")
			}
			if pc.PreemptionPolicy == nil || *pc.PreemptionPolicy != w.policy {
				t.Errorf("preemptionPolicy is %v, want %s", pc.PreemptionPolicy, w.policy)
			}
			if len(pc.Description) < 20 {
				t.Errorf("description %q says too little about when to use it", pc.Description)
			}
		})
	}
}

// lifeboatProc is a container that runs lifeboat, with its configuration
// resolved as lifeboat resolves it: flag, else the container's env, else
// the image's env (an empty value counts as unset).
type lifeboatProc struct {
	c       *corev1.Container
	init    bool
	sidecar bool // an init container with restartPolicy: Always
	sub     string
	flags   map[string]string
	env     map[string]string
	trainer []string // for run: the command after --
}

// value returns the setting of flag, and whether it is set.
func (p *lifeboatProc) value(flag string) (string, bool) {
	if v, ok := p.flags[flag]; ok {
		return v, true
	}
	v := p.env[envTwin(flag)]
	return v, v != ""
}

// grace returns the grace budget this lifeboat works with (30s unset).
func (p *lifeboatProc) grace() (time.Duration, error) {
	v, ok := p.value("grace")
	if !ok {
		return 30 * time.Second, nil
	}
	g, err := time.ParseDuration(v)
	if err != nil || g <= 0 {
		return 0, fmt.Errorf("container %s: grace %q is not a positive Go duration", p.c.Name, v)
	}
	return g, nil
}

// resolve works out what c runs: the image's ENTRYPOINT and CMD as
// Kubernetes combines them with command and args. It returns nil for a
// container that does not run lifeboat.
func resolve(c *corev1.Container, init bool) (*lifeboatProc, error) {
	img, err := loadImage(c.Image)
	if err != nil {
		return nil, fmt.Errorf("container %s: %w", c.Name, err)
	}
	argv := slices.Concat(img.entrypoint, img.cmd)
	if len(c.Command) > 0 {
		argv = slices.Concat(c.Command, c.Args)
	} else if c.Args != nil {
		argv = slices.Concat(img.entrypoint, c.Args)
	}
	env := map[string]string{}
	for k, v := range img.env {
		env[k] = v
	}
	for _, e := range c.Env {
		if path, ok := podEnv[e.Name]; ok {
			if e.ValueFrom == nil || e.ValueFrom.FieldRef == nil || e.ValueFrom.FieldRef.FieldPath != path {
				return nil, fmt.Errorf("container %s: %s must come from the downward API (valueFrom.fieldRef.fieldPath: %s)", c.Name, e.Name, path)
			}
			env[e.Name] = "(from " + path + ")"
			continue
		}
		if e.ValueFrom != nil {
			if strings.HasPrefix(e.Name, "LIFEBOAT_") {
				return nil, fmt.Errorf("container %s: %s comes from valueFrom; this test can only check literal LIFEBOAT_ values", c.Name, e.Name)
			}
			env[e.Name] = "(from " + e.Name + " valueFrom)"
			continue
		}
		env[e.Name] = e.Value
	}
	if len(argv) < 2 || filepath.Base(argv[0]) != "lifeboat" {
		return nil, nil
	}
	p := &lifeboatProc{c: c, init: init, sidecar: init && c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways,
		sub: argv[1], flags: map[string]string{}, env: env}
	known, ok := cliFlags[p.sub]
	if !ok {
		return nil, fmt.Errorf("container %s runs `lifeboat %s`, which this test does not check", c.Name, p.sub)
	}
	for k := range env {
		if _, ok := podEnv[k]; ok {
			continue
		}
		if f := flagOfEnv(k); f != "" && !known[f] {
			return nil, fmt.Errorf("container %s: %s is no flag of lifeboat %s (see lifeboat %s --help)", c.Name, k, p.sub, p.sub)
		}
	}
	args := argv[2:]
	for len(args) > 0 {
		a := args[0]
		args = args[1:]
		if a == "--" {
			p.trainer = args
			break
		}
		if !strings.HasPrefix(a, "-") {
			if p.sub == "run" {
				p.trainer = append([]string{a}, args...)
				break
			}
			return nil, fmt.Errorf("container %s: lifeboat %s takes no argument %q", c.Name, p.sub, a)
		}
		name, val, hasVal := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if !known[name] {
			return nil, fmt.Errorf("container %s: lifeboat %s has no flag %s", c.Name, p.sub, a)
		}
		if !hasVal {
			if boolFlags[name] {
				val = "true"
			} else if len(args) == 0 {
				return nil, fmt.Errorf("container %s: flag %s has no value", c.Name, a)
			} else {
				val, args = args[0], args[1:]
			}
		}
		p.flags[name] = val
	}
	if p.sub == "run" && len(p.trainer) == 0 {
		return nil, fmt.Errorf("container %s: lifeboat run has no trainer command (want `lifeboat run -- CMD`)", c.Name)
	}
	return p, nil
}

// podEnv are the variables that tell lifeboat which pod is its own, with
// the downward API field each must come from.
var podEnv = map[string]string{"LIFEBOAT_POD_NAME": "metadata.name", "LIFEBOAT_POD_NAMESPACE": "metadata.namespace"}

// pod is a Job's pod template with its lifeboat containers resolved.
type pod struct {
	job      *batchv1.Job
	spec     *corev1.PodSpec
	procs    []*lifeboatProc
	m        *manifests
	runProcs []*lifeboatProc
}

func newPod(j *batchv1.Job, m *manifests) (*pod, error) {
	p := &pod{job: j, spec: &j.Spec.Template.Spec, m: m}
	for i := range p.spec.InitContainers {
		lp, err := resolve(&p.spec.InitContainers[i], true)
		if err != nil {
			return nil, err
		}
		if lp != nil {
			p.procs = append(p.procs, lp)
		}
	}
	for i := range p.spec.Containers {
		lp, err := resolve(&p.spec.Containers[i], false)
		if err != nil {
			return nil, err
		}
		if lp != nil {
			p.procs = append(p.procs, lp)
			if lp.sub == "run" {
				p.runProcs = append(p.runProcs, lp)
			}
		}
	}
	return p, nil
}

// allContainers lists init and regular containers.
func (p *pod) allContainers() []*corev1.Container {
	var cs []*corev1.Container
	for i := range p.spec.InitContainers {
		cs = append(cs, &p.spec.InitContainers[i])
	}
	for i := range p.spec.Containers {
		cs = append(cs, &p.spec.Containers[i])
	}
	return cs
}

// mountAt returns the volume c mounts exactly at dir.
func mountAt(c *corev1.Container, dir string) (string, bool) {
	for _, vm := range c.VolumeMounts {
		if filepath.Clean(vm.MountPath) == filepath.Clean(dir) {
			return vm.Name, true
		}
	}
	return "", false
}

// jobChecks are the cross-reference checks run on every Job.
var jobChecks = []struct {
	name  string
	check func(p *pod) error
}{
	{"restartPolicy Never", func(p *pod) error {
		if p.spec.RestartPolicy != corev1.RestartPolicyNever {
			return fmt.Errorf("restartPolicy is %q; podFailurePolicy requires Never (a retried pod is a new pod that restores)", p.spec.RestartPolicy)
		}
		return nil
	}},
	{"backoffLimit", func(p *pod) error {
		if p.job.Spec.BackoffLimit == nil {
			return errors.New("no backoffLimit: say how many real failures (not preemptions) a Job may have")
		}
		return nil
	}},
	{"podFailurePolicy ignores preemption", func(p *pod) error {
		pfp := p.job.Spec.PodFailurePolicy
		if pfp == nil {
			return errors.New("no podFailurePolicy: preempted pods would count against backoffLimit")
		}
		if len(p.runProcs) != 1 {
			return fmt.Errorf("%d containers run `lifeboat run`, want exactly one, the trainer", len(p.runProcs))
		}
		trainer := p.runProcs[0].c.Name
		var exit143, disruption bool
		for i, r := range pfp.Rules {
			if r.OnExitCodes != nil && r.Action == batchv1.PodFailurePolicyActionIgnore &&
				r.OnExitCodes.Operator == batchv1.PodFailurePolicyOnExitCodesOpIn && slices.Contains(r.OnExitCodes.Values, 143) {
				if cn := r.OnExitCodes.ContainerName; cn != nil && *cn != trainer {
					return fmt.Errorf("rule %d ignores exit code 143 of container %q, but lifeboat run is container %q", i, *cn, trainer)
				}
				exit143 = true
			}
			for _, pc := range r.OnPodConditions {
				if pc.Type == corev1.DisruptionTarget && pc.Status == corev1.ConditionTrue && r.Action == batchv1.PodFailurePolicyActionIgnore {
					disruption = true
				}
			}
			if r.OnExitCodes != nil && r.Action != batchv1.PodFailurePolicyActionIgnore && r.OnExitCodes.Operator == batchv1.PodFailurePolicyOnExitCodesOpIn &&
				slices.Contains(r.OnExitCodes.Values, 143) {
				return fmt.Errorf("rule %d acts %s on exit code 143, lifeboat's preemption code", i, r.Action)
			}
		}
		if !exit143 {
			return errors.New("podFailurePolicy has no rule `action: Ignore` on exit code 143 (lifeboat's --preempt-exit-code)")
		}
		if !disruption {
			return errors.New("podFailurePolicy has no rule `action: Ignore` on the pod condition DisruptionTarget=True")
		}
		if v, ok := p.runProcs[0].value("preempt-exit-code"); ok && v != "143" {
			return fmt.Errorf("container %s sets --preempt-exit-code %s; the podFailurePolicy ignores 143", trainer, v)
		}
		return nil
	}},
	{"podFailurePolicy fails the Job on configuration errors, never on a preemption", func(p *pod) error {
		pfp := p.job.Spec.PodFailurePolicy
		if pfp == nil {
			return errors.New("no podFailurePolicy")
		}
		// The first rule that matches decides: a preempted pod is ignored
		// before any exit code can fail the Job.
		disruptionAt, firstFail := -1, -1
		failOn2 := map[string]bool{}  // container name ("" for all) whose exit 2 fails the Job
		failOn78 := map[string]bool{} // the same for exit 78: another live pod claims the rank
		for i, r := range pfp.Rules {
			for _, pc := range r.OnPodConditions {
				if pc.Type == corev1.DisruptionTarget && r.Action == batchv1.PodFailurePolicyActionIgnore && disruptionAt < 0 {
					disruptionAt = i
				}
			}
			if r.Action != batchv1.PodFailurePolicyActionFailJob {
				continue
			}
			if firstFail < 0 {
				firstFail = i
			}
			if len(r.OnPodConditions) > 0 {
				for _, pc := range r.OnPodConditions {
					if pc.Type == corev1.DisruptionTarget {
						return fmt.Errorf("rule %d fails the Job on DisruptionTarget, a preemption", i)
					}
				}
			}
			if ec := r.OnExitCodes; ec != nil {
				in := ec.Operator == batchv1.PodFailurePolicyOnExitCodesOpIn
				if in == slices.Contains(ec.Values, 143) {
					return fmt.Errorf("rule %d fails the Job on exit code 143, lifeboat's preemption code", i)
				}
				name := ""
				if ec.ContainerName != nil {
					name = *ec.ContainerName
				}
				if in && slices.Contains(ec.Values, 2) || !in && !slices.Contains(ec.Values, 2) {
					failOn2[name] = true
				}
				if in && slices.Contains(ec.Values, 78) || !in && !slices.Contains(ec.Values, 78) {
					failOn78[name] = true
				}
			}
		}
		if firstFail >= 0 && (disruptionAt < 0 || disruptionAt > firstFail) {
			return fmt.Errorf("rule %d fails the Job before the rule that ignores DisruptionTarget: a preempted pod could fail the Job", firstFail)
		}
		for _, lp := range p.procs {
			if lp.sidecar {
				continue // restarted in place by the kubelet: it never fails the pod
			}
			if !failOn2[lp.c.Name] && !failOn2[""] {
				return fmt.Errorf("no rule `action: FailJob` on exit code 2 of container %s (lifeboat %s): a bad flag or LIFEBOAT_* value would be retried until backoffLimit", lp.c.Name, lp.sub)
			}
			if lp.sub == "run" && !failOn78[lp.c.Name] && !failOn78[""] {
				return fmt.Errorf("no rule `action: FailJob` on exit code 78 of container %s (lifeboat run): two pods given one rank would be retried until backoffLimit", lp.c.Name)
			}
		}
		return nil
	}},
	{"lifeboat is the trainer's ENTRYPOINT", func(p *pod) error {
		for _, lp := range p.runProcs {
			if len(lp.c.Command) > 0 {
				return fmt.Errorf("container %s sets command %q; leave it to the image's ENTRYPOINT (lifeboat run --) and put the trainer in args", lp.c.Name, lp.c.Command)
			}
		}
		return nil
	}},
	{"terminationGracePeriodSeconds matches lifeboat's grace", func(p *pod) error {
		if p.spec.TerminationGracePeriodSeconds == nil {
			return errors.New("terminationGracePeriodSeconds is not set; set it with LIFEBOAT_GRACE")
		}
		tgps := time.Duration(*p.spec.TerminationGracePeriodSeconds) * time.Second
		var sum time.Duration
		var parts []string
		for _, lp := range p.procs {
			if lp.sub != "run" && lp.sub != "sidecar" {
				continue
			}
			g, err := lp.grace()
			if err != nil {
				return err
			}
			sum += g
			parts = append(parts, fmt.Sprintf("%s (lifeboat %s) %s", lp.c.Name, lp.sub, g))
		}
		if sum != tgps {
			why := "set both to the same time, or lifeboat plans with time the kubelet does not give it"
			if len(parts) > 1 {
				why = "a native sidecar is stopped after the trainer, so their budgets run one after the other and must add up to it"
			}
			return fmt.Errorf("terminationGracePeriodSeconds is %d (%s) but the lifeboat grace budgets add up to %s: %s; %s",
				*p.spec.TerminationGracePeriodSeconds, tgps, sum, strings.Join(parts, " + "), why)
		}
		return nil
	}},
	{"volumeMounts name volumes", func(p *pod) error {
		vols := map[string]bool{}
		for _, v := range p.spec.Volumes {
			vols[v.Name] = true
		}
		for _, c := range p.allContainers() {
			for _, vm := range c.VolumeMounts {
				if !vols[vm.Name] {
					return fmt.Errorf("container %s mounts volume %q at %s, but the pod has no such volume", c.Name, vm.Name, vm.MountPath)
				}
			}
		}
		return nil
	}},
	{"secretKeyRefs name the example Secret's keys", func(p *pod) error {
		for _, c := range p.allContainers() {
			for _, e := range c.Env {
				if e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil {
					continue
				}
				ref := e.ValueFrom.SecretKeyRef
				s := p.m.secrets[ref.Name]
				if s == nil {
					return fmt.Errorf("container %s: %s comes from Secret %q, which secret.example.yaml does not define", c.Name, e.Name, ref.Name)
				}
				_, inData := s.Data[ref.Key]
				_, inString := s.StringData[ref.Key]
				if !inData && !inString {
					return fmt.Errorf("container %s: %s comes from key %q of Secret %s, which has no such key", c.Name, e.Name, ref.Key, ref.Name)
				}
			}
		}
		return nil
	}},
	{"priorityClassName exists", func(p *pod) error {
		if p.m.priorities[p.spec.PriorityClassName] == nil {
			return fmt.Errorf("priorityClassName %q is not in priorityclasses.yaml", p.spec.PriorityClassName)
		}
		return nil
	}},
	{"store, credentials and checkpoint directory", func(p *pod) error {
		ckptVolume := ""
		for _, lp := range p.procs {
			store, hasStore := lp.value("store")
			dir, hasDir := lp.value("dir")
			switch {
			case hasStore && !hasDir, lp.sub != "run" && (!hasStore || !hasDir):
				return fmt.Errorf("container %s: lifeboat %s needs both a store (%q) and a directory (%q)", lp.c.Name, lp.sub, store, dir)
			case !hasStore:
				continue
			}
			if !strings.HasPrefix(store, "s3://") && !strings.HasPrefix(store, "file:///") {
				return fmt.Errorf("container %s: store %q is neither s3://bucket/prefix nor file:///path", lp.c.Name, store)
			}
			if strings.HasPrefix(store, "s3://") {
				for _, k := range []string{"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"} {
					if err := fromSecret(lp.c, k); err != nil {
						return err
					}
				}
				if _, ok := lp.value("s3-endpoint"); !ok && lp.env["AWS_ENDPOINT_URL"] == "" {
					return fmt.Errorf("container %s: store %s has no endpoint (AWS_ENDPOINT_URL or --s3-endpoint)", lp.c.Name, store)
				}
			}
			vol, ok := mountAt(lp.c, dir)
			if !ok {
				return fmt.Errorf("container %s: checkpoint directory %s (LIFEBOAT_DIR/--dir) is no mountPath of the container", lp.c.Name, dir)
			}
			if ckptVolume != "" && vol != ckptVolume {
				return fmt.Errorf("container %s: checkpoint directory is volume %q, another lifeboat's is %q", lp.c.Name, vol, ckptVolume)
			}
			ckptVolume = vol
		}
		if ckptVolume == "" {
			return errors.New("no lifeboat in the pod has a store and a checkpoint directory")
		}
		for _, v := range p.spec.Volumes {
			if v.Name == ckptVolume && v.EmptyDir == nil && v.PersistentVolumeClaim == nil {
				return fmt.Errorf("checkpoint volume %q is neither an emptyDir nor a persistentVolumeClaim", v.Name)
			}
		}
		for _, c := range p.spec.Containers {
			if _, ok := mountVolume(&c, ckptVolume); !ok {
				return fmt.Errorf("container %s does not mount the checkpoint volume %q", c.Name, ckptVolume)
			}
		}
		return nil
	}},
	{"sidecars and init restores", func(p *pod) error {
		restoreAt, sidecarAt := -1, -1
		for i, lp := range p.procs {
			switch lp.sub {
			case "sidecar":
				if !lp.sidecar {
					return fmt.Errorf("container %s runs lifeboat sidecar but is not an initContainer with restartPolicy: Always (a native sidecar), so nothing stops it after the trainer", lp.c.Name)
				}
				if p.spec.ShareProcessNamespace == nil || !*p.spec.ShareProcessNamespace {
					return fmt.Errorf("sidecar %s cannot see the trainer's open files without shareProcessNamespace: true", lp.c.Name)
				}
				sidecarAt = i
			case "restore":
				if !lp.init || lp.sidecar {
					return fmt.Errorf("container %s runs lifeboat restore but is not a plain initContainer", lp.c.Name)
				}
				restoreAt = i
			}
		}
		if sidecarAt >= 0 && restoreAt > sidecarAt {
			return errors.New("the restore init container comes after the sidecar, which would upload the files being restored")
		}
		if restoreAt >= 0 {
			for _, lp := range p.runProcs {
				if _, hasStore := lp.value("store"); hasStore {
					if v, _ := lp.value("restore"); v != "never" {
						return fmt.Errorf("container %s restores again although an init container did; set LIFEBOAT_RESTORE=never", lp.c.Name)
					}
				}
			}
		}
		return nil
	}},
	{"lifeboat knows its own pod and may use the API on it", func(p *pod) error {
		for _, lp := range p.procs {
			for _, name := range slices.Sorted(maps.Keys(podEnv)) {
				if _, ok := lp.env[name]; !ok {
					return fmt.Errorf("container %s (lifeboat %s) does not set %s from the downward API (fieldRef %s)", lp.c.Name, lp.sub, name, podEnv[name])
				}
			}
		}
		if p.spec.ServiceAccountName == "" {
			return errors.New("no serviceAccountName: set it to rbac.yaml's ServiceAccount lifeboat")
		}
		if p.spec.AutomountServiceAccountToken != nil && !*p.spec.AutomountServiceAccountToken {
			return errors.New("automountServiceAccountToken is false: lifeboat cannot reach the API")
		}
		return checkBinding(p.m, p.spec.ServiceAccountName)
	}},
	{"env names are unique", func(p *pod) error {
		for _, c := range p.allContainers() {
			seen := map[string]bool{}
			for _, e := range c.Env {
				if seen[e.Name] {
					return fmt.Errorf("container %s sets %s twice", c.Name, e.Name)
				}
				seen[e.Name] = true
			}
		}
		return nil
	}},
}

// envVar returns c's variable name for a test to break.
func envVar(t *testing.T, c *corev1.Container, name string) *corev1.EnvVar {
	t.Helper()
	for i := range c.Env {
		if c.Env[i].Name == name {
			return &c.Env[i]
		}
	}
	t.Fatalf("container %s sets no %s", c.Name, name)
	return nil
}

func mountVolume(c *corev1.Container, vol string) (string, bool) {
	for _, vm := range c.VolumeMounts {
		if vm.Name == vol {
			return vm.MountPath, true
		}
	}
	return "", false
}

// fromSecret checks that c takes name from a Secret, never as a literal.
func fromSecret(c *corev1.Container, name string) error {
	for _, e := range c.Env {
		if e.Name != name {
			continue
		}
		if e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil {
			return fmt.Errorf("container %s: %s must come from a Secret (valueFrom.secretKeyRef), not a literal", c.Name, name)
		}
		return nil
	}
	return fmt.Errorf("container %s uses an s3:// store but does not set %s from the Secret", c.Name, name)
}

func TestJobs(t *testing.T) {
	m := loadManifests(t)
	for _, o := range m.jobs {
		t.Run(filepath.Base(o.file), func(t *testing.T) {
			p, err := newPod(o.obj.(*batchv1.Job), m)
			if err != nil {
				t.Fatalf("%s: %v", o, err)
			}
			for _, c := range jobChecks {
				t.Run(c.name, func(t *testing.T) {
					if err := c.check(p); err != nil {
						t.Errorf("%s: %v", o, err)
					}
				})
			}
		})
	}
}

// TestJobChecksCatch breaks a valid Job in the ways the checks exist for
// and expects each to be reported.
func TestJobChecksCatch(t *testing.T) {
	m := loadManifests(t)
	base := func(t *testing.T, file string) *batchv1.Job {
		for _, o := range m.jobs {
			if filepath.Base(o.file) == file {
				b, _ := json.Marshal(o.obj)
				var j batchv1.Job
				if err := json.Unmarshal(b, &j); err != nil {
					t.Fatal(err)
				}
				return &j
			}
		}
		t.Fatalf("no Job in %s", file)
		return nil
	}
	setEnv := func(c *corev1.Container, name, val string) {
		for i := range c.Env {
			if c.Env[i].Name == name {
				c.Env[i].Value = val
				return
			}
		}
		c.Env = append(c.Env, corev1.EnvVar{Name: name, Value: val})
	}
	for _, tc := range []struct {
		name, file, want string
		breakIt          func(t *testing.T, j *batchv1.Job)
	}{
		{"grace differs", "job.yaml", "add up to", func(t *testing.T, j *batchv1.Job) {
			setEnv(&j.Spec.Template.Spec.Containers[0], "LIFEBOAT_GRACE", "60s")
		}},
		{"grace flag wins over env", "job.yaml", "trainer (lifeboat run) 1m0s", func(t *testing.T, j *batchv1.Job) {
			j.Spec.Template.Spec.Containers[0].Command = []string{"/usr/local/bin/lifeboat", "run", "--grace", "60s", "--"}
		}},
		{"sidecar grace not counted", "job-sidecar.yaml", "add up to", func(t *testing.T, j *batchv1.Job) {
			setEnv(&j.Spec.Template.Spec.Containers[0], "LIFEBOAT_GRACE", "120s")
		}},
		{"missing volume", "job.yaml", "no such volume", func(t *testing.T, j *batchv1.Job) { j.Spec.Template.Spec.Volumes[0].Name = "other" }},
		{"secret key", "job.yaml", "no such key", func(t *testing.T, j *batchv1.Job) {
			envVar(t, &j.Spec.Template.Spec.Containers[0], "AWS_ACCESS_KEY_ID").ValueFrom.SecretKeyRef.Key = "aws_access_key_id"
		}},
		{"secret name", "job.yaml", "does not define", func(t *testing.T, j *batchv1.Job) {
			envVar(t, &j.Spec.Template.Spec.Containers[0], "AWS_ACCESS_KEY_ID").ValueFrom.SecretKeyRef.Name = "s3"
		}},
		{"literal credentials", "job.yaml", "not a literal", func(t *testing.T, j *batchv1.Job) {
			envVar(t, &j.Spec.Template.Spec.Containers[0], "AWS_ACCESS_KEY_ID").ValueFrom = nil
		}},
		{"priority class", "job.yaml", "not in priorityclasses.yaml", func(t *testing.T, j *batchv1.Job) { j.Spec.Template.Spec.PriorityClassName = "long" }},
		{"no 143 rule", "job.yaml", "exit code 143", func(t *testing.T, j *batchv1.Job) {
			j.Spec.PodFailurePolicy.Rules = j.Spec.PodFailurePolicy.Rules[1:]
		}},
		{"no DisruptionTarget rule", "job.yaml", "DisruptionTarget", func(t *testing.T, j *batchv1.Job) {
			r := j.Spec.PodFailurePolicy.Rules
			j.Spec.PodFailurePolicy.Rules = append(r[:1:1], r[2:]...)
		}},
		{"FailJob on 143", "job.yaml", "fails the Job on exit code 143", func(t *testing.T, j *batchv1.Job) {
			r := &j.Spec.PodFailurePolicy.Rules[2]
			r.OnExitCodes.Values = append(r.OnExitCodes.Values, 143)
		}},
		{"FailJob before DisruptionTarget", "job.yaml", "before the rule that ignores DisruptionTarget", func(t *testing.T, j *batchv1.Job) {
			r := j.Spec.PodFailurePolicy.Rules
			r[1], r[2] = r[2], r[1]
		}},
		{"configuration error retried", "job.yaml", "exit code 2 of container trainer", func(t *testing.T, j *batchv1.Job) {
			j.Spec.PodFailurePolicy.Rules[2].OnExitCodes.Values = []int32{126, 127}
		}},
		{"restore's configuration error retried", "job-init-restore.yaml", "exit code 2 of container restore", func(t *testing.T, j *batchv1.Job) {
			r := j.Spec.PodFailurePolicy.Rules
			j.Spec.PodFailurePolicy.Rules = r[:len(r)-1]
		}},
		{"restart policy", "job.yaml", "requires Never", func(t *testing.T, j *batchv1.Job) { j.Spec.Template.Spec.RestartPolicy = corev1.RestartPolicyOnFailure }},
		{"dir not mounted", "job.yaml", "no mountPath", func(t *testing.T, j *batchv1.Job) {
			setEnv(&j.Spec.Template.Spec.Containers[0], "LIFEBOAT_DIR", "/data")
		}},
		{"unknown LIFEBOAT variable", "job.yaml", "no flag", func(t *testing.T, j *batchv1.Job) {
			setEnv(&j.Spec.Template.Spec.Containers[0], "LIFEBOAT_GRACE_PERIOD", "120s")
		}},
		{"unknown flag", "job-sidecar.yaml", "has no flag", func(t *testing.T, j *batchv1.Job) {
			j.Spec.Template.Spec.InitContainers[1].Args = append(j.Spec.Template.Spec.InitContainers[1].Args, "--grace-period", "1s")
		}},
		{"sidecar not native", "job-sidecar.yaml", "restartPolicy: Always", func(t *testing.T, j *batchv1.Job) {
			j.Spec.Template.Spec.InitContainers[1].RestartPolicy = nil
		}},
		{"restore after sidecar", "job-sidecar.yaml", "after the sidecar", func(t *testing.T, j *batchv1.Job) {
			ic := j.Spec.Template.Spec.InitContainers
			ic[0], ic[1] = ic[1], ic[0]
		}},
		{"restores twice", "job-init-restore.yaml", "restores again", func(t *testing.T, j *batchv1.Job) {
			setEnv(&j.Spec.Template.Spec.Containers[0], "LIFEBOAT_RESTORE", "auto")
		}},
		{"command replaces lifeboat", "job.yaml", "", func(t *testing.T, j *batchv1.Job) {
			j.Spec.Template.Spec.Containers[0].Command = []string{"python"}
			j.Spec.Template.Spec.Containers[0].Args = []string{"train.py"}
		}},
		{"no service account", "job.yaml", "no serviceAccountName", func(t *testing.T, j *batchv1.Job) { j.Spec.Template.Spec.ServiceAccountName = "" }},
		{"unknown service account", "job-sidecar.yaml", "not a ServiceAccount", func(t *testing.T, j *batchv1.Job) { j.Spec.Template.Spec.ServiceAccountName = "trainer" }},
		{"no token", "job.yaml", "automountServiceAccountToken", func(t *testing.T, j *batchv1.Job) {
			f := false
			j.Spec.Template.Spec.AutomountServiceAccountToken = &f
		}},
		{"pod name from the wrong field", "job.yaml", "fieldPath: metadata.name", func(t *testing.T, j *batchv1.Job) {
			for i, e := range j.Spec.Template.Spec.Containers[0].Env {
				if e.Name == "LIFEBOAT_POD_NAME" {
					j.Spec.Template.Spec.Containers[0].Env[i].ValueFrom.FieldRef.FieldPath = "metadata.uid"
				}
			}
		}},
		{"pod namespace as a literal", "job-init-restore.yaml", "downward API", func(t *testing.T, j *batchv1.Job) {
			for i, e := range j.Spec.Template.Spec.InitContainers[0].Env {
				if e.Name == "LIFEBOAT_POD_NAMESPACE" {
					j.Spec.Template.Spec.InitContainers[0].Env[i] = corev1.EnvVar{Name: e.Name, Value: "default"}
				}
			}
		}},
		{"sidecar does not know its pod", "job-sidecar.yaml", "uploader (lifeboat sidecar) does not set LIFEBOAT_POD_NAME", func(t *testing.T, j *batchv1.Job) {
			c := &j.Spec.Template.Spec.InitContainers[1]
			c.Env = slices.DeleteFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == "LIFEBOAT_POD_NAME" })
		}},
		{"unknown image", "job.yaml", "not built in this repository", func(t *testing.T, j *batchv1.Job) {
			j.Spec.Template.Spec.Containers[0].Image = "somewhere/else:1"
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			j := base(t, tc.file)
			tc.breakIt(t, j)
			p, err := newPod(j, m)
			var errs []string
			if err != nil {
				errs = append(errs, err.Error())
			} else {
				for _, c := range jobChecks {
					if err := c.check(p); err != nil {
						errs = append(errs, err.Error())
					}
				}
			}
			if len(errs) == 0 {
				t.Fatalf("no check caught it")
			}
			t.Logf("caught: %s", strings.Join(errs, "\n"))
			if tc.want != "" && !strings.Contains(strings.Join(errs, "\n"), tc.want) {
				t.Errorf("errors do not mention %q:\n%s", tc.want, strings.Join(errs, "\n"))
			}
		})
	}
}
