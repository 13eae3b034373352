package memory

import (
	"bufio"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/containerd/cgroups/v3"
	"github.com/containerd/cgroups/v3/cgroup1"
	"github.com/containerd/cgroups/v3/cgroup2"
	"github.com/opencontainers/runtime-spec/specs-go"
	"go.uber.org/goleak"

	"github.com/lifeboat-project/lifeboat/internal/testenv"
)

// helperEnv makes the test binary a stand-in trainer (see TestMain).
const helperEnv = "LIFEBOAT_MEMORY_TEST_HELPER"

func TestMain(m *testing.M) {
	switch os.Getenv(helperEnv) {
	case "":
		os.Exit(m.Run())
	case "alloc":
		// Wait for the test to look at our cgroup, then allocate and
		// touch memory until the kernel stops us.
		os.Stdin.Read(make([]byte, 1))
		var keep [][]byte
		for range 1024 {
			b := make([]byte, 1<<20)
			for i := 0; i < len(b); i += 4096 {
				b[i] = 1
			}
			keep = append(keep, b)
		}
		fmt.Fprintf(os.Stderr, "helper: allocated %d MiB without being killed\n", len(keep))
		os.Exit(3)
	case "fit":
		b := make([]byte, 4<<20)
		for i := 0; i < len(b); i += 4096 {
			b[i] = 1
		}
		os.Exit(0)
	}
	os.Exit(2)
}

// TestRealDetect checks New's reading of this machine against the
// library's own detection (statfs of /sys/fs/cgroup).
func TestRealDetect(t *testing.T) {
	m, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	p := m.Plan()
	t.Logf("plan: %+v", p)
	want := map[cgroups.CGMode][]Mode{
		cgroups.Unified:     {ModeV2},
		cgroups.Hybrid:      {ModeHybrid, ModeV2}, // v2 when memory is not on a v1 hierarchy
		cgroups.Legacy:      {ModeV1},
		cgroups.Unavailable: {ModeNone},
	}[cgroups.Mode()]
	if !contains(modesToStrings(want), string(p.Mode)) {
		t.Fatalf("mode %q; containerd/cgroups says %v, so want one of %v", p.Mode, cgroups.Mode(), want)
	}
	if p.Mode != ModeNone {
		if _, err := os.Stat(p.Cgroup); err != nil {
			t.Fatalf("lifeboat's cgroup: %v", err)
		}
	}
}

func modesToStrings(ms []Mode) []string {
	var out []string
	for _, m := range ms {
		out = append(out, string(m))
	}
	return out
}

// memoryCgroup returns the memory cgroup of pid as /proc shows it (v1: the
// memory line; v2: the unified line).
func memoryCgroup(t *testing.T, pid int, mode Mode) string {
	t.Helper()
	f, err := os.Open(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		parts := strings.SplitN(sc.Text(), ":", 3)
		if len(parts) != 3 {
			continue
		}
		if (mode.v1() && contains(strings.Split(parts[1], ","), "memory")) || (!mode.v1() && parts[0] == "0") {
			return parts[2]
		}
	}
	t.Fatalf("no memory cgroup for pid %d", pid)
	return ""
}

// enterTestCgroup stands in for the container: it creates a memory cgroup
// with the given limit for this test (on v1 under the test's own memory
// cgroup; on v2 beside it, because a v2 cgroup that holds processes cannot
// hand the memory controller to a child) and moves the test process into
// it. Cleanup moves the test process back and removes the cgroup.
func enterTestCgroup(t *testing.T, limit int64) string {
	t.Helper()
	plan, lay := inspect(Config{Root: DefaultRoot, ProcSelf: "/proc/self"})
	if lay.mode == ModeNone || plan.ReadOnly {
		testenv.Skip(t, "no writable memory cgroup here: "+plan.Reason)
	}
	name := fmt.Sprintf("lifeboat-test-%d", os.Getpid())
	if lay.mode.v1() {
		rel, err := filepath.Rel(lay.mount, lay.dir)
		if err != nil {
			t.Fatal(err)
		}
		opt := cgroup1.WithHierarchy(func() ([]cgroup1.Subsystem, error) {
			return []cgroup1.Subsystem{cgroup1.NewMemory(filepath.Dir(lay.mount))}, nil
		})
		orig, err := cgroup1.Load(cgroup1.StaticPath(filepath.Join("/", rel)), opt)
		if err != nil {
			t.Fatal(err)
		}
		cg, err := cgroup1.New(cgroup1.StaticPath(filepath.Join("/", rel, name)),
			&specs.LinuxResources{Memory: &specs.LinuxMemory{Limit: &limit}}, opt)
		if err != nil {
			testenv.Skip(t, fmt.Sprintf("cannot create a v1 memory cgroup under %s: %v", lay.dir, err))
		}
		t.Cleanup(func() {
			if err := orig.AddProc(self()); err != nil {
				t.Errorf("move the test process back to %s: %v", lay.dir, err)
			}
			if err := cg.Delete(); err != nil {
				t.Errorf("remove the test cgroup: %v", err)
			}
		})
		if err := cg.AddProc(self()); err != nil {
			t.Fatalf("move the test process into the test cgroup: %v", err)
		}
		return filepath.Join(lay.dir, name)
	}
	if lay.dir == lay.mount {
		testenv.Skip(t, fmt.Sprintf("the test process is in the root of its cgroup v2 tree (%s); a test cgroup with a memory limit needs a parent it can use", lay.dir))
	}
	parent := filepath.Dir(lay.dir)
	pm, err := cgroup2.Load("/", cgroup2.WithMountpoint(parent))
	if err != nil {
		t.Fatal(err)
	}
	orig, err := cgroup2.Load("/"+filepath.Base(lay.dir), cgroup2.WithMountpoint(parent))
	if err != nil {
		t.Fatal(err)
	}
	cg, err := pm.NewChild(name, &cgroup2.Resources{Memory: &cgroup2.Memory{Max: &limit}})
	if err != nil {
		testenv.Skip(t, fmt.Sprintf("cannot create a v2 memory cgroup under %s: %v", parent, err))
	}
	t.Cleanup(func() {
		if err := orig.AddProc(self()); err != nil {
			t.Errorf("move the test process back to %s: %v", lay.dir, err)
		}
		if err := cg.Delete(); err != nil {
			t.Errorf("remove the test cgroup: %v", err)
		}
	})
	if err := cg.AddProc(self()); err != nil {
		t.Fatalf("move the test process into the test cgroup: %v", err)
	}
	return filepath.Join(parent, name)
}

// spawnHelper starts the test binary as a stand-in trainer in mode, with
// stdin on a pipe it waits on before doing anything.
func spawnHelper(t *testing.T, m *Manager, mode string) (pid int, release func()) {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	pid, err = m.Spawn(func() (int, error) {
		return syscall.ForkExec(os.Args[0], []string{os.Args[0]}, &syscall.ProcAttr{
			Env:   append(os.Environ(), helperEnv+"="+mode),
			Files: []uintptr{r.Fd(), os.Stdout.Fd(), os.Stderr.Fd()},
		})
	})
	r.Close()
	if err != nil {
		w.Close()
		t.Fatal(err)
	}
	return pid, func() { w.Write([]byte{1}); w.Close() }
}

func wait(t *testing.T, pid int) syscall.WaitStatus {
	t.Helper()
	var ws syscall.WaitStatus
	for {
		_, err := syscall.Wait4(pid, &ws, 0, nil)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		return ws
	}
}

// TestRealOOMKill runs a trainer that allocates past its limit in real
// cgroups: the kernel kills the trainer, not lifeboat (the test process),
// and the kill is counted and delivered.
func TestRealOOMKill(t *testing.T) {
	testenv.RequireRoot(t)
	defer goleak.VerifyNone(t)
	const container, reserve = 256 << 20, 224 << 20 // the trainer gets 32 MiB
	dir := enterTestCgroup(t, container)

	m, err := New(Config{Reserve: reserve, Log: slog.New(slog.NewTextHandler(t.Output(), nil))})
	if err != nil {
		t.Fatal(err)
	}
	p := m.Plan()
	t.Logf("plan: %s", p)
	if p.Cgroup != dir || p.ContainerLimit != container || p.TrainerLimit != container-reserve {
		t.Fatalf("plan %+v; want cgroup %s, container limit %d, trainer limit %d", p, dir, container, container-reserve)
	}
	if err := m.Setup(); err != nil {
		if errors.Is(err, ErrUnavailable) {
			testenv.Skip(t, err.Error())
		}
		t.Fatal(err)
	}
	closed := false
	defer func() {
		if !closed {
			m.Close()
		}
	}()
	if got := memoryCgroup(t, os.Getpid(), p.Mode); !strings.HasSuffix(got, "/lifeboat-test-"+fmt.Sprint(os.Getpid())+"/lifeboat") {
		t.Fatalf("after Setup the test process is in %q, want its lifeboat leaf", got)
	}

	pid, release := spawnHelper(t, m, "alloc")
	if got := memoryCgroup(t, pid, p.Mode); !strings.HasSuffix(got, "/trainer") {
		t.Errorf("the trainer started in %q, want the trainer leaf", got)
	}
	if got := memoryCgroup(t, os.Getpid(), p.Mode); !strings.HasSuffix(got, "/lifeboat") {
		t.Errorf("after Spawn the test process is in %q, want its lifeboat leaf", got)
	}
	release()
	ws := wait(t, pid)
	if !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("trainer status %#x (exited %v code %d, signaled %v %v), want killed by SIGKILL",
			uint32(ws), ws.Exited(), ws.ExitStatus(), ws.Signaled(), ws.Signal())
	}
	// The kernel counts the kill before it sends SIGKILL.
	if n, err := m.OOMKillCount(); n != 1 || err != nil {
		t.Fatalf("OOMKillCount = %d, %v; want 1", n, err)
	}
	<-m.OOMKills()

	// The same cgroup serves the next trainer (a restart); one that stays
	// within its limit is not killed.
	pid, release = spawnHelper(t, m, "fit")
	release()
	if ws := wait(t, pid); !ws.Exited() || ws.ExitStatus() != 0 {
		t.Fatalf("trainer within its limit: status %#x, want exit 0", uint32(ws))
	}
	if n, err := m.OOMKillCount(); n != 1 || err != nil {
		t.Fatalf("OOMKillCount = %d, %v; want still 1", n, err)
	}

	closed = true
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	if got := memoryCgroup(t, os.Getpid(), p.Mode); !strings.HasSuffix(got, "/lifeboat-test-"+fmt.Sprint(os.Getpid())) {
		t.Errorf("after Close the test process is in %q, want the test cgroup", got)
	}
	for _, leaf := range []string{p.LifeboatCgroup, p.TrainerCgroup} {
		if _, err := os.Stat(leaf); !os.IsNotExist(err) {
			t.Errorf("%s still exists after Close: %v", leaf, err)
		}
	}
}
