package resume

import (
	"errors"
	"fmt"
	"log/slog"
	"path"
	"time"

	"github.com/lifeboat-project/lifeboat/checkpoint"
	"github.com/lifeboat-project/lifeboat/format"
	"github.com/lifeboat-project/lifeboat/watch"
)

// Sources of what the trainer resumes from (Point.Source,
// LIFEBOAT_RESUME_SOURCE).
const (
	SourceStore = "store" // restored from the store here
	SourceLocal = "local" // a checkpoint already in the directory, newer than the store's
	SourceInit  = "init"  // restored by an earlier lifeboat restore (an init container)
)

// NewerLocal decides whether the newest complete checkpoint in the
// watched directory is resumed instead of restoring the store's newest
// over it (restoring would destroy work that was never uploaded: the
// upload failed at the last preemption, or the store was down). snaps is
// the store's listing; the store's newest is by the rule of lines
// (checkpoint.Newest) for worldSize. It returns the local checkpoint to
// resume (numbered) and why, or nil, and the store's newest either way.
//
// The local checkpoint wins only when it belongs to the line of work the
// store's newest continues and is newer by that line's rule: it changed
// after the store's newest was committed (a checkpoint last changed before
// it is another run's, or work the line has since passed: a reused volume
// holding an earlier experiment's step 9000 is not newer than this job's
// step 500), and, when both are numbered by the trainer, its step is
// higher. And it must be provably whole: with verify, every file passes a
// format check (package format); a file no check knows is in doubt, and
// the store's newest wins (only an empty store lets it resume). Only for
// one rank: one rank of several cannot know that its peers hold the same
// newer step, and resuming it alone would pair iterations.
func NewerLocal(w *watch.Watcher, snaps []checkpoint.Snapshot, worldSize int, verify bool, log *slog.Logger) (local *watch.Ready, why string, newest *checkpoint.Snapshot) {
	newest = checkpoint.Newest(snaps, worldSize)
	if worldSize > 1 {
		return nil, "", newest
	}
	ready, err := w.Scan(true)
	if err != nil || len(ready) == 0 {
		return nil, "", newest
	}
	l := ready[len(ready)-1]
	w.Number(&l)
	args := []any{"id", l.ID, "step", l.Step, "changed", l.LastChange().UTC().Format(time.RFC3339Nano)}
	if newest != nil {
		args = append(args, "store_step", newest.Step, "store_committed", newest.Committed.UTC().Format(time.RFC3339Nano), "store_line", checkpoint.ShortLine(newest.Line))
		switch named := !l.Counter && !newest.Counter; {
		case !l.LastChange().After(newest.Committed):
			log.Info("resume.local_not_newer", append(args, "reason", "it last changed before the store's newest checkpoint was committed: another run's work, or work already committed",
				"effect", "the store's newest is restored; this checkpoint is not uploaded")...)
			return nil, "", newest
		case named && l.Step <= newest.Step:
			log.Info("resume.local_not_newer", append(args, "reason", "its step is not above the store's newest step of the line",
				"effect", "the store's newest is restored")...)
			return nil, "", newest
		}
	}
	doubt := ""
	if verify {
		for _, f := range l.Files {
			// The content decides the check; a file none vouches for
			// (unknown or partly recognised content, an empty file) is
			// in doubt.
			kind, err := format.InspectBeneath(w.Dir(), path.Join(l.Dir, f.Path))
			if err != nil && !errors.Is(err, format.ErrUnchecked) {
				log.Warn("resume.local_torn", "id", l.ID, "err", err, "effect", "not resumed; the store's newest checkpoint is restored")
				return nil, "", newest
			}
			if (err != nil || !kind.Checked()) && doubt == "" {
				doubt = path.Join(l.Dir, f.Path)
			}
		}
	}
	if doubt != "" && newest != nil {
		log.Warn("resume.local_in_doubt", append(args, "path", doubt,
			"reason", "no format check vouches for this file, and the previous run may have been killed while writing it",
			"effect", "not resumed; the store's newest whole checkpoint is restored")...)
		return nil, "", newest
	}
	why = "the store holds no complete checkpoint of this world size"
	if newest != nil {
		why = fmt.Sprintf("changed after the store's newest (step %d) was committed", newest.Step)
		if !l.Counter && !newest.Counter {
			why = fmt.Sprintf("step %d, above the store's newest step %d, changed after it was committed", l.Step, newest.Step)
		}
	}
	if doubt != "" {
		why += "; no format check vouches for " + doubt
	} else if verify {
		why += "; every file passed its format check"
	}
	log.Info("resume.local_newer", append(args, "files", len(l.Files), "reason", why,
		"effect", "kept, resumed and uploaded instead of restoring over it")...)
	return &l, why, newest
}
