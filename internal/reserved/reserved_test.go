package reserved_test

import (
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/lifeboat-project/lifeboat/internal/reserved"
	"github.com/lifeboat-project/lifeboat/watch"
)

// names are the reserved entries as they appear on disk, the marker left
// out (the watcher reads it; TestWatcherReadsMarker).
var names = []string{
	reserved.StopFile,
	reserved.StepRequestFile,
	reserved.CoordTempPrefix + "123456",
	reserved.TempPrefix + "abcdef",
	reserved.RestoreTempPrefix + "123456",
	reserved.RanksDir,
	reserved.ResumeFile,
	reserved.ResumeFile + ".tmp",
	reserved.RestoreRecord,
	reserved.AsideDir,
	reserved.Prefix + "anything-else",
}

// TestWatcherIgnores: no reserved name, as a file beside checkpoint files
// or as a directory holding checkpoint-shaped files, is ever part of a
// checkpoint or one of its own.
func TestWatcherIgnores(t *testing.T) {
	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			t.Run("file", func(t *testing.T) {
				dir := t.TempDir()
				for _, p := range []string{"step-000100/model.pdparams", "step-000100/" + name, "model.pdparams", name} {
					write(t, filepath.Join(dir, p))
				}
				want := map[string][]string{"dir:step-000100": {"model.pdparams"}, "files:": {"model.pdparams"}}
				if got := scan(t, dir); !reflect.DeepEqual(got, want) {
					t.Fatalf("checkpoints %v, want %v", got, want)
				}
			})
			t.Run("directory", func(t *testing.T) {
				dir := t.TempDir()
				for _, p := range []string{"step-000100/model.pdparams", name + "/step-000050/model.pdparams", name + "/rank-00000/step-000050/0.distcp", name + "/7.pdparams"} {
					write(t, filepath.Join(dir, p))
				}
				want := map[string][]string{"dir:step-000100": {"model.pdparams"}}
				if got := scan(t, dir); !reflect.DeepEqual(got, want) {
					t.Fatalf("checkpoints %v, want %v", got, want)
				}
			})
		})
	}
}

// TestWatcherReadsMarker: the marker is the one reserved name the watcher
// reads: it makes its directory a checkpoint and is not one of its files.
func TestWatcherReadsMarker(t *testing.T) {
	dir := t.TempDir()
	write(t, filepath.Join(dir, "step-000100/model.pdparams"))
	if err := os.WriteFile(filepath.Join(dir, "step-000100", reserved.Marker), []byte("100\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	want := map[string][]string{"marker:step-000100": {"model.pdparams"}}
	if got := scan(t, dir); !reflect.DeepEqual(got, want) {
		t.Fatalf("checkpoints %v, want %v", got, want)
	}
	if watch.DefaultMarker != reserved.Marker {
		t.Fatalf("watch.DefaultMarker is %q, want %q", watch.DefaultMarker, reserved.Marker)
	}
}

// TestHelperAgrees: the Python helper, which cannot import this package,
// spells every name it writes or reads the same way.
func TestHelperAgrees(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "images", "lifeboat.py"))
	if err != nil {
		t.Fatal(err)
	}
	src := string(b)
	for py, want := range map[string]string{
		"_INTERNAL_PREFIX":  reserved.Prefix,
		"DEFAULT_MARKER":    reserved.Marker,
		"RESUME_FILE":       reserved.ResumeFile,
		"STOP_FILE":         reserved.StopFile,
		"STOP_REQUEST_FILE": reserved.StepRequestFile,
	} {
		m := regexp.MustCompile(`(?m)^` + py + ` = "([^"]*)"$`).FindStringSubmatch(src)
		if m == nil || m[1] != want {
			t.Errorf("images/lifeboat.py: %s is %v, want %q", py, m, want)
		}
	}
	for _, p := range []string{reserved.CoordTempPrefix, reserved.TempPrefix} {
		use := `prefix=_INTERNAL_PREFIX + "` + strings.TrimPrefix(p, reserved.Prefix) + `"`
		if !strings.Contains(src, use) {
			t.Errorf("images/lifeboat.py never writes a %s* file (%s)", p, use)
		}
	}
}

func TestIs(t *testing.T) {
	for name, want := range map[string]bool{
		reserved.Marker: true, reserved.RanksDir: true, reserved.Prefix: true,
		"lifeboat-commit": false, "step-000100": false, ".lifeboat": false, "x" + reserved.Prefix: false,
	} {
		if got := reserved.Is(name); got != want {
			t.Errorf("Is(%q) = %v, want %v", name, got, want)
		}
	}
}

// scan returns the checkpoints a final scan of dir finds: id -> files.
func scan(t *testing.T, dir string) map[string][]string {
	t.Helper()
	w, err := watch.New(watch.Config{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	r, err := w.Scan(true)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string][]string{}
	for _, c := range r {
		for _, f := range c.Files {
			got[c.ID] = append(got[c.ID], f.Path)
		}
		sort.Strings(got[c.ID])
	}
	return got
}

func write(t *testing.T, p string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
}
