package fs

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

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

// blockReader hands out first, then blocks until release is closed, then
// hands out rest.
type blockReader struct {
	first, rest []byte
	reached     chan struct{}
	release     chan struct{}
	stage       int
}

func (b *blockReader) Read(p []byte) (int, error) {
	switch b.stage {
	case 0:
		b.stage = 1
		return copy(p, b.first), nil
	case 1:
		close(b.reached)
		<-b.release
		b.stage = 2
		return copy(p, b.rest), nil
	}
	return 0, io.EOF
}

// TestSweepTempFiles: Sweep offers the temporary file of a Put in
// progress (as a killed process leaves one) with its size and last write,
// only for a prefix its key is under; declined, it stays; accepted, it
// goes, and the Put then fails at its rename with nothing under its key.
// A directory that is a symlink is not followed.
func TestSweepTempFiles(t *testing.T) {
	s := newStore(t)
	ctx := context.Background()
	outside := t.TempDir()
	if err := os.WriteFile(filepath.Join(outside, TempPrefix+"x"), []byte("not ours"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(s.root, "chunks"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(s.root, "chunks", "ln")); err != nil {
		t.Fatal(err)
	}
	r := &blockReader{first: bytes.Repeat([]byte("a"), 1000), rest: []byte("b"), reached: make(chan struct{}), release: make(chan struct{})}
	before := time.Now()
	done := make(chan error, 1)
	go func() {
		_, err := s.Put(ctx, "chunks/ab/abc", r, 1001, storage.PutOptions{})
		done <- err
	}()
	<-r.reached

	sweep := func(prefix string, remove bool) []storage.Leftover {
		t.Helper()
		var got []storage.Leftover
		if err := s.Sweep(ctx, prefix, func(l storage.Leftover) (bool, error) { got = append(got, l); return remove, nil }); err != nil {
			t.Fatalf("Sweep(%q): %v", prefix, err)
		}
		return got
	}
	for _, prefix := range []string{"snapshots/", "chunks/x", "chunks/ab/abc"} {
		if got := sweep(prefix, true); len(got) != 0 {
			t.Errorf("Sweep(%q) offered %+v, a temporary file of a key not under it", prefix, got)
		}
	}
	got := sweep("chunks/", false)
	if len(got) != 1 || !strings.HasPrefix(got[0].Name, "chunks/ab/"+TempPrefix) || got[0].Size != 1000 ||
		got[0].ModTime.Before(before.Add(-time.Second)) || got[0].ModTime.After(time.Now()) {
		t.Fatalf("Sweep(chunks/) offered %+v, want the Put's temporary file of 1000 bytes written just now", got)
	}
	if again := sweep("", false); len(again) != 1 || again[0] != got[0] {
		t.Fatalf("a declined leftover was removed: Sweep(\"\") offered %+v", again)
	}
	if again := sweep("chunks/a", true); len(again) != 1 {
		t.Fatalf("Sweep(chunks/a) offered %+v", again)
	}
	if again := sweep("", true); len(again) != 0 {
		t.Fatalf("an accepted leftover stayed: %+v", again)
	}
	if _, err := os.Stat(filepath.Join(outside, TempPrefix+"x")); err != nil {
		t.Errorf("Sweep followed a symlink out of the root: %v", err)
	}
	close(r.release)
	if err := <-done; err == nil {
		t.Fatal("a Put whose temporary file was swept succeeded")
	}
	if _, err := s.Stat(ctx, "chunks/ab/abc"); !errors.Is(err, storage.ErrNotExist) {
		t.Errorf("Stat after the swept Put failed = %v, want ErrNotExist", err)
	}
}
