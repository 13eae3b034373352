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
type Target struct {
	Step      int64
	Rank      int
	WorldSize int
	Counter   bool
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
	return nil
}

func (t Target) String() string {
	kind := ""
	if t.Counter {
		kind = " (counter)"
	}
	return fmt.Sprintf("step %d%s rank %d of %d", t.Step, kind, t.Rank, t.WorldSize)
}
