package pipeline

import (
	"context"
	"time"

	"github.com/lifeboat-project/lifeboat/checkpoint"
	"github.com/lifeboat-project/lifeboat/resume"
	"github.com/lifeboat-project/lifeboat/storage"
	"github.com/lifeboat-project/lifeboat/watch"
)

// resumeConfig is what a start needs to know to resume.
type resumeConfig struct {
	RestoreConfig
	Dir string
	// Restore, Sidecar: Facts.Restore and Facts.Sidecar.
	Restore, Sidecar bool
	// VerifyFormat lets a checkpoint in the directory win over the
	// store's only when every file passes a format check
	// (resume.NewerLocal).
	VerifyFormat bool
	// Finished is a restore a kill cut short, finished at FinishedAt
	// (FinishInterrupted), or nil.
	Finished   *resume.Point
	FinishedAt time.Time
}

// resumed is what the trainer resumes from, and the line the run
// continues.
type resumed struct {
	Point *resume.Point // nil: a fresh start
	// Source is resume.SourceStore, SourceLocal or SourceInit: where
	// Point came from, or would have.
	Source string
	// Seconds is how long the restore took; At when what Point names
	// was restored (zero when nothing was).
	Seconds float64
	At      time.Time
	Line    checkpoint.LineScope
}

// resumeAtStart decides what the trainer resumes from at start-up (Decide) and
// does it: it asks w for a checkpoint in the directory newer than the
// store's, or reads the resume file, as the decision needs (Wants), and
// restores from s when it decides to, writing the resume file for what it
// resumes. snaps is s's listing.
func resumeAtStart(ctx context.Context, s storage.Store, w *watch.Watcher, snaps []checkpoint.Snapshot, c resumeConfig) (resumed, error) {
	f := Facts{Restore: c.Restore, Sidecar: c.Sidecar, Dir: c.Dir, WorldSize: c.WorldSize, Finished: c.Finished, Snaps: snaps}
	local, file := Wants(c.Restore, c.Finished != nil)
	if local {
		f.Local, f.LocalWhy, _ = resume.NewerLocal(w, snaps, c.WorldSize, c.VerifyFormat, c.Log)
	}
	if file {
		f.File = readResumeFile(c.Dir, c.Log)
	}
	d := Decide(f)
	switch d.Step {
	case StepFinished:
		return resumed{Point: d.Point, Source: resume.SourceStore, At: c.FinishedAt, Line: d.Line}, nil
	case StepLocal:
		writeResumeFile(c.Dir, d.Point, c.Log)
		return resumed{Point: d.Point, Source: resume.SourceLocal, Line: d.Line}, nil
	case StepRestore:
		t0 := time.Now()
		r, res, err := restoreAndHandOn(ctx, s, c.Dir, c.RestoreConfig)
		if err != nil {
			return resumed{}, err
		}
		return resumed{Point: r, Source: resume.SourceStore, Seconds: time.Since(t0).Seconds(), At: t0, Line: checkpoint.Continue(res, c.WorldSize)}, nil
	case StepHandOn:
		return resumed{Point: d.Point, Source: resume.SourceInit, At: d.Point.Written, Line: d.Line}, nil
	}
	if d.Fresh != nil {
		logFresh(c.Log, s, d.Fresh)
	}
	return resumed{Source: resume.SourceInit, Line: d.Line}, nil
}
