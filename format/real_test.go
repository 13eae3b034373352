package format

import (
	"bytes"
	"errors"
	"io/fs"
	"maps"
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

// TestRealDistcpAgainstMetadata: torch's .metadata records where each item
// of a shard lies. A shard cut exactly between two items is a run of whole
// zip archives, so only the metadata shows it is not whole.
func TestRealDistcpAgainstMetadata(t *testing.T) {
	dir := realCheckpoints(t)
	for _, sub := range []string{"dist", "dist1"} {
		meta, err := os.ReadFile(filepath.Join(dir, sub, ".metadata"))
		if err != nil {
			t.Fatal(err)
		}
		sizes := map[string]int64{}
		for _, rel := range realFiles(t, filepath.Join(dir, sub)) {
			if strings.HasSuffix(rel, ".distcp") {
				fi, err := os.Stat(filepath.Join(dir, sub, rel))
				if err != nil {
					t.Fatal(err)
				}
				sizes[rel] = fi.Size()
			}
		}
		if _, err := CheckDistcpMetadata(bytes.NewReader(meta), int64(len(meta)), sizes); err != nil {
			t.Errorf("%s: whole shards refused: %v", sub, err)
		}
		for shard, size := range sizes {
			for _, n := range []int64{size - 1, size + 1} {
				cut := maps.Clone(sizes)
				cut[shard] = n
				if _, err := CheckDistcpMetadata(bytes.NewReader(meta), int64(len(meta)), cut); !errors.Is(err, ErrTorn) {
					t.Errorf("%s: %s of %d bytes instead of %d: got %v, want ErrTorn", sub, shard, n, size, err)
				}
			}
		}
		// Another rank's shards are elsewhere: not having them is not torn.
		if _, err := CheckDistcpMetadata(bytes.NewReader(meta), int64(len(meta)), nil); err != nil {
			t.Errorf("%s: no shard at hand: %v", sub, err)
		}
	}
	// Cut exactly where the last item of the one-file shard begins.
	b, err := os.ReadFile(filepath.Join(dir, "dist1", "__0_0.distcp"))
	if err != nil {
		t.Fatal(err)
	}
	var at int
	for at = len(b) - eocdLen; at > 0; at-- {
		if bytes.HasPrefix(b[at-eocdLen:], []byte("PK\x05\x06")) {
			break
		}
	}
	if err := checkZip(bytes.NewReader(b[:at]), int64(at)); err != nil {
		t.Fatalf("the shard cut between items at byte %d should be a run of whole archives: %v", at, err)
	}
	meta, _ := os.ReadFile(filepath.Join(dir, "dist1", ".metadata"))
	if _, err := CheckDistcpMetadata(bytes.NewReader(meta), int64(len(meta)), map[string]int64{"__0_0.distcp": int64(at)}); !errors.Is(err, ErrTorn) {
		t.Errorf("cut between items: got %v, want ErrTorn", err)
	}
}
