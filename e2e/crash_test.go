package e2e

// The crash-consistency test: lifeboat is SIGKILLed at
// random moments of an upload and commit, and the trainer is SIGKILLed in
// the middle of writing the new checkpoint, many times, and every time a
// restore afterwards yields one whole checkpoint, never a mix or a cut file.
//
// The default trial count is small enough for CI. The long run is
//
//	LIFEBOAT_CRASH_TRIALS=200 go test -run TestCrash ./e2e/
//
// and LIFEBOAT_CRASH_SEED=N repeats the files and kill fractions of an
// earlier run (the kill moments themselves depend on the machine's timing).

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"math/rand/v2"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lifeboat-project/lifeboat/checkpoint"
	"github.com/lifeboat-project/lifeboat/pipeline"
	"github.com/lifeboat-project/lifeboat/resume"
	"github.com/lifeboat-project/lifeboat/storage"
	"github.com/lifeboat-project/lifeboat/storage/s3"
)

const (
	crashTrialsEnv     = "LIFEBOAT_CRASH_TRIALS"
	crashSeedEnv       = "LIFEBOAT_CRASH_SEED"
	crashDefaultTrials = 12 // per store kind, after one calibration run

	// crashCalibrations runs are measured before the trials; the longest
	// counts, because one fast run would make every kill too early.
	crashCalibrations = 3
	// The delays are drawn from [0, range x the calibrated window]: for
	// kills counted from lifeboat's start twice the window, so that the
	// latest land after the commit (the new checkpoint wins) even when the
	// machine is busier than during calibration and the earliest before
	// the upload (the previous one stays); for kills counted from the
	// upload's start 1.5x, so that most land inside the upload.
	crashRangeStart  = 2.0
	crashRangeUpload = 1.5

	logUploadStarted = `"msg":"checkpoint.upload_started"`
	logCommitted     = `"msg":"checkpoint.committed"`
)

// crashTrainer is the trainer lifeboat supervises: it copies the new
// checkpoint from the staging directory ($0) into $LIFEBOAT_DIR/$1 the way
// a save writes it (files created or truncated and written in place), then
// idles until it is killed with lifeboat.
const crashTrainer = `set -e; mkdir -p "$LIFEBOAT_DIR/$1"; cp -R "$0/." "$LIFEBOAT_DIR/$1/"; exec sleep 3600`

// crashCutTrainer is the trainer of a trainer-kill trial: it writes the new
// checkpoint from the staging directory ($0) into $LIFEBOAT_DIR/$1 file by
// file in name order, each truncated and written in place, and when it
// reaches the file $2 it writes only its first $3 bytes and SIGKILLs
// itself: a save cut short by the OOM killer or the grace deadline.
const crashCutTrainer = `set -e; d="$LIFEBOAT_DIR/$1"; mkdir -p "$d"
for f in $(cd "$0" && ls); do
	if [ "$f" = "$2" ]; then head -c "$3" "$0/$f" > "$d/$f"; kill -9 $$; fi
	cat "$0/$f" > "$d/$f"
done
exec sleep 3600`

// crashCkpt is one checkpoint the test knows the bytes of.
type crashCkpt struct {
	step  int64
	rev   int               // its revision of step
	files map[string]string // slash path under --dir -> hex SHA-256
}

// crashTrial is what one trial does, decided before it runs.
type crashTrial struct {
	index  int
	layout string  // "dirs": step-000001/ then step-000002/; "inplace": backup/ rewritten
	anchor string  // "start": delay counted from lifeboat's start; "upload": from its upload_started line
	frac   float64 // the delay as a fraction of the anchor's range
	seed   uint64
}

// crashTiming is what the calibration run measured.
type crashTiming struct {
	total  time.Duration // lifeboat started -> commit logged
	upload time.Duration // upload_started logged -> commit logged
}

func (c crashTiming) delay(tr crashTrial) time.Duration {
	if tr.anchor == "upload" {
		return time.Duration(tr.frac * crashRangeUpload * float64(c.upload))
	}
	return time.Duration(tr.frac * crashRangeStart * float64(c.total))
}

// TestCrash: for each store, SIGKILL lifeboat (PID 1 of its own PID
// namespace, so the kernel kills the trainer with it) at random moments
// while it restores the previous checkpoint, notices the new one and
// uploads and commits it. Afterwards `lifeboat restore` into an empty
// directory must succeed without falling back and yield exactly the
// previous checkpoint's files or exactly the new one's, each hashing to
// what the trainer wrote; `lifeboat verify --read-data-subset all latest`
// must pass for the restored step.
//
// Each store kind first runs three calibration trials that are killed only
// after the commit is logged; they measure how long lifeboat takes from its
// start to the commit and from the upload's start to the commit, and the
// longest counts. A third of the trials then kill at a delay after
// lifeboat's start, drawn from [0, 2x] that window, and two thirds at a
// delay after the upload_started log line, drawn from [0, 1.5x] the
// upload's window; each anchor's delays are stratified (one draw per equal
// slice, in random order), so kills cover the whole window at any trial
// count and both outcomes occur. Layouts alternate between a directory per
// step and a directory rewritten in place. The frozen "embeddings" file is
// the same in both checkpoints, so the new upload reuses stored chunks.
//
// Then half as many trials (at least two) kill the trainer instead, in the
// middle of writing the new checkpoint: into a new step directory or in
// place over the previous one restored into backup/, cut at a random byte
// of a random file. Lifeboat must exit 137, log checkpoint.interrupted and
// commit nothing of it: the restore gives exactly the previous checkpoint.
// The .pdparams and .pdopt files are whole pickles, so that a format check
// finds the whole ones whole and the cut ones cut.
func TestCrash(t *testing.T) {
	trials := crashDefaultTrials
	if s := os.Getenv(crashTrialsEnv); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			t.Fatalf("%s=%q: want a positive number of trials", crashTrialsEnv, s)
		}
		trials = n
	}
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv(crashSeedEnv); s != "" {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("%s=%q: want a number", crashSeedEnv, s)
		}
		seed = n
	}
	t.Logf("%d trials per store kind; %s=%d reproduces the files and kill fractions", trials, crashSeedEnv, seed)

	for ki, sk := range storeKinds() {
		t.Run(sk.name, func(t *testing.T) {
			for _, kv := range sk.env(t) { // skips here when the store is absent
				k, v, _ := strings.Cut(kv, "=")
				t.Setenv(k, v)
			}
			plan := crashPlan(seed+uint64(ki)<<32, trials)

			var timing crashTiming
			for c := range crashCalibrations {
				t.Run(fmt.Sprintf("calibrate-%d", c), func(t *testing.T) {
					ct := runCrashTrial(t, sk, crashTrial{index: -1, layout: []string{"dirs", "inplace"}[c%2], seed: plan[0].seed ^ uint64(c+1)}, nil).timing
					t.Logf("start to commit %s, upload to commit %s", ct.total, ct.upload)
					timing.total, timing.upload = max(timing.total, ct.total), max(timing.upload, ct.upload)
				})
			}
			if t.Failed() {
				return
			}
			t.Logf("calibration (the longest of %d runs): start to commit %s, upload to commit %s", crashCalibrations, timing.total, timing.upload)

			outcomes := map[string]int{}
			phases := map[string]int{}
			for _, tr := range plan {
				t.Run(fmt.Sprintf("trial-%03d", tr.index), func(t *testing.T) {
					r := runCrashTrial(t, sk, tr, &timing)
					outcomes[r.outcome]++
					phases[tr.anchor+"/"+r.phase]++
					t.Logf("%s %s anchor, kill after %s (%s): %s checkpoint restored",
						tr.layout, tr.anchor, r.delay, r.phase, r.outcome)
				})
			}
			t.Logf("outcomes over %d trials: %v; kill moments by anchor/phase: %v", trials, outcomes, phases)
			if trials >= crashDefaultTrials && !t.Failed() {
				if outcomes["previous"] == 0 || outcomes["new"] == 0 {
					t.Errorf("the kills did not span the upload: outcomes %v; want both the previous and the new checkpoint at least once", outcomes)
				}
				if phases["start/uploading"]+phases["upload/uploading"] == 0 {
					t.Errorf("no kill landed while the upload was in flight (phases %v)", phases)
				}
			}
			for i, tr := range plan[:max(2, (trials+1)/2)] {
				tr.layout = []string{"dirs", "inplace"}[i%2]
				t.Run(fmt.Sprintf("trainer-kill-%03d", i), func(t *testing.T) {
					runTrainerKillTrial(t, sk, tr)
				})
			}
		})
	}
}

// crashPlan decides every trial: layout, anchor, seed, and the delay
// fractions, stratified per anchor.
func crashPlan(seed uint64, trials int) []crashTrial {
	rng := rand.New(rand.NewPCG(seed, 0xc4a54))
	plan := make([]crashTrial, trials)
	byAnchor := map[string][]int{}
	for i := range plan {
		anchor := []string{"start", "upload", "upload"}[i%3]
		plan[i] = crashTrial{index: i, layout: []string{"dirs", "inplace"}[i%2], anchor: anchor, seed: rng.Uint64()}
		byAnchor[anchor] = append(byAnchor[anchor], i)
	}
	for _, idx := range byAnchor {
		perm := rng.Perm(len(idx))
		for k, i := range idx {
			plan[i].frac = (float64(perm[k]) + rng.Float64()) / float64(len(idx))
		}
	}
	return plan
}

// crashResult is what one trial found.
type crashResult struct {
	outcome string // "previous" or "new"
	phase   string // what lifeboat had logged when it was killed: "before-upload", "uploading", "committed"
	delay   time.Duration
	timing  crashTiming // calibration only
}

// runCrashTrial runs one trial in a fresh store. With timing nil it is the
// calibration run: lifeboat is killed only once it has logged the commit,
// and the result carries the measured windows.
func runCrashTrial(t *testing.T, sk storeKind, tr crashTrial, timing *crashTiming) crashResult {
	t.Helper()
	root, url := t.TempDir(), sk.url(t)
	staging, newSub, prev, next := crashSetup(t, root, url, tr)
	p := start(t, "pid1", "run", "--store", url, "--dir", filepath.Join(root, "pod"),
		"--settle", "50ms", "--scan-interval", "20ms", "--keep", "1", "--grace", "30s", "--log-format", "json",
		"--", "sh", "-c", crashTrainer, staging, newSub)
	t0 := time.Now()

	var res crashResult
	switch {
	case timing == nil:
		up := waitLog(t, p, logUploadStarted)
		done := waitLog(t, p, logCommitted)
		res.timing = crashTiming{total: done.Sub(t0), upload: done.Sub(up)}
	case tr.anchor == "start":
		res.delay = timing.delay(tr)
		time.Sleep(time.Until(t0.Add(res.delay)))
	default:
		res.delay = timing.delay(tr)
		up := waitLog(t, p, logUploadStarted)
		time.Sleep(time.Until(up.Add(res.delay)))
	}
	logged := p.stderr.String()
	if !p.alive() {
		t.Fatalf("lifeboat exited (%d) before it was killed; stderr:\n%s", p.code, tail(logged))
	}
	p.signal(syscall.SIGKILL)
	p.wait()
	switch {
	case strings.Contains(logged, logCommitted):
		res.phase = "committed"
	case strings.Contains(logged, logUploadStarted):
		res.phase = "uploading"
	default:
		res.phase = "before-upload"
	}
	res.outcome = checkCrashRestore(t, url, prev, next, p.stderr.String())
	if res.phase == "committed" && res.outcome != "new" {
		t.Errorf("lifeboat logged the commit before it was killed, but restore gave the %s checkpoint", res.outcome)
	}
	return res
}

// crashSetup commits the previous checkpoint of trial tr into the store at
// url, as lifeboat would, and stages the new one under root, where the
// trainer copies it from into --dir's newSub.
func crashSetup(t *testing.T, root, url string, tr crashTrial) (staging, newSub string, prev, next crashCkpt) {
	t.Helper()
	s := openCrashStore(t, url)
	rng := rand.New(rand.NewPCG(tr.seed, 0xf11e5))

	prevSub := "step-000001"
	newSub = "step-000002"
	if tr.layout == "inplace" {
		prevSub, newSub = "backup", "backup"
	}
	embed := 1<<20 + rng.Int64N(7<<20+1) // shared: the same bytes in both checkpoints
	sizes := func() map[string]int64 {
		model := 8<<20 + 1 + rng.Int64N(12<<20)
		if rng.IntN(4) == 0 {
			model = 16 << 20 // a whole number of chunks
		}
		return map[string]int64{
			"model.pdparams": model,
			"optim.pdopt":    1<<20 + rng.Int64N(11<<20+1),
			"embed.pdparams": embed,
			"state.bin":      1 + rng.Int64N(300), // raw bytes: no format check covers it
		}
	}
	tag := func(step int64) func(name string) string {
		return func(name string) string {
			if name == "embed.pdparams" {
				return fmt.Sprintf("%d/%s", tr.seed, name)
			}
			return fmt.Sprintf("%d/%d/%s", tr.seed, step, name)
		}
	}

	// The previous checkpoint, committed with the library as lifeboat would.
	seedDir := filepath.Join(root, "seed")
	prev = crashCkpt{step: 1, files: writeCrashFiles(t, filepath.Join(seedDir, prevSub), prevSub, sizes(), tag(1))}
	u := &checkpoint.Uploader{Store: s, Producer: "crash test"}
	if _, err := u.UploadFiles(context.Background(), seedDir, slices.Sorted(maps.Keys(prev.files)), checkpoint.Target{Step: prev.step, WorldSize: 1}); err != nil {
		t.Fatalf("commit the previous checkpoint: %v", err)
	}
	// The new one, staged where the trainer copies it from.
	staging = filepath.Join(root, "staging")
	next = crashCkpt{step: 2, files: writeCrashFiles(t, staging, newSub, sizes(), tag(2))}
	if tr.layout == "inplace" {
		// An unnumbered directory rewritten in place is a counter
		// checkpoint: the next revision of the step it follows.
		next.step, next.rev = prev.step, prev.rev+1
	}
	return staging, newSub, prev, next
}

// runTrainerKillTrial commits the previous checkpoint, then runs lifeboat
// (PID 1 of its own namespace) over a trainer that SIGKILLs itself in the
// middle of writing the new one, at a byte of a file chosen from the
// trial's seed. Lifeboat must exit 137 with checkpoint.interrupted logged,
// and the restore afterwards must give exactly the previous checkpoint.
func runTrainerKillTrial(t *testing.T, sk storeKind, tr crashTrial) {
	t.Helper()
	root, url := t.TempDir(), sk.url(t)
	staging, newSub, prev, next := crashSetup(t, root, url, tr)
	rng := rand.New(rand.NewPCG(tr.seed, 0xc07))
	var names []string
	for p := range next.files {
		names = append(names, path.Base(p))
	}
	slices.Sort(names)
	cut := names[rng.IntN(len(names))]
	fi, err := os.Stat(filepath.Join(staging, cut))
	if err != nil {
		t.Fatal(err)
	}
	n := rng.Int64N(fi.Size())
	t.Logf("%s: the trainer is killed after %d of the %d bytes of %s", tr.layout, n, fi.Size(), cut)

	p := start(t, "pid1", "run", "--store", url, "--dir", filepath.Join(root, "pod"),
		"--settle", "2s", "--scan-interval", "20ms", "--keep", "1", "--grace", "30s", "--log-format", "json",
		"--", "sh", "-c", crashCutTrainer, staging, newSub, cut, strconv.FormatInt(n, 10))
	if code := p.wait(); code != 137 {
		t.Errorf("exit %d, want 137 (the trainer was SIGKILLed); stderr:\n%s", code, tail(p.stderr.String()))
	}
	if !strings.Contains(p.stderr.String(), `"msg":"checkpoint.interrupted"`) {
		t.Errorf("no checkpoint.interrupted event for the cut save; stderr:\n%s", tail(p.stderr.String()))
	}
	if outcome := checkCrashRestore(t, url, prev, next, p.stderr.String()); outcome != "previous" {
		t.Errorf("the restore gave the %s checkpoint, want the previous one: the new one was never written whole", outcome)
	}
}

// checkCrashRestore restores the latest checkpoint of url into an empty
// directory, checks it is exactly prev or exactly next, verifies the step
// it came from with all data read, and returns "previous" or "new".
func checkCrashRestore(t *testing.T, url string, prev, next crashCkpt, runLog string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "restored")
	cmd := exec.Command(lifeboatBin, "restore", "--store", url, "--dir", dir, "--log-format", "json")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("restore after the kill: %v\n%s%s\nlifeboat run's log:\n%s", err, stdout.String(), stderr.String(), tail(runLog))
	}
	if strings.Contains(stderr.String(), "resume.fallback") {
		t.Errorf("restore fell back past a damaged checkpoint:\n%s\nlifeboat run's log:\n%s", stderr.String(), tail(runLog))
	}
	got, extra := hashTree(t, dir)
	var r resume.Point
	if b, err := os.ReadFile(filepath.Join(dir, resume.FileName)); err != nil || json.Unmarshal(b, &r) != nil {
		t.Fatalf("%s after restore: %q, %v", resume.FileName, b, err)
	}
	delete(got, resume.FileName)

	var outcome string
	var want crashCkpt
	switch {
	case maps.Equal(got, prev.files):
		outcome, want = "previous", prev
	case maps.Equal(got, next.files):
		outcome, want = "new", next
	default:
		t.Fatalf("restore (%s) gave neither checkpoint whole:\n%s\nlifeboat run's log:\n%s",
			strings.TrimSpace(stdout.String()), describeMix(got, prev, next), tail(runLog))
	}
	if len(extra) > 0 {
		t.Errorf("restore left other entries in the directory: %q", extra)
	}
	if r.Step != want.step {
		t.Errorf("restored the %s checkpoint's files as step %d, want step %d", outcome, r.Step, want.step)
	}

	out, err := exec.Command(lifeboatBin, "verify", "--store", url, "--read-data-subset", "all", "latest").CombinedOutput()
	if err != nil || !strings.Contains(string(out), fmt.Sprintf("step %d rev %d: ok", want.step, want.rev)) {
		t.Errorf("verify latest after restoring step %d revision %d: %v\n%s", want.step, want.rev, err, out)
	}
	return outcome
}

// describeMix says, for each file restore produced or missed, which
// checkpoint it matches.
func describeMix(got map[string]string, prev, next crashCkpt) string {
	var b strings.Builder
	for _, p := range slices.Sorted(maps.Keys(got)) {
		which := "neither (partial or corrupt)"
		switch got[p] {
		case prev.files[p]:
			which = "previous"
		case next.files[p]:
			which = "new"
		}
		fmt.Fprintf(&b, "  %s sha256 %.12s: %s\n", p, got[p], which)
	}
	for _, c := range []struct {
		name string
		ck   crashCkpt
	}{{"previous", prev}, {"new", next}} {
		for _, p := range slices.Sorted(maps.Keys(c.ck.files)) {
			if _, ok := got[p]; !ok {
				fmt.Fprintf(&b, "  %s of the %s checkpoint: missing\n", p, c.name)
			}
		}
	}
	return b.String()
}

// openCrashStore opens url the way the subcommands do (pipeline.OpenStore
// with the environment's S3 settings), creating the bucket of a fresh S3
// store, and empties it when the test ends.
func openCrashStore(t *testing.T, url string) storage.Store {
	t.Helper()
	loc, err := storage.ParseURL(url)
	if err != nil {
		t.Fatalf("store %s: %v", url, err)
	}
	s, err := pipeline.OpenStore(context.Background(), pipeline.StoreConfig{Location: loc, BucketLookup: s3.LookupAuto, CreateBucket: true, Getenv: os.Getenv})
	if err != nil {
		t.Fatalf("open %s: %v", url, err)
	}
	emptyAtCleanup(t, s)
	return s
}

// emptyAtCleanup deletes every object of s when the test ends.
func emptyAtCleanup(t *testing.T, s storage.Store) {
	t.Cleanup(func() {
		ctx := context.Background()
		var keys []string
		if err := s.List(ctx, "", func(oi storage.ObjectInfo) error { keys = append(keys, oi.Key); return nil }); err != nil {
			t.Logf("empty %s: %v", s, err)
			return
		}
		for _, k := range keys {
			_ = s.Delete(ctx, k)
		}
	})
}

// writeCrashFiles writes one checkpoint's files of the given sizes into dir,
// each file's bytes a ChaCha8 stream seeded by tag(name), and returns their
// hashes keyed by sub/name. A .pdparams or .pdopt file is one whole pickle
// of those bytes, as paddle.save writes one: PROTO 4, BINBYTES8 with the
// length, the bytes, STOP.
func writeCrashFiles(t *testing.T, dir, sub string, sizes map[string]int64, tag func(name string) string) map[string]string {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for name, size := range sizes {
		f, err := os.Create(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		h := sha256.New()
		w := io.MultiWriter(f, h)
		src := rand.NewChaCha8(sha256.Sum256([]byte(tag(name))))
		pickled := strings.HasSuffix(name, ".pdparams") || strings.HasSuffix(name, ".pdopt")
		if pickled {
			head := binary.LittleEndian.AppendUint64([]byte{0x80, 4, 0x8e}, uint64(size-12))
			if _, err := w.Write(head); err != nil {
				t.Fatal(err)
			}
			size -= 12
		}
		if _, err := io.CopyN(w, src, size); err != nil {
			t.Fatalf("write %s: %v", name, err)
		}
		if pickled {
			if _, err := w.Write([]byte{'.'}); err != nil { // STOP
				t.Fatal(err)
			}
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
		out[path.Join(sub, name)] = hex.EncodeToString(h.Sum(nil))
	}
	return out
}

// hashTree returns the SHA-256 of every regular file under dir by slash
// path, and the paths of anything else that is not a directory, or is
// restore's temporary directory.
func hashTree(t *testing.T, dir string) (files map[string]string, other []string) {
	t.Helper()
	files = map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		rel = filepath.ToSlash(rel)
		switch {
		case d.IsDir() && strings.HasPrefix(d.Name(), ".lifeboat-restore-"):
			other = append(other, rel)
			return fs.SkipDir
		case d.IsDir():
			return nil
		case !d.Type().IsRegular():
			other = append(other, rel)
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		sum := sha256.Sum256(b)
		files[rel] = hex.EncodeToString(sum[:])
		return nil
	})
	if err != nil {
		t.Fatalf("read the restored directory: %v", err)
	}
	return files, other
}

// waitLog polls lifeboat's stderr every millisecond until it holds line and
// returns when it was first seen; it fails if lifeboat exits first.
func waitLog(t *testing.T, p *lb, line string) time.Time {
	t.Helper()
	for deadline := time.Now().Add(hangLimit); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		if strings.Contains(p.stderr.String(), line) {
			return time.Now()
		}
		if !p.alive() {
			t.Fatalf("lifeboat exited (%d) before it logged %s; stderr:\n%s", p.code, line, tail(p.stderr.String()))
		}
	}
	t.Fatalf("lifeboat never logged %s; stderr:\n%s", line, tail(p.stderr.String()))
	return time.Time{}
}
