package e2e

// Tests of what a restore leaves in a reused --dir: the restored
// checkpoint and nothing else, whole, also across a SIGKILL in the middle
// of its move into place.

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// sums is the SHA-256 of each file, by slash path.
func sums(files map[string][]byte) map[string]string {
	out := map[string]string{}
	for p, b := range files {
		h := sha256.Sum256(b)
		out[p] = hex.EncodeToString(h[:])
	}
	return out
}

// ageTree sets the times of every file under dir two days back.
func ageTree(t *testing.T, dir string) {
	t.Helper()
	old := time.Now().Add(-48 * time.Hour)
	filepath.Walk(dir, func(p string, _ os.FileInfo, err error) error {
		if err == nil {
			os.Chtimes(p, old, old)
		}
		return nil
	})
}

// resumeTrainer is a trainer that writes "LIFEBOAT_RESUME_STEP
// LIFEBOAT_RESUME_DIR" and then every name in the resume directory, one a
// line, into the file it is given.
func resumeTrainer(seen string) []string {
	return []string{"sh", "-c", `{ echo "$LIFEBOAT_RESUME_STEP $LIFEBOAT_RESUME_DIR"; ls -A "$LIFEBOAT_RESUME_DIR" || true; } > "$0"`, seen}
}

// readSeen returns what resumeTrainer wrote: the step and directory, and
// the names.
func readSeen(t *testing.T, seen string) (string, []string) {
	t.Helper()
	b, err := os.ReadFile(seen)
	if err != nil {
		t.Fatalf("the trainer wrote nothing: %v", err)
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	return lines[0], lines[1:]
}

// manifestsIn lists the manifests of a file store.
func manifestsIn(t *testing.T, url string) []string {
	t.Helper()
	ms, _ := filepath.Glob(filepath.Join(strings.TrimPrefix(url, "file://"), "snapshots", "*", "rank-*.json")) // not completion records
	return ms
}

// TestRestoreMovesStrayFilesAside: the volume's
// step-000100/ holds model.pdparams and optim.pdopt of another
// experiment, two days old; the store's step 100 has only model.pdparams.
// After `lifeboat run`, and after `lifeboat restore` + `run --restore
// never`, the resume directory holds the store's model and nothing else;
// the other run's optimizer is under .lifeboat-aside/, the log says so
// (resume.moved_aside), and nothing is uploaded (row 2). Before, the
// trainer resumed the store's model beside the other run's optimizer,
// with no warning.
func TestRestoreMovesStrayFilesAside(t *testing.T) {
	store := map[string][]byte{"step-000100/model.pdparams": pickleBytes([]byte("the store's model at step 100"))}
	other := map[string][]byte{
		"step-000100/model.pdparams": pickleBytes([]byte("another experiment's model")),
		"step-000100/optim.pdopt":    pickleBytes([]byte("another experiment's optimizer")),
	}
	for _, mode := range []string{"run", "restore+never"} {
		t.Run(mode, func(t *testing.T) {
			url := storeWith(t, 100, store)
			dir := t.TempDir()
			writeTree(t, dir, other)
			ageTree(t, dir)
			seen := filepath.Join(t.TempDir(), "seen")
			var logs string
			if mode == "restore+never" {
				p := start(t, "plain", "restore", "--store", url, "--dir", dir)
				if code := p.wait(); code != 0 {
					t.Fatalf("restore exited %d:\n%s", code, p.stderr.String())
				}
				logs = p.stderr.String()
			}
			args := []string{"run", "--store", url, "--dir", dir}
			if mode == "restore+never" {
				args = append(args, "--restore", "never")
			}
			p := start(t, "plain", append(append(args, "--"), resumeTrainer(seen)...)...)
			if code := p.wait(); code != 0 {
				t.Fatalf("run exited %d:\n%s", code, p.stderr.String())
			}
			logs += p.stderr.String()
			head, names := readSeen(t, seen)
			if want := "100 " + filepath.Join(dir, "step-000100"); head != want {
				t.Errorf("the trainer was told %q, want %q", head, want)
			}
			if !slices.Equal(names, []string{"model.pdparams"}) {
				t.Errorf("the resume directory holds %q, want only the restored model.pdparams", names)
			}
			got, odd := hashTree(t, filepath.Join(dir, "step-000100"))
			if want := sums(map[string][]byte{"model.pdparams": store["step-000100/model.pdparams"]}); !mapsEqual(got, want) || len(odd) > 0 {
				t.Errorf("step-000100 holds %v %v, want the store's model only", got, odd)
			}
			aside, _ := filepath.Glob(filepath.Join(dir, ".lifeboat-aside", "*", "step-000100", "optim.pdopt"))
			if len(aside) != 1 {
				t.Fatalf("the other run's optimizer is not under .lifeboat-aside: %v", aside)
			}
			if b, _ := os.ReadFile(aside[0]); string(b) != string(other["step-000100/optim.pdopt"]) {
				t.Errorf("the optimizer moved aside changed")
			}
			if !jsonLogHas(logs, "resume.moved_aside", map[string]string{"entries": "1"}) || !strings.Contains(logs, "step-000100/optim.pdopt") {
				t.Errorf("no resume.moved_aside naming step-000100/optim.pdopt:\n%s", logs)
			}
			if strings.Contains(logs, `"msg":"checkpoint.committed"`) || len(manifestsIn(t, url)) != 1 {
				t.Errorf("something was committed after the restore (%d manifests):\n%s", len(manifestsIn(t, url)), logs)
			}
		})
	}
}

// restoreInit runs `lifeboat restore` into dir, as an init container
// does before `lifeboat run --restore never`, and returns its output.
func restoreInit(t *testing.T, url, dir string) string {
	t.Helper()
	code, out := runLifeboat(t, nil, "restore", "--store", url, "--dir", dir)
	if code != 0 {
		t.Fatalf("restore exited %d:\n%s", code, out)
	}
	return out
}

// TestOlderLocalStepNotCommittedAfterRestore: the
// volume holds an untouched step-000050/ of another experiment; the
// store's newest is step 100. After `lifeboat run`, and after `lifeboat
// restore` + `run --restore never`, the trainer resumes the store's 100,
// step 50 is logged once as stale (checkpoint.stale) and never committed,
// it stays on the volume as it was, and the next restore gives step 100.
// Whether the other experiment last wrote step 50 two days before the
// store's step 100 was committed or after it does not matter: it did not
// change after the restore. Before, step-000050/ was committed after
// step 100 and the next restore gave step 50, the other run's weights.
func TestOlderLocalStepNotCommittedAfterRestore(t *testing.T) {
	store := map[string][]byte{"step-000100/model.pdparams": pickleBytes([]byte("this job's model at step 100"))}
	other := map[string][]byte{
		"step-000050/model.pdparams": pickleBytes([]byte("another experiment's model at its step 50")),
		"step-000050/optim.pdopt":    pickleBytes([]byte("another experiment's optimizer at its step 50")),
	}
	for _, mode := range []string{"run", "restore+never"} {
		for _, age := range []string{"two days old", "written after the store's commit"} {
			t.Run(mode+"/"+age, func(t *testing.T) {
				dir := t.TempDir()
				var url string
				if age == "two days old" {
					writeTree(t, dir, other)
					ageTree(t, dir)
					url = storeWith(t, 100, store)
				} else {
					url = storeWith(t, 100, store)
					time.Sleep(20 * time.Millisecond) // past the file system's timestamp tick
					writeTree(t, dir, other)
				}
				before, _ := hashTree(t, filepath.Join(dir, "step-000050"))
				seen := filepath.Join(t.TempDir(), "seen")
				args := []string{"run", "--store", url, "--dir", dir}
				source := "store"
				if mode == "restore+never" {
					time.Sleep(20 * time.Millisecond) // past the file system's timestamp tick
					restoreInit(t, url, dir)
					args, source = append(args, "--restore", "never"), "init"
				}
				trainer := []string{"sh", "-c", `echo "$LIFEBOAT_RESUME_STEP $LIFEBOAT_RESUME_SOURCE $LIFEBOAT_RESUME_DIR" > "$0"`, seen}
				p := start(t, "plain", append(append(args, "--"), trainer...)...)
				waitExit(t, p, 0)
				logs := p.stderr.String()
				if b, _ := os.ReadFile(seen); strings.TrimSpace(string(b)) != "100 "+source+" "+filepath.Join(dir, "step-000100") {
					t.Errorf("the trainer was told %q, want step 100 from the %s", b, source)
				}
				if l := logLines(logs, "checkpoint.stale"); len(l) != 1 || fmt.Sprint(l[0]["step"]) != "50" || fmt.Sprint(l[0]["restored_step"]) != "100" {
					t.Errorf("checkpoint.stale lines %v; want one for step 50 after the restore of 100", l)
				}
				if l := logLines(logs, "checkpoint.committed"); len(l) != 0 || len(manifestsIn(t, url)) != 1 {
					t.Errorf("committed after the restore: %v (%d manifests)\n%s", l, len(manifestsIn(t, url)), tail(logs))
				}
				if after, odd := hashTree(t, filepath.Join(dir, "step-000050")); !mapsEqual(after, before) || len(odd) > 0 {
					t.Errorf("the other experiment's step-000050 changed: %v %v, was %v", after, odd, before)
				}
				if code, out := runLifeboat(t, nil, "restore", "--store", url, "--dir", t.TempDir()); code != 0 || !strings.Contains(out, "restored step 100 ") {
					t.Errorf("the next restore: exit %d\n%s\nwant step 100", code, out)
				}
			})
		}
	}
}

// TestRestoreFailsWithoutItsResumeFile: the resume file is what tells `run
// --restore never` what was restored, and so what is stale. When `lifeboat
// restore` restores step 100 but cannot write it (here a directory of its
// name is in the way), it exits 1 saying so and what to do, rather than 0:
// the init container fails instead of handing the main container a
// volume whose restored checkpoint it would not know, where the trainer
// would start fresh and the other experiment's step-000050/ would be new
// work. The directory in the way is left as it was. Before, restore
// logged resume.write_file_failed and exited 0.
func TestRestoreFailsWithoutItsResumeFile(t *testing.T) {
	store := map[string][]byte{"step-000100/model.pdparams": pickleBytes([]byte("this job's model at step 100"))}
	for _, form := range []string{"newest", "--step"} {
		t.Run(form, func(t *testing.T) {
			url := storeWith(t, 100, store)
			dir := t.TempDir()
			writeTree(t, dir, map[string][]byte{
				"step-000050/model.pdparams":            pickleBytes([]byte("another experiment's model")),
				".lifeboat-resume.json/left-by-another": []byte("not lifeboat's"),
			})
			ageTree(t, dir)
			args := []string{"restore", "--store", url, "--dir", dir}
			if form == "--step" {
				args = append(args, "--step", "100")
			}
			code, out := runLifeboat(t, nil, args...)
			if code != 1 {
				t.Fatalf("restore exited %d, want 1:\n%s", code, out)
			}
			for _, want := range []string{"lifeboat restore: ", ".lifeboat-resume.json", "--restore never", "run lifeboat restore again"} {
				if !strings.Contains(out, want) {
					t.Errorf("the error does not say %q:\n%s", want, out)
				}
			}
			if b, err := os.ReadFile(filepath.Join(dir, ".lifeboat-resume.json", "left-by-another")); err != nil || string(b) != "not lifeboat's" {
				t.Errorf("what was in the way changed: %q %v", b, err)
			}
		})
	}
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// TestRestoreKilledWhileMovingIsFinished: backup/ (no
// step number) of 300 files and 20 more of another run is being restored
// when lifeboat is SIGKILLed, at several chosen points of the move (the
// lifeboat_faults build stops itself after N moves; the test then sends
// SIGKILL): after the record is written and before anything moved, after
// one and after all 20 strays were moved aside, after the first file, half
// of them, and all but one moved into place. The next start finishes the
// restore before anything reads the directory: `run` after a killed `run`;
// after a killed `lifeboat restore` (an init container), `run --restore
// never` started on the volume at once, or `lifeboat restore` again (the
// init container retried, or the next pod's), which finishes it and then
// restores the store's newest, followed by `run --restore never`. Either
// way the trainer resumes the store's step 7 from backup/, which holds
// exactly the snapshot, nothing is uploaded and nothing is taken as newer
// local work. Before, the next start removed the temporary directory and
// took the half-moved backup/ as resume.local_newer: the trainer resumed a
// mix of new and old files, and the mix was committed.
func TestRestoreKilledWhileMovingIsFinished(t *testing.T) {
	bin := faultLifeboat(t)
	const nFiles, nStrays = 300, 20
	store, old := map[string][]byte{}, map[string][]byte{}
	for i := range nFiles {
		p := fmt.Sprintf("backup/f%04d.bin", i)
		store[p] = []byte(fmt.Sprintf("the store's file %d of step 7", i))
		old[p] = []byte(fmt.Sprintf("an old run's file %d", i))
	}
	for i := range nStrays {
		old[fmt.Sprintf("backup/x%02d.old", i)] = []byte("an old run's extra file")
	}
	want := map[string][]byte{}
	for p, b := range store {
		want[strings.TrimPrefix(p, "backup/")] = b
	}
	points := []int{0, 1, nStrays, nStrays + 1, nStrays + nFiles/2, nStrays + nFiles - 1}
	for _, mode := range []string{"run", "restore+never", "restore+restore+never"} {
		for _, n := range points {
			t.Run(fmt.Sprintf("%s/after %d moves", mode, n), func(t *testing.T) {
				dir := t.TempDir()
				writeTree(t, dir, old)
				ageTree(t, dir)
				// Stored after the volume's files last changed: the old
				// backup/ is not newer work.
				url := storeWith(t, 7, store)
				first := "run"
				if mode != "run" {
					first = "restore"
				}
				args := []string{first, "--store", url, "--dir", dir}
				if first == "run" {
					args = append(args, "--", "true")
				}
				p := startBin(t, bin, []string{fmt.Sprintf("LIFEBOAT_FAULT_STOP_AT_MOVE=%d", n)}, args...)
				waitSelfStopped(t, p)
				p.signal(syscall.SIGKILL)
				if code := p.wait(); code != 128+int(syscall.SIGKILL) {
					t.Fatalf("the first lifeboat exited %d, want killed", code)
				}

				var logs string
				if mode == "restore+restore+never" {
					logs = restoreInit(t, url, dir)
					if !strings.Contains(logs, `"msg":"resume.interrupted_restore_finished"`) || !strings.Contains(logs, "restored step 7 ") {
						t.Errorf("the next restore did not finish the interrupted one, then restore step 7:\n%s", logs)
					}
				}
				seen := filepath.Join(t.TempDir(), "seen")
				args = []string{"run", "--store", url, "--dir", dir}
				if mode != "run" {
					args = append(args, "--restore", "never")
				}
				p = start(t, "plain", append(append(args, "--"), resumeTrainer(seen)...)...)
				if code := p.wait(); code != 0 {
					t.Fatalf("the next start exited %d:\n%s", code, p.stderr.String())
				}
				logs += p.stderr.String()
				head, _ := readSeen(t, seen)
				if w := "7 " + filepath.Join(dir, "backup"); head != w {
					t.Errorf("the trainer was told %q, want %q", head, w)
				}
				got, odd := hashTree(t, filepath.Join(dir, "backup"))
				if !mapsEqual(got, sums(want)) || len(odd) > 0 {
					var mixed []string
					for p, s := range got {
						if sums(want)[p] != s {
							mixed = append(mixed, p)
						}
					}
					slices.Sort(mixed)
					t.Errorf("backup/ is not the store's snapshot: %d files (want %d), %d not the store's (%v), other entries %v",
						len(got), len(want), len(mixed), mixed[:min(len(mixed), 5)], odd)
				}
				if !strings.Contains(logs, `"msg":"resume.interrupted_restore_finished"`) {
					t.Errorf("no resume.interrupted_restore_finished:\n%s", logs)
				}
				if strings.Contains(logs, `"msg":"resume.local_newer"`) || strings.Contains(logs, `"msg":"checkpoint.committed"`) || len(manifestsIn(t, url)) != 1 {
					t.Errorf("the half-moved checkpoint was taken as newer or committed (%d manifests):\n%s", len(manifestsIn(t, url)), logs)
				}
				strays, _ := filepath.Glob(filepath.Join(dir, ".lifeboat-aside", "*", "backup", "x*.old"))
				if len(strays) != nStrays {
					t.Errorf("%d of the old run's %d extra files are under .lifeboat-aside", len(strays), nStrays)
				}
				if _, err := os.Stat(filepath.Join(dir, ".lifeboat-restoring.json")); err == nil {
					t.Errorf("the record of the restore is still there")
				}
			})
		}
	}
}
