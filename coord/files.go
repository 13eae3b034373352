package coord

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/lifeboat-project/lifeboat/internal/beneath"
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

// maxRequest bounds the step request read from the trainer.
const maxRequest = 4 << 10

// writeFile replaces dir/name with v as JSON, atomically: a reader sees
// the old content or the new, never a part. It is written beneath dir
// (internal/beneath): a link at name is replaced, never followed.
func writeFile(dir, name string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	d, err := beneath.Open(dir)
	if err != nil {
		return fmt.Errorf("coord: write %s: %w", filepath.Join(dir, name), err)
	}
	defer d.Close()
	if err := d.WriteFile(name, append(b, '\n'), 0o644, reserved.CoordTempPrefix); err != nil {
		return fmt.Errorf("coord: write %s: %w", filepath.Join(dir, name), err)
	}
	return nil
}

// readRequest reads the trainer's step request; ok is false when there is
// none. It is opened beneath dir without following links, and only a
// small regular file is read: a link planted there is refused unread.
func readRequest(dir string) (StepRequest, bool, error) {
	var r StepRequest
	d, err := beneath.Open(dir)
	if err != nil {
		return r, false, err
	}
	defer d.Close()
	b, err := d.ReadFile(StepRequestFile, maxRequest)
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

// removeStale removes what an earlier run left in dir: the stop file, the
// step request and temporary files, beneath dir (a link is removed, not
// what it points to).
func removeStale(dir string) error {
	d, err := beneath.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	ents, err := d.ReadDir("")
	if err != nil {
		return err
	}
	var errs []error
	for _, e := range ents {
		n := e.Name()
		if n != StopFile && n != StepRequestFile && !strings.HasPrefix(n, reserved.CoordTempPrefix) {
			continue
		}
		if err := d.Remove(n); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
