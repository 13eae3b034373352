package checkpoint

import "fmt"

// Target names what an upload commits: the snapshot of rank Rank, of a job
// of WorldSize ranks, at training step Step.
//
// Counter marks a checkpoint the trainer did not number (a file overwritten
// in place, such as backup/latest.pdparams): Step is then the newest step
// the trainer did name, which the checkpoint follows. It is committed as a
// revision of that step like any other change to a committed step, so it
// never takes a step number the trainer may use later.
//
// Generation, when set, names a job-wide save every rank took part in (the
// ranks agreed on it, through the store): a counter checkpoint that carries
// it can be paired with the other ranks' of the same generation. Without
// it, a counter checkpoint of a job of several ranks never makes its step
// complete (docs/FORMAT.md).
//
// Line is the line of work the upload belongs to (NewLine, or the line of
// the checkpoint the run restored); empty only for tests of the legacy
// format.
type Target struct {
	Step       int64
	Rank       int
	WorldSize  int
	Counter    bool
	Generation string
	Line       string
}

// Validate reports a target no manifest can name.
func (t Target) Validate() error {
	switch {
	case t.Step < 0:
		return fmt.Errorf("checkpoint: step %d is negative", t.Step)
	case t.WorldSize < 1 || t.WorldSize > MaxWorldSize:
		return fmt.Errorf("checkpoint: world size %d outside 1..%d", t.WorldSize, MaxWorldSize)
	case t.Rank < 0 || t.Rank >= t.WorldSize:
		return fmt.Errorf("checkpoint: rank %d outside 0..%d", t.Rank, t.WorldSize-1)
	}
	if err := checkGeneration(t.Generation); err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	if err := CheckLine(t.Line); err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	return nil
}

func (t Target) String() string {
	kind := ""
	if t.Counter {
		kind = " (counter)"
	}
	return fmt.Sprintf("step %d%s rank %d of %d", t.Step, kind, t.Rank, t.WorldSize)
}
