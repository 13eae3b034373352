package e2e

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lifeboat-project/lifeboat/internal/testenv"
	"github.com/lifeboat-project/lifeboat/limits/memory"
)

// TestDoctorJSONKeys: every key of doctor --json from the real binary is
// snake_case, and its flavour is the one lifeboat version names. (A report
// with every part filled in is cmd/lifeboat's TestDoctorReportJSONKeys.)
func TestDoctorJSONKeys(t *testing.T) {
	cmd := exec.Command(lifeboatBin, "doctor", "--json", "--gpu-memory-limit", "1024", "--store", "file://"+t.TempDir())
	cmd.Env = append(os.Environ(), "NVIDIA_VISIBLE_DEVICES=0")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("doctor --json: %v\n%s", err, out)
	}
	testenv.AssertSnakeCase(t, out)
	var got struct {
		Flavour string `json:"flavour"`
	}
	if err := json.Unmarshal(out, &got); err != nil || got.Flavour != versionFlavour(t) {
		t.Errorf("doctor --json flavour = %q (%v), want %q as lifeboat version says", got.Flavour, err, versionFlavour(t))
	}
}

// versionFlavour is the build flavour (static or gpu) that lifeboat
// version names: "lifeboat VERSION FLAVOUR (...) OS/ARCH GOVERSION".
func versionFlavour(t *testing.T) string {
	t.Helper()
	out, err := exec.Command(lifeboatBin, "version").Output()
	if err != nil {
		t.Fatalf("lifeboat version: %v\n%s", err, out)
	}
	f := strings.Fields(string(out))
	if len(f) < 3 || f[0] != "lifeboat" || (f[2] != "static" && f[2] != "gpu") {
		t.Fatalf("lifeboat version printed %q, want lifeboat VERSION static|gpu ...", out)
	}
	return f[2]
}

// TestDoctorExitCode: doctor exits 1 when a check fails (a protection
// asked for that cannot be enforced, a GPU request that cannot be met) and
// 0 when nothing asked for is missing; its report says which protection
// and why. Here no NVML is available, as on CI machines.
func TestDoctorExitCode(t *testing.T) {
	for _, tc := range []struct {
		env    []string
		args   []string
		code   int
		name   string // a protection
		state  string
		failed bool
	}{
		{nil, nil, 0, "gpu_memory_watchdog", stateOff, false},
		{[]string{"NVIDIA_VISIBLE_DEVICES=0"}, []string{"--gpu-memory-limit", "auto"}, 1, "gpu_memory_limit", stateNotEnforceable, true},
		{[]string{"NVIDIA_VISIBLE_DEVICES=0"}, []string{"--gpu-memory-limit", "8192", "--gpu-memory-policy", "term"}, 1, "gpu_memory_watchdog", stateNotEnforceable, true},
		{[]string{"NVIDIA_VISIBLE_DEVICES=0"}, []string{"--gpu-memory-limit", "8192"}, 0, "gpu_memory_watchdog", stateNotEnforceable, false},
		{[]string{"NVIDIA_VISIBLE_DEVICES=0"}, []string{"--gpu-memory-limit", "8192"}, 0, "gpu_memory_limit", stateEnforced, false},
		{[]string{"NVIDIA_VISIBLE_DEVICES=0"}, []string{"--gpus", "none", "--gpu-memory-limit", "auto", "--gpu-memory-policy", "kill"}, 0, "device_visibility", stateOff, false},
		{nil, []string{"--gpus", "MIG-11111111-2222-3333-4444-555555555555,MIG-11111111-2222-3333-4444-555555555556"}, 1, "device_visibility", stateNotEnforceable, true},
		{nil, []string{"--memory-cgroup", "off"}, 0, "oom_score_adj", stateOff, false},
	} {
		for _, asJSON := range []bool{true, false} {
			args := append([]string{"doctor"}, tc.args...)
			if asJSON {
				args = append(args, "--json")
			}
			cmd := exec.Command(lifeboatBin, args...)
			cmd.Env = append(os.Environ(), tc.env...)
			out, _ := cmd.Output()
			if code := cmd.ProcessState.ExitCode(); code != tc.code {
				t.Errorf("%v %v: exit %d, want %d\n%s", tc.env, args, code, tc.code, out)
			}
			if !asJSON {
				state := strings.ToUpper(strings.ReplaceAll(tc.state, "_", " "))
				if !strings.Contains(string(out), "  "+tc.name+": "+state) {
					t.Errorf("%v %v: no %q line:\n%s", tc.env, args, tc.name+": "+state, out)
				}
				continue
			}
			var rep doctorReport
			if err := json.Unmarshal(out, &rep); err != nil {
				t.Fatalf("%v %v: %v\n%s", tc.env, args, err, out)
			}
			if rep.Failed != (tc.code == 1) {
				t.Errorf("%v %v: failed = %v", tc.env, args, rep.Failed)
			}
			found := false
			for _, p := range rep.Protections {
				if p.Name == tc.name {
					found = true
					if p.State != tc.state || p.Failed != tc.failed || p.Detail == "" {
						t.Errorf("%v %v: %+v, want state %s, failed %v", tc.env, args, p, tc.state, tc.failed)
					}
				}
			}
			if !found {
				t.Errorf("%v %v: no protection %s in %+v", tc.env, args, tc.name, rep.Protections)
			}
		}
	}
	cmd := exec.Command(lifeboatBin, "doctor", "--gpu-memory-policy", "explode")
	if out, _ := cmd.CombinedOutput(); cmd.ProcessState.ExitCode() != 2 || !strings.Contains(string(out), "--gpu-memory-policy (LIFEBOAT_GPU_MEMORY_POLICY)") {
		t.Errorf("doctor --gpu-memory-policy explode: exit %d, %s", cmd.ProcessState.ExitCode(), out)
	}
}

// nobodyBinary returns a copy of lifeboat that the user nobody can run, in
// a directory it can write to.
func nobodyBinary(t *testing.T) (bin, dir string) {
	t.Helper()
	dir, err := os.MkdirTemp("", "lifeboat-nobody-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(lifeboatBin)
	if err != nil {
		t.Fatal(err)
	}
	bin = filepath.Join(dir, "lifeboat")
	if err := os.WriteFile(bin, data, 0o755); err != nil {
		t.Fatal(err)
	}
	return bin, dir
}

// TestDoctorUnprivileged: run as nobody, which cannot write its memory
// cgroup (as in an unprivileged pod), doctor says the trainer's cgroup is
// not enforceable and oom_score_adj is what protects lifeboat.
func TestDoctorUnprivileged(t *testing.T) {
	testenv.RequireRoot(t)
	setpriv, err := exec.LookPath("setpriv")
	if err != nil {
		testenv.Skip(t, "no setpriv")
	}
	bin, dir := nobodyBinary(t)
	cmd := exec.Command(setpriv, "--reuid=nobody", "--regid=nogroup", "--clear-groups", bin, "doctor", "--json", "--memory-cgroup", "on")
	cmd.Dir = dir
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("doctor as nobody: %v\n%s", err, out)
	}
	var rep doctorReport
	if err := json.Unmarshal(out, &rep); err != nil {
		t.Fatal(err)
	}
	if rep.Memory.Mode == memory.ModeNone {
		testenv.Skip(t, "no memory cgroup here: "+rep.Memory.Reason)
	}
	want := map[string]string{"trainer_memory_cgroup": stateNotEnforceable, "oom_score_adj": stateEnforced}
	for _, p := range rep.Protections {
		if s, ok := want[p.Name]; ok {
			if p.State != s || p.Failed {
				t.Errorf("%+v, want %s", p, s)
			}
			delete(want, p.Name)
		}
	}
	if len(want) > 0 {
		t.Errorf("missing %v in %+v", want, rep.Protections)
	}
}

// TestDoctorLatestIsWhatRestoreTakes: doctor's latest complete step is the
// one a restore takes, by the store's one rule of what is newest
// (checkpoint.Newest), not the highest step number. The store holds step
// 9000 of one line of work, then step 500 of a run started fresh on
// purpose (--restore never): a new line, the newer work. On the code
// before, doctor said 9000 while a restore took 500.
func TestDoctorLatestIsWhatRestoreTakes(t *testing.T) {
	url := "file://" + filepath.Join(t.TempDir(), "store")
	saveOne(t, nil, url, t.TempDir(), 9000, 1000)
	p := startEnv(t, "plain", nil, "run", "--store", url, "--dir", t.TempDir(), "--restore", "never", "--settle", "200ms", "--scan-interval", "100ms", "--",
		"sh", "-c", `mkdir -p "$LIFEBOAT_DIR/step-000500" && head -c 1000 /dev/urandom > "$LIFEBOAT_DIR/step-000500/model.bin"`)
	waitExit(t, p, 0)
	if code, out := runLifeboat(t, nil, "restore", "--store", url, "--dir", t.TempDir()); code != 0 || !strings.Contains(out, "restored step 500 ") {
		t.Fatalf("restore: exit %d\n%s\nwant step 500, the newer line's", code, out)
	}
	out, _ := exec.Command(lifeboatBin, "doctor", "--json", "--store", url).Output()
	var rep struct {
		Store storeReport `json:"store"`
	}
	if err := json.Unmarshal(out, &rep); err != nil {
		t.Fatalf("doctor --json: %v\n%s", err, out)
	}
	if rep.Store.Latest != 500 || rep.Store.Checkpoints != 2 {
		t.Errorf("doctor: latest complete step %d of %d checkpoints, want 500 of 2 (what a restore takes)", rep.Store.Latest, rep.Store.Checkpoints)
	}
}
