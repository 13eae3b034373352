package e2e

// The streamed final upload: from the stop on, the chunks of the trainer's
// SIGTERM save are stored as they are written, and the final upload only
// confirms them. The trainer (testdata/trainers/saver.py) writes its save
// in parts and waits between them until the test has seen the stream
// store the chunks of the first part in the store's directory.

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// storedChunks counts the chunks under a file:// store.
func storedChunks(t *testing.T, url string) int {
	t.Helper()
	n := 0
	root := filepath.Join(strings.TrimPrefix(url, "file://"), "chunks")
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type().IsRegular() {
			n++
		}
		return nil
	})
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	return n
}

// awaitChunks waits until the store holds at least n chunks.
func awaitChunks(t *testing.T, url string, n int, r *saverRun) {
	t.Helper()
	deadline := time.Now().Add(hangLimit)
	for storedChunks(t, url) < n {
		if time.Now().After(deadline) {
			t.Fatalf("the store holds %d chunks, not %d, after %s; lifeboat's log:\n%s", storedChunks(t, url), n, hangLimit, tail(r.stderr.String()))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

const mib8 = 8 << 20 // lifeboat's chunk size

// TestStreamedSaveRewrittenBehind: the SIGTERM handler writes two whole
// chunks of its save, waits until the stream has stored them, goes back
// and rewrites bytes of the first, writes the rest and exits 0. The commit
// holds the bytes on disk at the end (the next start restores them), the
// second chunk is taken from the stream, and the rewritten first one is
// stored again.
func TestStreamedSaveRewrittenBehind(t *testing.T) {
	w := newWholeStore(t, storeKinds()[0])
	w.seed(t, "save", "step-000100/model.pdparams", "100")
	before := storedChunks(t, w.url)
	r := w.start(t, w.pod(t), nil, "idle", "on-term",
		"part", "step-000200/model.bin", "16777216", "wait", "streamed",
		"rewrite", "step-000200/model.bin", "100", "4096",
		"part", "step-000200/model.bin", "5000000", "closeall", "report", "exit", "0")
	r.await(t, "idle")
	r.signal(syscall.SIGTERM)
	r.await(t, "waiting")
	awaitChunks(t, w.url, before+2, r)
	r.release(t, "streamed")
	if code := r.finish(t); code != 143 {
		t.Fatalf("exit %d, want 143; log:\n%s", code, tail(r.stderr.String()))
	}
	log := r.stderr.String()
	wantEvent(t, log, "checkpoint.stream_started")
	if m := logEvent(log, "checkpoint.streamed"); m == nil || m["chunks"] != float64(2) {
		t.Errorf("checkpoint.streamed: %v; want 2 chunks", m)
	}
	var committed map[string]any
	for line := range strings.Lines(log) {
		if m := logEvent(line, "checkpoint.committed"); m != nil && m["step"] == float64(200) {
			committed = m
		}
	}
	if committed == nil || committed["streamed_bytes"] != float64(mib8) {
		t.Errorf("commit of step 200: %v; want streamed_bytes %d (the second chunk; the first was rewritten)", committed, mib8)
	}
	reps := r.reports(t)
	if len(reps) != 1 {
		t.Fatalf("%d reports, want 1", len(reps))
	}
	want := reps[0].Files["step-000200/model.bin"]
	got := w.resumed(t)
	if got.LBStep != "200" || got.Files["step-000200/model.bin"].SHA256 != want.SHA256 {
		t.Errorf("the next start resumed step %q with %+v; want step 200 with the file as written last (%s, %d bytes)",
			got.LBStep, got.Files["step-000200/model.bin"], want.SHA256, want.Size)
	}
}

// TestStreamedSaveCutShort: the handler writes two whole chunks, waits
// until the stream stored them, and is killed within --settle of its last
// write (so the death rule calls the file cut short). Its save is never
// committed: the store lists what it did before, the streamed chunks are
// named by no manifest (left to prune), and the next start resumes the
// step before.
func TestStreamedSaveCutShort(t *testing.T) {
	w := newWholeStore(t, storeKinds()[0])
	before := w.seed(t, "save", "step-000100/model.pdparams", "100")
	chunks := storedChunks(t, w.url)
	r := w.start(t, w.pod(t), []string{"--settle", "30s", "--grace", "30s"}, "idle", "on-term",
		"part", "step-000200/model.bin", "16777216", "wait", "streamed", "kill9")
	r.await(t, "idle")
	r.signal(syscall.SIGTERM)
	r.await(t, "waiting")
	awaitChunks(t, w.url, chunks+2, r)
	r.release(t, "streamed")
	code := r.finish(t)
	log := r.stderr.String()
	if code != 137 {
		t.Errorf("exit %d, want 137 (the trainer's, killed by SIGKILL); log:\n%s", code, tail(log))
	}
	wantEvent(t, log, "checkpoint.interrupted", "id", "path", "reason")
	wantStoreUnchanged(t, before, lsJSON(t, w.env, w.url), log)
	if n := storedChunks(t, w.url); n != chunks+2 {
		t.Errorf("the store holds %d chunks, want %d: the seed's and the 2 streamed", n, chunks+2)
	}
	wantResumed(t, w.resumed(t), 100, map[string]int64{"step-000100/model.pdparams": 100})
}
