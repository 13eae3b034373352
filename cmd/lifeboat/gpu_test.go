package main

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/lifeboat-project/lifeboat/limits/gpu"
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

// fakeGPU is a gpu.Driver with one device and fixed compute processes.
type fakeGPU struct{ procs []gpu.Process }

func (f *fakeGPU) DeviceCount() (int, error) { return 1, nil }
func (f *fakeGPU) Device(int) (gpu.Device, error) {
	return gpu.Device{UUID: "GPU-fake", MemoryTotal: 80 << 30}, nil
}
func (f *fakeGPU) ComputeProcesses(string) ([]gpu.Process, error) { return f.procs, nil }
func (f *fakeGPU) Close() error                                   { return nil }

// TestGPUWatchdog: past the limit plus the margin the watchdog acts by
// policy on the trainer's processes only; a foreign process using the GPU
// is never counted or signalled.
func TestGPUWatchdog(t *testing.T) {
	const trainer, foreign = 4242, 1
	for _, tc := range []struct {
		policy string
		used   uint64
		sent   []string
		event  string
	}{
		{"term", 9 << 30, []string{"4242:TERM"}, "gpu.memory_over"},
		{"kill", 9 << 30, []string{"4242:KILL"}, "gpu.memory_over"},
		{"warn", 9 << 30, nil, "gpu.memory_warn"},
		{"term", 1 << 30, nil, ""},
	} {
		t.Run(fmt.Sprintf("%s-%dGiB", tc.policy, tc.used>>30), func(t *testing.T) {
			var logBuf strings.Builder
			var sent []string
			o := &gpuOptions{memoryPolicy: tc.policy, watchInterval: time.Second}
			plan := &gpuPlan{driver: &fakeGPU{procs: []gpu.Process{{PID: trainer, UsedMemory: tc.used}, {PID: foreign, UsedMemory: 70 << 30}}},
				devices: []string{"GPU-fake"}, limitMB: 8192}
			w, err := o.newWatchdog(plan, slog.New(slog.NewJSONHandler(&logBuf, nil)))
			if err != nil || w == nil {
				t.Fatalf("newWatchdog: %v, %v", w, err)
			}
			w.tree = func() ([]int, error) { return []int{trainer}, nil }
			w.kill = func(pid int, sig unix.Signal) error {
				sent = append(sent, fmt.Sprintf("%d:%s", pid, strings.TrimPrefix(unix.SignalName(sig), "SIG")))
				return nil
			}
			w.check()
			if fmt.Sprint(sent) != fmt.Sprint(tc.sent) {
				t.Errorf("signals sent %v, want %v", sent, tc.sent)
			}
			if tc.event != "" && !strings.Contains(logBuf.String(), tc.event) {
				t.Errorf("no %s in the log:\n%s", tc.event, logBuf.String())
			}
			if tc.event == "" && logBuf.Len() != 0 {
				t.Errorf("logged under the limit:\n%s", logBuf.String())
			}
		})
	}
	if _, err := (&gpuOptions{memoryPolicy: "maybe", watchInterval: time.Second}).newWatchdog(nil, slog.Default()); err == nil {
		t.Errorf("a bad --gpu-memory-policy was accepted")
	}
	if w, err := (&gpuOptions{memoryPolicy: "warn", watchInterval: time.Second}).newWatchdog(&gpuPlan{}, slog.Default()); w != nil || err != nil {
		t.Errorf("a watchdog without NVML: %v, %v", w, err)
	}
}
