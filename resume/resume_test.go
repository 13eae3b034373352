package resume

import (
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"testing"

	"github.com/lifeboat-project/lifeboat/checkpoint"
	"github.com/lifeboat-project/lifeboat/watch"
)

func TestEnv(t *testing.T) {
	tests := []struct {
		name string
		p    *Point
		want []string
	}{
		{"fresh start", nil, []string{"LIFEBOAT_RESUME_DIR=", "LIFEBOAT_RESUME_STEP=", "LIFEBOAT_RESUME_ID=", "LIFEBOAT_RESUME_SOURCE=", "LIFEBOAT_RESUME_REASON="}},
		{"restored", &Point{Dir: "/ckpt/step-5", Step: 5, ID: "ab12", Source: SourceStore, Reason: "the store's newest checkpoint"},
			[]string{"LIFEBOAT_RESUME_DIR=/ckpt/step-5", "LIFEBOAT_RESUME_STEP=5", "LIFEBOAT_RESUME_ID=ab12", "LIFEBOAT_RESUME_SOURCE=store", "LIFEBOAT_RESUME_REASON=the store's newest checkpoint"}},
		{"local", &Point{Dir: "/ckpt", Step: 0, Source: SourceLocal, Reason: "newer"},
			[]string{"LIFEBOAT_RESUME_DIR=/ckpt", "LIFEBOAT_RESUME_STEP=0", "LIFEBOAT_RESUME_ID=", "LIFEBOAT_RESUME_SOURCE=local", "LIFEBOAT_RESUME_REASON=newer"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.p.Env(); !slices.Equal(got, tt.want) {
				t.Errorf("Env = %q, want %q", got, tt.want)
			}
		})
	}
}

// TestFile: the file is the JSON object and newline the package doc
// shows, read back as written, replaced whole, and removed.
func TestFile(t *testing.T) {
	dir := t.TempDir()
	if p, err := Read(dir); p != nil || err != nil {
		t.Fatalf("Read with no file = %+v, %v; want nil, nil", p, err)
	}
	p := &Point{Dir: "/ckpt/step-5", Step: 5, ID: "3f9c2a7b1d4e6f80", Files: []string{"step-5/model.pdparams", "step-5/model.pdopt"}}
	if err := Write(dir, p); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, FileName))
	want := `{"dir":"/ckpt/step-5","step":5,"id":"3f9c2a7b1d4e6f80","files":["step-5/model.pdparams","step-5/model.pdopt"]}` + "\n"
	if err != nil || string(b) != want {
		t.Fatalf("resume file %q, %v; want %q", b, err, want)
	}
	if got, err := Read(dir); err != nil || got.Written.IsZero() || !reflect.DeepEqual(*got, Point{Dir: p.Dir, Step: p.Step, ID: p.ID, Files: p.Files, Written: got.Written}) {
		t.Fatalf("Read = %+v, %v; want %+v", got, err, p)
	}
	q := &Point{Dir: "/ckpt", Step: 7}
	if err := Write(dir, q); err != nil {
		t.Fatal(err)
	}
	if got, err := Read(dir); err != nil || got.Written.IsZero() || !reflect.DeepEqual(*got, Point{Dir: q.Dir, Step: q.Step, Files: q.Files, Written: got.Written}) {
		t.Fatalf("Read after a second Write = %+v, %v; want %+v", got, err, q)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Errorf("the directory holds %d entries, want only the resume file", len(ents))
	}
	if err := Remove(dir); err != nil {
		t.Fatal(err)
	}
	if err := Remove(dir); err != nil {
		t.Errorf("Remove with no file = %v", err)
	}
	if p, err := Read(dir); p != nil || err != nil {
		t.Errorf("Read after Remove = %+v, %v; want nil, nil", p, err)
	}
	if err := os.WriteFile(filepath.Join(dir, FileName), []byte("{"), 0o644); err != nil {
		t.Fatal(err)
	}
	if p, err := Read(dir); p != nil || err == nil {
		t.Errorf("Read of a torn file = %+v, %v; want an error", p, err)
	}
}

func TestRestored(t *testing.T) {
	files := func(paths ...string) *checkpoint.Manifest {
		m := &checkpoint.Manifest{ID: "id1"}
		for _, p := range paths {
			m.Files = append(m.Files, checkpoint.File{Path: p})
		}
		return m
	}
	ranks := filepath.Join("/ckpt", checkpoint.RanksDir)
	tests := []struct {
		name string
		res  *checkpoint.RestoreResult
		all  bool
		want *Point
	}{
		{"one directory", &checkpoint.RestoreResult{Step: 5, Dir: "/ckpt", Manifest: files("step-5/model.bin", "step-5/opt/state.bin")}, false,
			&Point{Dir: "/ckpt/step-5", Step: 5, ID: "id1", Files: []string{"step-5/model.bin", "step-5/opt/state.bin"}}},
		{"files at the top", &checkpoint.RestoreResult{Step: 2, Dir: "/ckpt", Manifest: files("model.bin", "step-2/x")}, false,
			&Point{Dir: "/ckpt", Step: 2, ID: "id1", Files: []string{"model.bin", "step-2/x"}}},
		{"every rank", &checkpoint.RestoreResult{Step: 9, Dir: ranks, Manifest: files("rank-00000/step-9/0.distcp", "rank-00001/step-9/1.distcp")}, true,
			&Point{Dir: ranks, Step: 9, ID: "id1", Files: []string{checkpoint.RanksDir + "/rank-00000/step-9/0.distcp", checkpoint.RanksDir + "/rank-00001/step-9/1.distcp"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.want.Source, tt.want.Reason = SourceStore, "the store's newest checkpoint"
			if got := Restored("/ckpt", tt.res, tt.all); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Restored = %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestLocal(t *testing.T) {
	l := watch.Ready{Candidate: watch.Candidate{Dir: "step-8", Step: 8, Files: []watch.File{{Path: "model.bin"}, {Path: "opt/state.bin"}}}}
	want := &Point{Dir: "/ckpt/step-8", Step: 8, Files: []string{"step-8/model.bin", "step-8/opt/state.bin"}, Line: "0123456789abcdef", Source: SourceLocal, Reason: "why"}
	if got := Local("/ckpt", l, "0123456789abcdef", "why"); !reflect.DeepEqual(got, want) {
		t.Errorf("Local = %+v, want %+v", got, want)
	}
}
