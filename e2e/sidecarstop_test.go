package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/lifeboat-project/lifeboat/coord"
)

// TestSidecarJoinsJobStop: a sidecar (rank 0) and a `lifeboat run` (rank
// 1) share one job. The sidecar's SIGTERM writes a stop record and rank 1
// stops as on preemption (143); another rank's stop reaches the trainer
// beside the sidecar through the stop file in its --dir.
func TestSidecarJoinsJobStop(t *testing.T) {
	for _, first := range []string{"sidecar", "run"} {
		t.Run(first+" stops first", func(t *testing.T) {
			store := "file://" + t.TempDir()
			dir0, dir1 := t.TempDir(), t.TempDir()
			sc := start(t, "plain", "sidecar", "--store", store, "--dir", dir0, "--rank", "0", "--world-size", "2",
				"--coord-interval", "100ms", "--log-format", "json")
			waitFor(t, sc, func() bool { return strings.Contains(sc.stderr.String(), "sidecar.started") })
			run := start(t, "plain", "run", "--store", store, "--dir", dir1, "--rank", "1", "--world-size", "2",
				"--coord-interval", "100ms", "--log-format", "json", "--termination-log", filepath.Join(t.TempDir(), "termination-log"),
				"--", "sh", "-c", `trap 'exit 0' TERM; touch "$LIFEBOAT_DIR/ready"; while kill -0 $PPID; do sleep 0.05; done`)
			waitFile(t, run, filepath.Join(dir1, "ready"))
			if first == "sidecar" {
				sc.signal(syscall.SIGTERM)
				if code := sc.wait(); code != 0 {
					t.Errorf("sidecar exited %d, want 0; stderr:\n%s", code, tail(sc.stderr.String()))
				}
				if code := run.wait(); code != 143 {
					t.Errorf("rank 1 exited %d, want 143; stderr:\n%s", code, tail(run.stderr.String()))
				}
				if log := run.stderr.String(); !strings.Contains(log, `"from_rank":0`) {
					t.Errorf("rank 1 did not follow rank 0's stop:\n%s", tail(log))
				}
				return
			}
			run.signal(syscall.SIGTERM)
			if code := run.wait(); code != 143 {
				t.Errorf("rank 1 exited %d, want 143; stderr:\n%s", code, tail(run.stderr.String()))
			}
			waitFile(t, sc, filepath.Join(dir0, coord.StopFile))
			b, _ := os.ReadFile(filepath.Join(dir0, coord.StopFile))
			if !strings.Contains(string(b), `"from_rank":1`) {
				t.Errorf("the sidecar's stop file holds %s, want rank 1's stop", b)
			}
			sc.signal(syscall.SIGTERM)
			if code := sc.wait(); code != 0 {
				t.Errorf("sidecar exited %d, want 0; stderr:\n%s", code, tail(sc.stderr.String()))
			}
		})
	}
}
