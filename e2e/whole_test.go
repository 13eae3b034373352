package e2e

// The whole-checkpoint tests: only a whole checkpoint is ever committed or
// resumed. Each test drives the real binary against a directory store and a
// real MinIO server, puts the fault into the trainer or its files at a
// chosen moment (testdata/trainers/saver.py saves, tears and kills itself
// as its arguments say, and waits on files the test creates), and checks
// lifeboat's exit code, the log event a user would grep for, what the store
// holds, and what the next start resumes: a new pod whose trainer reports
// LIFEBOAT_RESUME_STEP and whether pickle.load reads each restored file.

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lifeboat-project/lifeboat/checkpoint"
	"github.com/lifeboat-project/lifeboat/internal/testenv"
	"github.com/lifeboat-project/lifeboat/storage"
)

// wholePython is the interpreter the scripted trainer runs under: the
// system's, where numpy comes from the distribution when installed.
const wholePython = "/usr/bin/python3"

// wholeFlags make a run quick; a test's own flags come after and win.
var wholeFlags = []string{"--settle", "300ms", "--scan-interval", "50ms", "--grace", "10s", "--keep", "0", "--log-format", "json"}

// wholeStore is one test's store and scratch directory.
type wholeStore struct {
	url  string
	env  []string
	root string
}

func newWholeStore(t *testing.T, sk storeKind) *wholeStore {
	t.Helper()
	if _, err := os.Stat(wholePython); err != nil {
		testenv.Skip(t, wholePython+" is needed for the scripted trainer; install python3")
	}
	return &wholeStore{url: sk.url(t), env: sk.env(t), root: t.TempDir()}
}

// pod returns a new, empty checkpoint directory: a new pod's volume.
func (w *wholeStore) pod(t *testing.T) string {
	t.Helper()
	d, err := os.MkdirTemp(w.root, "pod-")
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// saverRun is lifeboat run supervising testdata/trainers/saver.py.
type saverRun struct {
	*trainerRun
	ctl string // where the trainer waits for files the test creates
}

// start runs lifeboat with --dir dir and flags, supervising the trainer
// with program (saver.py's arguments).
func (w *wholeStore) start(t *testing.T, dir string, flags []string, program ...string) *saverRun {
	t.Helper()
	ctl, err := os.MkdirTemp(w.root, "ctl-")
	if err != nil {
		t.Fatal(err)
	}
	saver, err := filepath.Abs(filepath.Join("testdata", "trainers", "saver.py"))
	if err != nil {
		t.Fatal(err)
	}
	args := append([]string{"run", "--store", w.url, "--dir", dir}, wholeFlags...)
	args = append(append(args, flags...), "--", wholePython, "-u", saver)
	tr := startTrainer(t, append(slices.Clone(w.env), "TRAINER_CTL="+ctl), append(args, program...)...)
	return &saverRun{trainerRun: tr, ctl: ctl}
}

// await reads the trainer's events until one named name.
func (r *saverRun) await(t *testing.T, name string) {
	t.Helper()
	for {
		if e := r.next(t); e.Event == name {
			return
		}
	}
}

// release creates the file the trainer's "wait name" waits for.
func (r *saverRun) release(t *testing.T, name string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(r.ctl, name), nil, 0o644); err != nil {
		t.Fatal(err)
	}
}

// finish waits for lifeboat to exit and returns its exit code.
func (r *saverRun) finish(t *testing.T) int {
	t.Helper()
	for range r.events {
	}
	return r.wait()
}

// saverReport is one "report" line of the trainer.
type saverReport struct {
	Event   string               `json:"event"`
	LBStep  string               `json:"lifeboat_step"`
	Dir     string               `json:"dir"`
	Attempt int                  `json:"attempt"`
	Files   map[string]saverFile `json:"files"`
}

// saverFile is what the trainer found of one file under $LIFEBOAT_DIR.
type saverFile struct {
	SHA256  string `json:"sha256"`
	Size    int64  `json:"size"`
	Resumed bool   `json:"resumed"` // under LIFEBOAT_RESUME_DIR
	Load    string `json:"load"`    // pickles: "ok" or the error pickle.load gave
	Step    int64  `json:"step"`    // pickles: the step the file holds
}

// reports returns the trainer's report lines so far.
func (r *saverRun) reports(t *testing.T) []saverReport {
	t.Helper()
	var out []saverReport
	for _, line := range strings.Split(r.stdout.String(), "\n") {
		var rep saverReport
		if json.Unmarshal([]byte(line), &rep) == nil && rep.Event == "report" {
			out = append(out, rep)
		}
	}
	return out
}

// seed runs a pod whose trainer runs program and exits 0, so that lifeboat
// commits what it saved at the final flush, and returns the store's
// checkpoints afterwards.
func (w *wholeStore) seed(t *testing.T, program ...string) []lsEntry {
	t.Helper()
	r := w.start(t, w.pod(t), nil, append(program, "exit", "0")...)
	if code := r.finish(t); code != 0 {
		t.Fatalf("seed run: exit %d, want 0; stderr:\n%s", code, tail(r.stderr.String()))
	}
	entries := lsJSON(t, w.env, w.url)
	if latestComplete(entries) < 0 {
		t.Fatalf("seed run committed nothing; stderr:\n%s", tail(r.stderr.String()))
	}
	return entries
}

// resumed starts a new pod whose trainer reports what it was given and
// exits 0, and returns the report.
func (w *wholeStore) resumed(t *testing.T) saverReport {
	t.Helper()
	r := w.start(t, w.pod(t), nil, "report", "exit", "0")
	if code := r.finish(t); code != 0 {
		t.Fatalf("resume run: exit %d, want 0; stderr:\n%s", code, tail(r.stderr.String()))
	}
	reps := r.reports(t)
	if len(reps) != 1 {
		t.Fatalf("resume run: %d reports, want 1; stdout:\n%s", len(reps), r.stdout.String())
	}
	return reps[0]
}

// wantResumed checks that rep resumed step and that each of files (path
// under $LIFEBOAT_DIR -> the step its pickle holds) was restored whole,
// and that every restored pickle loads.
func wantResumed(t *testing.T, rep saverReport, step int64, files map[string]int64) {
	t.Helper()
	if rep.LBStep != fmt.Sprint(step) {
		t.Errorf("the next start resumed LIFEBOAT_RESUME_STEP=%q (dir %q), want %d; files: %+v", rep.LBStep, rep.Dir, step, rep.Files)
	}
	for p, s := range files {
		f, ok := rep.Files[p]
		switch {
		case !ok:
			t.Errorf("%s was not restored; restored: %+v", p, rep.Files)
		case f.Load != "ok" || f.Step != s:
			t.Errorf("restored %s: pickle.load: %s (step %d), want a whole pickle of step %d", p, f.Load, f.Step, s)
		}
	}
	for p, f := range rep.Files {
		if f.Resumed && f.Load != "" && f.Load != "ok" {
			t.Errorf("restored %s: pickle.load: %s", p, f.Load)
		}
	}
}

// logEvent returns the first line of a JSON log whose msg is event, or nil.
func logEvent(log, event string) map[string]any {
	for _, line := range strings.Split(log, "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(line), &m) == nil && m["msg"] == event {
			return m
		}
	}
	return nil
}

// wantEvent checks that log has event with every one of keys.
func wantEvent(t *testing.T, log, event string, keys ...string) {
	t.Helper()
	m := logEvent(log, event)
	if m == nil {
		t.Errorf("no %s event in lifeboat's log:\n%s", event, tail(log))
		return
	}
	for _, k := range keys {
		if _, ok := m[k]; !ok {
			t.Errorf("the %s event has no %q: %v", event, k, m)
		}
	}
}

// wantStoreUnchanged checks that the store holds exactly the checkpoints
// it held before.
func wantStoreUnchanged(t *testing.T, before, after []lsEntry, log string) {
	t.Helper()
	key := func(es []lsEntry) string {
		var b strings.Builder
		for _, e := range es {
			fmt.Fprintf(&b, "step %d complete %t ids %v; ", e.Step, e.Complete, e.IDs)
		}
		return b.String()
	}
	if key(before) != key(after) {
		t.Errorf("the store changed:\nbefore: %s\nafter:  %s\nlifeboat's log:\n%s", key(before), key(after), tail(log))
	}
}

// lsRevision is an entry of `lifeboat ls --json` with the revision fields.
type lsRevision struct {
	lsEntry
	Revision int  `json:"revision"`
	Counter  bool `json:"counter"`
}

// lsRevisions runs lifeboat ls --json against url, keeping the revision
// fields.
func lsRevisions(t *testing.T, env []string, url string) []lsRevision {
	t.Helper()
	cmd := exec.Command(lifeboatBin, "ls", "--json", "--store", url)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("lifeboat ls: %v", err)
	}
	var entries []lsRevision
	if err := json.Unmarshal(out, &entries); err != nil {
		t.Fatalf("ls --json output %q: %v", out, err)
	}
	return entries
}

// TestWholeTornSaveNeverCommitted (row 1): the trainer is SIGKILLed in the
// middle of paddle.save, into a new step directory or in place over the
// whole backup it was restored from. Lifeboat exits 137 and logs
// checkpoint.interrupted; the store holds only what it held; the next start
// resumes the previous step, and its pickle loads.
func TestWholeTornSaveNeverCommitted(t *testing.T) {
	for _, sk := range storeKinds() {
		for _, tc := range []struct{ name, prev, torn string }{
			{"new-dir", "step-000100/model.pdparams", "step-000200/model.pdparams"},
			{"in-place", "backup/latest.pdparams", "backup/latest.pdparams"},
		} {
			t.Run(sk.name+"/"+tc.name, func(t *testing.T) {
				w := newWholeStore(t, sk)
				before := w.seed(t, "save", tc.prev, "100")
				r := w.start(t, w.pod(t), nil, "torn", tc.torn, "200", "kill9")
				if code := r.finish(t); code != 137 {
					t.Errorf("exit %d, want 137 (the trainer was SIGKILLed)", code)
				}
				wantEvent(t, r.stderr.String(), "checkpoint.interrupted", "id", "path", "reason")
				wantStoreUnchanged(t, before, lsJSON(t, w.env, w.url), r.stderr.String())
				wantResumed(t, w.resumed(t), latestComplete(before), map[string]int64{tc.prev: 100})
			})
		}
	}
}

// TestWholeRestartResumesWholeStep (row 2): with --restart on-failure, the
// trainer SIGKILLed in the middle of a save is restarted from the previous
// whole step, not from the torn file; the interruption is counted in
// lifeboat_checkpoints_interrupted_total.
func TestWholeRestartResumesWholeStep(t *testing.T) {
	for _, sk := range storeKinds() {
		t.Run(sk.name, func(t *testing.T) {
			w := newWholeStore(t, sk)
			before := w.seed(t, "save", "step-000100/model.pdparams", "100")
			r := w.start(t, w.pod(t), []string{"--restart", "on-failure", "--max-restarts", "1", "--restart-backoff", "10ms", "--metrics-addr", "127.0.0.1:0"},
				"report", "torn", "step-000200/model.pdparams", "200", "kill9",
				"|", "report", "wait", "done", "exit", "0")
			addr := listenAddr(t, r.lb)
			r.await(t, "waiting")
			// The metrics are fed from the agent's figures once a second.
			interrupted := scrape(t, addr, "lifeboat_checkpoints_interrupted_total")
			for deadline := time.Now().Add(hangLimit); interrupted == 0 && time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
				interrupted = scrape(t, addr, "lifeboat_checkpoints_interrupted_total")
			}
			r.release(t, "done")
			if code := r.finish(t); code != 0 {
				t.Errorf("exit %d, want 0 (the restarted trainer exited 0)", code)
			}
			reps := r.reports(t)
			if len(reps) != 2 || reps[1].Attempt != 2 {
				t.Fatalf("want a report from each of 2 starts, got %+v; stderr:\n%s", reps, tail(r.stderr.String()))
			}
			wantResumed(t, reps[1], 100, map[string]int64{"step-000100/model.pdparams": 100})
			wantEvent(t, r.stderr.String(), "checkpoint.interrupted", "id", "path", "reason")
			if interrupted < 1 {
				t.Errorf("lifeboat_checkpoints_interrupted_total = %v after the torn save, want 1 (-1e9: not exported)", interrupted)
			}
			wantStoreUnchanged(t, before, lsJSON(t, w.env, w.url), r.stderr.String())
		})
	}
}

// TestWholeSaveCutShortAtStop (row 3): the trainer's SIGTERM handler saves
// and the save ends early: the handler raises (exit 1), exits 0 after a
// short write, or writes half a raw file (no format check covers it) and
// blocks until the grace deadline SIGKILLs it. None is committed and the
// next start resumes the previous step. A whole pickle saved by the
// handler, after which a child process hangs until the deadline, is
// committed: the format check vouches for it.
func TestWholeSaveCutShortAtStop(t *testing.T) {
	slow := []string{"--settle", "10s", "--grace", "3s"}
	for _, sk := range storeKinds() {
		for _, tc := range []struct {
			name    string
			flags   []string
			handler []string
			code    int
			whole   bool // the handler's save is whole and is committed
		}{
			{"handler-raises", nil, []string{"torn", "step-000200/model.pdparams", "200", "raise"}, 1, false},
			{"handler-exits-0", nil, []string{"torn", "step-000200/model.pdparams", "200", "exit", "0"}, 143, false},
			{"raw-file-at-deadline", slow, []string{"rawtorn", "step-000200/model.bin", "4194304", "closeall", "idle"}, 137, false},
			{"whole-save-then-hang", slow, []string{"save", "step-000200/model.pdparams", "200", "hangchild"}, 137, true},
		} {
			t.Run(sk.name+"/"+tc.name, func(t *testing.T) {
				w := newWholeStore(t, sk)
				before := w.seed(t, "save", "step-000100/model.pdparams", "100")
				r := w.start(t, w.pod(t), tc.flags, append([]string{"idle", "on-term"}, tc.handler...)...)
				r.await(t, "idle")
				r.signal(syscall.SIGTERM)
				if code := r.finish(t); code != tc.code {
					t.Errorf("exit %d, want %d", code, tc.code)
				}
				log := r.stderr.String()
				if tc.whole {
					if m := logEvent(log, "checkpoint.interrupted"); m != nil {
						t.Errorf("a whole save was called interrupted: %v", m)
					}
					if got := latestComplete(lsJSON(t, w.env, w.url)); got != 200 {
						t.Errorf("latest complete step %d, want 200 (the handler's whole save); log:\n%s", got, tail(log))
					}
					wantResumed(t, w.resumed(t), 200, map[string]int64{"step-000200/model.pdparams": 200})
					return
				}
				wantEvent(t, log, "checkpoint.interrupted", "id", "path", "reason")
				wantStoreUnchanged(t, before, lsJSON(t, w.env, w.url), log)
				wantResumed(t, w.resumed(t), 100, map[string]int64{"step-000100/model.pdparams": 100})
			})
		}
	}
}

// TestWholeMarkerTrainerKilledMidSave (row 4): a trainer that marks each
// checkpoint with the marker file is killed in the middle of its next
// save: the unmarked directory is never committed. With --marker-only, an
// unmarked directory is not a checkpoint even before any marker was seen.
func TestWholeMarkerTrainerKilledMidSave(t *testing.T) {
	for _, sk := range storeKinds() {
		t.Run(sk.name+"/after-a-marker", func(t *testing.T) {
			w := newWholeStore(t, sk)
			r := w.start(t, w.pod(t), nil,
				"save", "step-000100/model.pdparams", "100", "mark", "step-000100", "100", "wait", "committed",
				"save", "step-000200/model.pdparams", "200", "torn", "step-000200/model.pdopt", "200", "kill9")
			r.await(t, "waiting")
			waitLog(t, r.lb, `"msg":"checkpoint.committed"`)
			before := lsJSON(t, w.env, w.url)
			r.release(t, "committed")
			if code := r.finish(t); code != 137 {
				t.Errorf("exit %d, want 137", code)
			}
			log := r.stderr.String()
			if logEvent(log, "checkpoint.interrupted") == nil && logEvent(log, "checkpoint.unmarked_ignored") == nil {
				t.Errorf("neither checkpoint.interrupted nor checkpoint.unmarked_ignored in the log:\n%s", tail(log))
			}
			wantStoreUnchanged(t, before, lsJSON(t, w.env, w.url), log)
			wantResumed(t, w.resumed(t), 100, map[string]int64{"step-000100/model.pdparams": 100})
		})
		t.Run(sk.name+"/marker-only", func(t *testing.T) {
			w := newWholeStore(t, sk)
			r := w.start(t, w.pod(t), []string{"--marker-only"}, "save", "step-000100/model.pdparams", "100", "exit", "0")
			if code := r.finish(t); code != 0 {
				t.Fatalf("exit %d, want 0; stderr:\n%s", code, tail(r.stderr.String()))
			}
			wantEvent(t, r.stderr.String(), "checkpoint.unmarked_ignored")
			if entries := lsJSON(t, w.env, w.url); len(entries) != 0 {
				t.Errorf("with --marker-only an unmarked directory was stored: %+v", entries)
			}
			if rep := w.resumed(t); rep.LBStep != "" || len(rep.Files) != 0 {
				t.Errorf("the next start resumed %q with %+v, want a fresh start", rep.LBStep, rep.Files)
			}
		})
	}
}

// TestWholeStrayFilesNotACheckpoint (row 5): a log, a config and a
// TensorBoard event file next to step-000100/ are not a checkpoint: at
// SIGTERM nothing but step 100 is stored, checkpoint.not_a_checkpoint is
// logged, and the next start restores the model, not train.log. Files that
// --exclude names are not checkpoints either.
func TestWholeStrayFilesNotACheckpoint(t *testing.T) {
	for _, sk := range storeKinds() {
		t.Run(sk.name+"/stray-files", func(t *testing.T) {
			w := newWholeStore(t, sk)
			r := w.start(t, w.pod(t), nil,
				"save", "step-000100/model.pdparams", "100", "append", "train.log", "step 100 loss 0.5",
				"append", "config.yaml", "lr: 0.1", "append", "events.out.tfevents.1700000000.trainer-0", "scalars",
				"idle", "on-term", "append", "train.log", "stopping", "exit", "0")
			r.await(t, "idle")
			r.signal(syscall.SIGTERM)
			if code := r.finish(t); code != 143 {
				t.Errorf("exit %d, want 143", code)
			}
			log := r.stderr.String()
			wantEvent(t, log, "checkpoint.not_a_checkpoint")
			for _, e := range lsJSON(t, w.env, w.url) {
				if e.Step != 100 {
					t.Errorf("stored step %d (%+v): only step-000100/ is a checkpoint; log:\n%s", e.Step, e, tail(log))
				}
			}
			rep := w.resumed(t)
			wantResumed(t, rep, 100, map[string]int64{"step-000100/model.pdparams": 100})
			for p := range rep.Files {
				if p != "step-000100/model.pdparams" {
					t.Errorf("the next start restored %s", p)
				}
			}
		})
		t.Run(sk.name+"/exclude", func(t *testing.T) {
			w := newWholeStore(t, sk)
			r := w.start(t, w.pod(t), []string{"--exclude", "debug-*"},
				"save", "step-000100/model.pdparams", "100", "save", "debug-dump-900.pdparams", "900", "exit", "0")
			if code := r.finish(t); code != 0 {
				t.Fatalf("exit %d, want 0; stderr:\n%s", code, tail(r.stderr.String()))
			}
			if got := latestComplete(lsJSON(t, w.env, w.url)); got != 100 {
				t.Errorf("latest complete step %d, want 100: --exclude debug-* names debug-dump-900.pdparams", got)
			}
		})
	}
}

// TestWholeSplitSaveStoredAsRevision (row 6): the trainer writes
// model.pdparams, which is committed, and then model.pdopt into the same
// step directory. The changed step is stored as a new revision
// (checkpoint.revised), lifeboat exits 143 (not 75), and the next start
// restores both files.
func TestWholeSplitSaveStoredAsRevision(t *testing.T) {
	for _, sk := range storeKinds() {
		t.Run(sk.name, func(t *testing.T) {
			w := newWholeStore(t, sk)
			r := w.start(t, w.pod(t), []string{"--settle", "1s"},
				"save", "step-000100/model.pdparams", "100", "wait", "committed",
				"save", "step-000100/model.pdopt", "100", "idle", "on-term", "exit", "0")
			r.await(t, "waiting")
			waitLog(t, r.lb, `"msg":"checkpoint.committed"`)
			r.release(t, "committed")
			r.await(t, "idle")
			r.signal(syscall.SIGTERM)
			if code := r.finish(t); code != 143 {
				t.Errorf("exit %d, want 143; stderr:\n%s", code, tail(r.stderr.String()))
			}
			wantEvent(t, r.stderr.String(), "checkpoint.revised")
			revised := false
			for _, e := range lsRevisions(t, w.env, w.url) {
				revised = revised || (e.Step == 100 && e.Complete && e.Revision > 0)
			}
			if !revised {
				t.Errorf("ls --json shows no complete revision > 0 of step 100: %+v", lsRevisions(t, w.env, w.url))
			}
			wantResumed(t, w.resumed(t), 100, map[string]int64{"step-000100/model.pdparams": 100, "step-000100/model.pdopt": 100})
		})
	}
}

// TestWholeCounterCheckpointFollowsNamedStep (row 7): epoch_3/, then a
// SIGTERM save into backup/. The backup is stored as a counter revision of
// step 3; the next start resumes step 3 from it, and the trainer's later
// epoch_4/ is committed as step 4, which the start after resumes.
func TestWholeCounterCheckpointFollowsNamedStep(t *testing.T) {
	for _, sk := range storeKinds() {
		t.Run(sk.name, func(t *testing.T) {
			w := newWholeStore(t, sk)
			r := w.start(t, w.pod(t), nil,
				"save", "epoch_3/model.pdparams", "3", "wait", "committed",
				"idle", "on-term", "save", "backup/latest.pdparams", "30", "exit", "0")
			r.await(t, "waiting")
			waitLog(t, r.lb, `"msg":"checkpoint.committed"`)
			r.release(t, "committed")
			r.await(t, "idle")
			r.signal(syscall.SIGTERM)
			if code := r.finish(t); code != 143 {
				t.Fatalf("first pod: exit %d, want 143; stderr:\n%s", code, tail(r.stderr.String()))
			}
			entries := lsRevisions(t, w.env, w.url)
			counter := false
			for _, e := range entries {
				if e.Step != 3 {
					t.Errorf("stored step %d: want only step 3 (epoch_3, and backup as its counter revision): %+v", e.Step, entries)
				}
				counter = counter || (e.Counter && e.Complete)
			}
			if !counter {
				t.Errorf("no complete counter entry in ls --json: %+v", entries)
			}

			r2 := w.start(t, w.pod(t), nil, "report", "save", "epoch_4/model.pdparams", "4", "exit", "0")
			if code := r2.finish(t); code != 0 {
				t.Errorf("second pod: exit %d, want 0; stderr:\n%s", code, tail(r2.stderr.String()))
			}
			if reps := r2.reports(t); len(reps) != 1 {
				t.Errorf("second pod: reports %+v", reps)
			} else {
				wantResumed(t, reps[0], 3, map[string]int64{"backup/latest.pdparams": 30})
			}
			for _, ev := range []string{"checkpoint.upload_failed", "checkpoint.upload_refused"} {
				if m := logEvent(r2.stderr.String(), ev); m != nil {
					t.Errorf("second pod: epoch_4 was refused: %v", m)
				}
			}
			if got := latestComplete(lsJSON(t, w.env, w.url)); got != 4 {
				t.Errorf("latest complete step %d after epoch_4/, want 4; stderr:\n%s", got, tail(r2.stderr.String()))
			}
			wantResumed(t, w.resumed(t), 4, map[string]int64{"epoch_4/model.pdparams": 4})
		})
	}
}

// TestWholeStoreInsideDirRefused (row 8): a file:// store inside --dir (or
// --dir itself) is refused at start with exit 2 and a message naming --store
// and --dir; no trainer is started.
func TestWholeStoreInsideDirRefused(t *testing.T) {
	for _, sub := range []string{"store", ".", "a/b/store"} {
		t.Run("run/"+sub, func(t *testing.T) {
			dir := t.TempDir()
			ran := filepath.Join(t.TempDir(), "ran")
			cmd := exec.Command(lifeboatBin, "run", "--store", "file://"+filepath.Join(dir, sub), "--dir", dir, "--", "touch", ran)
			out, _ := cmd.CombinedOutput()
			if code := cmd.ProcessState.ExitCode(); code != 2 || !strings.Contains(string(out), "--store") || !strings.Contains(string(out), "--dir") {
				t.Errorf("exit %d, output %q; want 2 and a message naming --store and --dir", code, out)
			}
			if _, err := os.Stat(ran); err == nil {
				t.Errorf("the trainer was started")
			}
		})
	}
	t.Run("sidecar", func(t *testing.T) {
		dir := t.TempDir()
		ctx, cancel := context.WithTimeout(context.Background(), hangLimit)
		defer cancel()
		cmd := exec.CommandContext(ctx, lifeboatBin, "sidecar", "--store", "file://"+filepath.Join(dir, "store"), "--dir", dir)
		out, _ := cmd.CombinedOutput()
		if ctx.Err() != nil {
			t.Fatalf("the sidecar ran on (killed after %s): a store inside --dir was not refused; output:\n%s", hangLimit, tail(string(out)))
		}
		if code := cmd.ProcessState.ExitCode(); code != 2 || !strings.Contains(string(out), "--store") || !strings.Contains(string(out), "--dir") {
			t.Errorf("exit %d, output %q; want 2 and a message naming --store and --dir", code, out)
		}
	})
}

// TestWholeDirSymlinkResolved (row 9): --dir given as a symbolic link to
// the real directory: watch.dir_resolved is logged and the checkpoints the
// trainer saves through it are uploaded and resumed.
func TestWholeDirSymlinkResolved(t *testing.T) {
	for _, sk := range storeKinds() {
		t.Run(sk.name, func(t *testing.T) {
			w := newWholeStore(t, sk)
			link := filepath.Join(w.root, "ckpt")
			if err := os.Symlink(w.pod(t), link); err != nil {
				t.Fatal(err)
			}
			r := w.start(t, link, nil, "save", "step-000100/model.pdparams", "100", "exit", "0")
			if code := r.finish(t); code != 0 {
				t.Errorf("exit %d, want 0", code)
			}
			wantEvent(t, r.stderr.String(), "watch.dir_resolved")
			if got := latestComplete(lsJSON(t, w.env, w.url)); got != 100 {
				t.Errorf("latest complete step %d, want 100; log:\n%s", got, tail(r.stderr.String()))
			}
			wantResumed(t, w.resumed(t), 100, map[string]int64{"step-000100/model.pdparams": 100})
		})
	}
}

// slowUploadFlags make an upload to MinIO take seconds: one worker and a
// bandwidth cap, so that a change to the files lands in its middle.
var slowUploadFlags = []string{"--workers", "1", "--upload-limit", "8MiB"}

// minioOnly returns the MinIO store kind: only its uploads can be slowed
// (--upload-limit) enough to change a file in the middle of one.
func minioOnly() storeKind {
	for _, sk := range storeKinds() {
		if sk.name == "minio" {
			return sk
		}
	}
	panic("no minio store kind")
}

// writeRandom writes size bytes of a ChaCha8 stream seeded by seed to p
// and returns them.
func writeRandom(t *testing.T, p string, size int, seed string) []byte {
	t.Helper()
	b := make([]byte, size)
	_, _ = rand.NewChaCha8(sha256.Sum256([]byte(seed))).Read(b)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return b
}

// setenv gives the test's process (and what it starts without an
// environment of its own) the store's environment.
func (w *wholeStore) setenv(t *testing.T) {
	t.Helper()
	for _, kv := range w.env {
		k, v, _ := strings.Cut(kv, "=")
		t.Setenv(k, v)
	}
}

// open opens the store as the subcommands do, and empties it when the
// test ends.
func (w *wholeStore) open(t *testing.T) storage.Store {
	t.Helper()
	w.setenv(t)
	return openCrashStore(t, w.url)
}

// waitChunk waits until s holds a chunk: an upload has read and stored
// its first bytes.
func waitChunk(t *testing.T, p *lb, s storage.Store) {
	t.Helper()
	for deadline := time.Now().Add(hangLimit); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		found := errors.New("found")
		if err := s.List(context.Background(), "chunks/", func(storage.ObjectInfo) error { return found }); errors.Is(err, found) {
			return
		}
		if !p.alive() {
			t.Fatalf("lifeboat exited (%d) before it stored a chunk; stderr:\n%s", p.code, tail(p.stderr.String()))
		}
	}
	t.Fatalf("no chunk was stored in %s; stderr:\n%s", hangLimit, tail(p.stderr.String()))
}

// storeManifests returns every manifest in s, whatever its step or
// revision, by key.
func storeManifests(t *testing.T, s storage.Store) map[string]*checkpoint.Manifest {
	t.Helper()
	ctx := context.Background()
	var keys []string
	if err := s.List(ctx, "snapshots/", func(oi storage.ObjectInfo) error {
		if strings.HasSuffix(oi.Key, ".json") && !strings.Contains(oi.Key, "-complete-of-") { // not a step's completion record
			keys = append(keys, oi.Key)
		}
		return nil
	}); err != nil {
		t.Fatalf("list manifests: %v", err)
	}
	out := map[string]*checkpoint.Manifest{}
	for _, k := range keys {
		rc, err := s.Get(ctx, k, 0, -1)
		if err != nil {
			t.Fatalf("get %s: %v", k, err)
		}
		b, err := io.ReadAll(rc)
		rc.Close()
		if err != nil {
			t.Fatalf("read %s: %v", k, err)
		}
		var m checkpoint.Manifest
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatalf("manifest %s: %v", k, err)
		}
		out[k] = &m
	}
	return out
}

// chunkSums are the SHA-256 sums of b cut into chunks of size.
func chunkSums(b []byte, size int64) []string {
	var out []string
	for off := int64(0); off < int64(len(b)); off += size {
		sum := sha256.Sum256(b[off:min(off+size, int64(len(b)))])
		out = append(out, hex.EncodeToString(sum[:]))
	}
	return out
}

// TestWholeRewriteDuringUploadNeverMixed (row 10): a file is rewritten in
// place in the middle of its upload with its size and modification time
// kept (dd conv=notrunc, then touch -r). No snapshot in the store may hold
// a mix of the two versions, and the next start restores the version on
// disk at the end.
func TestWholeRewriteDuringUploadNeverMixed(t *testing.T) {
	w := newWholeStore(t, minioOnly())
	dir := w.pod(t)
	const size = 48 << 20
	p := filepath.Join(dir, "step-000100", "model.bin")
	a := writeRandom(t, p, size, "version a")
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	b := make([]byte, size)
	_, _ = rand.NewChaCha8(sha256.Sum256([]byte("version b"))).Read(b)

	s := w.open(t)
	r := w.start(t, dir, slowUploadFlags, "idle", "on-term", "exit", "0")
	waitLog(t, r.lb, `"msg":"checkpoint.upload_started"`)
	// The first chunk is stored: the upload has read at most the first
	// four of the six (one worker, three buffers).
	waitChunk(t, r.lb, s)
	f, err := os.OpenFile(p, os.O_WRONLY, 0) // in place: no truncation, same inode
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(b, 0); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(p, fi.ModTime(), fi.ModTime()); err != nil {
		t.Fatal(err)
	}
	waitLog(t, r.lb, `"msg":"checkpoint.committed"`)
	r.signal(syscall.SIGTERM)
	if code := r.finish(t); code != 143 {
		t.Errorf("exit %d, want 143; stderr:\n%s", code, tail(r.stderr.String()))
	}
	for k, m := range storeManifests(t, s) {
		for _, mf := range m.Files {
			var got []string
			for _, c := range mf.Chunks {
				got = append(got, c.SHA256)
			}
			if !slices.Equal(got, chunkSums(a, m.ChunkSize)) && !slices.Equal(got, chunkSums(b, m.ChunkSize)) {
				t.Errorf("%s holds %s as a mix of the two versions (or neither); lifeboat's log:\n%s", k, mf.Path, tail(r.stderr.String()))
			}
		}
	}
	sumB := sha256.Sum256(b)
	rep := w.resumed(t)
	if got := rep.Files["step-000100/model.bin"].SHA256; got != hex.EncodeToString(sumB[:]) {
		t.Errorf("restored model.bin has SHA-256 %.12s, want the version on disk at the end (%.12s)", got, hex.EncodeToString(sumB[:]))
	}
}

// TestWholeSymlinkSwapDuringUpload (row 11): in the middle of an upload, a
// file of the checkpoint is swapped for a symbolic link to a root-only file
// outside --dir (with the same size and modification time). The outside
// file's bytes never reach the store or a restore.
func TestWholeSymlinkSwapDuringUpload(t *testing.T) {
	w := newWholeStore(t, minioOnly())
	dir := w.pod(t)
	ck := filepath.Join(dir, "step-000100")
	writeRandom(t, filepath.Join(ck, "a-model.bin"), 48<<20, "model")
	extra := filepath.Join(ck, "z-extra.bin")
	writeRandom(t, extra, 64<<10, "extra")
	fi, err := os.Stat(extra)
	if err != nil {
		t.Fatal(err)
	}
	secret := filepath.Join(w.root, "secret")
	secretBytes := bytes.Repeat([]byte("root-only secret outside --dir\n"), (64<<10)/31+1)[:64<<10]
	if err := os.WriteFile(secret, secretBytes, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(secret, fi.ModTime(), fi.ModTime()); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(secretBytes)
	secretSum := hex.EncodeToString(sum[:])

	s := w.open(t)
	r := w.start(t, dir, slowUploadFlags, "idle", "on-term", "exit", "0")
	waitLog(t, r.lb, `"msg":"checkpoint.upload_started"`)
	tmp := filepath.Join(w.root, "link")
	if err := os.Symlink(secret, tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, extra); err != nil {
		t.Fatal(err)
	}
	waitLog(t, r.lb, `"msg":"checkpoint.committed"`)
	r.signal(syscall.SIGTERM)
	if code := r.finish(t); code != 143 {
		t.Errorf("exit %d, want 143; stderr:\n%s", code, tail(r.stderr.String()))
	}
	for k, m := range storeManifests(t, s) {
		for _, mf := range m.Files {
			for _, c := range mf.Chunks {
				if c.SHA256 == secretSum {
					t.Errorf("%s stores %s with the bytes of the file outside --dir", k, mf.Path)
				}
			}
		}
	}
	if err := s.List(context.Background(), "chunks/", func(oi storage.ObjectInfo) error {
		if strings.HasSuffix(oi.Key, secretSum) {
			t.Errorf("the store holds the bytes of the file outside --dir as chunk %s", oi.Key)
		}
		return nil
	}); err != nil {
		t.Fatalf("list chunks: %v", err)
	}
	for p, f := range w.resumed(t).Files {
		if f.SHA256 == secretSum {
			t.Errorf("the next start restored %s with the bytes of the file outside --dir", p)
		}
	}
}

// TestWholeSpecialFilesSkippedAndLogged (row 12): a symbolic link and a
// named pipe in a checkpoint directory are left out with
// checkpoint.skipped_special logged; the regular files are committed and
// restored.
func TestWholeSpecialFilesSkippedAndLogged(t *testing.T) {
	for _, sk := range storeKinds() {
		t.Run(sk.name, func(t *testing.T) {
			w := newWholeStore(t, sk)
			r := w.start(t, w.pod(t), nil, "save", "step-000100/model.pdparams", "100",
				"symlink", "model.pdparams", "step-000100/latest.pdparams", "symlink", "/etc/passwd", "step-000100/passwd",
				"mkfifo", "step-000100/progress.pipe", "exit", "0")
			if code := r.finish(t); code != 0 {
				t.Errorf("exit %d, want 0; stderr:\n%s", code, tail(r.stderr.String()))
			}
			wantEvent(t, r.stderr.String(), "checkpoint.skipped_special")
			if got := latestComplete(lsJSON(t, w.env, w.url)); got != 100 {
				t.Errorf("latest complete step %d, want 100", got)
			}
			rep := w.resumed(t)
			wantResumed(t, rep, 100, map[string]int64{"step-000100/model.pdparams": 100})
			if len(rep.Files) != 1 {
				t.Errorf("restored %+v, want only step-000100/model.pdparams", rep.Files)
			}
		})
	}
}

// TestWholeSidecarSaysWritersInvisible (row 13): a sidecar in its own PID
// namespace cannot see the trainer's processes; it says so at start
// (sidecar.writers_invisible), and its final flush does not commit a
// pickle still being written by a process it cannot see.
func TestWholeSidecarSaysWritersInvisible(t *testing.T) {
	for _, sk := range storeKinds() {
		t.Run(sk.name, func(t *testing.T) {
			w := newWholeStore(t, sk)
			dir := w.pod(t)
			w.setenv(t) // for the sidecar
			saver, _ := filepath.Abs(filepath.Join("testdata", "trainers", "saver.py"))
			whole := filepath.Join(w.root, "whole.pdparams")
			for _, args := range [][]string{
				{"save", filepath.Join(dir, "step-000100", "model.pdparams"), "100"},
				{"save", whole, "200"},
			} {
				if out, err := exec.Command(wholePython, append([]string{saver}, args...)...).CombinedOutput(); err != nil {
					t.Fatalf("saver.py %v: %v\n%s", args, err, out)
				}
			}
			p := start(t, "pid1", "sidecar", "--store", w.url, "--dir", dir, "--settle", "2s", "--scan-interval", "50ms",
				"--grace", "30s", "--keep", "0", "--log-format", "json")
			waitLog(t, p, `"msg":"checkpoint.committed"`)
			b, err := os.ReadFile(whole)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.MkdirAll(filepath.Join(dir, "step-000200"), 0o755); err != nil {
				t.Fatal(err)
			}
			// The writer is this test, outside the sidecar's PID namespace;
			// it holds the file open with half the pickle written.
			f, err := os.Create(filepath.Join(dir, "step-000200", "model.pdparams"))
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if _, err := f.Write(b[:len(b)/2]); err != nil {
				t.Fatal(err)
			}
			p.signal(syscall.SIGTERM)
			if code := p.wait(); code != 0 {
				t.Errorf("sidecar exit %d, want 0; stderr:\n%s", code, tail(p.stderr.String()))
			}
			wantEvent(t, p.stderr.String(), "sidecar.writers_invisible")
			if want := "it relies on markers, format checks and --settle, also for the final upload"; !strings.Contains(p.stderr.String(), want) {
				t.Errorf("sidecar.writers_invisible does not say %q; stderr:\n%s", want, tail(p.stderr.String()))
			}
			if got := latestComplete(lsJSON(t, w.env, w.url)); got != 100 {
				t.Errorf("latest complete step %d, want 100 (step 200 was still being written); log:\n%s", got, tail(p.stderr.String()))
			}
			wantResumed(t, w.resumed(t), 100, map[string]int64{"step-000100/model.pdparams": 100})
		})
	}
}
