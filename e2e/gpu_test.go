package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lifeboat-project/lifeboat/signals"
)

// TestGPUEnvironment: without an NVIDIA driver (as on CI machines) lifeboat
// logs one line and still gives the trainer CUDA_VISIBLE_DEVICES,
// FLAGS_selected_gpus and the Paddle memory-pool flags from what the
// container was given; bad requests are clear errors and start nothing.
func TestGPUEnvironment(t *testing.T) {
	cmd := exec.Command(lifeboatBin, "run", "--gpu-memory-limit", "8192", "--", "sh", "-c",
		`echo "$CUDA_VISIBLE_DEVICES|$FLAGS_selected_gpus|$FLAGS_gpu_memory_limit_mb|$FLAGS_allocator_strategy"`)
	cmd.Env = append(os.Environ(), "NVIDIA_VISIBLE_DEVICES=2,3")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%v\n%s", err, stderr.String())
	}
	// The runtime renumbers the container's two GPUs 0 and 1.
	if got := strings.TrimSpace(string(out)); got != "0,1|0,1|8192|auto_growth" {
		t.Errorf("trainer saw %q, want CUDA_VISIBLE_DEVICES=0,1 FLAGS_selected_gpus=0,1 FLAGS_gpu_memory_limit_mb=8192 FLAGS_allocator_strategy=auto_growth", got)
	}
	if n := strings.Count(stderr.String(), "gpu.nvml_unavailable"); n != 1 {
		t.Errorf("%d nvml_unavailable lines, want exactly one:\n%s", n, stderr.String())
	}

	marker := filepath.Join(t.TempDir(), "ran")
	for _, tc := range []struct {
		args []string
		code int
		msg  string
	}{
		{[]string{"--gpus", "bogus"}, 2, "--gpus (LIFEBOAT_GPUS)"},
		{[]string{"--gpus", "MIG-11111111-2222-3333-4444-555555555555,MIG-11111111-2222-3333-4444-555555555556"}, 125, "run one trainer per MIG device"},
		{[]string{"--gpu-memory-limit", "lots"}, 2, "--gpu-memory-limit (LIFEBOAT_GPU_MEMORY_LIMIT)"},
	} {
		c := exec.Command(lifeboatBin, append(append([]string{"run"}, tc.args...), "--", "touch", marker)...)
		b, _ := c.CombinedOutput()
		if code := c.ProcessState.ExitCode(); code != tc.code || !strings.Contains(string(b), tc.msg) {
			t.Errorf("%v: exit %d, %q; want %d and %q", tc.args, code, b, tc.code, tc.msg)
		}
	}
	if _, err := os.Stat(marker); err == nil {
		t.Errorf("the trainer started despite a bad GPU request")
	}
}

// TestDoctor: the report names what the trainer gets, the memory plan and
// whether the store answers, as text and JSON, without credentials.
func TestDoctor(t *testing.T) {
	store := "file://" + filepath.Join(t.TempDir(), "store")
	cmd := exec.Command(lifeboatBin, "doctor", "--store", store, "--gpu-memory-limit", "1024")
	cmd.Env = append(os.Environ(), "NVIDIA_VISIBLE_DEVICES=0", "AWS_SECRET_ACCESS_KEY=doctor-secret-xyz")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("doctor: %v\n%s", err, out)
	}
	for _, want := range []string{"CUDA_VISIBLE_DEVICES=0", "FLAGS_gpu_memory_limit_mb=1024", "Memory", "reachable, 0 checkpoints"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("doctor output lacks %q:\n%s", want, out)
		}
	}
	cmd = exec.Command(lifeboatBin, "doctor", "--json", "--store", "s3://lifeboat-doctor/x", "--s3-endpoint", "http://127.0.0.1:1")
	cmd.Env = append(os.Environ(), "AWS_ACCESS_KEY_ID=AKIDDOCTOR", "AWS_SECRET_ACCESS_KEY=doctor-secret-xyz")
	out, _ = cmd.Output()
	if cmd.ProcessState.ExitCode() != 1 {
		t.Errorf("doctor with an unreachable store exited %d, want 1", cmd.ProcessState.ExitCode())
	}
	var rep doctorReport
	if err := json.Unmarshal(out, &rep); err != nil || rep.Store == nil || rep.Store.Reachable || !strings.Contains(rep.Store.Error, "127.0.0.1:1") {
		t.Errorf("doctor --json: %v, %+v\n%s", err, rep.Store, out)
	}
	if strings.Contains(string(out), "doctor-secret-xyz") || strings.Contains(string(out), "AKIDDOCTOR") {
		t.Errorf("credentials in the doctor report:\n%s", out)
	}
}

// TestGPUProtectionRefused: a GPU memory protection the user asked for
// (--gpu-memory-policy term or kill, --gpu-memory-limit auto or a
// fraction) that cannot be enforced because NVML is not available (no
// libnvidia-ml here; the static build has none at all) stops lifeboat with
// exit 2 before the trainer starts, saying what to do; where no GPU is
// visible it is moot and lifeboat runs.
func TestGPUProtectionRefused(t *testing.T) {
	static := filepath.Join(t.TempDir(), "lifeboat-static")
	build := exec.Command("go", "build", "-ldflags", signals.LinkFlag, "-o", static, lifeboatPkg)
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build without cgo: %v\n%s", err, out)
	}
	for _, bin := range []string{lifeboatBin, static} {
		for _, tc := range []struct {
			env  []string
			args []string
			code int
			msg  string
		}{
			{[]string{"NVIDIA_VISIBLE_DEVICES=0"}, []string{"--gpu-memory-limit", "8192", "--gpu-memory-policy", "term"}, 2, "--gpu-memory-policy warn"},
			{[]string{"NVIDIA_VISIBLE_DEVICES=0", "LIFEBOAT_GPU_MEMORY_POLICY=kill"}, []string{"--gpu-memory-limit", "8192"}, 2, "--gpu-memory-policy warn"},
			{[]string{"NVIDIA_VISIBLE_DEVICES=GPU-5d1f6a7e-3b2c-4c8a-9e1f-0a1b2c3d4e5f"}, []string{"--gpu-memory-limit", "auto"}, 2, "give the limit in MiB"},
			{nil, []string{"--gpus", "0", "--gpu-memory-limit", "0.5"}, 2, "give the limit in MiB"},
			{[]string{"NVIDIA_VISIBLE_DEVICES=0"}, []string{"--gpus", "none", "--gpu-memory-limit", "auto", "--gpu-memory-policy", "kill"}, 0, ""},
			{[]string{"NVIDIA_VISIBLE_DEVICES=void"}, []string{"--gpu-memory-limit", "8192", "--gpu-memory-policy", "kill"}, 0, ""},
			// "all" on a machine without /dev/nvidiaN: a CUDA image on a CPU node.
			{[]string{"NVIDIA_VISIBLE_DEVICES=all"}, []string{"--gpu-memory-limit", "8192", "--gpu-memory-policy", "term"}, 0, ""},
			{[]string{"NVIDIA_VISIBLE_DEVICES=0"}, []string{"--gpu-memory-limit", "8192"}, 0, "gpu.watchdog_unavailable"},
		} {
			marker := filepath.Join(t.TempDir(), "ran")
			c := exec.Command(bin, append(append([]string{"run"}, tc.args...), "--", "touch", marker)...)
			c.Env = append(os.Environ(), tc.env...)
			out, _ := c.CombinedOutput()
			name := fmt.Sprintf("%s %v %v", filepath.Base(bin), tc.env, tc.args)
			if code := c.ProcessState.ExitCode(); code != tc.code || !strings.Contains(string(out), tc.msg) {
				t.Errorf("%s: exit %d, %q; want %d and %q", name, code, out, tc.code, tc.msg)
			}
			_, err := os.Stat(marker)
			if ran := err == nil; ran != (tc.code == 0) {
				t.Errorf("%s: trainer ran: %v", name, ran)
			}
			if n := strings.Count(string(out), "lifeboat run: "); tc.code == 2 && n != 1 {
				t.Errorf("%s: %d error lines, want one:\n%s", name, n, out)
			}
		}
	}
}
