package pipeline

import (
	"context"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/lifeboat-project/lifeboat/checkpoint"
	"github.com/lifeboat-project/lifeboat/resume"
	"github.com/lifeboat-project/lifeboat/storage"
)

// fileStore is the StoreConfig of a directory store under root.
func fileStore(t *testing.T, root string) StoreConfig {
	t.Helper()
	loc, err := storage.ParseURL("file://" + filepath.Join(root, "store"))
	if err != nil {
		t.Fatal(err)
	}
	return StoreConfig{Location: loc}
}

// options are Options for a pod of one rank saving into dir.
func options(sc StoreConfig, dir string, restore bool) Options {
	log, _ := newLog()
	return Options{Store: sc, Dir: dir, WorldSize: 1, Restore: restore, Settle: time.Second, Interval: time.Second,
		Marker: ".lifeboat-complete", VerifyFormat: true, Producer: "lifeboat test", Log: log}
}

// pickle wraps data in a whole pickle, as paddle.save writes one.
func pickle(data []byte) []byte {
	b := []byte{0x80, 0x04, 0x8e, 0, 0, 0, 0, 0, 0, 0, 0}
	binary.LittleEndian.PutUint64(b[3:], uint64(len(data)))
	return append(append(b, data...), '.')
}

// TestOpenFieldErrors: what Open finds wrong with its options is a
// *FieldError naming the field, before the store is opened.
func TestOpenFieldErrors(t *testing.T) {
	root := t.TempDir()
	sc := fileStore(t, root)
	file := filepath.Join(root, "a-file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	inside := sc
	inside.Location.Path = filepath.Join(root, "ckpt", "store")
	limited := sc
	limited.UploadLimit = -1
	for _, c := range []struct {
		name  string
		o     Options
		field string
		value string
		is    error
	}{
		{"no directory", options(sc, "", true), FieldDir, "", ErrNoDir},
		{"a store inside the directory", options(inside, filepath.Join(root, "ckpt"), true), FieldDir, filepath.Join(root, "ckpt"), ErrHoldsStore},
		{"a directory that cannot be created", options(sc, filepath.Join(file, "ckpt"), true), FieldDir, filepath.Join(file, "ckpt"), nil},
		{"a negative upload limit", options(limited, filepath.Join(root, "ckpt2"), true), FieldUploadLimit, "-1", nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			opened := false
			c.o.Opened = func(storage.Store) { opened = true }
			p, err := Open(context.Background(), c.o)
			var fe *FieldError
			if p != nil || !errors.As(err, &fe) || fe.Field != c.field || fe.Value != c.value || (c.is != nil && !errors.Is(err, c.is)) {
				t.Fatalf("Open = %v, %v; want a *FieldError of %s, value %q, is %v", p, err, c.field, c.value, c.is)
			}
			if opened {
				t.Error("the store was opened")
			}
		})
	}
}

// TestOpenResumesNewerLocal: a whole checkpoint in the directory, newer
// than the store's newest by the line's rule, is resumed instead of
// restoring the store's over it; the trainer is told so, and the run
// continues the store's line.
func TestOpenResumesNewerLocal(t *testing.T) {
	root := t.TempDir()
	sc := fileStore(t, root)
	s, err := OpenStore(context.Background(), sc)
	if err != nil {
		t.Fatal(err)
	}
	const line = "dddddddddddddddd"
	commit(t, s, root, checkpoint.Target{Step: 5, Line: line, WorldSize: 1}, time.Now().Add(-time.Hour))
	dir := filepath.Join(root, "ckpt")
	model := filepath.Join(dir, "step-9", "model.pdparams")
	if err := os.MkdirAll(filepath.Dir(model), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(model, pickle([]byte("step 9, never uploaded")), 0o644); err != nil {
		t.Fatal(err)
	}
	o := options(sc, dir, true)
	var opened storage.Store
	o.Opened = func(s storage.Store) { opened = s }
	p, err := Open(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	if opened == nil || opened != p.Store {
		t.Errorf("Opened was told of %v; want the pipeline's store %v", opened, p.Store)
	}
	if p.Resume == nil || p.Resume.Step != 9 || p.ResumeSource != resume.SourceLocal || p.Resume.Line != line || p.FreshOver != nil {
		t.Fatalf("resume %+v from %q, fresh over %v; want the local step 9, line %s", p.Resume, p.ResumeSource, p.FreshOver, line)
	}
	for _, v := range []string{"LIFEBOAT_RESUME_DIR=" + filepath.Join(p.Dir, "step-9"), "LIFEBOAT_RESUME_STEP=9", "LIFEBOAT_RESUME_SOURCE=local",
		"LIFEBOAT_DIR=" + p.Dir, "LIFEBOAT_MARKER=.lifeboat-complete", "LIFEBOAT_RANK=0", "LIFEBOAT_WORLD_SIZE=1"} {
		if !slices.Contains(p.Env, v) {
			t.Errorf("trainer's environment %q lacks %s", p.Env, v)
		}
	}
	if b, err := os.ReadFile(model); err != nil || string(b) != string(pickle([]byte("step 9, never uploaded"))) {
		t.Errorf("the local checkpoint was changed: %q, %v", b, err)
	}
	if r, err := resume.Read(p.Dir); err != nil || r == nil || r.Step != 9 || r.Source != resume.SourceLocal {
		t.Errorf("resume file %+v, %v; want the local step 9", r, err)
	}
	// The pod is told what the trainer resumes from.
	c := &calls{}
	p.ReportTo(fakePod{c})
	if got, want := c.take(), []string{"pod.Restored 9 local"}; !slices.Equal(got, want) {
		t.Errorf("ReportTo told the pod %q, want %q", got, want)
	}
}

// TestOpenFreshOverProgress: with restore never and no resume file, the
// trainer starts fresh beside the store's complete step, and the pipeline
// says which (FreshOver, for the metric; the pod's event, ReportTo).
func TestOpenFreshOverProgress(t *testing.T) {
	root := t.TempDir()
	sc := fileStore(t, root)
	s, err := OpenStore(context.Background(), sc)
	if err != nil {
		t.Fatal(err)
	}
	commit(t, s, root, checkpoint.Target{Step: 100, Line: "eeeeeeeeeeeeeeee", WorldSize: 1}, time.Now().Add(-time.Minute))
	o := options(sc, filepath.Join(root, "ckpt"), false)
	log, out := newLog()
	o.Log = log
	p, err := Open(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	if p.Resume != nil || p.FreshOver == nil || p.FreshOver.Step != 100 || !slices.Contains(p.Env, "LIFEBOAT_RESUME_DIR=") {
		t.Fatalf("resume %+v, fresh over %+v, env %q; want a fresh start over step 100", p.Resume, p.FreshOver, p.Env)
	}
	if l := out.lines("resume.fresh_start"); len(l) != 1 || l[0]["level"] != "WARN" {
		t.Errorf("resume.fresh_start %v; want one WARN", l)
	}
	c := &calls{}
	p.ReportTo(fakePod{c})
	if got, want := c.take(), []string{"pod.FreshStartOverProgress 100"}; !slices.Equal(got, want) {
		t.Errorf("ReportTo told the pod %q, want %q", got, want)
	}
}

// TestStaleRestoreRemoved: what an earlier restore killed outright (by
// SIGKILL, so nothing could clean up) left in the directory is removed at
// start, and said.
func TestStaleRestoreRemoved(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "ckpt")
	stale := filepath.Join(dir, ".lifeboat-restore-123456", "model.bin")
	if err := os.MkdirAll(filepath.Dir(stale), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(stale, make([]byte, 1<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	o := options(fileStore(t, root), dir, true)
	log, out := newLog()
	o.Log = log
	if _, err := Open(context.Background(), o); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Dir(stale)); !os.IsNotExist(err) {
		t.Errorf("the stale restore directory is still there (%v)", err)
	}
	if len(out.lines("resume.stale_removed")) != 1 {
		t.Errorf("no resume.stale_removed line; log:\n%s", out)
	}
}
