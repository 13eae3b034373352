package e2e

// Two pods of one rank, with the real binary: a live
// pod's claim of its rank in the store (coord/claim/) makes a second live
// pod of the same rank fail loudly before it commits anything, while a
// preempted pod's final upload overlapping its replacement's start goes on
// as before.

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// awaitCommitted waits until p has logged a checkpoint.committed of step.
func awaitCommitted(t *testing.T, p *lb, step int) {
	t.Helper()
	deadline := time.Now().Add(hangLimit)
	for !jsonLogHas(p.stderr.String(), "checkpoint.committed", map[string]string{"step": fmt.Sprint(step)}) {
		if time.Now().After(deadline) || !p.alive() {
			t.Fatalf("no commit of step %d (exit %d); stderr:\n%s", step, p.code, tail(p.stderr.String()))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// podTrainer is stepsTrainer whose saves hold pod's name: two pods' saves
// of one step differ, as two real trainers' do.
func podTrainer(goDir, pod string, steps ...int) []string {
	argv := stepsTrainer(goDir, steps...)
	argv[len(argv)-1] = strings.Replace(argv[len(argv)-1], "printf 'rank %s step %s'", "printf 'pod "+pod+" rank %s step %s'", 1)
	return argv
}

// wrote reports whether p logged a commit that wrote a manifest (not one
// that found the same files committed already, which writes nothing).
func wrote(p *lb) bool {
	for _, rec := range logLines(p.stderr.String(), "checkpoint.committed") {
		if rec["already_committed"] != true {
			return true
		}
	}
	return false
}

// claimRun is the run id p logged in coord.claimed.
func claimRun(t *testing.T, p *lb) string {
	t.Helper()
	for _, rec := range logLines(p.stderr.String(), "coord.claimed") {
		if s, ok := rec["run"].(string); ok && s != "" {
			return s
		}
	}
	t.Fatalf("no coord.claimed with a run id; stderr:\n%s", tail(p.stderr.String()))
	return ""
}

// TestTwoPodsOneRank: a 2-rank job's Indexed Job gives
// two pods --rank 1. Pod A trains and has committed step 1; pod B starts
// on the same store with the same rank and saves its own step 1. B must
// fail loudly (exit 78, coord.rank_claimed naming A's run) before it
// commits anything: no revision of B's is stored over A's. On the code
// before, B committed its step 1 as revision 1 over A's with one INFO
// checkpoint.revised, and ls showed the step as A's and B's at once.
// The same holds for a single-rank job run twice (a Deployment of two
// replicas): both pods are rank 0 of world size 1.
func TestTwoPodsOneRank(t *testing.T) {
	for _, sk := range storeKinds() {
		for _, ws := range []struct{ rank, world int }{{1, 2}, {0, 1}} {
			t.Run(fmt.Sprintf("%s/rank-%d-of-%d", sk.name, ws.rank, ws.world), func(t *testing.T) {
				twoPodsOneRank(t, sk, ws.rank, ws.world)
			})
		}
	}
}

func twoPodsOneRank(t *testing.T, sk storeKind, rank, world int) {
	url, env := sk.url(t), sk.env(t)
	goA, goB := t.TempDir(), t.TempDir()
	flags := func(dir string) []string {
		return wsFlags(url, rank, world, dir, "--coord-interval", "100ms", "--grace", "10s")
	}
	a := startEnv(t, "plain", env, append(flags(t.TempDir()), podTrainer(goA, "A", 1, 2, 3)...)...)
	awaitCommitted(t, a, 1)

	tlog := filepath.Join(t.TempDir(), "termination-log")
	b := startEnv(t, "plain", env, append(flags(t.TempDir()), append([]string{"--termination-log", tlog}, podTrainer(goB, "B", 1, 2)...)...)...)
	deadline := time.Now().Add(hangLimit)
	for b.alive() {
		if wrote(b) {
			t.Fatalf("pod B committed while pod A holds rank %d; B's stderr:\n%s", rank, tail(b.stderr.String()))
		}
		if time.Now().After(deadline) {
			t.Fatalf("pod B still running after %v; stderr:\n%s", hangLimit, tail(b.stderr.String()))
		}
		time.Sleep(20 * time.Millisecond)
	}
	runA := claimRun(t, a)
	if b.code != codeRankClaimed {
		t.Fatalf("pod B exit %d, want %d; stderr:\n%s", b.code, codeRankClaimed, tail(b.stderr.String()))
	}
	if !jsonLogHas(b.stderr.String(), "coord.rank_claimed", map[string]string{"level": "ERROR", "rank": fmt.Sprint(rank), "other_run": runA}) {
		t.Errorf("pod B logged no ERROR coord.rank_claimed naming pod A's run %s; stderr:\n%s", runA, tail(b.stderr.String()))
	}
	if want := "give every pod its own rank (--rank, LIFEBOAT_RANK, PADDLE_TRAINER_ID, RANK, JOB_COMPLETION_INDEX, VC_TASK_INDEX)"; !strings.Contains(b.stderr.String(), want) {
		t.Errorf("pod B's coord.rank_claimed does not say %q; stderr:\n%s", want, tail(b.stderr.String()))
	}
	if msg, _ := os.ReadFile(tlog); !strings.HasPrefix(string(msg), "exit 78: another live pod claims this rank: run "+runA) {
		t.Errorf("pod B's termination log %q does not say why it exits 78", msg)
	}
	if wrote(b) || len(logLines(b.stderr.String(), "checkpoint.revised")) > 0 {
		t.Errorf("pod B committed; stderr:\n%s", b.stderr.String())
	}

	// Pod A either saw B too (78) or goes on; a stop ends it.
	if a.alive() {
		a.signal(syscall.SIGTERM)
	}
	code := a.wait()
	t.Logf("pod A exit %d, coord.rank_claimed %d", code, len(logLines(a.stderr.String(), "coord.rank_claimed")))
	if code != 143 && code != codeRankClaimed {
		t.Errorf("pod A exit %d, want 143 or %d; stderr:\n%s", code, codeRankClaimed, tail(a.stderr.String()))
	}
	for _, e := range lsJSON(t, env, url) {
		if e.Revision != 0 {
			t.Errorf("ls: step %d holds revision %d: a second pod's snapshot over the first's", e.Step, e.Revision)
		}
	}
}

// TestPreemptedPodOverlapsItsReplacement: the preemption overlap that must
// never count as two pods of one rank. Pod A is stopped (SIGTERM) while
// its trainer's last save (step 2, 6 MB) uploads slowly (--upload-limit);
// its replacement B starts while A's final upload still runs, restores,
// and commits step 3. Neither fails: A exits 143 once its final upload
// ends, B exits 0, and neither logs coord.rank_claimed.
func TestPreemptedPodOverlapsItsReplacement(t *testing.T) {
	for _, sk := range storeKinds() {
		t.Run(sk.name, func(t *testing.T) {
			url, env := sk.url(t), sk.env(t)
			dirA := t.TempDir()
			flags := func(dir string, extra ...string) []string {
				return wsFlags(url, 1, 2, dir, append([]string{"--coord-interval", "100ms", "--grace", "60s"}, extra...)...)
			}
			// A saves step 1, then on SIGTERM a 6 MB step 2, and exits.
			trainerA := `set -e
trap 'mkdir -p "$LIFEBOAT_DIR/step-000002" && head -c 6000000 /dev/urandom > "$LIFEBOAT_DIR/step-000002/shard.bin"; exit 0' TERM
mkdir -p "$LIFEBOAT_DIR/step-000001" && echo one > "$LIFEBOAT_DIR/step-000001/shard.bin"
while :; do sleep 0.05; done`
			a := startEnv(t, "plain", env, append(flags(dirA, "--upload-limit", "1MB", "--workers", "1"), "--", "sh", "-c", trainerA)...)
			awaitCommitted(t, a, 1)
			a.signal(syscall.SIGTERM)
			waitLog(t, a, `"checkpoint.upload_started"`)
			for !jsonLogHas(a.stderr.String(), "checkpoint.upload_started", map[string]string{"step": "2"}) {
				if !a.alive() {
					t.Fatalf("pod A exited before its final upload of step 2; stderr:\n%s", tail(a.stderr.String()))
				}
				time.Sleep(10 * time.Millisecond)
			}

			goB := t.TempDir()
			b := startEnv(t, "plain", env, append(flags(t.TempDir()), stepsTrainer(goB, 3)...)...)
			awaitCommitted(t, b, 3)
			if !a.alive() {
				t.Fatalf("pod A's final upload ended before pod B committed: the overlap did not happen; A's stderr:\n%s", tail(a.stderr.String()))
			}
			release(t, goB, 1)
			waitExit(t, b, 0)
			waitExit(t, a, 143)
			for _, p := range []*lb{a, b} {
				if len(logLines(p.stderr.String(), "coord.rank_claimed")) > 0 {
					t.Errorf("a preemption overlap was taken for two pods of one rank; stderr:\n%s", p.stderr.String())
				}
			}
			if !jsonLogHas(a.stderr.String(), "checkpoint.committed", map[string]string{"step": "2"}) {
				t.Errorf("pod A's final upload did not commit step 2; stderr:\n%s", tail(a.stderr.String()))
			}
			if _, err := os.Stat(filepath.Join(dirA, "step-000002", "shard.bin")); err != nil {
				t.Errorf("pod A's step 2: %v", err)
			}
		})
	}
}

// TestTwoSidecarsOneRank: the same with `lifeboat sidecar`: the second
// sidecar of rank 1 commits nothing and exits 78 at once.
func TestTwoSidecarsOneRank(t *testing.T) {
	url := "file://" + filepath.Join(t.TempDir(), "store")
	save := func(dir, content string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Join(dir, "step-000001"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "step-000001", "shard.bin"), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	flags := func(dir string) []string {
		return []string{"sidecar", "--store", url, "--dir", dir, "--settle", "200ms", "--scan-interval", "100ms",
			"--rank", "1", "--world-size", "2", "--coord-interval", "100ms", "--grace", "10s"}
	}
	dirA, dirB := t.TempDir(), t.TempDir()
	save(dirA, "pod A")
	a := start(t, "plain", flags(dirA)...)
	awaitCommitted(t, a, 1)
	save(dirB, "pod B")
	b := start(t, "plain", flags(dirB)...)
	waitExit(t, b, codeRankClaimed)
	if !jsonLogHas(b.stderr.String(), "coord.rank_claimed", map[string]string{"level": "ERROR", "other_run": claimRun(t, a)}) {
		t.Errorf("sidecar B logged no coord.rank_claimed naming A's run; stderr:\n%s", tail(b.stderr.String()))
	}
	if len(logLines(b.stderr.String(), "checkpoint.committed")) > 0 {
		t.Errorf("sidecar B committed; stderr:\n%s", b.stderr.String())
	}
	if a.alive() {
		a.signal(syscall.SIGTERM)
	}
	if code := a.wait(); code != 0 && code != codeRankClaimed {
		t.Errorf("sidecar A exit %d, want 0 or %d; stderr:\n%s", code, codeRankClaimed, tail(a.stderr.String()))
	}
	for _, e := range lsJSON(t, nil, url) {
		if e.Revision != 0 {
			t.Errorf("ls: step %d holds revision %d", e.Step, e.Revision)
		}
	}
}

// TestKilledPodsClaimGoesStale: pod A of rank 1 is SIGKILLed (no stop, no
// release: its claim stays); its replacement B starts at once. B's first
// commit waits until A's claim is stale (it did not answer B's flag for 5
// intervals, at least 2 s, by B's clock), then goes on: B logs
// coord.claim_stale naming A's run,
// commits, and exits 0; neither is taken for a twin.
func TestKilledPodsClaimGoesStale(t *testing.T) {
	for _, sk := range storeKinds() {
		t.Run(sk.name, func(t *testing.T) {
			url, env := sk.url(t), sk.env(t)
			flags := func(dir string) []string {
				return wsFlags(url, 1, 2, dir, "--coord-interval", "100ms", "--grace", "10s")
			}
			a := startEnv(t, "plain", env, append(flags(t.TempDir()), stepsTrainer(t.TempDir(), 1, 2)...)...)
			awaitCommitted(t, a, 1)
			runA := claimRun(t, a)
			a.signal(syscall.SIGKILL)
			a.wait()

			goB := t.TempDir()
			b := startEnv(t, "plain", env, append(flags(t.TempDir()), stepsTrainer(goB, 2)...)...)
			awaitCommitted(t, b, 2)
			if !jsonLogHas(b.stderr.String(), "coord.claim_stale", map[string]string{"run": runA}) {
				t.Errorf("pod B committed without finding pod A's claim stale; stderr:\n%s", tail(b.stderr.String()))
			}
			release(t, goB, 1)
			waitExit(t, b, 0)
			if len(logLines(b.stderr.String(), "coord.rank_claimed")) > 0 {
				t.Errorf("a killed pod's claim was taken for a twin; stderr:\n%s", b.stderr.String())
			}
		})
	}
}
