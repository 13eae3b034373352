package format

import (
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lifeboat-project/lifeboat/internal/testenv"
)

// systemPython is Debian's interpreter, the one that sees python3-torch
// and python3-numpy.
const systemPython = "/usr/bin/python3"

// realCheckpoints saves checkpoints with real PyTorch, numpy and Python
// (testdata/real_savers.py) into a new directory and returns it. Without
// torch and numpy the test skips locally and fails in CI.
func realCheckpoints(t *testing.T) string {
	t.Helper()
	if out, err := exec.Command(systemPython, "-c", "import torch, numpy").CombinedOutput(); err != nil {
		testenv.Skip(t, "needs Debian's python3-torch and python3-numpy ("+systemPython+"): "+strings.TrimSpace(string(out)))
	}
	dir := t.TempDir()
	cmd := exec.Command(systemPython, "testdata/real_savers.py", dir)
	cmd.Env = append(os.Environ(), "OMP_NUM_THREADS=1")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("real_savers.py: %v\n%s", err, out)
	}
	return dir
}

// realFiles lists the regular files under dir, relative to it.
func realFiles(t *testing.T, dir string) []string {
	t.Helper()
	var rels []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			rel, _ := filepath.Rel(dir, p)
			rels = append(rels, filepath.ToSlash(rel))
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return rels
}

// TestRealCheckpointsWhole: every file real frameworks save, whole, passes
// its check, and every one cut short at several offsets fails it.
func TestRealCheckpointsWhole(t *testing.T) {
	dir := realCheckpoints(t)
	rels := realFiles(t, dir)
	if len(rels) < 20 {
		t.Fatalf("real_savers.py wrote %d files: %v", len(rels), rels)
	}
	cuts := t.TempDir()
	for _, rel := range rels {
		t.Run(rel, func(t *testing.T) {
			p := filepath.Join(dir, filepath.FromSlash(rel))
			if err := CheckFile(p); err != nil {
				t.Errorf("whole file refused: %v", err)
			}
			b, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			n := len(b)
			if n < 32 {
				return
			}
			for _, at := range []int{16, n / 3, n / 2, n - 2} {
				cut := filepath.Join(cuts, strings.ReplaceAll(rel, "/", "_"))
				if err := os.WriteFile(cut, b[:at], 0o644); err != nil {
					t.Fatal(err)
				}
				if err := CheckFile(cut); !errors.Is(err, ErrTorn) {
					t.Errorf("cut at byte %d of %d: got %v, want a torn file", at, n, err)
				}
			}
		})
	}
}

// TestRealCheckpointsKinds: each file real frameworks save is recognised
// by its content as the format it is, and vouched for.
func TestRealCheckpointsKinds(t *testing.T) {
	dir := realCheckpoints(t)
	want := map[string]Kind{
		"legacy.pt": TorchLegacy, "legacy_p4.pt": TorchLegacy, "zip.pt": Zip,
		"dist/.metadata": Pickle, "dist/__0_0.distcp": Zip, "dist/__0_3.distcp": Zip,
		"dist1/.metadata": Pickle, "dist1/__0_0.distcp": Zip,
		"arr.npy": NPY, "two.npy": NPY, "arrays.npz": Zip, "arrays_z.npz": Zip,
		"p2.pkl": Pickle, "p5.pkl": Pickle, "multi.pkl": Pickle,
		"trainer_state.json": JSON, "metrics.json": JSON, "config.json": JSON, "extra.json": Empty,
	}
	for rel, kind := range want {
		got, err := Inspect(filepath.Join(dir, filepath.FromSlash(rel)))
		if got != kind || err != nil {
			t.Errorf("%s: got %v, %v; want %v, nil", rel, got, err, kind)
		}
		// Renamed to anything, it is the same file.
		renamed := filepath.Join(t.TempDir(), "data.bin")
		b, _ := os.ReadFile(filepath.Join(dir, filepath.FromSlash(rel)))
		if err := os.WriteFile(renamed, b, 0o644); err != nil {
			t.Fatal(err)
		}
		if got, err := Inspect(renamed); got != kind || err != nil {
			t.Errorf("%s renamed data.bin: got %v, %v; want %v, nil", rel, got, err, kind)
		}
	}
}
