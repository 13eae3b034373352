package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// aheadTrainer saves step-000025 and, on rank 0 only, step-000028 (a rank
// whose SIGTERM save, or whose last periodic save, is a few steps past
// the other's), writes ready, and waits; it exits 0 on SIGTERM.
const aheadTrainer = `
import os, signal, sys, time
rank, d = int(sys.argv[1]), os.environ["LIFEBOAT_DIR"]
signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
for step in [25, 28] if rank == 0 else [25]:
    os.makedirs(os.path.join(d, "step-%06d" % step))
    with open(os.path.join(d, "step-%06d" % step, "shard-%d.bin" % rank), "w") as f:
        f.write("rank %d step %d" % (rank, step))
open(os.path.join(d, "ready"), "w").close()
parent, t0 = os.getppid(), time.time()
while os.getppid() == parent and time.time() - t0 < 120:
    time.sleep(0.05)
sys.exit(1)
`

// TestStopLeavesACommonStep: a job-wide stop of two ranks whose newest
// checkpoints differ (rank 0 has steps 25 and 28, rank 1 step 25; nothing
// settled before the stop, as when a trainer saves more often than
// --settle). Each final upload commits its rank's newest: 28 on rank 0, 25
// on rank 1. Rank 0 then learns rank 1's newest through the store and
// commits its own step 25 too, so the stop leaves step 25 complete and
// the next start of both ranks resumes it (on the code before, no step
// was complete: both ranks started fresh although both had step 25).
func TestStopLeavesACommonStep(t *testing.T) {
	for _, sk := range storeKinds() {
		t.Run(sk.name, func(t *testing.T) {
			url, env := sk.url(t), sk.env(t)
			root := t.TempDir()
			var ranks []*lb
			var dirs []string
			for rank := range 2 {
				dir := filepath.Join(root, fmt.Sprintf("rank-%d", rank))
				if err := os.Mkdir(dir, 0o755); err != nil {
					t.Fatal(err)
				}
				ranks = append(ranks, startEnv(t, "plain", env, "run", "--store", url, "--dir", dir, "--settle", "1h", "--scan-interval", "100ms",
					"--grace", "30s", "--coord-interval", "100ms", "--rank", fmt.Sprint(rank), "--world-size", "2", "--log-format", "json",
					"--termination-log", filepath.Join(t.TempDir(), "termination-log"),
					"--", "python3", "-u", "-c", aheadTrainer, fmt.Sprint(rank)))
				dirs = append(dirs, dir)
			}
			for r, dir := range dirs {
				waitFile(t, ranks[r], filepath.Join(dir, "ready"))
			}
			ranks[0].signal(syscall.SIGTERM)
			for _, r := range ranks {
				waitExit(t, r, 143)
			}
			if c := logLines(ranks[0].stderr.String(), "checkpoint.common_step_committed"); len(c) != 1 || c[0]["step"] != 25.0 {
				t.Errorf("rank 0's checkpoint.common_step_committed lines %v; want one, of step 25\n%s", c, ranks[0].stderr.String())
			}
			for r, want := range []float64{28, 25} {
				if f := logLines(ranks[r].stderr.String(), "coord.flushed"); len(f) != 1 || f[0]["newest"] != want || f[0]["common"] != 25.0 || f[0]["reported"] != 2.0 {
					t.Errorf("rank %d's coord.flushed lines %v; want one: newest %v, both ranks reported, common 25", r, f, want)
				}
			}
			e, _ := lsStep(lsJSON(t, env, url), 25, 2)
			if !e.Complete || !e.Restorable {
				t.Errorf("ls: step 25 %+v; want it complete", e)
			}
			for rank := range 2 {
				out := filepath.Join(root, fmt.Sprintf("resumed-%d", rank))
				p := startEnv(t, "plain", env, append(wsFlags(url, rank, 2, filepath.Join(root, fmt.Sprintf("again-%d", rank))),
					"--", "sh", "-c", `cat "$LIFEBOAT_RESUME_DIR/shard-$0.bin" > "$1"`, fmt.Sprint(rank), out)...)
				waitExit(t, p, 0)
				if b, err := os.ReadFile(out); err != nil || string(b) != fmt.Sprintf("rank %d step 25", rank) {
					t.Errorf("rank %d's next start resumed %q (%v), want its step 25\n%s", rank, b, err, p.stderr.String())
				}
			}
			if t.Failed() {
				t.Logf("rank 0:\n%s\nrank 1:\n%s", ranks[0].stderr.String(), strings.TrimSpace(ranks[1].stderr.String()))
			}
		})
	}
}
