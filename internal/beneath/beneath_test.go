package beneath

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// both runs f with openat2 and with the segment-by-segment fallback.
func both(t *testing.T, f func(t *testing.T)) {
	t.Run("openat2", func(t *testing.T) { noOpenat2.Store(false); f(t) })
	t.Run("fallback", func(t *testing.T) {
		noOpenat2.Store(true)
		defer noOpenat2.Store(false)
		f(t)
	})
}

// setup returns an opened dir holding a/ and a link l -> an outside
// directory holding the file "victim".
func setup(t *testing.T) (*Dir, string, string) {
	t.Helper()
	root := t.TempDir()
	in, out := filepath.Join(root, "in"), filepath.Join(root, "out")
	for _, d := range []string{filepath.Join(in, "a"), out} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(out, "victim"), []byte("outside"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(out, filepath.Join(in, "l")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(out, "victim"), filepath.Join(in, "a", "f")); err != nil {
		t.Fatal(err)
	}
	d, err := Open(in)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d, in, out
}

func outsideUntouched(t *testing.T, out string) {
	t.Helper()
	ents, _ := os.ReadDir(out)
	b, err := os.ReadFile(filepath.Join(out, "victim"))
	if err != nil || string(b) != "outside" || len(ents) != 1 {
		t.Fatalf("the outside directory changed: %v %q %d entries", err, b, len(ents))
	}
}

func TestNeverThroughALink(t *testing.T) {
	both(t, func(t *testing.T) {
		d, _, out := setup(t)
		if err := d.MkdirAll("l/x"); !errors.Is(err, unix.ELOOP) || !errors.Is(err, ErrSymlink) {
			t.Errorf("MkdirAll through a link: %v, want ELOOP", err)
		}
		if _, err := d.OpenFile("l/victim", unix.O_WRONLY|unix.O_TRUNC, 0); !errors.Is(err, unix.ELOOP) {
			t.Errorf("OpenFile through a link: %v, want ELOOP", err)
		}
		if _, err := d.OpenFile("a/f", unix.O_WRONLY|unix.O_TRUNC, 0); !errors.Is(err, unix.ELOOP) {
			t.Errorf("OpenFile of a link: %v, want ELOOP", err)
		}
		if _, _, err := d.CreateTemp("l", "t-", 0o600); !errors.Is(err, unix.ELOOP) {
			t.Errorf("CreateTemp through a link: %v, want ELOOP", err)
		}
		if err := d.Rename("a", "l/moved"); !errors.Is(err, unix.ELOOP) {
			t.Errorf("Rename through a link: %v, want ELOOP", err)
		}
		if err := d.RemoveAll("l/victim"); !errors.Is(err, unix.ELOOP) {
			t.Errorf("RemoveAll through a link: %v, want ELOOP", err)
		}
		if err := d.WriteFile("l/victim", []byte("x"), 0o644, "t-"); !errors.Is(err, unix.ELOOP) {
			t.Errorf("WriteFile through a link: %v, want ELOOP", err)
		}
		// A link at the last segment is replaced or removed, never followed.
		if err := d.WriteFile("a/f", []byte("inside"), 0o644, "t-"); err != nil {
			t.Errorf("WriteFile over a link: %v", err)
		}
		if err := d.RemoveAll("l"); err != nil {
			t.Errorf("RemoveAll of a link: %v", err)
		}
		for _, p := range []string{"../x", "/abs", "a//b", "a/./b", "."} {
			if err := d.MkdirAll(p); err == nil {
				t.Errorf("MkdirAll(%q) succeeded", p)
			}
		}
		outsideUntouched(t, out)
	})
}

func TestRemoveAllKeepsLinkedTrees(t *testing.T) {
	both(t, func(t *testing.T) {
		d, in, out := setup(t)
		if err := os.Symlink(out, filepath.Join(in, "a", "l2")); err != nil {
			t.Fatal(err)
		}
		if err := d.RemoveAll("a"); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Lstat(filepath.Join(in, "a")); !os.IsNotExist(err) {
			t.Fatalf("a still there: %v", err)
		}
		outsideUntouched(t, out)
	})
}

func TestWriteFileAndTemp(t *testing.T) {
	both(t, func(t *testing.T) {
		d, in, _ := setup(t)
		if err := d.MkdirAll("b/c"); err != nil {
			t.Fatal(err)
		}
		if err := d.WriteFile("b/c/x", []byte("hello"), 0o640, "t-"); err != nil {
			t.Fatal(err)
		}
		b, err := d.ReadFile("b/c/x", 10)
		if err != nil || string(b) != "hello" {
			t.Fatalf("ReadFile: %q, %v", b, err)
		}
		if _, err := d.ReadFile("b/c/x", 3); err == nil {
			t.Fatal("ReadFile over its limit succeeded")
		}
		fi, err := os.Stat(filepath.Join(in, "b/c/x"))
		if err != nil || fi.Mode().Perm() != 0o640 {
			t.Fatalf("mode: %v %v", fi, err)
		}
		ents, _ := os.ReadDir(filepath.Join(in, "b/c"))
		if len(ents) != 1 {
			t.Fatalf("b/c holds %d entries, want only x", len(ents))
		}
		tmp, err := d.MkdirTemp("b", "t-")
		if err != nil {
			t.Fatal(err)
		}
		if err := d.Rename("b/c/x", tmp+"/deep/x"); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(filepath.Join(in, tmp, "deep", "x")); err != nil {
			t.Fatal(err)
		}
	})
}
