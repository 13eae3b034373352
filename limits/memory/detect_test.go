package memory

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Mount tables as the kernel shows them, trimmed to the cgroup lines plus
// one unrelated mount.
const (
	mountsHybrid = `22 1 0:21 / / rw,relatime - ext4 /dev/vda rw
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,name=systemd
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
`
	mountsLegacy = `31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
`
	// docker on a v1 host: the container's own cgroup is bind-mounted
	// read-only, so the mount's root is the container's cgroup.
	mountsDockerV1RO = `700 690 0:32 /docker/abc /sys/fs/cgroup/memory ro,nosuid,nodev,noexec,relatime master:15 - cgroup cgroup rw,memory
`
	// docker with cgroupns on a v2 host, privileged (rw) and not (ro).
	mountsV2 = `29 22 0:26 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime - cgroup2 cgroup2 rw,nsdelegate,memory_recursiveprot
`
	mountsV2RO = `29 22 0:26 / /sys/fs/cgroup ro,nosuid,nodev,noexec,relatime - cgroup2 cgroup2 rw
`
	// Kubernetes without cgroupns: the pod's cgroup is the mount's root.
	mountsV2Bind = `29 22 0:26 /kubepods/pod1/c1 /sys/fs/cgroup rw,relatime - cgroup2 cgroup2 rw
`
	// A mount point with a space, escaped as the kernel does.
	mountsEscaped = `35 31 0:32 / /sys/fs/cgroup/mem\040ory rw,relatime - cgroup cgroup rw,memory
`
)

const (
	cgHybrid = `9:name=systemd:/
4:memory:/process_api/ba7d
1:cpu:/
0::/
`
	cgLegacy = `4:memory:/docker/abc
1:cpu,cpuacct:/docker/abc
`
	cgV2       = "0::/\n"
	cgV2Nested = "0::/kubepods/pod1/c1\n"
)

func TestDetect(t *testing.T) {
	root := "/tmp/root"
	for _, tc := range []struct {
		name, cgroup, mounts string
		mode                 Mode
		dir, mount           string
		ro                   bool
		reason               string // substring, for ModeNone
	}{
		{name: "hybrid", cgroup: cgHybrid, mounts: mountsHybrid, mode: ModeHybrid,
			mount: root + "/memory", dir: root + "/memory/process_api/ba7d"},
		{name: "legacy", cgroup: cgLegacy, mounts: mountsLegacy, mode: ModeV1,
			mount: root + "/memory", dir: root + "/memory/docker/abc"},
		{name: "docker v1 bind mount, read-only", cgroup: cgLegacy, mounts: mountsDockerV1RO, mode: ModeV1,
			mount: root + "/memory", dir: root + "/memory", ro: true},
		{name: "v2 cgroupns", cgroup: cgV2, mounts: mountsV2, mode: ModeV2, mount: root, dir: root},
		{name: "v2 read-only", cgroup: cgV2, mounts: mountsV2RO, mode: ModeV2, mount: root, dir: root, ro: true},
		{name: "v2 host path", cgroup: cgV2Nested, mounts: mountsV2, mode: ModeV2,
			mount: root, dir: root + "/kubepods/pod1/c1"},
		{name: "v2 bind mount of own cgroup", cgroup: cgV2Nested, mounts: mountsV2Bind, mode: ModeV2, mount: root, dir: root},
		{name: "v2 outside the mounted subtree", cgroup: "0::/other\n", mounts: mountsV2Bind, mode: ModeNone,
			reason: "outside the subtree"},
		{name: "cgroupns escape", cgroup: "0::/../../x\n", mounts: mountsV2, mode: ModeNone, reason: "outside"},
		{name: "escaped mount point", cgroup: cgLegacy, mounts: mountsEscaped, mode: ModeV1,
			mount: root + "/mem ory", dir: root + "/mem ory/docker/abc"},
		{name: "no cgroupfs tmpfs", cgroup: "4:memory:/a\n", mounts: "35 31 0:32 / /cg/memory rw - cgroup cgroup rw,memory\n", mode: ModeV1,
			mount: "/cg/memory", dir: "/cg/memory/a"},
		{name: "hybrid process, v2 only mounted", cgroup: cgHybrid, mounts: mountsV2, mode: ModeNone,
			reason: "no cgroup v1 memory hierarchy is mounted"},
		{name: "v2 process, no cgroup2 mount", cgroup: cgV2, mounts: mountsLegacy, mode: ModeNone,
			reason: "no memory line"},
		{name: "nothing mounted", cgroup: cgV2, mounts: "22 1 0:21 / / rw - ext4 /dev/vda rw\n", mode: ModeNone,
			reason: "no cgroup2 filesystem"},
		{name: "empty cgroup file", cgroup: "", mounts: mountsV2, mode: ModeNone, reason: "neither"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, err := detect([]byte(tc.cgroup), []byte(tc.mounts), root)
			if err != nil {
				t.Fatal(err)
			}
			if l.mode != tc.mode {
				t.Fatalf("mode %q, want %q (reason %q)", l.mode, tc.mode, l.reason)
			}
			if tc.mode == ModeNone {
				if !strings.Contains(l.reason, tc.reason) {
					t.Fatalf("reason %q, want it to contain %q", l.reason, tc.reason)
				}
				return
			}
			if l.dir != tc.dir || l.mount != tc.mount || l.readOnly != tc.ro {
				t.Fatalf("dir %q mount %q ro %v, want %q %q %v", l.dir, l.mount, l.readOnly, tc.dir, tc.mount, tc.ro)
			}
		})
	}
}

func TestDetectMalformed(t *testing.T) {
	if _, err := detect([]byte("garbage\n"), []byte(mountsV2), "/r"); err == nil {
		t.Error("malformed /proc/self/cgroup: no error")
	}
	if _, err := detect([]byte(cgV2), []byte("1 2 3\n"), "/r"); err == nil {
		t.Error("malformed mountinfo: no error")
	}
}

func TestParseLimit(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int64
		err  bool
	}{
		{in: "max\n", want: 0},
		{in: "9223372036854771712\n", want: 0}, // v1 unlimited, 4 KiB pages
		{in: "9223372036854775807", want: 0},
		{in: "18446744073709551615", want: 0}, // beyond int64
		{in: "4611686018427387904", want: 0},  // 1<<62: the threshold
		{in: "268435456\n", want: 256 << 20},
		{in: "0", want: 0},
		{in: "-1", want: 0},
		{in: "lots", err: true},
		{in: "", err: true},
	} {
		got, err := parseLimit(tc.in)
		if (err != nil) != tc.err || got != tc.want {
			t.Errorf("parseLimit(%q) = %d, %v; want %d, error %v", tc.in, got, err, tc.want, tc.err)
		}
	}
}

// writeFiles writes name → content under dir, creating directories.
func writeFiles(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, content := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func TestContainerLimit(t *testing.T) {
	for _, tc := range []struct {
		name  string
		mode  Mode
		files map[string]string
		want  int64
	}{
		{name: "v2 own limit", mode: ModeV2, files: map[string]string{"a/b/memory.max": "1073741824\n", "a/memory.max": "max\n"}, want: 1 << 30},
		{name: "v2 pod limit above", mode: ModeV2, files: map[string]string{"a/b/memory.max": "max\n", "a/memory.max": "536870912\n"}, want: 512 << 20},
		{name: "v2 tightest wins", mode: ModeV2, files: map[string]string{"a/b/memory.max": "1073741824\n", "a/memory.max": "536870912\n"}, want: 512 << 20},
		{name: "v2 none", mode: ModeV2, files: map[string]string{"a/b/memory.max": "max\n", "a/memory.max": "max\n"}, want: 0},
		{name: "v2 root has no file", mode: ModeV2, files: map[string]string{"a/b/cgroup.procs": ""}, want: 0},
		{name: "v1 unlimited", mode: ModeHybrid, files: map[string]string{"a/b/memory.limit_in_bytes": "9223372036854771712\n", "a/memory.limit_in_bytes": "9223372036854771712\n", "memory.limit_in_bytes": "9223372036854771712\n"}, want: 0},
		{name: "v1 limited", mode: ModeV1, files: map[string]string{"a/b/memory.limit_in_bytes": "9223372036854771712\n", "a/memory.limit_in_bytes": "2147483648\n"}, want: 2 << 30},
		{name: "above the mount is ignored", mode: ModeV2, files: map[string]string{"a/b/memory.max": "max\n", "memory.max": "4096\n"}, want: 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			writeFiles(t, root, tc.files)
			mount := root
			if tc.name == "above the mount is ignored" {
				mount = filepath.Join(root, "a")
			}
			got, err := containerLimit(tc.mode, mount, filepath.Join(root, "a/b"))
			if err != nil || got != tc.want {
				t.Fatalf("containerLimit = %d, %v; want %d", got, err, tc.want)
			}
		})
	}
	t.Run("garbage", func(t *testing.T) {
		root := t.TempDir()
		writeFiles(t, root, map[string]string{"memory.max": "lots\n"})
		if _, err := containerLimit(ModeV2, root, root); err == nil || !strings.Contains(err.Error(), "memory.max") {
			t.Fatalf("err = %v, want one naming memory.max", err)
		}
	})
}

func TestReadCounter(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{
		"memory.events":      "low 0\nhigh 0\nmax 12\noom 3\noom_kill 2\noom_group_kill 0\n",
		"memory.oom_control": "oom_kill_disable 0\nunder_oom 0\noom_kill 5\n",
		"empty":              "",
	})
	for _, tc := range []struct {
		file string
		want uint64
		ok   bool
	}{
		{"memory.events", 2, true},
		{"memory.oom_control", 5, true},
		{"empty", 0, false},
	} {
		n, ok, err := readCounter(filepath.Join(dir, tc.file), "oom_kill")
		if err != nil || n != tc.want || ok != tc.ok {
			t.Errorf("%s: %d %v %v; want %d %v", tc.file, n, ok, err, tc.want, tc.ok)
		}
	}
}

func TestPlanArithmetic(t *testing.T) {
	for _, tc := range []struct {
		name      string
		limit     string // memory.max of lifeboat's cgroup
		reserve   int64
		available bool
		trainer   int64
		reason    string
	}{
		{name: "default reserve", limit: "1073741824", available: true, trainer: 1<<30 - 64<<20},
		{name: "custom reserve", limit: "268435456", reserve: 224 << 20, available: true, trainer: 32 << 20},
		{name: "no limit", limit: "max", available: true, trainer: 0},
		{name: "limit equals reserve", limit: "67108864", available: false, reason: "not above lifeboat's reserve 64MiB"},
		{name: "limit below reserve", limit: "33554432", available: false, reason: "lower the reserve"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root, procSelf := fakeV2(t, tc.limit)
			m, err := New(Config{Root: root, ProcSelf: procSelf, Reserve: tc.reserve})
			if err != nil {
				t.Fatal(err)
			}
			p := m.Plan()
			if p.Available != tc.available || p.TrainerLimit != tc.trainer || !strings.Contains(p.Reason, tc.reason) {
				t.Fatalf("plan %+v; want available %v, trainer limit %d, reason containing %q", p, tc.available, tc.trainer, tc.reason)
			}
			if p.Mode != ModeV2 || p.TrainerCgroup != filepath.Join(root, "trainer") {
				t.Fatalf("plan %+v", p)
			}
		})
	}
}

func TestNewRejectsNegativeReserve(t *testing.T) {
	if _, err := New(Config{Reserve: -1}); err == nil {
		t.Fatal("no error")
	}
}

func TestUnavailable(t *testing.T) {
	t.Run("read-only mount", func(t *testing.T) {
		root, procSelf := fakeV2(t, "max")
		writeFiles(t, procSelf, map[string]string{"mountinfo": mountsV2RO})
		m, err := New(Config{Root: root, ProcSelf: procSelf})
		if err != nil {
			t.Fatal(err)
		}
		if p := m.Plan(); p.Available || !p.ReadOnly || !strings.Contains(p.Reason, "read-only") {
			t.Fatalf("plan %+v", p)
		}
		err = m.Setup()
		if !errorsIs(err, ErrUnavailable) || !strings.Contains(err.Error(), "read-only") {
			t.Fatalf("Setup: %v, want ErrUnavailable saying read-only", err)
		}
		if m.OOMKills() != nil {
			t.Error("OOMKills not nil after a failed Setup")
		}
		pid, err := m.Spawn(func() (int, error) { return 42, nil })
		if pid != 42 || err != nil {
			t.Errorf("Spawn without Setup: %d, %v", pid, err)
		}
		if err := m.Close(); err != nil {
			t.Error(err)
		}
	})
	t.Run("no memory controller", func(t *testing.T) {
		root, procSelf := fakeV2(t, "max")
		writeFiles(t, root, map[string]string{"cgroup.controllers": "cpu io pids\n"})
		m, err := New(Config{Root: root, ProcSelf: procSelf})
		if err != nil {
			t.Fatal(err)
		}
		err = m.Setup()
		if !errorsIs(err, ErrUnavailable) || !strings.Contains(err.Error(), "not delegated") {
			t.Fatalf("Setup: %v, want ErrUnavailable saying the controller is not delegated", err)
		}
		if got := readFile(t, filepath.Join(root, "lifeboat/cgroup.procs")); got != "" {
			t.Errorf("Setup moved %q into the lifeboat leaf", got)
		}
	})
	t.Run("no cgroup files", func(t *testing.T) {
		m, err := New(Config{Root: t.TempDir(), ProcSelf: t.TempDir()})
		if err != nil {
			t.Fatal(err)
		}
		if p := m.Plan(); p.Available || p.Mode != ModeNone || !strings.Contains(p.Reason, "cannot read") {
			t.Fatalf("plan %+v", p)
		}
		if err := m.Setup(); !errorsIs(err, ErrUnavailable) {
			t.Fatalf("Setup: %v", err)
		}
	})
}
