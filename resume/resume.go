package resume

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"path/filepath"
	"strconv"
	"time"

	"github.com/lifeboat-project/lifeboat/checkpoint"
	"github.com/lifeboat-project/lifeboat/internal/beneath"
	"github.com/lifeboat-project/lifeboat/internal/reserved"
	"github.com/lifeboat-project/lifeboat/watch"
)

// FileName is the resume file's name in the checkpoint directory.
const FileName = reserved.ResumeFile

// Point is what the trainer is told to resume from (the package doc
// describes each member).
type Point struct {
	Dir   string   `json:"dir"`
	Step  int64    `json:"step"`
	ID    string   `json:"id"`
	Files []string `json:"files"`
	// Line is the line of work of what was resumed (empty: the legacy
	// line, or not known); the run continues it.
	Line string `json:"line,omitempty"`
	// Source says where the checkpoint came from (SourceStore,
	// SourceLocal, SourceInit), Reason why it was chosen.
	Source string `json:"source,omitempty"`
	Reason string `json:"reason,omitempty"`
	// Written is when the resume file Read read was last written: a
	// restore's end, for a file an earlier restore wrote. Not in the file.
	Written time.Time `json:"-"`
}

// Env renders p as the trainer's LIFEBOAT_RESUME_* variables; a nil p (a
// fresh start) sets them empty.
func (p *Point) Env() []string {
	if p == nil {
		return []string{"LIFEBOAT_RESUME_DIR=", "LIFEBOAT_RESUME_STEP=", "LIFEBOAT_RESUME_ID=", "LIFEBOAT_RESUME_SOURCE=", "LIFEBOAT_RESUME_REASON="}
	}
	return []string{"LIFEBOAT_RESUME_DIR=" + p.Dir, "LIFEBOAT_RESUME_STEP=" + strconv.FormatInt(p.Step, 10), "LIFEBOAT_RESUME_ID=" + p.ID,
		"LIFEBOAT_RESUME_SOURCE=" + p.Source, "LIFEBOAT_RESUME_REASON=" + p.Reason}
}

// Restored is the Point of a restore into dir: the deepest directory that
// holds every restored file (with all, every rank's files were restored and
// it is the directory holding the ranks), the step, the manifest's ID and
// the files, relative to dir.
func Restored(dir string, res *checkpoint.RestoreResult, all bool) *Point {
	p := &Point{Dir: filepath.Join(res.Dir, checkpoint.CommonDir(res.Manifest.Files)), Step: res.Step, ID: res.Manifest.ID, Line: res.Line,
		Source: SourceStore, Reason: "the store's newest checkpoint this volume could hold"}
	if len(res.Fallbacks) == 0 {
		p.Reason = "the store's newest checkpoint"
	}
	if all {
		p.Dir = res.Dir
	}
	for _, f := range res.Manifest.Files {
		p.Files = append(p.Files, relTo(dir, res.Dir, f.Path))
	}
	return p
}

// Local is the Point of a complete checkpoint already in dir, found by
// the watcher (NewerLocal): nothing was restored, so it has no ID. line is
// the line it continues, why the reason it was chosen.
func Local(dir string, l watch.Ready, line, why string) *Point {
	p := &Point{Dir: filepath.Join(dir, filepath.FromSlash(l.Dir)), Step: l.Step, Line: line, Source: SourceLocal, Reason: why}
	for _, f := range l.Files {
		p.Files = append(p.Files, path.Join(l.Dir, f.Path))
	}
	return p
}

// Write replaces dir's resume file with p, atomically and beneath dir:
// the JSON goes into a new temporary file in dir, named
// reserved.RestoreTempPrefix and random characters and created
// O_CREAT|O_EXCL|O_NOFOLLOW, which is renamed over the resume file
// (package beneath). A link planted at either name is never followed; a
// leftover temporary file is removed with the restores' leftovers.
func Write(dir string, p *Point) error {
	name := filepath.Join(dir, FileName)
	b, err := json.Marshal(p)
	if err != nil {
		return err
	}
	root, err := beneath.Open(dir)
	if err != nil {
		return fmt.Errorf("resume: write %s: %w", name, err)
	}
	defer root.Close()
	if err := root.WriteFile(FileName, append(b, '\n'), 0o644, reserved.RestoreTempPrefix); err != nil {
		return fmt.Errorf("resume: write %s: %w", name, err)
	}
	return nil
}

// maxFileSize bounds the resume file Read reads: far more than the
// files of any checkpoint take.
const maxFileSize = 64 << 20

// Read reads dir's resume file: nil and no error when there is none, an
// error when it cannot be read, is not a regular file (a link is not
// followed) or is not a resume file.
func Read(dir string) (*Point, error) {
	name := filepath.Join(dir, FileName)
	root, err := beneath.Open(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("resume: read %s: %w", name, err)
	}
	defer root.Close()
	b, err := root.ReadFile(FileName, maxFileSize)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("resume: read %s: %w", name, err)
	}
	var p Point
	if err := json.Unmarshal(b, &p); err != nil {
		return nil, fmt.Errorf("resume: read %s: %w", name, err)
	}
	if st, err := root.Lstat(FileName); err == nil {
		p.Written = time.Unix(st.Mtim.Unix())
	}
	return &p, nil
}

// Remove removes dir's resume file, when there is one (a link of that
// name is removed, not what it points to).
func Remove(dir string) error {
	root, err := beneath.Open(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("resume: %w", err)
	}
	defer root.Close()
	if err := root.Remove(FileName); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("resume: %w", err)
	}
	return nil
}

// relTo is the slash path of p, relative to sub (a directory in dir),
// relative to dir.
func relTo(dir, sub, p string) string {
	rel, err := filepath.Rel(dir, sub)
	if err != nil || rel == "." {
		return p
	}
	return path.Join(filepath.ToSlash(rel), p)
}
