package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/lifeboat-project/lifeboat/internal/testenv"
)

// requireTorch skips locally (and fails in CI) unless Debian's python3-torch
// is importable by /usr/bin/python3.
func requireTorch(t *testing.T) {
	t.Helper()
	if out, err := exec.Command(wholePython, "-c", "import torch").CombinedOutput(); err != nil {
		testenv.Skip(t, "needs Debian's python3-torch ("+wholePython+"): "+strings.TrimSpace(string(out)))
	}
}

// startTorch runs lifeboat run --store url --dir dir supervising
// testdata/trainers/torch_saver.py with args.
func startTorch(t *testing.T, url, dir string, flags []string, args ...string) *trainerRun {
	t.Helper()
	saver, err := filepath.Abs(filepath.Join("testdata", "trainers", "torch_saver.py"))
	if err != nil {
		t.Fatal(err)
	}
	all := append([]string{"run", "--store", url, "--dir", dir}, wholeFlags...)
	all = append(append(all, flags...), "--", wholePython, "-u", saver)
	return startTrainer(t, []string{"OMP_NUM_THREADS=1"}, append(all, args...)...)
}

// TestTorchCheckpointsCommitted drives the real binary with a trainer that
// saves real PyTorch checkpoints: torch.save's legacy format, torch 1.13's
// distributed checkpoint (.distcp and .metadata) and trainer_state.json
// with NaN. The save its SIGTERM handler makes is committed and a new pod
// resumes it, loading every file with torch. A save cut short by the
// writer's SIGKILL is refused, naming the file, and the step before is
// resumed.
func TestTorchCheckpointsCommitted(t *testing.T) {
	requireTorch(t)
	for _, tc := range []struct {
		name   string
		onTerm string
		code   int
		step   int64
	}{
		{"whole", "save", 143, 200},
		{"killed-mid-save", "killed", 137, 100},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			url := "file://" + filepath.Join(root, "store")
			pod := filepath.Join(root, "pod-1")
			if err := os.Mkdir(pod, 0o755); err != nil {
				t.Fatal(err)
			}
			tlog := filepath.Join(root, "termination-log")
			r := startTorch(t, url, pod, []string{"--termination-log", tlog}, "train", tc.onTerm)
			for e := r.next(t); e.Event != "idle"; e = r.next(t) {
			}
			r.signal(syscall.SIGTERM)
			for range r.events {
			}
			log := r.stderr.String()
			if code := r.wait(); code != tc.code {
				t.Errorf("exit %d, want %d; stderr:\n%s", code, tc.code, tail(log))
			}
			if got := latestComplete(lsJSON(t, nil, url)); got != tc.step {
				t.Fatalf("latest complete step %d, want %d; stderr:\n%s", got, tc.step, tail(log))
			}
			if tc.step == 200 {
				if m := logEvent(log, "checkpoint.interrupted"); m != nil {
					t.Errorf("a whole save was called interrupted: %v", m)
				}
			} else {
				m := logEvent(log, "checkpoint.interrupted")
				if m == nil || m["path"] != "step-000200/model.pt" {
					t.Errorf("checkpoint.interrupted %v, want one with path step-000200/model.pt; stderr:\n%s", m, tail(log))
				}
			}
			// The termination message says what the stop committed, and
			// which newer step it refused.
			want := []string{"the final upload committed step 200", "step 200 stays the latest"}
			if tc.step != 200 {
				want = []string{"step 200, an interrupted save"}
			}
			if b, _ := os.ReadFile(tlog); !strings.Contains(string(b), want[0]) && (len(want) == 1 || !strings.Contains(string(b), want[1])) {
				t.Errorf("termination message %q does not say %q", b, want)
			}

			pod2 := filepath.Join(root, "pod-2")
			if err := os.Mkdir(pod2, 0o755); err != nil {
				t.Fatal(err)
			}
			r2 := startTorch(t, url, pod2, nil, "load")
			e := r2.next(t)
			if e.Event != "loaded" || e.Step != tc.step {
				t.Errorf("resume: %+v, want loaded step %d; stderr:\n%s", e, tc.step, tail(r2.stderr.String()))
			}
			for range r2.events {
			}
			if code := r2.wait(); code != 0 {
				t.Errorf("resume run: exit %d; stdout:\n%s\nstderr:\n%s", code, r2.stdout.String(), tail(r2.stderr.String()))
			}
		})
	}
}
