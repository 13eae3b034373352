package e2e

// Tests of the one-shot store commands (verify, prune, restore --step) with
// the real binary against each store kind: the checkpoints they work on are
// committed with checkpoint.Uploader, as lifeboat run commits them.

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lifeboat-project/lifeboat/checkpoint"
	"github.com/lifeboat-project/lifeboat/resume"
	"github.com/lifeboat-project/lifeboat/storage"
	"github.com/lifeboat-project/lifeboat/storage/s3"
)

// lbRun runs the lifeboat binary with env added to the test's
// environment, and returns its exit code, stdout and stderr.
func lbRun(t *testing.T, env []string, args ...string) (int, string, string) {
	t.Helper()
	cmd := exec.Command(lifeboatBin, args...)
	cmd.Env = append(os.Environ(), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if _, ok := err.(*exec.ExitError); err != nil && !ok {
		t.Fatalf("lifeboat %s: %v", strings.Join(args, " "), err)
	}
	return cmd.ProcessState.ExitCode(), stdout.String(), stderr.String()
}

// openStore opens url with env applied (the store kind's credentials),
// the way the subcommands do, and empties it when the test ends.
func openStore(t *testing.T, env []string, url string) storage.Store {
	t.Helper()
	// The credentials are passed in, not set in the test's environment,
	// so that tests on several stores can run at once.
	getenv := func(k string) string {
		for _, kv := range slices.Backward(env) {
			if name, v, ok := strings.Cut(kv, "="); ok && name == k {
				return v
			}
		}
		return os.Getenv(k)
	}
	loc, err := storage.ParseURL(url)
	if err != nil {
		t.Fatal(err)
	}
	s, err := storage.Open(context.Background(), loc, func(config any) error {
		if cfg, ok := config.(*s3.Config); ok {
			cfg.FromEnv(getenv)
			cfg.AccessKey, cfg.SecretKey = getenv("AWS_ACCESS_KEY_ID"), getenv("AWS_SECRET_ACCESS_KEY")
			cfg.BucketLookup, cfg.CreateBucket = s3.LookupAuto, true
		}
		return nil
	})
	if err != nil {
		t.Fatalf("open %s: %v", url, err)
	}
	s = storage.Retry(storage.Recover(s), storage.RetryPolicy{})
	emptyAtCleanup(t, s)
	return s
}

// seedStep commits files (slash path -> bytes) as the snapshot of step,
// rank 0 of 1, and returns its manifest.
func seedStep(t *testing.T, s storage.Store, step int64, files map[string][]byte) *checkpoint.Manifest {
	t.Helper()
	return seedRank(t, s, checkpoint.Target{Step: step, WorldSize: 1}, files)
}

// seedRank commits files as the snapshot target names (a new revision when
// the step and rank hold other files already) and returns its manifest.
func seedRank(t *testing.T, s storage.Store, target checkpoint.Target, files map[string][]byte) *checkpoint.Manifest {
	t.Helper()
	dir := t.TempDir()
	var paths []string
	for p, b := range files {
		abs := filepath.Join(dir, filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(abs), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(abs, b, 0o644); err != nil {
			t.Fatal(err)
		}
		paths = append(paths, p)
	}
	u := &checkpoint.Uploader{Store: s, ChunkSize: 1 << 10, SkipFormatCheck: true}
	res, err := u.UploadFiles(context.Background(), dir, paths, target)
	if err != nil {
		t.Fatalf("commit %s: %v", target, err)
	}
	return res.Manifest
}

// numbered is n bytes that differ for every seed.
func numbered(seed string, n int) []byte {
	var b []byte
	for i := 0; len(b) < n; i++ {
		h := sha256.Sum256([]byte(seed + string(rune(i))))
		b = append(b, h[:]...)
	}
	return b[:n]
}

// TestVerifyReadsDataByDefault: a chunk whose bytes were altered in place,
// its size kept, is found by plain `lifeboat verify` (exit 1, the chunk
// named as corrupt) for every form of the step argument; with
// --read-data-subset none, which checks presence and sizes only, the same
// store passes, and the output says no content was read.
func TestVerifyReadsDataByDefault(t *testing.T) {
	root := t.TempDir()
	storeDir := filepath.Join(root, "store")
	url := "file://" + storeDir
	s := openStore(t, nil, url)
	m := seedStep(t, s, 7, map[string][]byte{"step-7/model.pdparams": numbered("model", 3000)})
	sum := m.Files[0].Chunks[1].SHA256
	chunk := filepath.Join(storeDir, "chunks", sum[:2], sum)
	b, err := os.ReadFile(chunk)
	if err != nil {
		t.Fatal(err)
	}
	b[10] ^= 0xff
	if err := os.WriteFile(chunk, b, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, form := range [][]string{nil, {"7"}, {"latest"}, {"all"}} {
		code, out, errOut := lbRun(t, nil, append([]string{"verify", "--store", url}, form...)...)
		if code != 1 || !strings.Contains(out, "corrupt-chunk chunks/"+sum[:2]+"/"+sum) {
			t.Errorf("verify %v of a store with an altered chunk: exit %d, want 1 naming the corrupt chunk; stdout:\n%s\nstderr:\n%s", form, code, out, errOut)
		}
	}
	code, out, errOut := lbRun(t, nil, "verify", "--store", url, "--read-data-subset", "none")
	if code != 0 || !strings.Contains(out, "read-data none: 0 chunks, 0 bytes read and checked (sha256)") {
		t.Errorf("verify --read-data-subset none: exit %d, want 0 (sizes are right) saying nothing was read; stdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	code, out, _ = lbRun(t, []string{"LIFEBOAT_READ_DATA_SUBSET=none"}, "verify", "--store", url)
	if code != 0 {
		t.Errorf("LIFEBOAT_READ_DATA_SUBSET=none: exit %d, want 0; stdout:\n%s", code, out)
	}
	// Each part n/t reads its share; together they find the chunk.
	found := 0
	for _, part := range []string{"1/2", "2/2"} {
		code, out, _ := lbRun(t, nil, "verify", "--store", url, "--read-data-subset", part)
		if code == 1 && strings.Contains(out, "corrupt-chunk") {
			found++
		}
	}
	if found != 1 {
		t.Errorf("the parts 1/2 and 2/2 found the altered chunk %d times, want once", found)
	}
}

// TestVerifyChecksNamedBeneathCounters: a 2-rank step 10 whose ranks'
// highest revisions are counter checkpoints (unpaired) over their named
// revisions 0 is restored from the named ones, so `lifeboat verify`
// checks those and says so: with rank 1's counter revision's chunk
// deleted it passes (exit 0), in text and JSON naming the revisions
// checked and why the highest were passed over; with rank 1's named
// revision's chunk altered it fails (exit 1) naming that chunk. On the
// code before, verify checked the counter revisions: the reverse.
func TestVerifyChecksNamedBeneathCounters(t *testing.T) {
	for _, broken := range []string{"counter", "named"} {
		t.Run(broken, func(t *testing.T) {
			url := "file://" + filepath.Join(t.TempDir(), "store")
			s := openStore(t, nil, url)
			var named, counter [2]*checkpoint.Manifest
			for r := range 2 {
				named[r] = seedRank(t, s, checkpoint.Target{Step: 10, Rank: r, WorldSize: 2}, map[string][]byte{"m.bin": numbered(fmt.Sprint("named", r), 3000)})
			}
			for r := range 2 {
				counter[r] = seedRank(t, s, checkpoint.Target{Step: 10, Rank: r, WorldSize: 2, Counter: true}, map[string][]byte{"m.bin": numbered(fmt.Sprint("counter", r), 3000)})
			}
			m := counter[1]
			if broken == "named" {
				m = named[1]
			}
			sum := m.Files[0].Chunks[1].SHA256
			key := "chunks/" + sum[:2] + "/" + sum
			ctx := context.Background()
			if broken == "counter" {
				if err := s.Delete(ctx, key); err != nil {
					t.Fatal(err)
				}
			} else {
				rc, err := s.Get(ctx, key, 0, -1)
				if err != nil {
					t.Fatal(err)
				}
				b, _ := io.ReadAll(rc)
				rc.Close()
				b[10] ^= 0xff
				if _, err := s.Put(ctx, key, bytes.NewReader(b), int64(len(b)), storage.PutOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			const why = "ranks 0,1 are counter checkpoints: ranks cannot be paired"
			code, out, errOut := lbRun(t, nil, "verify", "--store", url, "10")
			wantCode := map[string]int{"counter": 0, "named": 1}[broken]
			if code != wantCode || !strings.Contains(out, "step 10 rev 0: ") ||
				!strings.Contains(out, "named revisions checked (rank 0 rev 0, rank 1 rev 0)") || !strings.Contains(out, why) ||
				(broken == "named") != strings.Contains(out, "corrupt-chunk "+key) {
				t.Errorf("verify 10 with %s revision's chunk broken: exit %d, want %d; stdout:\n%s\nstderr:\n%s", broken, code, wantCode, out, errOut)
			}
			code, out, errOut = lbRun(t, nil, "verify", "--store", url, "--json", "10")
			var reps []verifyEntry
			if err := json.Unmarshal([]byte(out), &reps); err != nil || code != wantCode || len(reps) != 1 {
				t.Fatalf("verify --json: exit %d, %v; stdout:\n%s\nstderr:\n%s", code, err, out, errOut)
			}
			rep := reps[0]
			wantRanks := []verifyRank{{0, 0, false, "snapshots/00000000000000000010/rank-00000-of-00002.json"}, {1, 0, false, "snapshots/00000000000000000010/rank-00001-of-00002.json"}}
			if rep.Step != 10 || rep.Revision != 0 || rep.PassedOver != why || rep.DataCheck != "sha256" || !slices.Equal(rep.Ranks, wantRanks) || rep.OK != (broken == "counter") ||
				(broken == "named") != (len(rep.Problems) == 1 && rep.Problems[0].Key == key && rep.Problems[0].Kind == "corrupt-chunk") {
				t.Errorf("verify --json: %+v; want the named revisions %+v checked, passed over because %q", rep, wantRanks, why)
			}
		})
	}
}

// TestVerifyHelpListsForms: `lifeboat help verify` names every form of
// the step argument and every read-data level.
func TestVerifyHelpListsForms(t *testing.T) {
	code, out, _ := lbRun(t, nil, "help", "verify")
	if code != 0 {
		t.Fatalf("help verify: exit %d", code)
	}
	for _, want := range []string{"STEP", "latest", "all", "none", "n/t", "--read-data-subset"} {
		if !strings.Contains(out, want) {
			t.Errorf("help verify does not mention %q:\n%s", want, out)
		}
	}
}

// readResume reads dir's resume file.
func readResume(t *testing.T, dir string) resume.Point {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, resume.FileName))
	if err != nil {
		t.Fatalf("no resume file: %v", err)
	}
	var r resume.Point
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatalf("resume file %q: %v", b, err)
	}
	return r
}

// TestRestoreStepWritesResumeFile: `lifeboat restore --step N`, like the
// plain restore, leaves .lifeboat-resume.json in --dir saying where step
// N's files are, its id and its files, so that `lifeboat run --restore
// never` hands the trainer that step; it replaces the file an earlier
// restore of another step wrote.
func TestRestoreStepWritesResumeFile(t *testing.T) {
	for _, sk := range storeKinds() {
		t.Run(sk.name, func(t *testing.T) {
			url, env := sk.url(t), sk.env(t)
			s := openStore(t, env, url)
			m5 := seedStep(t, s, 5, map[string][]byte{"step-5/model.bin": numbered("five", 2500), "step-5/opt/state.bin": numbered("five-opt", 10)})
			m9 := seedStep(t, s, 9, map[string][]byte{"step-9/model.bin": numbered("nine", 2500)})
			dir := filepath.Join(t.TempDir(), "ckpt")
			if code, out, errOut := lbRun(t, env, "restore", "--store", url, "--dir", dir); code != 0 {
				t.Fatalf("restore: exit %d\n%s\n%s", code, out, errOut)
			}
			if r := readResume(t, dir); r.Step != 9 || r.ID != m9.ID {
				t.Fatalf("plain restore's resume file: %+v, want step 9 id %s", r, m9.ID)
			}
			if code, out, errOut := lbRun(t, env, "restore", "--store", url, "--dir", dir, "--step", "5"); code != 0 {
				t.Fatalf("restore --step 5: exit %d\n%s\n%s", code, out, errOut)
			}
			r := readResume(t, dir)
			want := resume.Point{Dir: filepath.Join(dir, "step-5"), Step: 5, ID: m5.ID, Files: []string{"step-5/model.bin", "step-5/opt/state.bin"}}
			if r.Dir != want.Dir || r.Step != want.Step || r.ID != want.ID || !slices.Equal(r.Files, want.Files) {
				t.Errorf("restore --step 5 left resume file %+v, want %+v", r, want)
			}
		})
	}
}

// storeObjects lists every object in s: key -> size.
func storeObjects(t *testing.T, s storage.Store) map[string]int64 {
	t.Helper()
	objs := map[string]int64{}
	if err := s.List(context.Background(), "", func(oi storage.ObjectInfo) error {
		objs[oi.Key] = oi.Size
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return objs
}

// TestPruneLeavesOnlyKept: once --min-chunk-age has passed, `lifeboat
// prune --keep 1` leaves exactly the kept checkpoint in the store: its
// manifest (highest revision) and the chunks it names, byte for byte;
// older steps, the superseded revision, an incomplete step (a rank that
// never committed) and an unreferenced chunk (an upload that died) are
// gone. Before the age has passed, the incomplete step, the unreferenced
// chunk and the superseded revision stay: an upload may be in progress.
// For the directory store the bytes on disk are counted too.
func TestPruneLeavesOnlyKept(t *testing.T) {
	for _, sk := range storeKinds() {
		t.Run(sk.name, func(t *testing.T) {
			url, env := sk.url(t), sk.env(t)
			s := openStore(t, env, url)
			shared := numbered("shared", 3000)
			seedStep(t, s, 1, map[string][]byte{"step-1/model.bin": numbered("one", 5000), "step-1/vocab.bin": shared})
			seedStep(t, s, 2, map[string][]byte{"step-2/model.bin": numbered("two", 5000), "step-2/vocab.bin": shared})
			seedStep(t, s, 3, map[string][]byte{"step-3/model.bin": numbered("three", 5000), "step-3/vocab.bin": shared})
			m3 := seedStep(t, s, 3, map[string][]byte{"step-3/model.bin": numbered("three", 5000), "step-3/vocab.bin": shared,
				"step-3/opt.bin": numbered("three-opt", 2000)}) // revision 1: the optimizer arrived after the first commit
			seedRank(t, s, checkpoint.Target{Step: 4, Rank: 0, WorldSize: 2}, map[string][]byte{"step-4/model.bin": numbered("four", 5000)})
			orphan := numbered("died before its manifest", 700)
			sum := sha256.Sum256(orphan)
			hexSum := hex.EncodeToString(sum[:])
			if _, err := s.Put(context.Background(), "chunks/"+hexSum[:2]+"/"+hexSum, bytes.NewReader(orphan), int64(len(orphan)), storage.PutOptions{}); err != nil {
				t.Fatal(err)
			}
			if m3.Revision != 1 {
				t.Fatalf("step 3 was committed as revision %d, want 1", m3.Revision)
			}
			want := map[string]int64{}
			for _, f := range m3.Files {
				for _, c := range f.Chunks {
					want["chunks/"+c.SHA256[:2]+"/"+c.SHA256] = c.Size
				}
			}
			manifestKey := "snapshots/00000000000000000003/rank-00000-of-00001-rev-00001.json"
			want[manifestKey] = storeObjects(t, s)[manifestKey]
			// The step's completion record of revision 1 stays with it;
			// the one of revision 0 no longer holds and goes.
			records := 0
			for k, n := range storeObjects(t, s) {
				if strings.HasPrefix(k, "snapshots/00000000000000000003-complete-of-") && strings.Contains(k, fmt.Sprintf("-at-%019d", m3.Created.UnixNano())) {
					want[k] = n
					records++
				}
			}
			if records != 1 {
				t.Fatalf("%d completion records of step 3's revision 1 stored, want one", records)
			}

			// Inside the age: an hour, so that no slow start of this prune
			// on a busy machine can make what was just stored old enough.
			code, out, errOut := lbRun(t, env, "prune", "--store", url, "--keep", "1", "--min-chunk-age", "1h")
			if code != 0 || !strings.Contains(out, "kept steps [3]; deleted steps [1 2]") {
				t.Fatalf("prune inside the age: exit %d, want steps 1 and 2 deleted\n%s\n%s", code, out, errOut)
			}
			if !strings.Contains(errOut, "prune.short_chunk_age") {
				t.Errorf("no warning that a --min-chunk-age below 6h is unsafe while uploads run:\n%s", errOut)
			}
			objs := storeObjects(t, s)
			for _, k := range []string{"snapshots/00000000000000000004/rank-00000-of-00002.json", "snapshots/00000000000000000003/rank-00000-of-00001.json",
				"chunks/" + hexSum[:2] + "/" + hexSum} {
				if _, ok := objs[k]; !ok {
					t.Errorf("%s was deleted inside --min-chunk-age", k)
				}
			}

			time.Sleep(3500 * time.Millisecond)
			code, out, errOut = lbRun(t, env, "prune", "--store", url, "--keep", "1", "--min-chunk-age", "3s")
			if code != 0 || !strings.Contains(out, "kept steps [3]; deleted steps [4]") || !strings.Contains(out, "steps [4] were incomplete") {
				t.Fatalf("prune after the age: exit %d, want the incomplete step 4 deleted\n%s\n%s", code, out, errOut)
			}
			objs = storeObjects(t, s)
			var got, wantBytes int64
			for k, n := range objs {
				got += n
				if _, ok := want[k]; !ok {
					t.Errorf("the store still holds %s (%d bytes), which the kept step does not use", k, n)
				}
			}
			for k, n := range want {
				wantBytes += n
				if objs[k] != n {
					t.Errorf("the kept step's %s: %d bytes stored, want %d", k, objs[k], n)
				}
			}
			if got != wantBytes {
				t.Errorf("the store holds %d bytes, want exactly the kept step's %d", got, wantBytes)
			}
			if dir, ok := strings.CutPrefix(url, "file://"); ok {
				var onDisk int64
				err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
					if err != nil || d.IsDir() {
						return err
					}
					fi, err := d.Info()
					onDisk += fi.Size()
					return err
				})
				if err != nil || onDisk != wantBytes {
					t.Errorf("files under %s hold %d bytes (%v), want exactly the kept step's %d", dir, onDisk, err, wantBytes)
				}
			}
			if code, out, errOut := lbRun(t, env, "verify", "--store", url); code != 0 {
				t.Errorf("verify after prune: exit %d\n%s\n%s", code, out, errOut)
			}
		})
	}
}
