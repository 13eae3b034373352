package pipeline

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"regexp"
	"time"

	"github.com/lifeboat-project/lifeboat/checkpoint"
	"github.com/lifeboat-project/lifeboat/storage"
)

// Options say what one lifeboat's pipeline does: where checkpoints are
// stored, which directory the trainer saves into and how its checkpoints
// are recognised, restored, uploaded and kept. The caller fills and
// validates them once; Open reports what it finds wrong as a *FieldError.
type Options struct {
	Store StoreConfig
	// Dir is the directory the trainer saves checkpoints into (required).
	// Open creates it and resolves its symbolic links.
	Dir string
	// Rank of WorldSize is this pod's place in the job.
	Rank, WorldSize int
	// Restore restores the store's newest complete checkpoint before the
	// trainer starts, unless something better is at hand (Decide);
	// unset, only an init container's restore is resumed.
	Restore bool
	// AllRanks restores every rank's files of the newest complete step of
	// any world size (RestoreConfig.AllRanks).
	AllRanks bool
	// Workers is the parallel chunk uploads and downloads; 0: the
	// defaults. Check is how a restore checks each chunk it downloads.
	Workers int
	Check   checkpoint.Check
	// Keep is how many complete checkpoints the store keeps (0: all).
	Keep int
	// Settle is how long a checkpoint's files must stay unchanged to
	// count as complete; Interval how often Dir is scanned.
	Settle, Interval time.Duration
	// Marker, StepPattern, Exclude and MarkerOnly say how a checkpoint
	// is recognised (watch.Config).
	Marker      string
	StepPattern *regexp.Regexp
	Exclude     []string
	MarkerOnly  bool
	// VerifyFormat makes a file whose content a format check recognises
	// and finds not whole make its checkpoint an interrupted save, never
	// committed or resumed.
	VerifyFormat bool
	// Sidecar is set when the trainer runs in another container: its
	// processes may be invisible and its deaths unknown, it restores for
	// itself, and a fresh start is its own business.
	Sidecar bool
	// Producer names the writer in every manifest ("lifeboat v1.2.3").
	Producer string
	Log      *slog.Logger
	// ProgressTo gets a restore's progress bar when it is a terminal;
	// otherwise progress is logged.
	ProgressTo io.Writer
	// Opened, when set, is told of the store once it is open, before the
	// restore: a stop during the restore writes its stop record there.
	Opened func(storage.Store)
}

// The Options fields a *FieldError may name.
const (
	FieldDir                       = "Dir"
	FieldUploadLimit               = "Store.UploadLimit"
	FieldUnsafeNoConditionalWrites = "Store.UnsafeNoConditionalWrites"
)

// ErrNoDir says Options.Dir is empty; ErrHoldsStore that the directory
// holds a directory store (FieldDir, with the directory as Value):
// lifeboat would upload its own store as a checkpoint at every scan.
var (
	ErrNoDir      = errors.New("no checkpoint directory")
	ErrHoldsStore = errors.New("the directory holds the store")
)

// FieldError says which field of Options is wrong, its value and why.
type FieldError struct {
	Field string // one of the Field constants
	Value string
	Err   error
}

func (e *FieldError) Error() string {
	return fmt.Sprintf("pipeline: %s %s: %v", e.Field, e.Value, e.Err)
}
func (e *FieldError) Unwrap() error { return e.Err }
