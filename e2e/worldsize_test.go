package e2e

// World-size changes and the pairing of ranks, with the real binary: a job
// of two ranks that comes back with one, and two ranks whose SIGTERM saves
// come from different iterations.

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// wsFlags are the flags of every lifeboat run in these tests.
func wsFlags(url string, rank, world int, dir string, extra ...string) []string {
	return append([]string{"run", "--store", url, "--settle", "200ms", "--scan-interval", "100ms", "--grace", "30s",
		"--rank", fmt.Sprint(rank), "--world-size", fmt.Sprint(world), "--dir", dir}, extra...)
}

// stepsTrainer is a shell trainer that saves step-NNNNNN/shard-R.bin for
// each of steps, in order, and after each one waits for the file go/N
// (N counting from 1) before going on; then it exits 0. A wait gives up
// (exit 1) after two minutes or when lifeboat is gone, so that a failed
// test leaves no trainer behind.
func stepsTrainer(goDir string, steps ...int) []string {
	var b strings.Builder
	b.WriteString(`set -e
save() { mkdir -p "$LIFEBOAT_DIR/step-$1"; printf 'rank %s step %s' "$LIFEBOAT_RANK" "$1" > "$LIFEBOAT_DIR/step-$1/shard-$LIFEBOAT_RANK.bin"; }
await() { n=0; while [ ! -e "$1" ]; do sleep 0.05; n=$((n+1)); [ $n -lt 2400 ] && kill -0 "$PPID" 2>/dev/null || exit 1; done; }
`)
	for i, s := range steps {
		fmt.Fprintf(&b, "save %06d\nawait %q\n", s, filepath.Join(goDir, fmt.Sprint(i+1)))
	}
	return []string{"--", "sh", "-c", b.String()}
}

// release creates go/n: the trainers go on past their nth save.
func release(t *testing.T, goDir string, n int) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(goDir, fmt.Sprint(n)), nil, 0o644); err != nil {
		t.Fatal(err)
	}
}

// lsStep returns ls's entry of step for worldSize, and whether there is one.
func lsStep(entries []lsEntry, step int64, worldSize int) (lsEntry, bool) {
	for _, e := range entries {
		if e.Step == step && e.WorldSize == worldSize {
			return e, true
		}
	}
	return lsEntry{}, false
}

// waitStored waits until ls shows step of worldSize with all its ranks'
// manifests (complete or not, as want says).
func waitStored(t *testing.T, env []string, url string, step int64, worldSize int, complete bool, runs ...*lb) lsEntry {
	t.Helper()
	deadline := time.Now().Add(hangLimit)
	for {
		entries := lsJSON(t, env, url)
		if e, ok := lsStep(entries, step, worldSize); ok && len(e.Ranks) == worldSize && e.Complete == complete {
			return e
		}
		if time.Now().After(deadline) {
			var logs []string
			for _, r := range runs {
				logs = append(logs, tail(r.stderr.String()))
			}
			t.Fatalf("step %d of world size %d not stored with complete=%v in %v; ls: %+v\nlogs:\n%s", step, worldSize, complete, hangLimit, entries, strings.Join(logs, "\n---\n"))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// waitExit waits for p to exit with code.
func waitExit(t *testing.T, p *lb, code int) {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(hangLimit):
		t.Fatalf("lifeboat still running after %v; stderr:\n%s", hangLimit, tail(p.stderr.String()))
	}
	if p.code != code {
		t.Fatalf("exit %d, want %d; stderr:\n%s", p.code, code, tail(p.stderr.String()))
	}
}

// logLines returns the JSON log records of stderr with msg.
func logLines(stderr, msg string) []map[string]any {
	var out []map[string]any
	for _, rec := range logRecords(stderr) {
		if rec["msg"] == msg {
			out = append(out, rec)
		}
	}
	return out
}

// TestWorldSizeChange: a job of two ranks commits steps 5020, 5030 and
// 5031, then comes back with one rank. With --restore-ranks all that rank
// restores both old ranks' files of step 5031, each under its rank's
// directory, and is told where. Without it, it says at WARN that the store
// holds steps of world size 2 only, starts fresh (a new line of work), and
// commits steps 10, 20 and 30 with --keep 3, pruning after each commit:
// none of the new run's steps is ever deleted, and neither is any step of
// the old job, another line of another world size (issue row 2: on the
// code before, the 1-rank run's prune deleted them after three commits).
// lifeboat prune by hand then deletes the old line's steps, naming it.
func TestWorldSizeChange(t *testing.T) {
	for _, sk := range storeKinds() {
		t.Run(sk.name, func(t *testing.T) {
			url, env := sk.url(t), sk.env(t)
			root := t.TempDir()
			goDir := filepath.Join(root, "go")
			if err := os.Mkdir(goDir, 0o755); err != nil {
				t.Fatal(err)
			}

			// The old job: two ranks, three steps.
			var ranks []*lb
			for rank := range 2 {
				dir := filepath.Join(root, fmt.Sprintf("old-rank-%d", rank))
				ranks = append(ranks, startEnv(t, "plain", env, append(wsFlags(url, rank, 2, dir), stepsTrainer(goDir, 5020, 5030, 5031)...)...))
			}
			for i, step := range []int64{5020, 5030, 5031} {
				waitStored(t, env, url, step, 2, true, ranks...)
				release(t, goDir, i+1)
			}
			for _, r := range ranks {
				waitExit(t, r, 0)
			}

			// One rank, --restore-ranks all: both old ranks' files of 5031.
			t.Run("restore-ranks all", func(t *testing.T) {
				dir := filepath.Join(root, "all")
				out := filepath.Join(root, "all.out")
				p := startEnv(t, "plain", append([]string{"LIFEBOAT_RESTORE_RANKS=all"}, env...), append(wsFlags(url, 0, 1, dir),
					"--", "sh", "-c", `printf '%s|%s' "$LIFEBOAT_RESUME_DIR" "$LIFEBOAT_RESUME_STEP" > `+out)...)
				waitExit(t, p, 0)
				b, err := os.ReadFile(out)
				ranksDir := filepath.Join(dir, ".lifeboat-ranks")
				if err != nil || string(b) != ranksDir+"|5031" {
					t.Errorf("the trainer was told %q (%v), want %q", b, err, ranksDir+"|5031")
				}
				for rank := range 2 {
					f := filepath.Join(ranksDir, fmt.Sprintf("rank-%05d", rank), "step-005031", fmt.Sprintf("shard-%d.bin", rank))
					if b, err := os.ReadFile(f); err != nil || string(b) != fmt.Sprintf("rank %d step 005031", rank) {
						t.Errorf("%s: %q, %v; want rank %d's shard of step 5031", f, b, err, rank)
					}
				}
				// The init container's form, and the flag.
				dir2 := filepath.Join(root, "all-init")
				code, output := runLifeboat(t, env, "restore", "--store", url, "--dir", dir2, "--world-size", "1", "--restore-ranks", "all")
				if code != 0 || !strings.Contains(output, "restored step 5031") {
					t.Errorf("lifeboat restore --restore-ranks all: exit %d\n%s", code, output)
				}
				if _, err := os.Stat(filepath.Join(dir2, ".lifeboat-ranks", "rank-00001", "step-005031", "shard-1.bin")); err != nil {
					t.Errorf("lifeboat restore --restore-ranks all: %v", err)
				}
				if code, output := runLifeboat(t, env, "restore", "--store", url, "--dir", dir2, "--restore-ranks", "some"); code != 2 || !strings.Contains(output, "LIFEBOAT_RESTORE_RANKS") {
					t.Errorf("--restore-ranks some: exit %d, %q; want 2 naming the variable", code, output)
				}
				for _, e := range lsJSON(t, env, url) {
					if e.WorldSize == 1 {
						t.Errorf("restoring every rank committed %+v", e)
					}
				}
			})

			// One rank, its own files only: a fresh start, then 10, 20, 30.
			dir := filepath.Join(root, "new")
			p := startEnv(t, "plain", env, append(wsFlags(url, 0, 1, dir, "--keep", "3"), stepsTrainer(goDir+"-new", 10, 20, 30)...)...)
			if err := os.Mkdir(goDir+"-new", 0o755); err != nil {
				t.Fatal(err)
			}
			var committed []int64
			for i, step := range []int64{10, 20, 30} {
				committed = append(committed, step)
				// Rank 0 prunes right after each commit.
				deadline := time.Now().Add(hangLimit)
				for len(logLines(p.stderr.String(), "checkpoint.committed")) < i+1 || len(logLines(p.stderr.String(), "checkpoint.pruned")) < i+1 {
					if time.Now().After(deadline) {
						t.Fatalf("no commit and prune of step %d; stderr:\n%s", step, tail(p.stderr.String()))
					}
					time.Sleep(50 * time.Millisecond)
				}
				var have []int64
				for _, e := range lsJSON(t, env, url) {
					if e.WorldSize == 1 && e.Complete {
						have = append(have, e.Step)
					}
				}
				if !slices.Equal(have, committed) {
					t.Fatalf("after step %d and its prune the new run's complete steps are %v, want %v: prune deleted newer work\n%s",
						step, have, committed, tail(p.stderr.String()))
				}
				release(t, goDir+"-new", i+1)
			}
			waitExit(t, p, 0)
			warn := logLines(p.stderr.String(), "resume.fresh_start")
			if len(warn) != 1 || warn[0]["level"] != "WARN" || !strings.Contains(fmt.Sprint(warn[0]["complete_for_world_sizes"]), "2 (newest step 5031)") ||
				!strings.Contains(fmt.Sprint(warn[0]["hint"]), "--restore-ranks all") {
				t.Errorf("resume.fresh_start lines %v; want one WARN naming world size 2 and --restore-ranks all", warn)
			}
			var steps []string
			for _, e := range lsJSON(t, env, url) {
				steps = append(steps, fmt.Sprintf("%d/%d:%v", e.Step, e.WorldSize, e.Complete))
			}
			// The old job's steps are another line's, of another world
			// size: the new run's prune never touches them.
			if want := []string{"10/1:true", "20/1:true", "30/1:true", "5020/2:true", "5030/2:true", "5031/2:true"}; !slices.Equal(steps, want) {
				t.Errorf("store holds %v, want %v: the new run's own three and every step of the old job", steps, want)
			}
			// lifeboat prune by hand deletes what it is asked, and says
			// which lines it deletes from.
			code, out := runLifeboat(t, env, "prune", "--store", url, "--keep", "3", "--dry-run")
			if code != 0 || !regexp.MustCompile(`would delete from line [0-9a-f]{16}: steps \[5020 5030 5031\]`).MatchString(out) {
				t.Errorf("lifeboat prune --dry-run: exit %d\n%s\nwant it to name the old job's line and steps", code, out)
			}
			if code, out := runLifeboat(t, env, "prune", "--store", url, "--keep", "3"); code != 0 || !strings.Contains(out, "deleted from line ") {
				t.Errorf("lifeboat prune: exit %d\n%s", code, out)
			}
			steps = nil
			for _, e := range lsJSON(t, env, url) {
				steps = append(steps, fmt.Sprintf("%d/%d:%v", e.Step, e.WorldSize, e.Complete))
			}
			if want := []string{"10/1:true", "20/1:true", "30/1:true"}; !slices.Equal(steps, want) {
				t.Errorf("after lifeboat prune --keep 3 the store holds %v, want %v (the line committed last)", steps, want)
			}
		})
	}
}

// counterTrainer saves named steps 5 and 10 (waiting for go/1 between
// them), then waits; on SIGTERM it saves backup/latest.pdparams, an
// unnumbered checkpoint, holding its iteration iter, and exits. It gives
// up (exit 1) after two minutes or when lifeboat is gone.
const counterTrainer = `
import os, pickle, signal, sys, time
d, rank, it, go = os.environ["LIFEBOAT_DIR"], int(os.environ["LIFEBOAT_RANK"]), int(sys.argv[1]), sys.argv[2]
def save(sub, name, iteration):
    os.makedirs(os.path.join(d, sub), exist_ok=True)
    with open(os.path.join(d, sub, name), "wb") as f:
        pickle.dump({"rank": rank, "iteration": iteration}, f, protocol=4)
def term(*_):
    save("backup", "latest.pdparams", it)
    sys.exit(0)
def wait(done):
    t0, parent = time.time(), os.getppid()
    while not done():
        time.sleep(0.05)
        if time.time() - t0 > 120 or os.getppid() != parent:
            sys.exit(1)
signal.signal(signal.SIGTERM, term)
save("step-000005", "model.pdparams", 5)
wait(lambda: os.path.exists(os.path.join(go, "1")))
save("step-000010", "model.pdparams", 10)
wait(lambda: False)
`

// TestCounterRanksResumeNamedRevisions: two ranks commit named steps 5
// and 10, then get SIGTERM; their handlers save backup/latest.pdparams at
// different iterations (50 and 31), each committed by its own lifeboat as
// a counter revision of step 10. Those cannot be paired, but both ranks'
// named step 10 is stored beneath them: ls shows step 10 complete with its
// named revisions and why the counter ones were passed over, and the next
// start resumes the named step 10, iteration 10 (on the code before, it
// fell back to step 5 and lost a whole save interval).
func TestCounterRanksResumeNamedRevisions(t *testing.T) {
	for _, sk := range storeKinds() {
		t.Run(sk.name, func(t *testing.T) {
			url, env := sk.url(t), sk.env(t)
			root := t.TempDir()
			goDir := filepath.Join(root, "go")
			if err := os.Mkdir(goDir, 0o755); err != nil {
				t.Fatal(err)
			}
			var ranks []*lb
			for rank, iter := range []int{50, 31} {
				dir := filepath.Join(root, fmt.Sprintf("rank-%d", rank))
				ranks = append(ranks, startEnv(t, "plain", env, append(wsFlags(url, rank, 2, dir),
					"--", "python3", "-u", "-c", counterTrainer, fmt.Sprint(iter), goDir)...))
			}
			waitStored(t, env, url, 5, 2, true, ranks...)
			release(t, goDir, 1)
			waitStored(t, env, url, 10, 2, true, ranks...)
			for _, r := range ranks {
				r.signal(syscall.SIGTERM)
			}
			for _, r := range ranks {
				waitExit(t, r, 143)
			}
			why := "ranks 0,1 are counter checkpoints: ranks cannot be paired"
			e, _ := lsStep(lsJSON(t, env, url), 10, 2)
			if !e.Complete || !e.Restorable || e.Counter || e.Revision != 0 || e.PassedOver != why {
				t.Errorf("ls: step 10 %+v; want it complete with the named revisions 0, the counter revisions passed over because %s", e, why)
			}
			code, text := runLifeboat(t, env, "ls", "--store", url)
			if code != 0 || !strings.Contains(text, "counter revisions above not restored: "+why) {
				t.Errorf("ls: exit %d\n%s\nwant step 10 with the passed-over counter revisions and why", code, text)
			}

			out := filepath.Join(root, "resumed")
			p := startEnv(t, "plain", env, append(wsFlags(url, 0, 2, filepath.Join(root, "again")),
				"--", "python3", "-c", `import os, pickle, sys
with open(os.path.join(os.environ["LIFEBOAT_RESUME_DIR"], "model.pdparams"), "rb") as f:
    it = pickle.load(f)["iteration"]
with open(sys.argv[1], "w") as f:
    f.write("%s %s" % (os.environ["LIFEBOAT_RESUME_STEP"], it))`, out)...)
			waitExit(t, p, 0)
			if b, err := os.ReadFile(out); err != nil || string(b) != "10 10" {
				t.Errorf("the next start resumed (step, iteration) %q (%v), want 10 10", b, err)
			}
			if fb := logLines(p.stderr.String(), "resume.fallback"); len(fb) != 0 {
				t.Errorf("resume.fallback lines %v; want none", fb)
			}
		})
	}
}
