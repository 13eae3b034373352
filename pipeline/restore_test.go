package pipeline

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lifeboat-project/lifeboat/checkpoint"
	"github.com/lifeboat-project/lifeboat/resume"
	"github.com/lifeboat-project/lifeboat/storage"
	fsstore "github.com/lifeboat-project/lifeboat/storage/fs"
	"github.com/lifeboat-project/lifeboat/watch"
)

// logBuffer is a JSON log that tests read back, line by line.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// lines returns the records whose msg is msg.
func (l *logBuffer) lines(msg string) []map[string]any {
	var out []map[string]any
	sc := bufio.NewScanner(strings.NewReader(l.String()))
	for sc.Scan() {
		var rec map[string]any
		if json.Unmarshal(sc.Bytes(), &rec) == nil && rec["msg"] == msg {
			out = append(out, rec)
		}
	}
	return out
}

func newLog() (*slog.Logger, *logBuffer) {
	b := &logBuffer{}
	return slog.New(slog.NewJSONHandler(b, nil)), b
}

// newStore is a directory store in a test's temporary directory.
func newStore(t *testing.T, root string) storage.Store {
	t.Helper()
	s, err := fsstore.New(filepath.Join(root, "store"))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// commit uploads one rank's checkpoint of step st (a file shard.bin that
// names it) to s, as committed at.
func commit(t *testing.T, s storage.Store, root string, st checkpoint.Target, at time.Time) {
	t.Helper()
	u := &checkpoint.Uploader{Store: s, Clock: func() time.Time { return at }}
	dir := filepath.Join(root, fmt.Sprintf("src-%s-%d-%d", st.Line, st.Step, st.Rank))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "shard.bin"), []byte(dir), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := u.Upload(context.Background(), dir, st); err != nil {
		t.Fatal(err)
	}
}

// TestOtherWorldSizesNameTheNewest: a fresh start for want of a checkpoint
// of its own world size names, for each other world size, the step a
// restore of that size would take, by the store's one rule of newest
// (checkpoint.Newest), not the highest step number. The store holds line
// A's step 9000 of two ranks, then line B's step 100 of two ranks,
// committed an hour later: a restore with two ranks takes 100. On the
// code before, resume.fresh_start named "2 (newest step 9000)".
func TestOtherWorldSizesNameTheNewest(t *testing.T) {
	root := t.TempDir()
	s := newStore(t, root)
	at := time.Now().Add(-2 * time.Hour)
	for _, st := range []checkpoint.Target{{Step: 9000, Line: "aaaaaaaaaaaaaaaa"}, {Step: 100, Line: "bbbbbbbbbbbbbbbb"}} {
		for rank := range 2 {
			st.Rank, st.WorldSize = rank, 2
			commit(t, s, root, st, at)
		}
		at = at.Add(time.Hour)
	}
	ctx := context.Background()
	log, out := newLog()
	r, _, err := Restore(ctx, s, filepath.Join(root, "two"), RestoreConfig{Rank: 0, WorldSize: 2, Log: log})
	if err != nil || r == nil || r.Step != 100 {
		t.Fatalf("restore with two ranks: %+v, %v\n%s\nwant step 100, line B's", r, err, out)
	}
	log, out = newLog()
	r, _, err = Restore(ctx, s, filepath.Join(root, "one"), RestoreConfig{Rank: 0, WorldSize: 1, Log: log})
	warn := out.lines("resume.fresh_start")
	if err != nil || r != nil || len(warn) != 1 || warn[0]["level"] != "WARN" || fmt.Sprint(warn[0]["complete_for_world_sizes"]) != "2 (newest step 100)" {
		t.Errorf("restore with one rank: %+v, %v, resume.fresh_start %v; want a fresh start with complete_for_world_sizes \"2 (newest step 100)\", what a restore of two ranks takes\n%s", r, err, warn, out)
	}
}

// TestRestoreFreshRemovesResumeFile: a restore that finds nothing removes
// the resume file an earlier restore left, so that the trainer does not
// resume from it, and says so at INFO when the store is empty.
func TestRestoreFreshRemovesResumeFile(t *testing.T) {
	root := t.TempDir()
	s := newStore(t, root)
	dir := filepath.Join(root, "ckpt")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := resume.Write(dir, &resume.Point{Dir: dir, Step: 3, ID: "old"}); err != nil {
		t.Fatal(err)
	}
	log, out := newLog()
	r, res, err := Restore(context.Background(), s, dir, RestoreConfig{WorldSize: 1, Log: log})
	if r != nil || res != nil || err != nil {
		t.Fatalf("Restore = %+v, %+v, %v; want a fresh start", r, res, err)
	}
	if _, err := os.Stat(filepath.Join(dir, resume.FileName)); !os.IsNotExist(err) {
		t.Errorf("resume file after a fresh start: %v; want it removed", err)
	}
	if l := out.lines("resume.fresh_start"); len(l) != 1 || l[0]["level"] != "INFO" {
		t.Errorf("resume.fresh_start %v; want one INFO line", l)
	}
}

// TestResumeDoesWhatItDecides: resumeAtStart restores the store's newest with
// restore auto and writes the resume file; with restore never it hands on
// that file as an init container's, continuing its line; over the same
// store without the file it starts a new line, with a WARN.
func TestResumeDoesWhatItDecides(t *testing.T) {
	root := t.TempDir()
	s := newStore(t, root)
	const line = "cccccccccccccccc"
	commit(t, s, root, checkpoint.Target{Step: 40, Line: line, WorldSize: 1}, time.Now().Add(-time.Minute))
	ctx := context.Background()
	snaps, err := checkpoint.List(ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(root, "ckpt")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	log, out := newLog()
	rc := RestoreConfig{WorldSize: 1, Log: log}
	w := watcherFor(t, dir, log)
	got, err := resumeAtStart(ctx, s, w, snaps, resumeConfig{RestoreConfig: rc, Dir: dir, Restore: true})
	if err != nil || got.Point == nil || got.Point.Step != 40 || got.Source != resume.SourceStore || got.Line.Line != line || got.At.IsZero() {
		t.Fatalf("restore auto: %+v, %v; want step 40 restored from the store, line %s\n%s", got, err, line, out)
	}
	file, err := resume.Read(dir)
	if err != nil || file == nil || file.Step != 40 {
		t.Fatalf("resume file after restore auto: %+v, %v; want step 40", file, err)
	}
	got, err = resumeAtStart(ctx, s, w, snaps, resumeConfig{RestoreConfig: rc, Dir: dir})
	if err != nil || got.Point == nil || got.Point.Step != 40 || got.Source != resume.SourceInit || got.Point.Source != resume.SourceInit || got.Line.Line != line {
		t.Fatalf("restore never with the file: %+v, %v; want step 40 handed on, line %s", got, err, line)
	}
	if l := out.lines("resume.fresh_start"); len(l) != 0 {
		t.Fatalf("resume.fresh_start %v before the fresh start", l)
	}
	if err := resume.Remove(dir); err != nil {
		t.Fatal(err)
	}
	got, err = resumeAtStart(ctx, s, w, snaps, resumeConfig{RestoreConfig: rc, Dir: dir})
	if err != nil || got.Point != nil || got.Line.Line == line || got.Line.From != nil {
		t.Fatalf("restore never without the file: %+v, %v; want a fresh start on a new line", got, err)
	}
	if l := out.lines("resume.fresh_start"); len(l) != 1 || l[0]["level"] != "WARN" || !strings.Contains(fmt.Sprint(l[0]["reason"]), "complete step 40") {
		t.Errorf("resume.fresh_start %v; want one WARN naming step 40", l)
	}
}

// watcherFor watches dir with the default rules.
func watcherFor(t *testing.T, dir string, log *slog.Logger) *watch.Watcher {
	t.Helper()
	w, err := watch.New(watch.Config{Dir: dir, Log: log})
	if err != nil {
		t.Fatal(err)
	}
	return w
}
