package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
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
