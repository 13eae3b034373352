package memory

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

func errorsIs(err, target error) bool { return errors.Is(err, target) }

var selfPid = strconv.Itoa(os.Getpid())

// eventsFile is a trainer memory.events with n OOM kills.
func eventsFile(n int) string {
	return "low 0\nhigh 0\nmax 7\noom " + strconv.Itoa(n) + "\noom_kill " + strconv.Itoa(n) + "\noom_group_kill 0\n"
}

// fakeV2 writes a cgroup v2 tree into a temporary directory as the kernel
// would show it inside a container with a cgroup namespace: lifeboat's
// cgroup is the mount's root, with the memory controller available and
// memory.max set to limit. The kernel creates the interface files of a new
// cgroup itself; the fake creates those of both leaves up front (Setup
// creates the directories with MkdirAll, which keeps them). It returns the
// cgroupfs root and the directory standing in for /proc/self.
func fakeV2(t *testing.T, limit string) (root, procSelf string) {
	t.Helper()
	root, procSelf = t.TempDir(), t.TempDir()
	writeFiles(t, root, map[string]string{
		"cgroup.controllers":     "cpuset cpu io memory pids\n",
		"cgroup.subtree_control": "",
		"cgroup.procs":           selfPid + "\n",
		"cgroup.type":            "domain\n",
		"memory.max":             limit + "\n",
		"lifeboat/cgroup.procs":  "",
		"trainer/cgroup.procs":   "",
		"trainer/memory.max":     "max\n",
		"trainer/memory.events":  eventsFile(0),
		"trainer/cgroup.events":  "populated 0\nfrozen 0\n",
	})
	writeFiles(t, procSelf, map[string]string{"cgroup": cgV2, "mountinfo": mountsV2})
	return root, procSelf
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// TestV2Fake runs the whole cgroup v2 life cycle against a fake tree: the
// files written are what the kernel would act on.
func TestV2Fake(t *testing.T) {
	defer goleak.VerifyNone(t)
	root, procSelf := fakeV2(t, strconv.Itoa(256<<20))
	m, err := New(Config{Root: root, ProcSelf: procSelf})
	if err != nil {
		t.Fatal(err)
	}
	p := m.Plan()
	if !p.Available || p.Mode != ModeV2 || p.ContainerLimit != 256<<20 || p.TrainerLimit != 192<<20 || p.Reserve != 64<<20 {
		t.Fatalf("plan %+v", p)
	}
	if got, want := p.String(), "memory (v2): trainer cgroup "+root+"/trainer, limit 192MiB = container 256MiB - reserve 64MiB"; got != want {
		t.Errorf("Plan.String() = %q, want %q", got, want)
	}
	if err := m.Setup(); err != nil {
		t.Fatal(err)
	}
	if err := m.Setup(); err != nil {
		t.Fatalf("second Setup: %v", err)
	}

	// Setup moved lifeboat into its leaf, enabled the memory controller
	// for the children and limited the trainer's leaf.
	if got := readFile(t, filepath.Join(root, "lifeboat/cgroup.procs")); got != selfPid {
		t.Errorf("lifeboat/cgroup.procs = %q, want %s", got, selfPid)
	}
	if got := readFile(t, filepath.Join(root, "cgroup.subtree_control")); got != "+memory" {
		t.Errorf("cgroup.subtree_control = %q, want +memory", got)
	}
	if got := readFile(t, filepath.Join(root, "trainer/memory.max")); got != strconv.Itoa(192<<20) {
		t.Errorf("trainer/memory.max = %q, want %d", got, 192<<20)
	}
	writeFiles(t, root, map[string]string{"cgroup.procs": ""}) // the kernel moved lifeboat out

	// Spawn: lifeboat is in the trainer's leaf while start forks, and back
	// in its own afterwards, also when start fails.
	writeFiles(t, root, map[string]string{"lifeboat/cgroup.procs": ""})
	pid, err := m.Spawn(func() (int, error) {
		if got := readFile(t, filepath.Join(root, "trainer/cgroup.procs")); got != selfPid {
			t.Errorf("during start, trainer/cgroup.procs = %q, want %s", got, selfPid)
		}
		return 4242, nil
	})
	if pid != 4242 || err != nil {
		t.Fatalf("Spawn = %d, %v", pid, err)
	}
	if got := readFile(t, filepath.Join(root, "lifeboat/cgroup.procs")); got != selfPid {
		t.Errorf("after Spawn, lifeboat/cgroup.procs = %q, want %s", got, selfPid)
	}
	writeFiles(t, root, map[string]string{"lifeboat/cgroup.procs": ""})
	boom := errors.New("exec failed")
	if _, err := m.Spawn(func() (int, error) { return 0, boom }); err != boom {
		t.Fatalf("Spawn with a failing start = %v, want %v", err, boom)
	}
	if got := readFile(t, filepath.Join(root, "lifeboat/cgroup.procs")); got != selfPid {
		t.Errorf("after a failed start, lifeboat/cgroup.procs = %q, want %s", got, selfPid)
	}

	// OOM kills: one value per increment of memory.events' oom_kill.
	kills := m.OOMKills()
	if kills == nil {
		t.Fatal("OOMKills is nil after Setup")
	}
	writeFiles(t, root, map[string]string{"trainer/memory.events": eventsFile(1)})
	<-kills
	writeFiles(t, root, map[string]string{"trainer/memory.events": eventsFile(3)})
	<-kills
	<-kills
	if n, err := m.OOMKillCount(); n != 3 || err != nil {
		t.Errorf("OOMKillCount = %d, %v; want 3", n, err)
	}

	// Close refuses while the trainer's leaf holds processes...
	writeFiles(t, root, map[string]string{"trainer/cgroup.procs": "4242\n"})
	if err := m.Close(); err == nil || !strings.Contains(err.Error(), filepath.Join(root, "trainer")) {
		t.Fatalf("Close with a live trainer: %v, want an error naming the trainer's cgroup", err)
	}
	if _, ok := <-kills; ok {
		t.Error("OOMKills still open after Close")
	}
	if _, err := os.Stat(filepath.Join(root, "lifeboat")); err != nil {
		t.Errorf("Close with a live trainer touched lifeboat's leaf: %v", err)
	}
	// ...and once it is empty moves lifeboat back and removes both leaves.
	writeFiles(t, root, map[string]string{"trainer/cgroup.procs": "", "lifeboat/cgroup.procs": ""})
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	if got := readFile(t, filepath.Join(root, "cgroup.procs")); got != selfPid {
		t.Errorf("after Close, cgroup.procs = %q, want %s", got, selfPid)
	}
	if got := readFile(t, filepath.Join(root, "cgroup.subtree_control")); got != "-memory" {
		t.Errorf("after Close, cgroup.subtree_control = %q, want -memory", got)
	}
	for _, leaf := range []string{"lifeboat", "trainer"} {
		if _, err := os.Stat(filepath.Join(root, leaf)); !os.IsNotExist(err) {
			t.Errorf("%s still exists after Close: %v", leaf, err)
		}
	}
	if err := m.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if m.OOMKills() != nil {
		t.Error("OOMKills not nil after Close")
	}
	if n, err := m.OOMKillCount(); n != 0 || err != nil {
		t.Errorf("OOMKillCount after Close = %d, %v", n, err)
	}
}

// TestV2FakeNoLimit: without a container limit the trainer still gets its
// own cgroup (OOM attribution), with no memory.max written.
func TestV2FakeNoLimit(t *testing.T) {
	defer goleak.VerifyNone(t)
	root, procSelf := fakeV2(t, "max")
	writeFiles(t, root, map[string]string{"cgroup.subtree_control": "memory pids\n"})
	m, err := New(Config{Root: root, ProcSelf: procSelf})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Setup(); err != nil {
		t.Fatal(err)
	}
	if got := readFile(t, filepath.Join(root, "trainer/memory.max")); got != "max" {
		t.Errorf("trainer/memory.max = %q, want it untouched (max)", got)
	}
	writeFiles(t, root, map[string]string{"lifeboat/cgroup.procs": "", "cgroup.subtree_control": "memory pids\n"})
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	// The controller was enabled before Setup: Close leaves it so.
	if got := readFile(t, filepath.Join(root, "cgroup.subtree_control")); got != "memory pids" {
		t.Errorf("cgroup.subtree_control = %q, want it untouched", got)
	}
}

// fakeV1 writes a hybrid host's v1 memory hierarchy: lifeboat's cgroup is
// /ctr with a 1 GiB limit under an unlimited root.
func fakeV1(t *testing.T) (root, procSelf string) {
	t.Helper()
	root, procSelf = t.TempDir(), t.TempDir()
	unlimited := "9223372036854771712\n"
	writeFiles(t, root, map[string]string{
		"memory/memory.limit_in_bytes":             unlimited,
		"memory/ctr/memory.limit_in_bytes":         "1073741824\n",
		"memory/ctr/cgroup.procs":                  selfPid + "\n",
		"memory/ctr/lifeboat/cgroup.procs":         "",
		"memory/ctr/trainer/cgroup.procs":          "",
		"memory/ctr/trainer/memory.limit_in_bytes": unlimited,
		"memory/ctr/trainer/memory.oom_control":    "oom_kill_disable 0\nunder_oom 0\noom_kill 0\n",
		"memory/ctr/trainer/cgroup.event_control":  "",
		"unified/cgroup.procs":                     "",
	})
	writeFiles(t, procSelf, map[string]string{
		"cgroup":    "9:name=systemd:/\n4:memory:/ctr\n0::/\n",
		"mountinfo": mountsHybrid,
	})
	return root, procSelf
}

func TestV1Fake(t *testing.T) {
	defer goleak.VerifyNone(t)
	root, procSelf := fakeV1(t)
	m, err := New(Config{Root: root, ProcSelf: procSelf, Reserve: 100 << 20})
	if err != nil {
		t.Fatal(err)
	}
	p := m.Plan()
	if !p.Available || p.Mode != ModeHybrid || p.ContainerLimit != 1<<30 || p.TrainerLimit != 1<<30-100<<20 ||
		p.TrainerCgroup != filepath.Join(root, "memory/ctr/trainer") {
		t.Fatalf("plan %+v", p)
	}
	if err := m.Setup(); err != nil {
		t.Fatal(err)
	}
	ctr := filepath.Join(root, "memory/ctr")
	if got := readFile(t, filepath.Join(ctr, "lifeboat/cgroup.procs")); got != selfPid {
		t.Errorf("lifeboat/cgroup.procs = %q, want %s", got, selfPid)
	}
	if got := readFile(t, filepath.Join(ctr, "trainer/memory.limit_in_bytes")); got != strconv.Itoa(1<<30-100<<20) {
		t.Errorf("trainer/memory.limit_in_bytes = %q", got)
	}
	if got := readFile(t, filepath.Join(ctr, "trainer/cgroup.event_control")); len(strings.Fields(got)) != 2 {
		t.Errorf("cgroup.event_control = %q, want an eventfd registration", got)
	}
	writeFiles(t, ctr, map[string]string{"trainer/memory.oom_control": "oom_kill_disable 0\nunder_oom 0\noom_kill 1\n"})
	<-m.OOMKills() // found by polling: a file write does not signal the eventfd
	writeFiles(t, ctr, map[string]string{"lifeboat/cgroup.procs": ""})
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	if got := readFile(t, filepath.Join(ctr, "cgroup.procs")); got != selfPid {
		t.Errorf("after Close, cgroup.procs = %q, want %s", got, selfPid)
	}
	for _, leaf := range []string{"lifeboat", "trainer"} {
		if _, err := os.Stat(filepath.Join(ctr, leaf)); !os.IsNotExist(err) {
			t.Errorf("%s still exists after Close: %v", leaf, err)
		}
	}
}
