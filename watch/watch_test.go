package watch

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestGroup(t *testing.T) {
	f := func(p string) File { return File{Path: p, Size: 1} }
	type want struct {
		id    string
		dir   string
		files []string
		step  int64
		has   bool
	}
	for _, tc := range []struct {
		name    string
		files   []string
		markers map[string]int64
		want    []want
	}{
		{
			name:  "subdirectory per checkpoint",
			files: []string{"step-000100/model.pdparams", "step-000100/opt/state.pdopt", "step-000200/model.pdparams"},
			want: []want{
				{"dir:step-000100", "step-000100", []string{"model.pdparams", "opt/state.pdopt"}, 100, true},
				{"dir:step-000200", "step-000200", []string{"model.pdparams"}, 200, true},
			},
		},
		{
			name:  "files with step in their names, grouped by step",
			files: []string{"epoch_3.pdparams", "epoch_3.pdopt", "epoch_12.pdparams", "notes.txt"},
			want: []want{
				{"files:3", "", []string{"epoch_3.pdopt", "epoch_3.pdparams"}, 3, true},
				{"files:12", "", []string{"epoch_12.pdparams"}, 12, true},
				{"files:", "", []string{"notes.txt"}, 0, false},
			},
		},
		{
			name:  "in-place backup directory has no step",
			files: []string{"backup/latest.pdparams", "backup/latest.pdopt"},
			want:  []want{{"dir:backup", "backup", []string{"latest.pdopt", "latest.pdparams"}, 0, false}},
		},
		{
			name:    "marker gives the step and wins over the name",
			files:   []string{"ckpt-7/model.pdparams", "ckpt-7/.lifeboat-commit", "ckpt-7/sub/x"},
			markers: map[string]int64{"ckpt-7": 700},
			want:    []want{{"marker:ckpt-7", "ckpt-7", []string{"model.pdparams", "sub/x"}, 700, true}},
		},
		{
			name:    "marker without a valid step falls back to the name",
			files:   []string{"ckpt-7/model.pdparams"},
			markers: map[string]int64{"ckpt-7": -1},
			want:    []want{{"marker:ckpt-7", "ckpt-7", []string{"model.pdparams"}, 7, true}},
		},
		{
			name:    "marker at the top covers everything",
			files:   []string{"a.pdparams", "sub/b"},
			markers: map[string]int64{"": 5},
			want:    []want{{"marker:", "", []string{"a.pdparams", "sub/b"}, 5, true}},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var files []File
			for _, p := range tc.files {
				files = append(files, f(p))
			}
			got := Group(files, DefaultMarker, tc.markers, DefaultStepPattern)
			if len(got) != len(tc.want) {
				t.Fatalf("got %d candidates %+v, want %d", len(got), got, len(tc.want))
			}
			for i, w := range tc.want {
				g := got[i]
				var paths []string
				for _, f := range g.Files {
					paths = append(paths, f.Path)
				}
				if g.ID != w.id || g.Dir != w.dir || !reflect.DeepEqual(paths, w.files) || g.Step != w.step || g.HasStep != w.has {
					t.Errorf("candidate %d = {%s %q %v %d %v}, want %+v", i, g.ID, g.Dir, paths, g.Step, g.HasStep, w)
				}
			}
		})
	}
}

func TestParseMarkerStep(t *testing.T) {
	for in, want := range map[string]int64{"100": 100, " 42\n": 42, "": -1, "x": -1, "-3": -1, "1e3": -1} {
		if got := ParseMarkerStep([]byte(in)); got != want {
			t.Errorf("ParseMarkerStep(%q) = %d, want %d", in, got, want)
		}
	}
}

// fakeClock is a settable clock.
type fakeClock struct{ now time.Time }

func (c *fakeClock) Now() time.Time { return c.now }

func write(t *testing.T, path, content string, mtime time.Time) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(path, mtime, mtime); err != nil {
		t.Fatal(err)
	}
}

func ids(rs []Ready) string {
	var s []string
	for _, r := range rs {
		s = append(s, r.ID)
	}
	return strings.Join(s, ",")
}

// TestSettleAndDone: a checkpoint is returned once its files have been
// unchanged for the settle time, not before, and not again after Done
// unless its content changes (then again under the newest step known, as a
// new revision of it).
func TestSettleAndDone(t *testing.T) {
	dir := t.TempDir()
	clk := &fakeClock{now: time.Now()}
	w, err := New(Config{Dir: dir, Settle: 5 * time.Second, Clock: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	w.SetLastStep(10)
	write(t, filepath.Join(dir, "backup/latest.pdparams"), "v1", clk.now)
	if r, _ := w.Scan(false); len(r) != 0 {
		t.Fatalf("fresh files returned before settling: %s", ids(r))
	}
	clk.now = clk.now.Add(6 * time.Second)
	r, err := w.Scan(false)
	if len(r) == 1 {
		w.Number(&r[0])
	}
	if err != nil || len(r) != 1 || r[0].ID != "dir:backup" || r[0].Step != 10 || !r[0].Counter {
		t.Fatalf("after settle: %+v, %v; want dir:backup at counter step 10", r, err)
	}
	w.Done(r[0])
	if r, _ := w.Scan(false); len(r) != 0 {
		t.Fatalf("done checkpoint returned again: %s", ids(r))
	}
	write(t, filepath.Join(dir, "backup/latest.pdparams"), "v2-longer", clk.now)
	if r, _ := w.Scan(false); len(r) != 0 {
		t.Fatalf("rewritten file returned before settling")
	}
	r, _ = w.Scan(true)
	if len(r) == 1 {
		w.Number(&r[0])
		w.Number(&r[0]) // the same content keeps its step
	}
	if len(r) != 1 || r[0].Step != 10 || !r[0].Counter {
		t.Fatalf("final scan: %+v; want the rewritten backup at counter step 10", r)
	}
}

// TestMarkerNeedsNoSettle: a marked directory is complete at once; files
// written after it without a marker are not a checkpoint.
func TestMarkerNeedsNoSettle(t *testing.T) {
	dir := t.TempDir()
	clk := &fakeClock{now: time.Now()}
	w, _ := New(Config{Dir: dir, Clock: clk.Now})
	write(t, filepath.Join(dir, "run/model.pdparams"), "m", clk.now)
	write(t, filepath.Join(dir, "run", DefaultMarker), "300\n", clk.now)
	r, err := w.Scan(false)
	if err != nil || len(r) != 1 || !r[0].Marker || r[0].Step != 300 || len(r[0].Files) != 1 {
		t.Fatalf("marker checkpoint: %+v, %v", r, err)
	}
	write(t, filepath.Join(dir, "latest.pdparams"), "x", clk.now)
	if r, _ = w.Scan(true); ids(r) != "marker:run" {
		t.Fatalf("final scan: %s; want the marked directory only", ids(r))
	}
}

// TestOpenForWriteIsNotComplete: a file another process holds open for
// writing keeps its checkpoint out, even in a final scan; once closed it is
// returned.
func TestOpenForWriteIsNotComplete(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "step-5", "model.pdparams")
	write(t, path, "partial", time.Now().Add(-time.Hour))
	holder := exec.Command("sh", "-c", `exec 3>>"$0"; echo ready; read x`, path)
	stdin, _ := holder.StdinPipe()
	out, _ := holder.StdoutPipe()
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 6)
	if _, err := out.Read(buf); err != nil {
		t.Fatal(err)
	}
	w, _ := New(Config{Dir: dir})
	if r, _ := w.Scan(true); len(r) != 0 {
		t.Errorf("file open for writing by pid %d counted as complete: %s", holder.Process.Pid, ids(r))
	}
	stdin.Close()
	_ = holder.Wait()
	if r, _ := w.Scan(true); len(r) != 1 || r[0].Step != 5 {
		t.Errorf("closed file: %+v, want step-5", r)
	}
	// A reader does not block.
	reader := exec.Command("sh", "-c", `exec 3<"$0"; echo ready; read x`, path)
	stdin, _ = reader.StdinPipe()
	out, _ = reader.StdoutPipe()
	if err := reader.Start(); err != nil {
		t.Fatal(err)
	}
	if _, err := out.Read(buf); err != nil {
		t.Fatal(err)
	}
	defer func() { stdin.Close(); _ = reader.Wait() }()
	if busy := openForWrite("/proc", dir, os.Getpid()); len(busy) != 0 {
		t.Errorf("a reader made files busy: %v", busy)
	}
}

func TestWritableFdinfo(t *testing.T) {
	dir := t.TempDir()
	for content, want := range map[string]bool{
		"pos:\t0\nflags:\t0100000\n":  false, // O_RDONLY|O_LARGEFILE
		"pos:\t0\nflags:\t0100001\n":  true,  // O_WRONLY
		"pos:\t0\nflags:\t02100002\n": true,  // O_RDWR|O_CLOEXEC
		"pos:\t0\n":                   true,  // no flags line: assume writing
	} {
		p := filepath.Join(dir, "fdinfo")
		_ = os.WriteFile(p, []byte(content), 0o644)
		if got := writable(p); got != want {
			t.Errorf("writable(%q) = %v, want %v", content, got, want)
		}
	}
	if writable(filepath.Join(dir, "missing")) {
		t.Errorf("a vanished descriptor counted as writing")
	}
}

func TestNewRejects(t *testing.T) {
	var fe *FieldError
	if _, err := New(Config{}); !errors.As(err, &fe) || fe.Field != FieldDir {
		t.Errorf("New without a dir: %v, want a FieldError of %s", err, FieldDir)
	}
}
