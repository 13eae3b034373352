package coord

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/lifeboat-project/lifeboat/internal/reserved"
	"github.com/lifeboat-project/lifeboat/storage"
)

// Keys under the store's prefix.
const (
	StopPrefix  = "coord/stop/"
	StepsPrefix = "coord/steps/"
	agreedName  = "agreed.json"
)

// Files in the trainer's checkpoint directory. Both are reserved names
// (package reserved): the scanner ignores them.
const (
	// StopFile is written when a stop begins on this rank: a StopInfo.
	StopFile = reserved.StopFile
	// StepRequestFile is written by the trainer (lifeboat.stop_step): a
	// StepRequest.
	StepRequestFile = reserved.StepRequestFile
)

// idTime is the time part of a stop id: fixed width, so ids sort by time.
const idTime = "20060102T150405.000000000Z"

// Stop is one stop record, coord/stop/<ID>.json.
type Stop struct {
	ID       string    `json:"id"`
	Rank     int       `json:"rank"`
	Host     string    `json:"host,omitempty"`
	Reason   string    `json:"reason"`
	Written  time.Time `json:"written"`           // by the writer's clock
	Deadline time.Time `json:"deadline,omitzero"` // the end of the writer's grace budget
}

// StopID names a stop written at t by rank.
func StopID(t time.Time, rank int) string {
	return t.UTC().Format(idTime) + "-rank-" + fmt.Sprintf("%06d", rank)
}

// parseStopID returns the time and rank a stop id names.
func parseStopID(id string) (time.Time, int, bool) {
	ts, r, ok := strings.Cut(id, "-rank-")
	if !ok {
		return time.Time{}, 0, false
	}
	t, err := time.Parse(idTime, ts)
	if err != nil {
		return time.Time{}, 0, false
	}
	rank, err := strconv.Atoi(r)
	if err != nil || rank < 0 {
		return time.Time{}, 0, false
	}
	return t, rank, true
}

// stopKey is where the stop id is stored.
func stopKey(id string) string { return StopPrefix + id + ".json" }

// Write stores s create-only under its id, which it sets from s.Written
// and s.Rank when empty. A stop already stored under that id is
// storage.ErrExists.
func Write(ctx context.Context, st storage.Store, s Stop) (Stop, error) {
	if s.ID == "" {
		s.ID = StopID(s.Written, s.Rank)
	}
	b, err := json.Marshal(s)
	if err != nil {
		return s, err
	}
	if _, err := st.Put(ctx, stopKey(s.ID), bytes.NewReader(b), int64(len(b)), storage.PutOptions{IfNotExists: true}); err != nil {
		return s, fmt.Errorf("coord: write stop %s: %w", s.ID, err)
	}
	return s, nil
}

// read returns the stop stored under id.
func read(ctx context.Context, st storage.Store, id string) (Stop, error) {
	var s Stop
	err := getJSON(ctx, st, stopKey(id), &s)
	return s, err
}

// listStops returns the ids of the stop records, in order (oldest first).
func listStops(ctx context.Context, st storage.Store) ([]string, error) {
	var ids []string
	err := st.List(ctx, StopPrefix, func(oi storage.ObjectInfo) error {
		id, ok := strings.CutSuffix(strings.TrimPrefix(oi.Key, StopPrefix), ".json")
		if _, _, valid := parseStopID(id); ok && valid {
			ids = append(ids, id)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("coord: list %s: %w", StopPrefix, err)
	}
	return ids, nil
}

// reportKey is where rank publishes that its trainer is at step.
func reportKey(id string, rank int, step int64) string {
	return fmt.Sprintf("%s%s/rank-%06d.step-%d", StepsPrefix, id, rank, step)
}

// parseReport returns the rank and step a report's name (the part after
// the stop id) holds.
func parseReport(name string) (rank int, step int64, ok bool) {
	r, s, found := strings.Cut(name, ".step-")
	r, isRank := strings.CutPrefix(r, "rank-")
	if !found || !isRank {
		return 0, 0, false
	}
	rank, err1 := strconv.Atoi(r)
	step, err2 := strconv.ParseInt(s, 10, 64)
	if err1 != nil || err2 != nil || rank < 0 || step < 0 {
		return 0, 0, false
	}
	return rank, step, true
}

// Agreed is coord/steps/<id>/agreed.json: the step every rank saves.
type Agreed struct {
	Step      int64  `json:"step"`
	Rank      int    `json:"rank"`     // who decided
	Reported  int    `json:"reported"` // ranks whose step was known
	WorldSize int    `json:"world_size"`
	How       string `json:"how"` // "every rank asked", "not every rank asked in time"
}

func agreedKey(id string) string { return StepsPrefix + id + "/" + agreedName }

// steps is what is published under one stop id.
type steps struct {
	reports map[int]int64 // rank -> highest step published
	agreed  bool
}

// listSteps reads the names under coord/steps/<id>/.
func listSteps(ctx context.Context, st storage.Store, id string) (steps, error) {
	s := steps{reports: map[int]int64{}}
	prefix := StepsPrefix + id + "/"
	err := st.List(ctx, prefix, func(oi storage.ObjectInfo) error {
		name := strings.TrimPrefix(oi.Key, prefix)
		if name == agreedName {
			s.agreed = true
			return nil
		}
		if rank, step, ok := parseReport(name); ok {
			if old, seen := s.reports[rank]; !seen || step > old {
				s.reports[rank] = step
			}
		}
		return nil
	})
	if err != nil {
		return s, fmt.Errorf("coord: list %s: %w", prefix, err)
	}
	return s, nil
}

// putJSON stores v under key, create-only when createOnly is set.
func putJSON(ctx context.Context, st storage.Store, key string, v any, createOnly bool) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	if _, err := st.Put(ctx, key, bytes.NewReader(b), int64(len(b)), storage.PutOptions{IfNotExists: createOnly}); err != nil {
		return fmt.Errorf("coord: write %s: %w", key, err)
	}
	return nil
}

// getJSON reads key into v.
func getJSON(ctx context.Context, st storage.Store, key string, v any) error {
	rc, err := st.Get(ctx, key, 0, -1)
	if err != nil {
		return fmt.Errorf("coord: read %s: %w", key, err)
	}
	defer rc.Close()
	b, err := io.ReadAll(io.LimitReader(rc, 1<<20))
	if err != nil {
		return fmt.Errorf("coord: read %s: %w", key, err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("coord: read %s: %w", key, err)
	}
	return nil
}
