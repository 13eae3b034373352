package checkpoint

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/lifeboat-project/lifeboat/internal/beneath"
)

// TestStrays: what the restored checkpoint's directory holds beyond the
// snapshot is a stray, whole entries; the top of the directory restored
// into is never cleaned, nor are reserved names.
func TestStrays(t *testing.T) {
	cases := []struct {
		name  string
		files []string // the snapshot's
		disk  []string // on the volume before
		want  []string
	}{
		{"checkpoint dir", []string{"step-1/model.pt"},
			[]string{"step-1/model.pt", "step-1/optim.pt", "step-1/sub/x", "step-1/.lifeboat-commit", "other/y", "top.log"},
			[]string{"step-1/optim.pt", "step-1/sub"}},
		{"nested", []string{"ck/a/m.pt", "ck/b/n.pt"},
			[]string{"ck/a/m.pt", "ck/a/old.pt", "ck/b/c/deep", "ck/z"},
			[]string{"ck/a/old.pt", "ck/b/c", "ck/z"}},
		{"at the top", []string{"model.pt", "sub/opt.pt"},
			[]string{"model.pt", "notes.txt", "step-9/x", "sub/opt.pt", "sub/old.pt", "sub/dir/keep"},
			[]string{"sub/old.pt"}},
		{"nothing there yet", []string{"step-1/model.pt"}, []string{"top.log"}, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			tr := tree{}
			for _, p := range c.disk {
				tr[p] = []byte("x")
			}
			writeTree(t, dir, tr)
			root, err := beneath.Open(dir)
			if err != nil {
				t.Fatal(err)
			}
			defer root.Close()
			var files []File
			for _, p := range c.files {
				files = append(files, File{Path: p})
			}
			got, err := strays(root, "", files)
			if err != nil {
				t.Fatal(err)
			}
			slices.Sort(got)
			if !slices.Equal(got, c.want) {
				t.Errorf("strays = %q, want %q", got, c.want)
			}
		})
	}
}

// TestFinishInterruptedWithoutRecord: no record, nothing done.
func TestFinishInterruptedWithoutRecord(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "x"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if res, err := FinishInterrupted(dir); res != nil || err != nil {
		t.Fatalf("FinishInterrupted = %+v, %v; want nothing", res, err)
	}
	if res, err := FinishInterrupted(filepath.Join(dir, "missing")); res != nil || err != nil {
		t.Fatalf("FinishInterrupted of a missing dir = %+v, %v; want nothing", res, err)
	}
}
