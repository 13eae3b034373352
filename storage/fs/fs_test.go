package fs

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/lifeboat-project/lifeboat/storage"
	"github.com/lifeboat-project/lifeboat/storage/storagetest"
)

func newStore(t *testing.T) *Store {
	t.Helper()
	s, err := New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestConformance(t *testing.T) {
	storagetest.Run(t, func(t *testing.T) storage.Store { return newStore(t) })
}

func TestLeftoverTempFileInvisible(t *testing.T) {
	s := newStore(t)
	ctx := context.Background()
	if _, err := s.Put(ctx, "dir/real", bytes.NewReader([]byte("ok")), 2, storage.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	// What a crash between create and rename leaves behind.
	for _, p := range []string{TempPrefix + "abc", "dir/" + TempPrefix + "def"} {
		if err := os.WriteFile(filepath.Join(s.root, p), []byte("half"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var keys []string
	if err := s.List(ctx, "", func(i storage.ObjectInfo) error { keys = append(keys, i.Key); return nil }); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(keys, []string{"dir/real"}) {
		t.Fatalf("List = %q, want only dir/real", keys)
	}
	for _, k := range []string{TempPrefix + "abc", "dir/" + TempPrefix + "def"} {
		if _, err := s.Get(ctx, k, 0, -1); !errors.Is(err, storage.ErrInvalidKey) {
			t.Errorf("Get(%q) = %v, want ErrInvalidKey", k, err)
		}
	}
}

func TestFailedPutLeavesNoTempFile(t *testing.T) {
	s := newStore(t)
	_, err := s.Put(context.Background(), "k", bytes.NewReader([]byte("abc")), 3, storage.PutOptions{SHA256: "00"})
	if !errors.Is(err, storage.ErrChecksum) {
		t.Fatalf("Put with wrong SHA256: %v", err)
	}
	ents, err := os.ReadDir(s.root)
	if err != nil {
		t.Fatal(err)
	}
	if len(ents) != 0 {
		t.Fatalf("root holds %v after a failed Put", ents)
	}
}

func TestSymlinksRefused(t *testing.T) {
	s := newStore(t)
	ctx := context.Background()
	outside := t.TempDir()
	if err := os.WriteFile(filepath.Join(outside, "secret"), []byte("s"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(s.root, "link")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(outside, "secret"), filepath.Join(s.root, "filelink")); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get(ctx, "link/secret", 0, -1); err == nil {
		t.Error("Get through a directory symlink succeeded")
	}
	if _, err := s.Get(ctx, "filelink", 0, -1); err == nil {
		t.Error("Get of a file symlink succeeded")
	}
	if _, err := s.Put(ctx, "link/new", bytes.NewReader([]byte("x")), 1, storage.PutOptions{}); err == nil {
		t.Error("Put through a directory symlink succeeded")
	}
	if _, err := os.Stat(filepath.Join(outside, "new")); err == nil {
		t.Error("Put wrote outside the root")
	}
	if err := s.Delete(ctx, "link/secret"); err == nil {
		t.Error("Delete through a directory symlink succeeded")
	}
	var keys []string
	if err := s.List(ctx, "", func(i storage.ObjectInfo) error { keys = append(keys, i.Key); return nil }); err != nil {
		t.Fatal(err)
	}
	if len(keys) != 0 {
		t.Fatalf("List followed symlinks: %q", keys)
	}
}

func TestRenameNoReplaceFallback(t *testing.T) {
	dir := t.TempDir()
	d, err := os.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	for _, n := range []string{"a", "b", "c"} {
		if err := os.WriteFile(filepath.Join(dir, n), []byte(n), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	fd := int(d.Fd())
	if err := renameNoReplace(fd, "a", "b"); err == nil {
		t.Fatal("renameNoReplace over an existing file succeeded")
	}
	if err := renameNoReplace(fd, "a", "new"); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "new")); string(b) != "a" {
		t.Fatalf("new holds %q", b)
	}
}

func TestNewRejectsRelativeRoot(t *testing.T) {
	if _, err := New("rel/dir"); err == nil {
		t.Fatal("New with a relative root succeeded")
	}
}

func TestString(t *testing.T) {
	s := newStore(t)
	if got, want := s.String(), "file://"+s.root; got != want {
		t.Fatalf("String() = %q, want %q", got, want)
	}
}
