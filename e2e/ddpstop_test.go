package e2e

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lifeboat-project/lifeboat/internal/testenv"
)

// freePort returns a TCP port on 127.0.0.1 that nothing listens on now:
// each DDP job gets its own MASTER_PORT.
func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// startDDP starts a real DDP job on gloo, one `lifeboat run` per rank on
// one fresh file:// store, and waits until every rank has trained a few
// steps.
func startDDP(t *testing.T, world int, flags ...string) []*lb {
	t.Helper()
	return startDDPOn(t, "file://"+t.TempDir(), world, nil, flags...)
}

// startDDPOn is startDDP on store, with env added to each rank's (see
// testdata/torch/ddp.py: MODE, SAVE_EVERY, STEP_SECONDS).
func startDDPOn(t *testing.T, store string, world int, env []string, flags ...string) []*lb {
	t.Helper()
	testenv.RequireTorch(t)
	trainer, err := filepath.Abs("testdata/torch/ddp.py")
	if err != nil {
		t.Fatal(err)
	}
	images, err := filepath.Abs("../images")
	if err != nil {
		t.Fatal(err)
	}
	port := freePort(t)
	var ranks []*lb
	var dirs []string
	for r := 0; r < world; r++ {
		dir := t.TempDir()
		env := append([]string{"MASTER_ADDR=127.0.0.1", "MASTER_PORT=" + strconv.Itoa(port), "RANK=" + strconv.Itoa(r),
			"WORLD_SIZE=" + strconv.Itoa(world), "OMP_NUM_THREADS=1", "PYTHONDONTWRITEBYTECODE=1", "PYTHONPATH=" + images}, env...)
		args := append([]string{"run", "--store", store, "--dir", dir, "--rank", strconv.Itoa(r), "--world-size", strconv.Itoa(world),
			"--log-format", "json", "--termination-log", filepath.Join(t.TempDir(), "termination-log")}, flags...)
		args = append(args, "--", testenv.Python, trainer)
		ranks = append(ranks, startEnv(t, "plain", env, args...))
		dirs = append(dirs, dir)
	}
	for r, dir := range dirs {
		waitFile(t, ranks[r], filepath.Join(dir, "ready"))
	}
	return ranks
}

// stopAtRank0 sends SIGTERM to rank 0 only, checks that every rank exits
// 143, and logs the time from the signal to the last rank's exit (not a
// bound: docs/BENCHMARKS.md records it).
func stopAtRank0(t *testing.T, ranks []*lb) {
	t.Helper()
	sent := time.Now()
	ranks[0].signal(syscall.SIGTERM)
	for r, p := range ranks {
		if code := p.wait(); code != 143 {
			t.Errorf("rank %d exited %d, want 143; stderr:\n%s", r, code, p.stderr.String())
		}
	}
	t.Logf("from rank 0's SIGTERM to the last rank's exit: %s", time.Since(sent).Round(time.Millisecond))
}

// TestDDPStopLeavesOneStep: real DDP jobs on gloo of 2 and 4 ranks that
// save every 3 steps, far more often than --settle (an hour: nothing is
// uploaded before the stop), are stopped by a SIGTERM to rank 0 only.
// With a plain handler, rank 0 saves the step it is at (between two
// periodic saves) and the other ranks' collectives fail before they save;
// with lifeboat.stop_step every rank saves the agreed step. Either way
// every rank exits 143, the store holds a complete step, and the next
// round of every rank resumes that same step, whose files hold it. Before,
// with the handler, each rank's final upload committed only its own newest
// (rank 0 its SIGTERM save, the others their last periodic save): no step
// was complete and every rank started fresh.
func TestDDPStopLeavesOneStep(t *testing.T) {
	for _, world := range []int{2, 4} {
		for _, mode := range []string{"handler", "stopstep"} {
			t.Run(fmt.Sprintf("%d ranks %s", world, mode), func(t *testing.T) {
				store := "file://" + t.TempDir()
				trainer, err := filepath.Abs("testdata/torch/ddp.py")
				if err != nil {
					t.Fatal(err)
				}
				env := []string{"MODE=" + mode, "SAVE_EVERY=3", "STEP_SECONDS=0.01"}
				ranks := startDDPOn(t, store, world, env, "--coord-interval", "200ms", "--grace", "12s", "--settle", "1h")
				stopAtRank0(t, ranks)
				latest := latestComplete(lsJSON(t, nil, store))
				if latest < 3 {
					t.Fatalf("newest complete step %d after the stop, want one", latest)
				}
				for r := range ranks {
					code, text := runLifeboat(t, []string{"RESUME_ONLY=1", "PYTHONDONTWRITEBYTECODE=1"}, "run", "--store", store, "--dir", t.TempDir(),
						"--rank", strconv.Itoa(r), "--world-size", strconv.Itoa(world), "--", testenv.Python, trainer)
					want := fmt.Sprintf("resumed %d %d", latest, latest)
					if code != 0 || !strings.Contains(text, want) {
						t.Errorf("rank %d's next start: exit %d, want 0 and %q:\n%s", r, code, want, text)
					}
				}
			})
		}
	}
}

// TestDDPStopEveryRankExits143: SIGTERM to rank 0 of a real 2-rank DDP
// job on gloo stops the job, and every rank exits 143. Rank 1's
// allreduce fails as soon as rank 0's trainer has saved and left, and its
// trainer exits 1: with the stop record visible to rank 1 that failure is
// part of the job-wide stop. With an hour between rank 1's looks at the
// store, the failure always comes first and rank 1 finds rank 0's record
// only when it looks on the failure (lifeboat exited 1 before); with a
// short interval either may come first, and both end in 143.
func TestDDPStopEveryRankExits143(t *testing.T) {
	for _, interval := range []string{"1h", "200ms"} {
		t.Run("coord-interval "+interval, func(t *testing.T) {
			ranks := startDDP(t, 2, "--coord-interval", interval)
			stopAtRank0(t, ranks)
			if t.Failed() {
				return
			}
			// With an hour between looks, rank 1 learnt of the stop from
			// its trainer's failure, whose own code its log keeps.
			if log := ranks[1].stderr.String(); interval == "1h" &&
				(!strings.Contains(log, `"msg":"supervisor.failed_in_job_stop","status":"trainer exited with code 1"`) ||
					!strings.Contains(log, `"msg":"supervisor.child_exited"`)) {
				t.Errorf("rank 1 does not log its trainer's failure as part of the stop:\n%s", log)
			}
		})
	}
}

// TestTrainerFailureStopsTheJob: a rank whose trainer exits 3 with no
// restart writes a stop record with why, and the other rank stops as on
// preemption (143) instead of training on, or waiting in a collective
// until its timeout; the failed rank exits with its trainer's code.
func TestTrainerFailureStopsTheJob(t *testing.T) {
	store := "file://" + t.TempDir()
	fail := filepath.Join(t.TempDir(), "fail")
	var ranks []*lb
	var dirs []string
	for r, script := range []string{
		// Ends with its lifeboat too, so a failed test does not hang.
		`trap 'exit 0' TERM; touch "$LIFEBOAT_DIR/ready"; while kill -0 $PPID; do sleep 0.05; done`,
		`touch "$LIFEBOAT_DIR/ready"; while [ ! -e "$0" ]; do sleep 0.05; done; exit 3`,
	} {
		dir := t.TempDir()
		ranks = append(ranks, start(t, "plain", "run", "--store", store, "--dir", dir, "--rank", strconv.Itoa(r), "--world-size", "2",
			"--coord-interval", "100ms", "--log-format", "json", "--termination-log", filepath.Join(t.TempDir(), "termination-log"),
			"--", "sh", "-c", script, fail))
		dirs = append(dirs, dir)
	}
	for r, dir := range dirs {
		waitFile(t, ranks[r], filepath.Join(dir, "ready"))
	}
	if err := os.WriteFile(fail, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for r, want := range []int{143, 3} {
		if code := ranks[r].wait(); code != want {
			t.Errorf("rank %d exited %d, want %d; stderr:\n%s", r, code, want, ranks[r].stderr.String())
		}
	}
	if log := ranks[0].stderr.String(); !strings.Contains(log, `"reason":"trainer exited with code 3"`) {
		t.Errorf("rank 0 does not name rank 1's failure as the stop's reason:\n%s", log)
	}
}
