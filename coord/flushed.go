package coord

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/lifeboat-project/lifeboat/storage"
)

// flushedKey is where rank publishes, under the job-wide stop id, the
// newest step it has committed at the end of its final upload; step -1:
// none.
func flushedKey(id string, rank int, step int64) string {
	if step < 0 {
		return fmt.Sprintf("%s%s/flushed-rank-%06d.none", StepsPrefix, id, rank)
	}
	return fmt.Sprintf("%s%s/flushed-rank-%06d.step-%d", StepsPrefix, id, rank, step)
}

// parseFlushed returns the rank and step a flushed report's name (the
// part after the stop id) holds; step -1 for none.
func parseFlushed(name string) (rank int, step int64, ok bool) {
	rest, isFlushed := strings.CutPrefix(name, "flushed-rank-")
	if !isFlushed {
		return 0, 0, false
	}
	r, s, found := strings.Cut(rest, ".")
	rank, err := strconv.Atoi(r)
	if !found || err != nil || rank < 0 {
		return 0, 0, false
	}
	if s == "none" {
		return rank, -1, true
	}
	s, isStep := strings.CutPrefix(s, "step-")
	step, err = strconv.ParseInt(s, 10, 64)
	if !isStep || err != nil || step < 0 {
		return 0, 0, false
	}
	return rank, step, true
}

// Flushed is what the ranks published at the end of their final uploads
// in one job-wide stop.
type Flushed struct {
	StopID string
	// Steps holds, by rank, the newest step each rank had committed when
	// its final upload ended (-1: none), for the ranks that published in
	// time.
	Steps     map[int]int64
	WorldSize int
}

// All reports whether every rank published.
func (f Flushed) All() bool { return len(f.Steps) == f.WorldSize }

// Common is the step every rank should hold in the store once the stop is
// over: the lowest of the newest steps the ranks committed (docs/FORMAT.md,
// "A stop leaves a complete step"). A rank whose newest is higher commits
// its own checkpoint of that step, when it still has it. ok is false when
// a rank committed nothing (no step can be common) or none published.
func (f Flushed) Common() (step int64, ok bool) {
	if len(f.Steps) == 0 {
		return 0, false
	}
	steps := make([]int64, 0, len(f.Steps))
	for _, s := range f.Steps {
		steps = append(steps, s)
	}
	m := slices.Min(steps)
	return m, m >= 0
}

// Flushed publishes, under the job-wide stop this rank took part in (the
// lowest stop record that counts for this lifeboat), step: the newest
// step this rank had committed when its final upload ended (-1: none).
// Then it lists what the other ranks published, every poll, until every
// rank's is there, StepWait has passed, or ctx ends, and returns what it
// found. A request that fails (a store slow or unreachable for a moment
// during the stop) is tried again at the next poll while StepWait lasts:
// one slow request must not cost the stop its common step. It returns an
// error only when there is no job-wide stop, or when the store failed
// until StepWait passed (or ctx ended) before this rank's step was
// published and one listing read; a rank that does not publish in time
// is missing from the result. It is safe to call while Run runs.
func (c *Coordinator) Flushed(ctx context.Context, step int64, poll time.Duration) (Flushed, error) {
	f := Flushed{WorldSize: c.cfg.WorldSize, Steps: map[int]int64{}}
	id, err := c.jobID(ctx)
	if err != nil {
		return f, err
	}
	f.StopID = id
	until := c.cfg.Now().Add(c.cfg.StepWait)
	prefix := StepsPrefix + id + "/"
	var published, listed bool
	var failed error // the last failed request's error
wait:
	for {
		if !published {
			rctx, cancel := context.WithTimeout(ctx, c.cfg.RequestTimeout)
			failed = putJSON(rctx, c.cfg.Store, flushedKey(id, c.cfg.Rank, step), struct{}{}, false)
			cancel()
			published = failed == nil
		}
		if published {
			rctx, cancel := context.WithTimeout(ctx, c.cfg.RequestTimeout)
			err := c.cfg.Store.List(rctx, prefix, func(oi storage.ObjectInfo) error {
				if rank, s, ok := parseFlushed(strings.TrimPrefix(oi.Key, prefix)); ok && rank < c.cfg.WorldSize {
					if old, seen := f.Steps[rank]; !seen || s > old {
						f.Steps[rank] = s
					}
				}
				return nil
			})
			cancel()
			if err == nil {
				listed = true
			} else {
				failed = fmt.Errorf("coord: list %s: %w", prefix, err)
			}
		}
		if listed && f.All() || !c.cfg.Now().Before(until) {
			break
		}
		select {
		case <-ctx.Done():
			break wait
		case <-time.After(poll):
		}
	}
	if !listed {
		return f, cmp.Or(failed, context.Cause(ctx))
	}
	return f, nil
}

// jobID is the id of the job-wide stop this lifeboat took part in: the
// lowest stop record that counts for it (the package doc), which every
// rank reads alike once the stop's records are written.
func (c *Coordinator) jobID(ctx context.Context) (string, error) {
	joined, ok := c.Joined()
	if !ok {
		return "", fmt.Errorf("coord: no job-wide stop")
	}
	rctx, cancel := context.WithTimeout(ctx, c.cfg.RequestTimeout)
	defer cancel()
	ids, err := listStops(rctx, c.cfg.Store)
	if err != nil {
		return "", err
	}
	now := c.cfg.Now()
	for _, id := range ids {
		if ok, ahead := c.counts(id, joined.ID, now); ok && ahead <= c.cfg.ClockSkew {
			return id, nil
		}
	}
	return joined.ID, nil
}
