package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/lifeboat-project/lifeboat/internal/testenv"
)

// TestTorchDataLoaderSavesOnStop: a real PyTorch trainer with
// DataLoader(num_workers=2) and a SIGTERM handler that saves and exits,
// under lifeboat as PID 1 with its default flags, saves on SIGTERM and
// lifeboat exits 143: the SIGTERM goes to the process that saves, not to
// its DataLoader workers, which die of a TERM that does not come from
// their parent and make the trainer fail before it has saved (exit 1).
// The same holds whatever runs it as the main process: a shell that does
// not pass TERM on (it dies of it, and the trainer gets TERM then), a
// launcher that passes it on (torchrun, paddle.distributed.launch), and
// one that catches it and does not (the trainer gets it at half the
// trainer's budget).
func TestTorchDataLoaderSavesOnStop(t *testing.T) {
	testenv.RequireTorch(t)
	trainer, err := filepath.Abs("testdata/torch/dataloader.py")
	if err != nil {
		t.Fatal(err)
	}
	launcher, _ := filepath.Abs("testdata/torch/launcher.py")
	py := testenv.Python
	for _, tc := range []struct {
		name  string
		flags []string
		argv  func(out string) []string
	}{
		{"python", nil, func(out string) []string { return []string{py, trainer, out} }},
		{"sh -c", nil, func(out string) []string {
			return []string{"sh", "-c", `cd "$0" && "$1" "$2" "$0"`, out, py, trainer}
		}},
		{"launcher that forwards TERM", nil, func(out string) []string {
			return []string{py, launcher, "forward", py, trainer, out}
		}},
		{"launcher that keeps TERM", []string{"--grace", "20s"}, func(out string) []string {
			return []string{py, launcher, "keep", py, trainer, out}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := t.TempDir()
			args := append([]string{"run", "--log-format", "json"}, tc.flags...)
			args = append(append(args, "--"), tc.argv(out)...)
			p := startEnv(t, "pid1", []string{"OMP_NUM_THREADS=1", "PYTHONDONTWRITEBYTECODE=1"}, args...)
			waitFile(t, p, filepath.Join(out, "ready"))
			p.signal(syscall.SIGTERM)
			code := p.wait()
			stderr := p.stderr.String()
			if _, err := os.Stat(filepath.Join(out, "saved.pt")); err != nil {
				t.Errorf("the trainer did not save on SIGTERM (%v); stderr:\n%s", err, stderr)
			}
			if code != 143 {
				t.Errorf("lifeboat exited %d, want 143 (a preemption); stderr:\n%s", code, stderr)
			}
			if strings.Contains(stderr, "exited unexpectedly") {
				t.Errorf("a DataLoader worker died of the SIGTERM; stderr:\n%s", stderr)
			}
		})
	}
}
