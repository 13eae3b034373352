package checkpoint

import (
	"archive/zip"
	"bytes"
	"context"
	"errors"
	"maps"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/lifeboat-project/lifeboat/format"
	"github.com/lifeboat-project/lifeboat/storage"
	"github.com/lifeboat-project/lifeboat/storage/mem"
)

// zipOf returns a whole zip archive holding b as one stored member.
func zipOf(t *testing.T, b []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	w := zip.NewWriter(&buf)
	f, err := w.CreateHeader(&zip.FileHeader{Name: "archive/data.pkl", Method: zip.Store})
	mustDo(t, err)
	_, err = f.Write(b)
	mustDo(t, err)
	mustDo(t, w.Close())
	return buf.Bytes()
}

// TestUploadRefusesTornFiles: a checkpoint with a file that is not a whole
// file of its format is interrupted: the upload fails with ErrInterrupted
// (and format.ErrTorn), names the file, reads it once (no retry), and
// commits nothing. Whole files of every checked format pass, and
// SkipFormatCheck commits even a torn one.
func TestUploadRefusesTornFiles(t *testing.T) {
	params := pickleOf(randomBytes(81, 5*testChunk+7))
	archive := zipOf(t, randomBytes(82, 3*testChunk))
	tests := []struct {
		name string
		tr   tree
		skip bool   // Uploader.SkipFormatCheck
		rank int    // of 2 ranks when not 0
		bad  string // the file named in the error; "" for success
		// reads of the bad file: 1 (it is read once, never again), 0 when
		// the set of paths is what fails
		reads int32
	}{
		{"whole files of each format", tree{"model.pdparams": params, "model.pt": archive,
			"dist/0_0.distcp": pickleOf([]byte("shard")), "dist/0.metadata": pickleOf([]byte("meta")), "notes.txt": []byte("any")}, false, 0, "", 0},
		{"pickle cut short", tree{"model.pdparams": params[:len(params)-testChunk-3], "opt.pdopt": pickleOf([]byte("x"))}, false, 0, "model.pdparams", 1},
		{"pickle cut within its first chunk", tree{"opt.pdopt": params[:100]}, false, 0, "opt.pdopt", 1},
		// No check applies to an empty file, whatever its name: the
		// agent's death rule judges it.
		{"empty file named as a pickle", tree{"model.pdparams": {}}, false, 0, "", 0},
		{"a pickle's name on text", tree{"model.pdparams": []byte("not a pickle")}, false, 0, "", 0},
		{"zip cut short", tree{"model.pt": archive[:len(archive)-10]}, false, 0, "model.pt", 1},
		{"distcp shard without its metadata", tree{"dist/0_0.distcp": pickleOf([]byte("shard"))}, false, 0, "dist", 0},
		{"another rank's shard: the metadata is the coordinator's", tree{"dist/1_0.distcp": pickleOf([]byte("shard"))}, false, 1, "", 0},
		{"torn pickle with the checks off", tree{"model.pdparams": params[:len(params)-1]}, true, 0, "", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			defer verifyNone(t)
			ctx := context.Background()
			s := mem.New()
			dir := t.TempDir()
			writeTree(t, dir, tt.tr)
			u := newUploader(s, nil)
			u.SkipFormatCheck = tt.skip
			var opens atomic.Int32
			u.beforeOpen = func(rel string) {
				if rel == tt.bad {
					opens.Add(1)
				}
			}
			paths := slices.Sorted(maps.Keys(tt.tr))
			world := 1
			if tt.rank > 0 {
				world = tt.rank + 1
			}
			res, err := u.UploadFiles(ctx, dir, paths, Target{Step: 1, Rank: tt.rank, WorldSize: world})
			if tt.bad == "" {
				if err != nil {
					t.Fatal(err)
				}
				out := t.TempDir()
				if _, err := Restore(ctx, s, 1, tt.rank, out, RestoreOptions{SkipFormatCheck: tt.skip, WorldSize: world}); err != nil {
					t.Fatal(err)
				}
				checkTree(t, out, tt.tr)
				return
			}
			if !errors.Is(err, ErrInterrupted) || !errors.Is(err, format.ErrTorn) || !strings.Contains(err.Error(), tt.bad) ||
				!strings.Contains(err.Error(), "not whole") {
				t.Fatalf("upload = %+v, %v; want ErrInterrupted and format.ErrTorn naming %s", res, err, tt.bad)
			}
			if !storage.IsPermanent(err) {
				t.Errorf("the error is not marked permanent, so a retry loop may retry it: %v", err)
			}
			if n := opens.Load(); n != tt.reads {
				t.Errorf("the torn file was opened %d times, want %d", n, tt.reads)
			}
			if m := storedKeys(t, s, snapshotsPrefix); len(m) != 0 {
				t.Errorf("committed %v", m)
			}
		})
	}
}

// TestRestoreFallsBackPastTornFile: a snapshot holding a torn file (stored
// by an uploader with the checks off) is corrupt to RestoreLatest, which
// leaves the directory as it was and restores the previous snapshot; with
// the checks off the restore takes it.
func TestRestoreFallsBackPastTornFile(t *testing.T) {
	defer verifyNone(t)
	ctx := context.Background()
	s := mem.New()
	older := sampleTree(91)
	upload(t, newUploader(s, nil), 1, 0, 1, older)
	torn := sampleTree(92)
	torn["model.pdopt"] = torn["model.pdopt"][:len(torn["model.pdopt"])-2]
	u := newUploader(s, nil)
	u.SkipFormatCheck = true
	upload(t, u, 2, 0, 1, torn)

	dir := t.TempDir()
	user := tree{"notes.txt": []byte("keep me")}
	writeTree(t, dir, user)
	if _, err := Restore(ctx, s, 2, 0, dir, RestoreOptions{}); !errors.Is(err, ErrCorrupt) || !errors.Is(err, format.ErrTorn) {
		t.Fatalf("Restore of the torn snapshot = %v, want ErrCorrupt and format.ErrTorn", err)
	}
	checkTree(t, dir, user) // nothing moved in, no temporary directory left

	res, err := RestoreLatest(ctx, s, 0, dir, RestoreOptions{})
	if err != nil || res.Step != 1 {
		t.Fatalf("RestoreLatest = %+v, %v; want step 1", res, err)
	}
	if len(res.Fallbacks) != 1 || res.Fallbacks[0].Step != 2 || !errors.Is(res.Fallbacks[0].Err, ErrCorrupt) ||
		!strings.Contains(res.Fallbacks[0].Err.Error(), "model.pdopt") {
		t.Errorf("fallbacks %+v, want step 2 corrupt, naming model.pdopt", res.Fallbacks)
	}
	want := maps.Clone(older)
	maps.Copy(want, user)
	checkTree(t, dir, want)

	dir = t.TempDir()
	if res, err := RestoreLatest(ctx, s, 0, dir, RestoreOptions{SkipFormatCheck: true}); err != nil || res.Step != 2 {
		t.Fatalf("RestoreLatest with the checks off = %+v, %v; want step 2", res, err)
	}
	checkTree(t, dir, torn)
}
