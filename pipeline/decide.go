package pipeline

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"syscall"

	"github.com/lifeboat-project/lifeboat/checkpoint"
	"github.com/lifeboat-project/lifeboat/resume"
	"github.com/lifeboat-project/lifeboat/setting"
	"github.com/lifeboat-project/lifeboat/watch"
)

// Step is what a start does about what the trainer resumes from.
type Step int

const (
	// StepFinished resumes a restore that a kill cut short while it moved
	// files into place, finished before the start: it is the one that was
	// chosen, so its checkpoint is neither new work nor taken as newer,
	// and its line is continued.
	StepFinished Step = iota
	// StepLocal resumes a complete checkpoint already in the directory,
	// newer than the store's by the line's rule (resume.NewerLocal):
	// restoring over it would destroy work that was never uploaded.
	StepLocal
	// StepRestore restores the store's newest complete checkpoint; what
	// a restore that finds none means is AfterRestore's to say.
	StepRestore
	// StepHandOn hands on what an init container restored (its resume
	// file): its files are not new checkpoints, and its line is continued.
	StepHandOn
	// StepFresh starts the trainer fresh: nothing is restored here and no
	// init container restored anything.
	StepFresh
)

func (s Step) String() string {
	switch s {
	case StepFinished:
		return "finished"
	case StepLocal:
		return "local"
	case StepRestore:
		return "restore"
	case StepHandOn:
		return "hand-on"
	case StepFresh:
		return "fresh"
	}
	return "Step(" + strconv.Itoa(int(s)) + ")"
}

// Facts are what a start knows when it decides what the trainer resumes
// from. Which of them are looked at depends on the others (Wants): a start
// does not scan the directory for a newer checkpoint when it is not to
// restore, and reads no resume file when it is.
type Facts struct {
	// Restore is set when the store's newest is restored unless something
	// better is at hand (restore auto); unset, only an init container's
	// restore is resumed (restore never).
	Restore bool
	// Sidecar is set when the trainer runs in another container: a fresh
	// start there is the trainer's own business, not said.
	Sidecar   bool
	Dir       string // the checkpoint directory
	WorldSize int
	// Finished is a restore a kill cut short, finished before the start
	// (FinishInterrupted), or nil.
	Finished *resume.Point
	// Local is the directory's complete checkpoint that is newer than the
	// store's (resume.NewerLocal), numbered, and LocalWhy why; nil when
	// there is none. Looked at only with Restore.
	Local    *watch.Ready
	LocalWhy string
	// File is the resume file an earlier restore wrote into the directory
	// (resume.Read), or nil. Looked at only without Restore.
	File *resume.Point
	// Snaps is the store's listing (checkpoint.List).
	Snaps []checkpoint.Snapshot
}

// Wants says which facts beyond the listing Decide looks at: the
// directory's newer checkpoint (local) or the resume file (file); neither
// once an interrupted restore was finished.
func Wants(restore, finished bool) (local, file bool) {
	if finished {
		return false, false
	}
	return restore, !restore
}

// Decision is what the trainer resumes from, or why it starts fresh.
type Decision struct {
	Step Step
	// Point is what the trainer resumes from (StepFinished, StepLocal,
	// StepHandOn); nil for StepRestore (the restore says) and StepFresh.
	Point *resume.Point
	// Line is the line of work the run continues; for StepRestore the
	// restore's result decides it (checkpoint.Continue).
	Line checkpoint.LineScope
	// Fresh, for StepFresh beside a complete step of this world size in
	// the store, says so (not for a sidecar); nil otherwise.
	Fresh *FreshStart
}

// FreshStart says why the trainer starts fresh: the resume.fresh_start
// log line.
type FreshStart struct {
	// Warn is set when the store holds progress the trainer does not
	// resume (a WARN); unset, the store holds nothing to resume (INFO).
	Warn   bool
	Reason setting.Text
	// WorldSizes, when not empty, lists the other world sizes the store
	// holds complete steps for, each with the step a restore of that
	// size takes first ("2 (newest step 5031), 4 (...)").
	WorldSizes string
	Hint       setting.Text
}

// Decide decides what the trainer resumes from at start-up, from f alone.
func Decide(f Facts) Decision {
	ws := f.WorldSize
	switch {
	case f.Finished != nil:
		return Decision{Step: StepFinished, Point: f.Finished,
			Line: checkpoint.ContinueFrom(&checkpoint.StepRef{Line: f.Finished.Line, Step: f.Finished.Step, WorldSize: ws}, ws, nil)}
	case f.Restore && f.Local != nil:
		var from *checkpoint.StepRef
		if n := checkpoint.Newest(f.Snaps, ws); n != nil {
			from = &checkpoint.StepRef{Line: n.Line, Step: n.Step, WorldSize: n.WorldSize}
		}
		line := checkpoint.ContinueFrom(from, ws, nil)
		return Decision{Step: StepLocal, Point: resume.Local(f.Dir, *f.Local, line.Line, f.LocalWhy), Line: line}
	case f.Restore:
		return Decision{Step: StepRestore}
	case f.File != nil:
		p := *f.File
		p.Source = resume.SourceInit
		return Decision{Step: StepHandOn, Point: &p,
			Line: checkpoint.ContinueFrom(&checkpoint.StepRef{Line: p.Line, Step: p.Step, WorldSize: ws}, ws, nil)}
	}
	d := Decision{Step: StepFresh, Line: checkpoint.ContinueFrom(nil, ws, nil)}
	if n := checkpoint.Newest(f.Snaps, ws); n != nil && !f.Sidecar {
		d.Fresh = &FreshStart{Warn: true,
			Reason: setting.Textf("%s never and no resume file from lifeboat restore, although the store holds complete step %d of this world size (line %s)", setting.Restore, n.Step, checkpoint.ShortLine(n.Line)),
			Hint:   setting.Textf("the trainer starts a new line of work beside it; set %s auto to resume it; lifeboat ls shows the lines", setting.Restore)}
	}
	return d
}

// AfterRestore decides what a restore's error means: nil, nil when it
// restored; a fresh start when the store holds nothing this rank can
// restore (failing the start would fail every retry the same way and wedge
// the Job: the trainer starts fresh, loudly); else the error, which fails
// the start. stored is the store's listing, looked at only when the store
// holds no complete checkpoint of worldSize (checkpoint.ErrNoCheckpoint):
// a fresh start then names the world sizes it does hold.
func AfterRestore(err error, worldSize int, stored []checkpoint.Snapshot) (*FreshStart, error) {
	switch {
	case err == nil:
		return nil, nil
	case errors.Is(err, checkpoint.ErrNothingRestorable):
		hint := setting.Textf("see each resume.fallback line; the steps stay in the store")
		if errors.Is(err, checkpoint.ErrTooBig) || errors.Is(err, syscall.ENOSPC) {
			hint = setting.Textf("make %s's volume larger; the steps stay in the store", setting.Dir)
		}
		return &FreshStart{Warn: true, Reason: setting.Textf("%s", err.Error()), Hint: hint}, nil
	case errors.Is(err, checkpoint.ErrNoCheckpoint):
		if other := otherWorldSizes(stored, worldSize); other != "" {
			return &FreshStart{Warn: true, Reason: setting.Textf("no complete checkpoint for world size %d", worldSize), WorldSizes: other,
				Hint: setting.Textf("run with the world size those steps were saved with (%s); or, if the format reshards on load, load every old rank's files with %s all; or start this world size fresh on purpose with %s never", setting.WorldSize, setting.AllRanks, setting.Restore)}, nil
		}
		return &FreshStart{Reason: setting.Textf("%s", err.Error())}, nil
	}
	return nil, err
}

// otherWorldSizes lists the world sizes other than worldSize that snaps
// holds complete steps for, each with the step a restore of that size
// takes first ("2 (newest step 5031), 4 (...)"), or "".
func otherWorldSizes(snaps []checkpoint.Snapshot, worldSize int) string {
	var parts []string
	for _, n := range checkpoint.NewestByWorldSize(snaps) {
		if n.WorldSize != worldSize {
			parts = append(parts, fmt.Sprintf("%d (newest step %d)", n.WorldSize, n.Step))
		}
	}
	return strings.Join(parts, ", ")
}
