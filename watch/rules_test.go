package watch

import (
	"bytes"
	"encoding/json"
	"errors"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/lifeboat-project/lifeboat/setting"
)

// logBuffer captures a Watcher's log lines as JSON objects.
type logBuffer struct{ bytes.Buffer }

func (b *logBuffer) logger() *slog.Logger {
	return slog.New(slog.NewJSONHandler(b, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// events returns the logged records whose msg is event.
func (b *logBuffer) events(t *testing.T, event string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(b.String()), "\n") {
		if line == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		if m["msg"] == event {
			out = append(out, m)
		}
	}
	return out
}

// makeTree writes files (path -> content) under dir, an hour old.
func makeTree(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	old := time.Now().Add(-time.Hour)
	for p, content := range files {
		write(t, filepath.Join(dir, filepath.FromSlash(p)), content, old)
	}
}

// candidateFiles renders rs as "id: file,file" lines, sorted.
func candidateFiles(rs []Ready) []string {
	var out []string
	for _, r := range rs {
		var paths []string
		for _, f := range r.Files {
			paths = append(paths, f.Path)
		}
		out = append(out, r.ID+": "+strings.Join(paths, ","))
	}
	sort.Strings(out)
	return out
}

// TestWhatIsACheckpoint: excluded files are part of no checkpoint; loose
// top-level files and unnumbered directories are checkpoints only with a
// file of a checkpoint format; numbered directories and markers always are.
func TestWhatIsACheckpoint(t *testing.T) {
	for _, tc := range []struct {
		name    string
		files   map[string]string
		exclude []string
		want    []string
		ignored []string // IDs logged as checkpoint.not_a_checkpoint
	}{
		{
			name: "log, config and tensorboard file next to a step directory",
			files: map[string]string{
				"train.log": "loss=1", "config.yaml": "lr: 1", "config.json": "{}", "events.out.tfevents.123.host": "tb",
				"step-000100/model.pdparams": "m",
			},
			want:    []string{"dir:step-000100: model.pdparams"},
			ignored: []string{"files:"},
		},
		{
			name:  "numbered files with a checkpoint format form one checkpoint",
			files: map[string]string{"epoch_3.pdparams": "m", "epoch_3.json": "{}", "train.log": "x"},
			want:  []string{"files:3: epoch_3.json,epoch_3.pdparams"},
		},
		{
			name:    "numbered top-level files of no checkpoint format",
			files:   map[string]string{"config_3.yaml": "x", "train.log.1": "rotated", "nohup.out": "x"},
			ignored: []string{"files:3"},
		},
		{
			name:    "unnumbered directory without a checkpoint format",
			files:   map[string]string{"backup/notes.txt": "x", "step-2/model.pdparams": "m"},
			want:    []string{"dir:step-2: model.pdparams"},
			ignored: []string{"dir:backup"},
		},
		{
			name:  "unnumbered directory with a checkpoint format",
			files: map[string]string{"backup/latest.pdparams": "m", "backup/notes.txt": "x"},
			want:  []string{"dir:backup: latest.pdparams,notes.txt"},
		},
		{
			name:  "extensions no format check covers",
			files: map[string]string{"inference.pdmodel": "x", "inference.pdiparams": "x", "emb_7.npy": "x"},
			want:  []string{"files:7: emb_7.npy", "files:: inference.pdiparams,inference.pdmodel"},
		},
		{
			name:  "a numbered directory counts whatever it holds",
			files: map[string]string{"step-000100/notes.txt": "x"},
			want:  []string{"dir:step-000100: notes.txt"},
		},
		{
			name:  "a marker directory counts whatever it holds",
			files: map[string]string{"run/data.txt": "x", "run/" + DefaultMarker: "5"},
			want:  []string{"marker:run: data.txt"},
		},
		{
			name: "excluded files inside a checkpoint are not part of it",
			files: map[string]string{
				"step-1/model.pdparams": "m", "step-1/train.log": "x", "step-1/.nfs000123": "x",
				"step-1/model.pdparams.tmp": "x", "step-1/save.lock": "x", "step-1/state.swp": "x", "step-1/a~": "x",
			},
			want: []string{"dir:step-1: model.pdparams"},
		},
		{
			name:    "Exclude replaces the defaults; a pattern with a slash matches the path",
			files:   map[string]string{"step-1/model.pdparams": "m", "step-1/run.log": "x", "step-1/scratch/a.bin": "x", "step-2/scratch/b": "x"},
			exclude: []string{"step-*/scratch/*"},
			want:    []string{"dir:step-1: model.pdparams,run.log"},
		},
		{
			name:    "an empty Exclude excludes nothing",
			files:   map[string]string{"step-1/model.pdparams": "m", "step-1/a.tmp": "x"},
			exclude: []string{},
			want:    []string{"dir:step-1: a.tmp,model.pdparams"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			makeTree(t, dir, tc.files)
			var logs logBuffer
			w, err := New(Config{Dir: dir, Exclude: tc.exclude, Log: logs.logger()})
			if err != nil {
				t.Fatal(err)
			}
			r, err := w.Scan(true)
			if err != nil {
				t.Fatal(err)
			}
			if got := candidateFiles(r); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("checkpoints %q, want %q", got, tc.want)
			}
			if _, err := w.Scan(true); err != nil { // logs nothing more
				t.Fatal(err)
			}
			var ignored []string
			for _, m := range logs.events(t, "checkpoint.not_a_checkpoint") {
				ignored = append(ignored, m["id"].(string))
				if m["files"] == nil || m["example"] == nil || m["reason"] == nil {
					t.Errorf("log line without files, example or why: %v", m)
				}
			}
			sort.Strings(ignored)
			if !reflect.DeepEqual(ignored, tc.ignored) {
				t.Errorf("logged as not a checkpoint %q, want each of %q once", ignored, tc.ignored)
			}
		})
	}
}

// TestMarkers: once a marker has been seen, or with MarkerOnly, unmarked
// directories and files are not checkpoints, even at the final scan, and
// each is logged once.
func TestMarkers(t *testing.T) {
	t.Run("after the first marker", func(t *testing.T) {
		dir := t.TempDir()
		var logs logBuffer
		w, _ := New(Config{Dir: dir, Log: logs.logger()})
		makeTree(t, dir, map[string]string{"ckpt-1/model.pdparams": "m", "ckpt-1/" + DefaultMarker: "1"})
		if r, _ := w.Scan(true); ids(r) != "marker:ckpt-1" {
			t.Fatalf("marked checkpoint: %s", ids(r))
		}
		// The trainer dies writing its next checkpoint; the one before is
		// pruned by its own retention.
		if err := os.RemoveAll(filepath.Join(dir, "ckpt-1")); err != nil {
			t.Fatal(err)
		}
		makeTree(t, dir, map[string]string{"ckpt-2/model.pdparams": "half", "latest.pdparams": "x"})
		for range 2 {
			if r, _ := w.Scan(true); len(r) != 0 {
				t.Fatalf("unmarked candidates after a marker was seen: %s", ids(r))
			}
		}
		got := logs.events(t, "checkpoint.unmarked_ignored")
		if len(got) != 2 || got[0]["reason"] != "a marker was seen; only marked directories are checkpoints" {
			t.Errorf("logged %v; want dir:ckpt-2 and files: once each, with why", got)
		}
		makeTree(t, dir, map[string]string{"ckpt-2/" + DefaultMarker: "2"})
		if r, _ := w.Scan(true); ids(r) != "marker:ckpt-2" {
			t.Errorf("after its marker: %s, want marker:ckpt-2", ids(r))
		}
	})
	t.Run("marker only", func(t *testing.T) {
		dir := t.TempDir()
		var logs logBuffer
		w, _ := New(Config{Dir: dir, MarkerOnly: true, Log: logs.logger()})
		makeTree(t, dir, map[string]string{"step-100/model.pdparams": "m"})
		if r, _ := w.Scan(true); len(r) != 0 {
			t.Fatalf("unmarked directory with MarkerOnly: %s", ids(r))
		}
		got := logs.events(t, "checkpoint.unmarked_ignored")
		if len(got) != 1 || got[0]["id"] != "dir:step-100" || got[0]["reason"] != string(setting.MarkerOnly) {
			t.Errorf("logged %v", got)
		}
	})
}

// TestCounterSteps: a checkpoint without a step takes the newest named step
// (a revision of it), never one above it that a later named step would
// collide with.
func TestCounterSteps(t *testing.T) {
	dir := t.TempDir()
	w, _ := New(Config{Dir: dir})
	number := func() Ready {
		t.Helper()
		r, err := w.Scan(true)
		if err != nil || len(r) == 0 {
			t.Fatalf("scan: %v, %v", r, err)
		}
		newest := r[len(r)-1]
		w.Number(&newest)
		return newest
	}
	makeTree(t, dir, map[string]string{"backup/latest.pdparams": "v1"})
	if r := number(); r.ID != "dir:backup" || r.Step != 0 || !r.Counter {
		t.Fatalf("with no step known: %s step %d counter %v, want dir:backup at 0, counter", r.ID, r.Step, r.Counter)
	}
	makeTree(t, dir, map[string]string{"epoch_3/model.pdparams": "m"})
	r := number()
	if r.ID != "dir:backup" || r.Step != 0 {
		t.Errorf("unchanged backup: %s step %d, want it to keep step 0", r.ID, r.Step)
	}
	w.Done(r)
	write(t, filepath.Join(dir, "backup/latest.pdparams"), "v2", time.Now().Add(-time.Hour))
	if r := number(); r.ID != "dir:backup" || r.Step != 3 || !r.Counter {
		t.Errorf("rewritten backup after epoch_3/: %s step %d counter %v, want step 3, counter", r.ID, r.Step, r.Counter)
	}
	w.SetLastStep(10) // the store's newest
	w.SetLastStep(5)  // steps known never go down
	makeTree(t, dir, map[string]string{"latest.pdparams": "x"})
	all, _ := w.Scan(true)
	for i := range all {
		w.Number(&all[i])
	}
	got := map[string]int64{}
	for _, r := range all {
		got[r.ID] = r.Step
		if r.Counter == r.HasStep {
			t.Errorf("%s: Counter %v with HasStep %v", r.ID, r.Counter, r.HasStep)
		}
	}
	if want := map[string]int64{"dir:epoch_3": 3, "dir:backup": 3, "files:": 10}; !reflect.DeepEqual(got, want) {
		t.Errorf("steps %v, want %v (the backup keeps its number, the new one takes the store's 10)", got, want)
	}
	// A named step that is not a checkpoint raises nothing.
	dir2 := t.TempDir()
	w2, _ := New(Config{Dir: dir2})
	makeTree(t, dir2, map[string]string{"config_9.yaml": "x", "backup/latest.pdparams": "m"})
	r2, _ := w2.Scan(true)
	if len(r2) != 1 {
		t.Fatalf("got %s", ids(r2))
	}
	w2.Number(&r2[0])
	if r2[0].Step != 0 {
		t.Errorf("backup numbered %d after a stray config_9.yaml, want 0", r2[0].Step)
	}
}

// TestSymlinkedDir: a --dir that is a symlink is resolved, so that files the
// trainer holds open through the real path are seen as busy.
func TestSymlinkedDir(t *testing.T) {
	real, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(t.TempDir(), "ckpt")
	if err := os.Symlink(real, link); err != nil {
		t.Fatal(err)
	}
	var logs logBuffer
	w, err := New(Config{Dir: link, Log: logs.logger()})
	if err != nil {
		t.Fatal(err)
	}
	if w.Dir() != real {
		t.Errorf("Dir() = %s, want %s", w.Dir(), real)
	}
	if got := logs.events(t, "watch.dir_resolved"); len(got) != 1 || got[0]["dir"] != link || got[0]["resolved"] != real {
		t.Errorf("logged %v", got)
	}
	path := filepath.Join(real, "step-5", "model.pdparams")
	write(t, path, "partial", time.Now().Add(-time.Hour))
	stop := holdOpen(t, path, ">>")
	defer stop()
	if r, _ := w.Scan(true); len(r) != 0 {
		t.Errorf("file open for writing under a symlinked dir counted as complete: %s", ids(r))
	}
	if got := w.OpenForWrite(); !got["step-5/model.pdparams"] || len(got) != 1 {
		t.Errorf("OpenForWrite = %v, want step-5/model.pdparams", got)
	}
	stop()
	if r, _ := w.Scan(true); ids(r) != "dir:step-5" {
		t.Errorf("closed file under a symlinked dir: %q, want dir:step-5", ids(r))
	}

	file := filepath.Join(real, "f")
	write(t, file, "x", time.Now())
	for _, tc := range []struct {
		dir  string
		want error
	}{
		{filepath.Join(real, "missing"), fs.ErrNotExist},
		{file, ErrNotDir},
	} {
		var fe *FieldError
		if _, err := New(Config{Dir: tc.dir}); !errors.As(err, &fe) || fe.Field != FieldDir || fe.Value != tc.dir || !errors.Is(err, tc.want) {
			t.Errorf("New(%s): %v, want a FieldError of %s %s wrapping %v", tc.dir, err, FieldDir, tc.dir, tc.want)
		}
	}
}

// holdOpen has a shell hold path open with redirection op (">>" writes,
// "<" reads) until stop is called.
func holdOpen(t *testing.T, path, op string) (stop func()) {
	t.Helper()
	cmd := exec.Command("sh", "-c", `exec 3`+op+`"$0"; echo ready; read x`, path)
	stdin, _ := cmd.StdinPipe()
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if _, err := out.Read(make([]byte, 6)); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	return func() { once.Do(func() { stdin.Close(); _ = cmd.Wait() }) }
}

// TestSpecialFiles: symlinks, FIFOs, sockets and devices in a checkpoint
// are left out and logged once per path.
func TestSpecialFiles(t *testing.T) {
	dir := t.TempDir()
	makeTree(t, dir, map[string]string{"step-1/model.pdparams": "m"})
	want := map[string]string{"step-1/link": "symlink", "step-1/fifo": "fifo", "step-1/sock": "socket"}
	if err := os.Symlink("model.pdparams", filepath.Join(dir, "step-1", "link")); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(dir, "step-1", "fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mknod(filepath.Join(dir, "step-1", "sock"), syscall.S_IFSOCK|0o644, 0); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mknod(filepath.Join(dir, "step-1", "null"), syscall.S_IFCHR|0o644, 1<<8|3); err == nil {
		want["step-1/null"] = "char device"
	}
	var logs logBuffer
	w, _ := New(Config{Dir: dir, Log: logs.logger()})
	for range 2 {
		r, err := w.Scan(true)
		if got := candidateFiles(r); err != nil || !reflect.DeepEqual(got, []string{"dir:step-1: model.pdparams"}) {
			t.Fatalf("scan: %q, %v", got, err)
		}
	}
	got := map[string]string{}
	for _, m := range logs.events(t, "checkpoint.skipped_special") {
		p := m["path"].(string)
		if _, dup := got[p]; dup {
			t.Errorf("%s logged twice", p)
		}
		got[p] = m["type"].(string)
		if m["id"] != "dir:step-1" || m["level"] != "WARN" {
			t.Errorf("log line %v, want id dir:step-1 at WARN", m)
		}
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("logged %v, want %v", got, want)
	}
}

// TestWritersVisible decides from a fake /proc whether processes that
// could write checkpoints are visible at all.
func TestWritersVisible(t *testing.T) {
	const self = 7
	type proc struct {
		ppid int
		fd   bool // fd directory readable
	}
	for _, tc := range []struct {
		name  string
		procs map[int]proc
		want  bool
	}{
		{"alone in its PID namespace", map[int]proc{self: {0, true}}, false},
		{"alone with its launcher", map[int]proc{1: {0, true}, self: {1, true}}, false},
		{"the trainer is its child", map[int]proc{self: {0, true}, 8: {self, true}}, true},
		{"a sibling in a shared namespace", map[int]proc{1: {0, true}, self: {1, true}, 9: {1, true}}, true},
		{"others whose descriptors cannot be read", map[int]proc{1: {0, false}, self: {1, true}, 9: {1, false}}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			for pid, p := range tc.procs {
				d := filepath.Join(root, strconv.Itoa(pid))
				if err := os.MkdirAll(d, 0o755); err != nil {
					t.Fatal(err)
				}
				stat := strconv.Itoa(pid) + " (a b) S " + strconv.Itoa(p.ppid) + " 1 1 0 -1\n"
				if err := os.WriteFile(filepath.Join(d, "stat"), []byte(stat), 0o644); err != nil {
					t.Fatal(err)
				}
				if p.fd {
					if err := os.Mkdir(filepath.Join(d, "fd"), 0o500); err != nil {
						t.Fatal(err)
					}
				}
			}
			w, err := New(Config{Dir: t.TempDir(), ProcRoot: root})
			if err != nil {
				t.Fatal(err)
			}
			w.self = self
			if got := w.WritersVisible(); got != tc.want {
				t.Errorf("WritersVisible = %v, want %v", got, tc.want)
			}
		})
	}
	t.Run("real /proc with a child", func(t *testing.T) {
		dir := t.TempDir()
		stop := holdOpen(t, filepath.Join(dir, "x"), ">>")
		defer stop()
		w, _ := New(Config{Dir: dir})
		if !w.WritersVisible() {
			t.Errorf("WritersVisible = false with a child process running")
		}
	})
}

// TestWritersInvisible: when the caller says writers cannot be seen, even
// the final scan waits for the settle time, and Writing says the trainer
// is writing until then, naming the setting (Settle) that decides it.
func TestWritersInvisible(t *testing.T) {
	dir := t.TempDir()
	clk := &fakeClock{now: time.Now()}
	w, _ := New(Config{Dir: dir, WritersInvisible: true, Settle: 5 * time.Second, Clock: clk.Now})
	write(t, filepath.Join(dir, "step-1", "model.pdparams"), "m", clk.now)
	if r, _ := w.Scan(true); len(r) != 0 {
		t.Fatalf("final scan with invisible writers returned unsettled files: %s", ids(r))
	}
	if writing, why := w.Writing(); !writing || !why.Mentions(setting.Settle) || !strings.Contains(why.String(), "less than Settle 5s") {
		t.Errorf("Writing = %v, %q; want writing, because of Settle", writing, why)
	}
	clk.now = clk.now.Add(6 * time.Second)
	if r, _ := w.Scan(true); ids(r) != "dir:step-1" {
		t.Fatalf("after settling: %s, want dir:step-1", ids(r))
	}
	if writing, why := w.Writing(); writing || !why.IsZero() {
		t.Errorf("after settling, Writing = %v, %q; want not writing", writing, why)
	}
}

// TestSurveyExcluded: Survey gives an excluded file as part of no
// checkpoint, naming the setting that excludes it (Exclude).
func TestSurveyExcluded(t *testing.T) {
	dir := t.TempDir()
	makeTree(t, dir, map[string]string{"step-1/model.pdparams": "m", "train.log": "l"})
	w, err := New(Config{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	sv, err := w.Survey(0)
	if err != nil {
		t.Fatal(err)
	}
	var why []setting.Text
	for _, o := range sv.Other {
		if o.Path == "train.log" {
			why = append(why, o.Why)
		}
	}
	if len(why) != 1 || !why[0].Mentions(setting.Exclude) || why[0].String() != "excluded (Exclude)" {
		t.Errorf("train.log's entries: %q; want one, excluded by Exclude (all: %+v)", why, sv.Other)
	}
}
