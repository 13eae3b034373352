package checkpoint

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/lifeboat-project/lifeboat/internal/beneath"
	"github.com/lifeboat-project/lifeboat/storage/mem"
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

// TestFinishInterruptedRanks: a restore of every rank was killed between
// moving the old RanksDir aside and renaming the staged copy into place;
// FinishInterrupted renames it, and fails (taking nothing apart that is
// not there) when the staged copy is gone too.
func TestFinishInterruptedRanks(t *testing.T) {
	s := mem.New()
	tr := sampleTree(7)
	up := upload(t, newUploader(s, nil), 5, 0, 1, tr)
	b, err := up.Manifest.Encode()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	staged := tree{}
	for p, c := range tr {
		staged[".lifeboat-restore-stage/"+RankDir(0)+"/"+p] = c
	}
	writeTree(t, dir, staged)
	root, err := beneath.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	rec := &restoreRecord{Tmp: ".lifeboat-restore-stage", Sub: RanksDir, Whole: true, Ranks: []json.RawMessage{b}}
	if err := writeRecord(root, rec); err != nil {
		t.Fatal(err)
	}
	res, err := FinishInterrupted(dir)
	if err != nil || res == nil || res.Step != 5 || res.Dir != filepath.Join(dir, RanksDir) || len(res.Ranks) != 1 {
		t.Fatalf("FinishInterrupted = %+v, %v; want step 5 in %s", res, err, RanksDir)
	}
	want := tree{}
	for p, c := range tr {
		want[RanksDir+"/"+RankDir(0)+"/"+p] = c
	}
	checkTree(t, dir, want) // and the record is gone

	if err := writeRecord(root, &restoreRecord{Tmp: ".lifeboat-restore-gone", Sub: "other", Whole: true, Ranks: []json.RawMessage{b}}); err != nil {
		t.Fatal(err)
	}
	if _, err := FinishInterrupted(dir); !errors.Is(err, errIncomplete) {
		t.Fatalf("FinishInterrupted with nothing to move = %v, want errIncomplete", err)
	}
	checkTree(t, dir, want)
}

// TestFinishInterruptedFiles: a one-rank restore killed after moving one
// stray aside and some of its files: FinishInterrupted moves the rest, and
// the directory holds exactly the snapshot. When a file the record names
// is gone from both places, the files in place are moved aside instead.
func TestFinishInterruptedFiles(t *testing.T) {
	s := mem.New()
	tr := tree{"ck/a.bin": []byte("a"), "ck/b.bin": []byte("bb"), "ck/c.bin": []byte("ccc")}
	up := upload(t, newUploader(s, nil), 3, 0, 1, tr)
	b, err := up.Manifest.Encode()
	if err != nil {
		t.Fatal(err)
	}
	for _, lost := range []bool{false, true} {
		dir := t.TempDir()
		disk := tree{
			"ck/a.bin":        tr["ck/a.bin"], // moved already
			"ck/b.bin":        []byte("old b"),
			"ck/c.bin":        []byte("old c"),
			"ck/stray2":       []byte("not moved aside yet"),
			"aside/ck/stray1": []byte("moved aside already"),
			"tmp/ck/b.bin":    tr["ck/b.bin"],
			"tmp/ck/c.bin":    tr["ck/c.bin"],
			"notes.txt":       []byte("the trainer's"),
		}
		if lost {
			delete(disk, "tmp/ck/c.bin")
		}
		writeTree(t, dir, disk)
		root, err := beneath.Open(dir)
		if err != nil {
			t.Fatal(err)
		}
		rec := &restoreRecord{Tmp: "tmp", Aside: "aside", Strays: []string{"ck/stray1", "ck/stray2"}, Manifest: b}
		if err := writeRecord(root, rec); err != nil {
			t.Fatal(err)
		}
		root.Close()
		res, err := FinishInterrupted(dir)
		if !lost {
			if err != nil || res.Step != 3 || !slices.Equal(res.MovedAside, rec.Strays) {
				t.Fatalf("FinishInterrupted = %+v, %v", res, err)
			}
			checkTree(t, dir, tree{"ck/a.bin": tr["ck/a.bin"], "ck/b.bin": tr["ck/b.bin"], "ck/c.bin": tr["ck/c.bin"], "notes.txt": disk["notes.txt"],
				"aside/ck/stray1": disk["aside/ck/stray1"], "aside/ck/stray2": disk["ck/stray2"]})
			continue
		}
		if !errors.Is(err, errIncomplete) {
			t.Fatalf("FinishInterrupted with a file lost = %v, want errIncomplete", err)
		}
		if _, err := os.Stat(filepath.Join(dir, "ck", "a.bin")); !os.IsNotExist(err) {
			t.Errorf("the restored a.bin stayed in place beside old files: %v", err)
		}
	}
}
