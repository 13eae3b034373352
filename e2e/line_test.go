package e2e

// Lines of work, with the real binary: what is newest, what a local
// checkpoint may beat and what the automatic prune may delete never roll a
// job back or destroy its progress (docs/FORMAT.md, "Lines of work").

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lifeboat-project/lifeboat/checkpoint"
	"github.com/lifeboat-project/lifeboat/internal/testenv"
	"github.com/lifeboat-project/lifeboat/storage"
)

// awaitCommitsPruned waits until p has logged n checkpoint.committed and
// n checkpoint.pruned lines.
func awaitCommitsPruned(t *testing.T, p *lb, n int) {
	t.Helper()
	deadline := time.Now().Add(hangLimit)
	for len(logLines(p.stderr.String(), "checkpoint.committed")) < n || len(logLines(p.stderr.String(), "checkpoint.pruned")) < n {
		if time.Now().After(deadline) {
			t.Fatalf("no %d commits and prunes; stderr:\n%s", n, tail(p.stderr.String()))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// storedSteps is ls's view: "step/world size" of every step, ascending.
func storedSteps(t *testing.T, env []string, url string) []string {
	t.Helper()
	var out []string
	for _, e := range lsJSON(t, env, url) {
		out = append(out, fmt.Sprintf("%d/%d", e.Step, e.WorldSize))
	}
	return out
}

// saveOne runs lifeboat run once over dir with a trainer that writes
// step-NNNNNN/model.bin of size bytes (random) and exits: the final upload
// commits it.
func saveOne(t *testing.T, env []string, url, dir string, step, size int) {
	t.Helper()
	p := startEnv(t, "plain", env, "run", "--store", url, "--dir", dir, "--settle", "200ms", "--scan-interval", "100ms", "--",
		"sh", "-c", fmt.Sprintf(`mkdir -p "$LIFEBOAT_DIR/step-%06d" && head -c %d /dev/urandom > "$LIFEBOAT_DIR/step-%06d/model.bin"`, step, size, step))
	waitExit(t, p, 0)
}

// tmpfsDir is an empty directory on a tmpfs of size bytes: a small volume.
func tmpfsDir(t *testing.T, size int) string {
	t.Helper()
	testenv.RequireRoot(t)
	dir := t.TempDir()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, fmt.Sprintf("size=%d", size)); err != nil {
		t.Fatalf("mount a tmpfs of %d bytes: %v", size, err)
	}
	t.Cleanup(func() { _ = syscall.Unmount(dir, syscall.MNT_DETACH) })
	return dir
}

// TestPruneKeepsWhatThePodCouldNotRestore: the store
// holds step 5000 (6 MB); the replacement pod's --dir is a 4 MB volume.
// The restore falls back (too big), the trainer starts fresh, loudly, and
// commits steps 10, 20 and 30 with --keep 1, pruning after each commit.
// Step 5000 is never deleted: it is another line of work, which this pod
// merely could not restore. On the code before, the first prune deleted
// it.
func TestPruneKeepsWhatThePodCouldNotRestore(t *testing.T) {
	for _, sk := range storeKinds() {
		t.Run(sk.name, func(t *testing.T) {
			url, env := sk.url(t), sk.env(t)
			saveOne(t, env, url, t.TempDir(), 5000, 6<<20)
			if got := storedSteps(t, env, url); !slices.Equal(got, []string{"5000/1"}) {
				t.Fatalf("store holds %v, want step 5000", got)
			}
			small := tmpfsDir(t, 4<<20)
			goDir := t.TempDir()
			p := startEnv(t, "plain", env, append(wsFlags(url, 0, 1, small, "--keep", "1"), stepsTrainer(goDir, 10, 20, 30)...)...)
			for i := range 3 {
				awaitCommitsPruned(t, p, i+1)
				if got := storedSteps(t, env, url); !slices.Contains(got, "5000/1") {
					t.Fatalf("after commit %d and its prune the store holds %v: step 5000 was deleted\n%s", i+1, got, tail(p.stderr.String()))
				}
				release(t, goDir, i+1)
			}
			waitExit(t, p, 0)
			if got := storedSteps(t, env, url); !slices.Equal(got, []string{"30/1", "5000/1"}) {
				t.Errorf("store holds %v, want the new line's 30 (keep 1) and step 5000", got)
			}
			fresh := logLines(p.stderr.String(), "resume.fresh_start")
			if len(fresh) != 1 || fresh[0]["level"] != "WARN" || !strings.Contains(fmt.Sprint(fresh[0]["reason"]), "step 5000") {
				t.Errorf("resume.fresh_start lines %v; want one WARN naming step 5000", fresh)
			}
		})
	}
}

// TestReusedVolumeNotResumedNorUploaded: a reused volume still holds step-009000/ of an earlier
// experiment, last changed before any of the store's commits; the store
// holds this job's steps 300, 400 and 500. The next start restores 500
// (the trainer is told it came from the store), says why the local step
// 9000 is not newer, never uploads it (checkpoint.stale), and after three
// commits with --keep 3 the store holds 600, 700 and 800. On the code
// before, 9000 was resumed as newer (resume.local_newer), committed, and
// the prunes deleted every step of the real run.
func TestReusedVolumeNotResumedNorUploaded(t *testing.T) {
	for _, sk := range storeKinds() {
		t.Run(sk.name, func(t *testing.T) {
			url, env := sk.url(t), sk.env(t)
			volume := t.TempDir()
			if err := os.MkdirAll(filepath.Join(volume, "step-009000"), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(volume, "step-009000", "model.pdparams"), pickleBytes([]byte("another experiment")), 0o644); err != nil {
				t.Fatal(err)
			}
			time.Sleep(20 * time.Millisecond) // past the file system's timestamp tick
			goDir := t.TempDir()
			job := startEnv(t, "plain", env, append(wsFlags(url, 0, 1, t.TempDir()), stepsTrainer(goDir, 300, 400, 500)...)...)
			for i, step := range []int64{300, 400, 500} {
				waitStored(t, env, url, step, 1, true, job)
				release(t, goDir, i+1)
			}
			waitExit(t, job, 0)

			seen := filepath.Join(t.TempDir(), "seen")
			goDir2 := t.TempDir()
			trainer := stepsTrainer(goDir2, 600, 700, 800)
			trainer[len(trainer)-1] = `printf '%s|%s|%s' "$LIFEBOAT_RESUME_STEP" "$LIFEBOAT_RESUME_SOURCE" "$LIFEBOAT_RESUME_DIR" > ` + seen + "\n" + trainer[len(trainer)-1]
			p := startEnv(t, "plain", env, append(wsFlags(url, 0, 1, volume, "--keep", "3"), trainer...)...)
			for i := range 3 {
				awaitCommitsPruned(t, p, i+1)
				release(t, goDir2, i+1)
			}
			waitExit(t, p, 0)
			if b, _ := os.ReadFile(seen); string(b) != "500|store|"+filepath.Join(volume, "step-000500") {
				t.Errorf("the trainer was told %q, want step 500 from the store", b)
			}
			if l := logLines(p.stderr.String(), "resume.local_newer"); len(l) != 0 {
				t.Errorf("the other experiment's step 9000 was taken as newer: %v", l)
			}
			if l := logLines(p.stderr.String(), "resume.local_not_newer"); len(l) != 1 || fmt.Sprint(l[0]["step"]) != "9000" {
				t.Errorf("resume.local_not_newer lines %v; want one for step 9000", l)
			}
			if l := logLines(p.stderr.String(), "checkpoint.stale"); len(l) != 1 || fmt.Sprint(l[0]["step"]) != "9000" {
				t.Errorf("checkpoint.stale lines %v; want one for step 9000", l)
			}
			if got := storedSteps(t, env, url); !slices.Equal(got, []string{"600/1", "700/1", "800/1"}) {
				t.Errorf("store holds %v, want the job's 600, 700 and 800\n%s", got, tail(p.stderr.String()))
			}
		})
	}
}

// TestClockAheadDoesNotRollBack: one pod's clock ran an
// hour ahead when it committed step 400 (its manifest's created time is
// edited so in a file:// store). Its replacement resumes 400 and commits
// 500, 600 and 700 with --keep 3: the store keeps them, and the next pod
// resumes 700. The future time is logged. On the code before, the next
// pod resumed 400 and the prune deleted 500.
func TestClockAheadDoesNotRollBack(t *testing.T) {
	root := filepath.Join(t.TempDir(), "store")
	url := "file://" + root
	saveOne(t, nil, url, t.TempDir(), 400, 1000)
	key := filepath.Join(root, "snapshots", fmt.Sprintf("%020d", 400), "rank-00000-of-00001.json")
	b, err := os.ReadFile(key)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	m["created"] = time.Now().Add(time.Hour).UTC().Format(time.RFC3339Nano)
	if b, err = json.Marshal(m); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(key, append(b, '\n'), 0o644); err != nil {
		t.Fatal(err)
	}

	goDir := t.TempDir()
	p := startEnv(t, "plain", nil, append(wsFlags(url, 0, 1, t.TempDir(), "--keep", "3"), stepsTrainer(goDir, 500, 600, 700)...)...)
	for i := range 3 {
		awaitCommitsPruned(t, p, i+1)
		release(t, goDir, i+1)
	}
	waitExit(t, p, 0)
	if got := storedSteps(t, nil, url); !slices.Equal(got, []string{"500/1", "600/1", "700/1"}) {
		t.Errorf("store holds %v, want 500, 600 and 700\n%s", got, tail(p.stderr.String()))
	}
	if l := logLines(p.stderr.String(), "checkpoint.future_created"); len(l) != 1 || !strings.Contains(fmt.Sprint(l[0]["manifest"]), "00000000000000000400") {
		t.Errorf("checkpoint.future_created lines %v; want one for step 400's manifest", l)
	}
	code, out := runLifeboat(t, nil, "restore", "--store", url, "--dir", t.TempDir())
	if code != 0 || !regexp.MustCompile(`restored step 700 `).MatchString(out) {
		t.Errorf("the next restore: exit %d\n%s\nwant step 700", code, out)
	}
}

// TestPrunedStepNotCommittedAgain: one
// job, one volume, --keep 1: the first pod commits 100, 200 and 300 and
// its prunes leave 300. The second pod restores 300; the volume's
// step-000100/ and step-000200/, untouched since, are stale: never
// committed again (checkpoint.stale), the prune deletes nothing, and the
// store still holds 300 only, which the next restore takes. The same with
// each pod run as `lifeboat restore` (an init container) and then `run
// --restore never`. On the code before, the second pod committed step 200
// again and the next restore took it.
func TestPrunedStepNotCommittedAgain(t *testing.T) {
	for _, mode := range []string{"run", "restore+never"} {
		t.Run(mode, func(t *testing.T) {
			url := "file://" + filepath.Join(t.TempDir(), "store")
			volume, goDir := t.TempDir(), t.TempDir()
			var extra []string
			if mode == "restore+never" {
				if out := restoreInit(t, url, volume); !strings.Contains(out, "no complete checkpoint") {
					t.Fatalf("the first restore found something in an empty store:\n%s", out)
				}
				extra = []string{"--restore", "never"}
			}
			p := startEnv(t, "plain", nil, append(wsFlags(url, 0, 1, volume, append(extra, "--keep", "1")...), stepsTrainer(goDir, 100, 200, 300)...)...)
			for i := range 3 {
				awaitCommitsPruned(t, p, i+1)
				release(t, goDir, i+1)
			}
			waitExit(t, p, 0)
			if got := storedSteps(t, nil, url); !slices.Equal(got, []string{"300/1"}) {
				t.Fatalf("store holds %v after the first pod, want 300", got)
			}
			if mode == "restore+never" {
				if out := restoreInit(t, url, volume); !strings.Contains(out, "restored step 300 ") {
					t.Fatalf("the second pod's restore did not restore step 300:\n%s", out)
				}
			}
			p2 := startEnv(t, "plain", nil, append(wsFlags(url, 0, 1, volume, append(extra, "--keep", "1")...), "--", "true")...)
			waitExit(t, p2, 0)
			var stale []string
			for _, l := range logLines(p2.stderr.String(), "checkpoint.stale") {
				stale = append(stale, fmt.Sprint(l["step"]))
			}
			if slices.Sort(stale); !slices.Equal(stale, []string{"100", "200"}) {
				t.Errorf("checkpoint.stale for steps %v, want 100 and 200", stale)
			}
			if l := logLines(p2.stderr.String(), "checkpoint.committed"); len(l) != 0 {
				t.Errorf("the second pod committed %v", l)
			}
			if l := logLines(p2.stderr.String(), "checkpoint.pruned"); len(l) != 0 {
				t.Errorf("the second pod pruned %v", l)
			}
			if got := storedSteps(t, nil, url); !slices.Equal(got, []string{"300/1"}) {
				t.Errorf("store holds %v after the second pod, want 300 only\n%s", got, tail(p2.stderr.String()))
			}
			if code, out := runLifeboat(t, nil, "restore", "--store", url, "--dir", t.TempDir()); code != 0 || !strings.Contains(out, "restored step 300 ") {
				t.Errorf("the next restore: exit %d\n%s\nwant step 300", code, out)
			}
		})
	}
}

// TestWorldSizeWithoutRank: --world-size 2 with no rank
// from any source is bad input: exit 2 naming what to set, nothing run.
// On the code before, the pod ran quietly as rank 0, and a second pod so
// started stored its checkpoints as revisions of the first's.
func TestWorldSizeWithoutRank(t *testing.T) {
	dir := t.TempDir()
	code, out := runLifeboat(t, nil, "run", "--store", "file://"+filepath.Join(t.TempDir(), "store"), "--dir", dir, "--world-size", "2", "--", "touch", filepath.Join(dir, "ran"))
	if code != 2 || !strings.Contains(out, "world size 2 (from --world-size) but no rank") || !strings.Contains(out, "--rank (LIFEBOAT_RANK)") {
		t.Errorf("exit %d, want 2 naming --rank\n%s", code, out)
	}
	if _, err := os.Stat(filepath.Join(dir, "ran")); err == nil {
		t.Errorf("the trainer ran")
	}
}

// TestCounterNumberedInItsOwnLine: the store holds rank
// 1's manifest of step 5000 of an old 2-rank run (incomplete). A 1-rank
// run saves step-000030/, then backup/latest.bin: the counter checkpoint
// is a revision of step 30, the newest complete step of its own line and
// world size, and the next restore gives it as step 30. On the code
// before, it was filed as step 5000 (the highest step in the listing, of
// any world size, complete or not) and the next pod was told 5000.
func TestCounterNumberedInItsOwnLine(t *testing.T) {
	url := "file://" + filepath.Join(t.TempDir(), "store")
	old := startEnv(t, "plain", nil, append(wsFlags(url, 1, 2, t.TempDir()), "--", "sh", "-c",
		`mkdir -p "$LIFEBOAT_DIR/step-005000" && echo old > "$LIFEBOAT_DIR/step-005000/shard-1.bin"`)...)
	waitExit(t, old, 0)
	goDir := t.TempDir()
	p := startEnv(t, "plain", nil, append(wsFlags(url, 0, 1, t.TempDir()), "--", "sh", "-c", `set -e
mkdir -p "$LIFEBOAT_DIR/step-000030" "$LIFEBOAT_DIR/backup"
echo 30 > "$LIFEBOAT_DIR/step-000030/model.bin"
n=0; while [ ! -e "$0/1" ]; do sleep 0.05; n=$((n+1)); [ $n -lt 2400 ] || exit 1; done
echo 35 > "$LIFEBOAT_DIR/backup/latest.bin"`, goDir)...)
	waitStored(t, nil, url, 30, 1, true, p)
	release(t, goDir, 1)
	waitExit(t, p, 0)
	if got := storedSteps(t, nil, url); !slices.Equal(got, []string{"30/1", "5000/2"}) {
		t.Errorf("store holds %v, want 30 (with the counter revision) and the old rank's 5000\n%s", got, tail(p.stderr.String()))
	}
	e, ok := lsStep(lsJSON(t, nil, url), 30, 1)
	if !ok || e.Revision != 1 || !e.Counter {
		t.Errorf("step 30: %+v; want revision 1, a counter checkpoint", e)
	}
	dir := t.TempDir()
	code, out := runLifeboat(t, nil, "restore", "--store", url, "--dir", dir, "--world-size", "1")
	if b, _ := os.ReadFile(filepath.Join(dir, "backup", "latest.bin")); code != 0 || !strings.Contains(out, "restored step 30 ") || string(b) != "35\n" {
		t.Errorf("the next restore: exit %d, backup/latest.bin %q\n%s\nwant step 30 holding iteration 35", code, b, out)
	}
}

// TestFreshStartOverProgressIsLoud: the store holds a complete step; a run
// with --restore never (and no resume file) starts fresh beside it: one
// WARN names the step and its line, and lifeboat_fresh_start_over_progress
// is 1 while the trainer runs. On the code before, nothing was said.
func TestFreshStartOverProgressIsLoud(t *testing.T) {
	url := "file://" + filepath.Join(t.TempDir(), "store")
	saveOne(t, nil, url, t.TempDir(), 100, 1000)
	addr, goDir := freeAddr(t), t.TempDir()
	p := startEnv(t, "plain", nil, append(wsFlags(url, 0, 1, t.TempDir(), "--restore", "never", "--metrics-addr", addr), "--", "sh", "-c",
		`n=0; while [ ! -e "$0/1" ]; do sleep 0.05; n=$((n+1)); [ $n -lt 2400 ] || exit 1; done`, goDir)...)
	deadline := time.Now().Add(hangLimit)
	for scrape(t, addr, "lifeboat_fresh_start_over_progress") != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("lifeboat_fresh_start_over_progress never 1; stderr:\n%s", tail(p.stderr.String()))
		}
		time.Sleep(50 * time.Millisecond)
	}
	release(t, goDir, 1)
	waitExit(t, p, 0)
	warn := logLines(p.stderr.String(), "resume.fresh_start")
	if len(warn) != 1 || warn[0]["level"] != "WARN" || !regexp.MustCompile(`complete step 100 of this world size \(line [0-9a-f]{16}\)`).MatchString(fmt.Sprint(warn[0]["reason"])) {
		t.Errorf("resume.fresh_start lines %v; want one WARN naming step 100 and its line", warn)
	}
}

// chunkKeys lists the chunk keys s holds.
func chunkKeys(t *testing.T, s storage.Store) map[string]bool {
	t.Helper()
	keys := map[string]bool{}
	if err := s.List(context.Background(), "chunks/", func(oi storage.ObjectInfo) error { keys[oi.Key] = true; return nil }); err != nil {
		t.Fatalf("list chunks: %v", err)
	}
	return keys
}

// TestLateCommitOfReplacedPod: two pods of one job
// overlap. Pod A commits step 40, saves step 50 (24 MB, --upload-limit
// 2MB keeps it uploading) and is preempted (SIGTERM) while uploading it;
// once a chunk of step 50 is stored (its upload, and the created time it
// writes, have begun) A is held there with SIGSTOP, so that the order of
// what follows is chosen, not raced. Its
// replacement B, on its own volume, restores 40, commits 45 and, more than
// checkpoint.ClockAllowance after A's upload began, 50, with --keep 1.
// Then A goes on (SIGCONT): its upload of step 50 lands after B's commit
// and is not committed (checkpoint.late_commit; A still exits 143). The
// store holds B's step 50 only (revision 0, B's manifest), and the next
// restore gives B's files of step 50. On the code before, A's files
// became revision 1 of step 50 over B's, with an older created time.
func TestLateCommitOfReplacedPod(t *testing.T) {
	for _, sk := range storeKinds() {
		t.Run(sk.name, func(t *testing.T) {
			// Each store waits out the clock allowance: at once.
			t.Parallel()
			url, env := sk.url(t), sk.env(t)
			s := openStore(t, env, url)
			goA := t.TempDir()
			a := startEnv(t, "plain", env, append(wsFlags(url, 0, 1, t.TempDir(), "--upload-limit", "2MB", "--grace", "10m"), "--", "sh", "-c", `set -e
await() { n=0; while [ ! -e "$1" ]; do sleep 0.05; n=$((n+1)); [ $n -lt 2400 ] && kill -0 "$PPID" 2>/dev/null || exit 1; done; }
mkdir -p "$LIFEBOAT_DIR/step-000040" "$LIFEBOAT_DIR/step-000050"
echo "pod A step 40" > "$LIFEBOAT_DIR/step-000040/shard-0.bin"
await "$0/1"
head -c 24000000 /dev/urandom > "$0/model.bin"
mv "$0/model.bin" "$LIFEBOAT_DIR/step-000050/model.bin"
await "$0/2"`, goA)...)
			waitStored(t, env, url, 40, 1, true, a)
			before := chunkKeys(t, s)
			release(t, goA, 1)
			waitFor(t, a, func() bool {
				return slices.ContainsFunc(logLines(a.stderr.String(), "checkpoint.upload_started"), func(l map[string]any) bool { return fmt.Sprint(l["step"]) == "50" })
			})
			if err := syscall.Kill(a.pid, syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			// A chunk of step 50 stored: A's upload (and its created
			// time) has begun. Hold A there.
			waitFor(t, a, func() bool {
				for k := range chunkKeys(t, s) {
					if !before[k] {
						return true
					}
				}
				return false
			})
			began := time.Now()
			if err := syscall.Kill(a.pid, syscall.SIGSTOP); err != nil {
				t.Fatal(err)
			}
			held := true
			t.Cleanup(func() {
				if held {
					_ = syscall.Kill(a.pid, syscall.SIGCONT)
				}
			})
			if _, ok := lsStep(lsJSON(t, env, url), 50, 1); ok {
				t.Fatalf("pod A's upload of step 50 ended before it was held; stderr:\n%s", tail(a.stderr.String()))
			}

			// B waits for its save of 50 past the clock allowance: its
			// trainer's waits may last longer than stepsTrainer's.
			goB := t.TempDir()
			trainer := stepsTrainer(goB, 45, 50)
			trainer[len(trainer)-1] = strings.Replace(trainer[len(trainer)-1], "-lt 2400", "-lt 12000", 1)
			b := startEnv(t, "plain", env, append(wsFlags(url, 0, 1, t.TempDir(), "--keep", "1"), trainer...)...)
			awaitCommitsPruned(t, b, 1)
			if r := logLines(b.stderr.String(), "resume.restored"); len(r) != 1 || fmt.Sprint(r[0]["step"]) != "40" {
				t.Fatalf("pod B's resume.restored %v; want step 40", r)
			}
			// The rule names a moment: B's commit of 50 stored more than
			// the clock allowance after A's upload began (no later than
			// began). Wait for that moment, then let B save 50.
			time.Sleep(time.Until(began.Add(checkpoint.ClockAllowance + time.Second)))
			release(t, goB, 1)
			awaitCommitsPruned(t, b, 2)
			var bID string
			for _, l := range logLines(b.stderr.String(), "checkpoint.committed") {
				if fmt.Sprint(l["step"]) == "50" {
					bID = fmt.Sprint(l["manifest_id"])
				}
			}

			if err := syscall.Kill(a.pid, syscall.SIGCONT); err != nil {
				t.Fatal(err)
			}
			held = false
			waitExit(t, a, 143)
			late := logLines(a.stderr.String(), "checkpoint.late_commit")
			if len(late) != 1 || fmt.Sprint(late[0]["step"]) != "50" || late[0]["level"] != "WARN" {
				t.Errorf("pod A's checkpoint.late_commit lines %v; want one WARN for step 50\n%s", late, tail(a.stderr.String()))
			}
			release(t, goB, 2)
			waitExit(t, b, 0)

			if got := storedSteps(t, env, url); !slices.Equal(got, []string{"50/1"}) {
				t.Errorf("store holds %v, want B's step 50 (--keep 1)", got)
			}
			if e, ok := lsStep(lsJSON(t, env, url), 50, 1); !ok || e.Revision != 0 || !slices.Equal(e.IDs, []string{bID}) {
				t.Errorf("step 50: %+v; want revision 0, pod B's manifest %s", e, bID)
			}
			dir := t.TempDir()
			code, out := runLifeboat(t, env, "restore", "--store", url, "--dir", dir)
			got, _ := os.ReadFile(filepath.Join(dir, "step-000050", "shard-0.bin"))
			_, errA := os.Stat(filepath.Join(dir, "step-000050", "model.bin"))
			if code != 0 || !strings.Contains(out, "restored step 50 ") || string(got) != "rank 0 step 000050" || errA == nil {
				t.Errorf("the next restore: exit %d, shard-0.bin %q, pod A's model.bin there: %v\n%s\nwant pod B's step 50", code, got, errA == nil, out)
			}
		})
	}
}

// TestRolledBackSaveCommitted: a trainer saves its
// counter checkpoint backup/latest.pdparams three times: state X, then Y,
// then X again, byte for byte (it rolled back after a divergence). The
// third save is new work and is committed as a new revision; the next
// restore gives X, not the Y the trainer discarded. On the code before,
// the third save was "already committed" and the store's newest stayed Y.
func TestRolledBackSaveCommitted(t *testing.T) {
	for _, sk := range storeKinds() {
		t.Run(sk.name, func(t *testing.T) {
			url, env := sk.url(t), sk.env(t)
			goDir := t.TempDir()
			p := startEnv(t, "plain", env, append(wsFlags(url, 0, 1, t.TempDir()), "--", "sh", "-c", `set -e
await() { n=0; while [ ! -e "$1" ]; do sleep 0.05; n=$((n+1)); [ $n -lt 2400 ] && kill -0 "$PPID" 2>/dev/null || exit 1; done; }
save() {
	python3 -c 'import pickle, sys; pickle.dump({"state": sys.argv[2]}, open(sys.argv[1], "wb"))' "$0/latest.pdparams" "$1"
	mkdir -p "$LIFEBOAT_DIR/backup" && mv "$0/latest.pdparams" "$LIFEBOAT_DIR/backup/latest.pdparams"
}
save state-X; await "$0/1"
save state-Y-diverged; await "$0/2"
save state-X; await "$0/3"`, goDir)...)
			for i := 1; i <= 3; i++ {
				waitFor(t, p, func() bool { return len(logLines(p.stderr.String(), "checkpoint.committed")) >= i })
				release(t, goDir, i)
			}
			waitExit(t, p, 0)
			dir := t.TempDir()
			if code, out := runLifeboat(t, env, "restore", "--store", url, "--dir", dir); code != 0 {
				t.Fatalf("restore: exit %d\n%s", code, out)
			}
			b, err := os.ReadFile(filepath.Join(dir, "backup", "latest.pdparams"))
			if err != nil || !strings.Contains(string(b), "state-X") {
				t.Errorf("the next restore gave %q (%v), want state X, which the trainer saved last; log:\n%s", b, err, tail(p.stderr.String()))
			}
		})
	}
}
