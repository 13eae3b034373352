package e2e

import (
	"crypto/rand"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lifeboat-project/lifeboat/internal/testenv"
)

// TestOOMKillsTheTrainerNotLifeboat runs lifeboat in a memory cgroup of
// 256 MiB (standing in for a container's limit) with --memory-cgroup on and
// a 200 MiB reserve: a trainer that allocates 512 MiB is OOM-killed in its
// own cgroup, and lifeboat survives to say so, write the termination log
// and exit 137. It needs the cgroup v1 memory hierarchy (as on the machines
// CI runs on) and root.
func TestOOMKillsTheTrainerNotLifeboat(t *testing.T) {
	testenv.RequireRoot(t)
	root := "/sys/fs/cgroup/memory"
	if _, err := os.Stat(filepath.Join(root, "memory.limit_in_bytes")); err != nil {
		testenv.Skip(t, "no cgroup v1 memory hierarchy at "+root)
	}
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	cg := filepath.Join(root, "lifeboat-oomtest-"+hex.EncodeToString(b))
	if err := os.Mkdir(cg, 0o755); err != nil {
		testenv.Skip(t, "cannot create a memory cgroup: "+err.Error())
	}
	t.Cleanup(func() { _ = os.Remove(cg) })
	if err := os.WriteFile(filepath.Join(cg, "memory.limit_in_bytes"), []byte("268435456"), 0o644); err != nil {
		t.Fatalf("set the test cgroup's limit: %v", err)
	}
	tlog := filepath.Join(t.TempDir(), "termination-log")
	cmd := exec.Command("sh", "-c", `echo $$ > "$0/cgroup.procs" && exec "$@"`, cg,
		lifeboatBin, "run", "--memory-cgroup", "on", "--memory-reserve", "200MiB", "--termination-log", tlog,
		"--", "python3", "-c", "b = bytearray(512 << 20)")
	out, _ := cmd.CombinedOutput()
	if code := cmd.ProcessState.ExitCode(); code != 137 {
		t.Fatalf("exit %d, want 137 (the trainer OOM-killed, lifeboat alive to report it); output:\n%s", code, out)
	}
	if !strings.Contains(string(out), `"msg":"supervisor.oom_killed"`) {
		t.Errorf("no supervisor.oom_killed event:\n%s", out)
	}
	if !strings.Contains(string(out), `"msg":"memory.cgroup"`) {
		t.Errorf("no memory.cgroup plan in the log:\n%s", out)
	}
	if b, _ := os.ReadFile(tlog); !strings.Contains(string(b), "killed by the kernel's OOM killer") || !strings.Contains(string(b), "exit code 137") {
		t.Errorf("termination log %q does not say the trainer was OOM-killed", b)
	}
	// lifeboat removed the leaves it made.
	if ents, _ := os.ReadDir(cg); func() bool {
		for _, e := range ents {
			if e.IsDir() {
				return true
			}
		}
		return false
	}() {
		t.Errorf("lifeboat left cgroups behind in %s", cg)
	}
}

// TestOOMScoreUnprivileged runs lifeboat as nobody (as in an unprivileged
// pod: it cannot write the memory cgroup it is in) inside a 200 MiB memory
// cgroup the test makes. The trainer cannot get its own cgroup, so it
// starts with oom_score_adj 1000; allocating past the limit, it is the
// OOM killer's choice, and lifeboat survives to say so, write the
// termination log and exit 137. It needs root to make the cgroup, the
// cgroup v1 memory hierarchy, setpriv and /usr/bin/python3.
func TestOOMScoreUnprivileged(t *testing.T) {
	cg, setpriv := unprivilegedCgroup(t)
	bin, dir := nobodyBinary(t)
	tlog := filepath.Join(dir, "termination-log")
	cmd := exec.Command("sh", "-c", `echo $$ > "$0/cgroup.procs" && exec "$@"`, cg,
		setpriv, "--reuid=nobody", "--regid=nogroup", "--clear-groups",
		bin, "run", "--memory-cgroup", "on", "--termination-log", tlog,
		"--", python, "-c", "print('adj', open('/proc/self/oom_score_adj').read().strip(), flush=True); b = bytearray(400 << 20)")
	cmd.Dir = dir
	out, _ := cmd.CombinedOutput()
	if code := cmd.ProcessState.ExitCode(); code != 137 {
		t.Fatalf("exit %d, want 137 (the trainer OOM-killed, lifeboat alive to report it); output:\n%s", code, out)
	}
	for _, want := range []string{"adj 1000\n", `"msg":"memory.unavailable"`, `"msg":"memory.oom_score"`, `"msg":"supervisor.oom_killed"`} {
		if !strings.Contains(string(out), want) {
			t.Errorf("no %q in the output:\n%s", want, out)
		}
	}
	if b, _ := os.ReadFile(tlog); !strings.Contains(string(b), "killed by the kernel's OOM killer") || !strings.Contains(string(b), "oom_score_adj 1000") || !strings.Contains(string(b), "exit code 137") {
		t.Errorf("termination log %q does not say the trainer was OOM-killed", b)
	}
}

// unprivilegedCgroup makes a v1 memory cgroup limited to 200 MiB for a
// test that runs lifeboat as nobody in it, and returns it with setpriv's
// path. It skips without root, the v1 memory hierarchy, setpriv or
// /usr/bin/python3 (the trainers' interpreter, which nobody can run).
func unprivilegedCgroup(t *testing.T) (cg, setpriv string) {
	t.Helper()
	testenv.RequireRoot(t)
	root := "/sys/fs/cgroup/memory"
	if _, err := os.Stat(filepath.Join(root, "memory.limit_in_bytes")); err != nil {
		testenv.Skip(t, "no cgroup v1 memory hierarchy at "+root)
	}
	setpriv, err := exec.LookPath("setpriv")
	if err != nil {
		testenv.Skip(t, "no setpriv")
	}
	if _, err := os.Stat(python); err != nil {
		testenv.Skip(t, "no "+python)
	}
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	cg = filepath.Join(root, "lifeboat-oomscore-"+hex.EncodeToString(b))
	if err := os.Mkdir(cg, 0o755); err != nil {
		testenv.Skip(t, "cannot create a memory cgroup: "+err.Error())
	}
	t.Cleanup(func() { _ = os.Remove(cg) })
	if err := os.WriteFile(filepath.Join(cg, "memory.limit_in_bytes"), []byte("209715200"), 0o644); err != nil {
		t.Fatalf("set the test cgroup's limit: %v", err)
	}
	return cg, setpriv
}

const python = "/usr/bin/python3"

// TestOOMScoreProtectsLifeboatFromWorkers: a trainer whose 80 workers each
// hold a little memory (every one smaller than lifeboat) runs a 200 MiB
// cgroup out of memory: the workers hold it until all are forked. By size alone the kernel would take lifeboat
// first (it did, on the code before: lifeboat died by SIGKILL); with the
// trainer's tree at oom_score_adj 1000 it takes a process of that tree.
// Which one is the kernel's choice among equals (by their sizes at that
// moment): a worker, and the trainer exits with its own code 3, or the
// trainer's main process, and lifeboat reports the OOM kill with 137.
// What lifeboat promises, and what is asserted, is that it is never the
// one taken: it lives to log supervisor.exit with the trainer's outcome.
func TestOOMScoreProtectsLifeboatFromWorkers(t *testing.T) {
	cg, setpriv := unprivilegedCgroup(t)
	bin, dir := nobodyBinary(t)
	script := filepath.Join(dir, "workers.py")
	if err := os.WriteFile(script, []byte(`import os, sys
# Each worker holds its 3 MiB until the pipe's last writer closes it: the
# parent does once every worker is forked (or when it dies), so the 80
# hold 240 MiB together however slowly the machine forks them.
r, w = os.pipe()
pids = []
for i in range(80):
    pid = os.fork()
    if pid == 0:
        os.close(w)
        b = b"\1" * (3 << 20)
        os.read(r, 1)
        os._exit(0)
    pids.append(pid)
os.close(w)
killed = sum(os.WIFSIGNALED(os.waitpid(p, 0)[1]) for p in pids)
print("workers killed", killed, flush=True)
sys.exit(3 if killed else 0)
`), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("sh", "-c", `echo $$ > "$0/cgroup.procs" && exec "$@"`, cg,
		setpriv, "--reuid=nobody", "--regid=nogroup", "--clear-groups",
		bin, "run", "--memory-cgroup", "on", "--", python, script)
	cmd.Dir = dir
	out, _ := cmd.CombinedOutput()
	code := cmd.ProcessState.ExitCode()
	if !cmd.ProcessState.Exited() {
		t.Fatalf("lifeboat died of %v: the OOM killer took it while the trainer's tree was a candidate; output:\n%s", cmd.ProcessState, out)
	}
	if !strings.Contains(string(out), `"msg":"supervisor.exit"`) {
		t.Errorf("no supervisor.exit: lifeboat did not live to report the trainer's end:\n%s", out)
	}
	switch code {
	case 3: // a worker was taken; the trainer saw it and exited with its own code
		if !strings.Contains(string(out), "workers killed") || !strings.Contains(string(out), `"msg":"memory.oom_kill"`) {
			t.Errorf("exit 3 without the trainer's worker report or memory.oom_kill:\n%s", out)
		}
	case 137: // the trainer's main process was taken, and lifeboat says so
		if !strings.Contains(string(out), `"msg":"supervisor.oom_killed"`) {
			t.Errorf("exit 137 without supervisor.oom_killed:\n%s", out)
		}
	default:
		t.Fatalf("exit %d, want 3 (a worker OOM-killed: the trainer's own code) or 137 (the trainer OOM-killed, reported by lifeboat); output:\n%s", code, out)
	}
}

// TestMemoryCgroupFlags: bad values are usage errors; off and auto (not
// PID 1) leave cgroups alone.
func TestMemoryCgroupFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		code int
		msg  string
	}{
		{[]string{"run", "--memory-cgroup", "maybe", "--", "true"}, 2, "--memory-cgroup (LIFEBOAT_MEMORY_CGROUP)"},
		{[]string{"run", "--memory-cgroup", "on", "--memory-reserve", "lots", "--", "true"}, 2, "--memory-reserve (LIFEBOAT_MEMORY_RESERVE)"},
		{[]string{"run", "--trainer-oom-score-adj", "1001", "--", "true"}, 2, "--trainer-oom-score-adj (LIFEBOAT_TRAINER_OOM_SCORE_ADJ)"},
		{[]string{"run", "--memory-cgroup", "off", "--", "true"}, 0, ""},
		{[]string{"run", "--", "true"}, 0, ""},
	} {
		c := exec.Command(lifeboatBin, tc.args...)
		out, _ := c.CombinedOutput()
		if code := c.ProcessState.ExitCode(); code != tc.code || !strings.Contains(string(out), tc.msg) {
			t.Errorf("%v: exit %d, %q; want %d and %q", tc.args, code, out, tc.code, tc.msg)
		}
		if tc.code == 0 && strings.Contains(string(out), "memory.cgroup") {
			t.Errorf("%v: a memory cgroup was set up", tc.args)
		}
	}
}
