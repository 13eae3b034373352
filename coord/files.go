package coord

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/lifeboat-project/lifeboat/internal/reserved"
)

// StopInfo is StopFile's content: the job-wide stop as this rank knows it,
// and once agreed, the step every rank saves.
type StopInfo struct {
	ID       string    `json:"id"`
	FromRank int       `json:"from_rank"`
	Host     string    `json:"host,omitempty"`
	Reason   string    `json:"reason"`
	Written  time.Time `json:"written"`
	Deadline time.Time `json:"deadline,omitzero"`
	Step     *int64    `json:"step,omitempty"`
}

// StepRequest is StepRequestFile's content: the step the trainer has
// finished when it asks which step to save.
type StepRequest struct {
	Step int64 `json:"step"`
}

// writeFile replaces dir/name with v as JSON, atomically: a reader sees
// the old content or the new, never a part.
func writeFile(dir, name string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	f, err := os.CreateTemp(dir, reserved.CoordTempPrefix+"*")
	if err != nil {
		return fmt.Errorf("coord: write %s: %w", filepath.Join(dir, name), err)
	}
	_, werr := f.Write(append(b, '\n'))
	cerr := f.Close()
	if err = errors.Join(werr, cerr, os.Chmod(f.Name(), 0o644)); err == nil {
		err = os.Rename(f.Name(), filepath.Join(dir, name))
	}
	if err != nil {
		_ = os.Remove(f.Name())
		return fmt.Errorf("coord: write %s: %w", filepath.Join(dir, name), err)
	}
	return nil
}

// readRequest reads the trainer's step request; ok is false when there is
// none.
func readRequest(dir string) (StepRequest, bool, error) {
	var r StepRequest
	b, err := os.ReadFile(filepath.Join(dir, StepRequestFile))
	if errors.Is(err, os.ErrNotExist) {
		return r, false, nil
	}
	if err != nil {
		return r, false, err
	}
	if err := json.Unmarshal(b, &r); err != nil || r.Step < 0 {
		return r, false, fmt.Errorf("%s holds %q, not {\"step\": N}", filepath.Join(dir, StepRequestFile), b)
	}
	return r, true, nil
}

// removeStale removes what an earlier run left in dir.
func removeStale(dir string) error {
	var errs []error
	tmps, _ := filepath.Glob(filepath.Join(dir, reserved.CoordTempPrefix+"*"))
	for _, p := range append([]string{filepath.Join(dir, StopFile), filepath.Join(dir, StepRequestFile)}, tmps...) {
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
