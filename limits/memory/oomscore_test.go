package memory

import (
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

// TestOOMGroup: cgroup v2's memory.oom.group=1 on lifeboat's cgroup is
// found on a fake tree, said once at Protect and in Describe; without it,
// or on cgroup v1, nothing is said.
func TestOOMGroup(t *testing.T) {
	for _, tc := range []struct {
		name  string
		group string // "" for no file
		want  bool
	}{
		{"v2 with oom.group", "1\n", true},
		{"v2 without", "0\n", false},
		{"v2 on an old kernel", "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root, procSelf := fakeV2(t, "268435456")
			files := map[string]string{"memory.events": eventsFile(0)}
			if tc.group != "" {
				files["memory.oom.group"] = tc.group
			}
			writeFiles(t, root, files)
			writeFiles(t, procSelf, map[string]string{"oom_score_adj": "0\n"})
			var logBuf strings.Builder
			m, err := New(Config{Root: root, ProcSelf: procSelf, OOMScoreAdj: 1000, Log: slog.New(slog.NewJSONHandler(&logBuf, nil))})
			if err != nil {
				t.Fatal(err)
			}
			p := m.Plan()
			if p.OOMGroup != tc.want || p.OOMCounter != filepath.Join(root, "memory.events") {
				t.Fatalf("plan %+v; want OOMGroup %v", p, tc.want)
			}
			if err := m.Protect(); err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			if n := strings.Count(logBuf.String(), `"msg":"memory.oom_group"`); n != map[bool]int{true: 1, false: 0}[tc.want] {
				t.Errorf("%d memory.oom_group warnings:\n%s", n, logBuf.String())
			}
			if got := strings.Contains(m.Describe(), "memory.oom.group=1"); got != tc.want {
				t.Errorf("Describe() = %q", m.Describe())
			}
		})
	}
	root, procSelf := fakeV1(t)
	m, err := New(Config{Root: root, ProcSelf: procSelf})
	if err != nil {
		t.Fatal(err)
	}
	if p := m.Plan(); p.OOMGroup || p.OOMCounter != filepath.Join(root, "memory/ctr/memory.oom_control") {
		t.Fatalf("v1 plan %+v", p)
	}
}

// TestProtectSpawn: after Protect the trainer is started while lifeboat's
// oom_score_adj is the trainer's (a child copies it at fork), and lifeboat
// returns to its own, lowered where allowed; OOM kills are counted on
// lifeboat's own cgroup.
func TestProtectSpawn(t *testing.T) {
	defer goleak.VerifyNone(t)
	root, procSelf := fakeV2(t, "268435456")
	writeFiles(t, root, map[string]string{"memory.events": eventsFile(2)})
	adj := filepath.Join(procSelf, "oom_score_adj")
	writeFiles(t, procSelf, map[string]string{"oom_score_adj": "0\n"})
	m, err := New(Config{Root: root, ProcSelf: procSelf, OOMScoreAdj: 1000})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, ok := m.OOMScores(); ok {
		t.Fatal("OOMScores before Protect")
	}
	if err := m.Protect(); err != nil {
		t.Fatal(err)
	}
	if err := m.Protect(); err != nil {
		t.Fatalf("second Protect: %v", err)
	}
	if tr, lb, ok := m.OOMScores(); !ok || tr != 1000 || lb != LifeboatOOMScoreAdj {
		t.Fatalf("OOMScores = %d, %d, %v", tr, lb, ok)
	}
	if got := readFile(t, adj); got != "-999" {
		t.Fatalf("lifeboat's oom_score_adj %s after Protect, want -999", got)
	}
	var atFork string
	pid, err := m.Spawn(func() (int, error) { atFork = readFile(t, adj); return 4242, nil })
	if err != nil || pid != 4242 {
		t.Fatalf("Spawn = %d, %v", pid, err)
	}
	if atFork != "1000" || readFile(t, adj) != "-999" {
		t.Fatalf("oom_score_adj at fork %s, after %s; want 1000 then -999", atFork, readFile(t, adj))
	}
	if n, err := m.OOMKillCount(); n != 0 || err != nil {
		t.Fatalf("OOMKillCount = %d, %v before any kill", n, err)
	}
	writeFiles(t, root, map[string]string{"memory.events": eventsFile(3)})
	if n, err := m.OOMKillCount(); n != 1 || err != nil {
		t.Fatalf("OOMKillCount = %d, %v; want 1", n, err)
	}
	if d := m.Describe(); !strings.Contains(d, "oom_score_adj 1000 (lifeboat -999)") {
		t.Errorf("Describe() = %q", d)
	}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	// A trainer value not above lifeboat's changes nothing at spawn.
	writeFiles(t, procSelf, map[string]string{"oom_score_adj": "-999\n"})
	m, _ = New(Config{Root: root, ProcSelf: procSelf})
	if err := m.Protect(); err != nil {
		t.Fatal(err)
	}
	if tr, lb, _ := m.OOMScores(); tr != -999 || lb != -999 {
		t.Fatalf("OOMScores without OOMScoreAdj = %d, %d", tr, lb)
	}
	_ = m.Close()
	// Without a readable oom_score_adj there is nothing to protect with.
	os.Remove(adj)
	m, _ = New(Config{Root: root, ProcSelf: procSelf, OOMScoreAdj: 1000})
	if err := m.Protect(); err == nil {
		t.Fatal("Protect without oom_score_adj succeeded")
	}
}
