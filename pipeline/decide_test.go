package pipeline

import (
	"errors"
	"fmt"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lifeboat-project/lifeboat/checkpoint"
	"github.com/lifeboat-project/lifeboat/resume"
	"github.com/lifeboat-project/lifeboat/setting"
	"github.com/lifeboat-project/lifeboat/watch"
)

var newLine = regexp.MustCompile(`^[0-9a-f]{16}$`)

// TestDecide covers every branch of the start-up's resume decision.
func TestDecide(t *testing.T) {
	const dir = "/ckpt"
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	lineA, lineB := "aaaaaaaaaaaaaaaa", "bbbbbbbbbbbbbbbb"
	snap := func(step int64, ws int, line string, at time.Time) checkpoint.Snapshot {
		return checkpoint.Snapshot{Step: step, WorldSize: ws, Line: line, Complete: true, Created: at, Committed: at}
	}
	// The store: line A's step 100 of one rank, line B's step 7 of two
	// ranks, committed later.
	store := []checkpoint.Snapshot{snap(100, 1, lineA, t0), snap(7, 2, lineB, t0.Add(time.Hour))}
	finished := &resume.Point{Dir: dir + "/step-50", Step: 50, ID: "m50", Line: lineB, Source: resume.SourceStore}
	local := &watch.Ready{Candidate: watch.Candidate{ID: "step-120", Dir: "step-120", Step: 120, HasStep: true,
		Files: []watch.File{{Path: "model.pdparams"}}}}
	file := &resume.Point{Dir: dir + "/step-90", Step: 90, ID: "m90", Line: lineA, Written: t0}

	type want struct {
		step      Step
		point     *resume.Point // nil: none
		line      string        // "" : a new line
		from      *checkpoint.StepRef
		freshWarn string // a substring of Fresh.Reason; "": no Fresh
	}
	for _, c := range []struct {
		name string
		f    Facts
		want want
	}{
		{"a finished restore wins over everything", Facts{Restore: true, WorldSize: 1, Finished: finished, Local: local, File: file, Snaps: store},
			want{step: StepFinished, point: finished, line: lineB, from: &checkpoint.StepRef{Line: lineB, Step: 50, WorldSize: 1}}},
		{"a finished restore with restore never", Facts{WorldSize: 2, Finished: finished, File: file, Snaps: store},
			want{step: StepFinished, point: finished, line: lineB, from: &checkpoint.StepRef{Line: lineB, Step: 50, WorldSize: 2}}},
		{"a newer local checkpoint continues the store's newest line", Facts{Restore: true, Dir: dir, WorldSize: 1, Local: local, LocalWhy: "newer", Snaps: store},
			want{step: StepLocal, point: &resume.Point{Dir: filepath.Join(dir, "step-120"), Step: 120, Line: lineA, Source: resume.SourceLocal, Reason: "newer",
				Files: []string{"step-120/model.pdparams"}}, line: lineA, from: &checkpoint.StepRef{Line: lineA, Step: 100, WorldSize: 1}}},
		{"a newer local checkpoint over an empty store starts a line", Facts{Restore: true, Dir: dir, WorldSize: 1, Local: local, LocalWhy: "empty"},
			want{step: StepLocal, point: &resume.Point{Dir: filepath.Join(dir, "step-120"), Step: 120, Source: resume.SourceLocal, Reason: "empty",
				Files: []string{"step-120/model.pdparams"}}}},
		{"restore auto without a newer local checkpoint restores", Facts{Restore: true, WorldSize: 1, File: file, Snaps: store},
			want{step: StepRestore}},
		{"restore auto over an empty store still asks the store", Facts{Restore: true, WorldSize: 1},
			want{step: StepRestore}},
		{"restore never hands on the resume file", Facts{WorldSize: 1, Local: local, File: file, Snaps: store},
			want{step: StepHandOn, point: &resume.Point{Dir: file.Dir, Step: 90, ID: "m90", Line: lineA, Source: resume.SourceInit, Written: t0},
				line: lineA, from: &checkpoint.StepRef{Line: lineA, Step: 90, WorldSize: 1}}},
		{"restore never without a file beside a step of this world size warns", Facts{WorldSize: 1, Snaps: store},
			want{step: StepFresh, freshWarn: "complete step 100 of this world size (line aaaaaaaa"}},
		{"restore never without a file beside another world size's step is quiet", Facts{WorldSize: 4, Snaps: store},
			want{step: StepFresh}},
		{"restore never over an empty store is quiet", Facts{WorldSize: 1},
			want{step: StepFresh}},
		{"a sidecar's fresh start is the trainer's business", Facts{Sidecar: true, WorldSize: 1, Snaps: store},
			want{step: StepFresh}},
	} {
		t.Run(c.name, func(t *testing.T) {
			d := Decide(c.f)
			w := c.want
			if d.Step != w.step {
				t.Fatalf("step %v; want %v", d.Step, w.step)
			}
			if w.point != nil && w.line == "" {
				// A new line is random: the point names the decision's.
				p := *w.point
				p.Line = d.Line.Line
				w.point = &p
			}
			if got, exp := fmt.Sprintf("%+v", d.Point), fmt.Sprintf("%+v", w.point); got != exp {
				t.Errorf("point %s; want %s", got, exp)
			}
			if w.step == StepRestore {
				if d.Line.Line != "" || d.Line.From != nil || d.Fresh != nil {
					t.Errorf("restore decided line %+v, fresh %+v; the restore's result decides them", d.Line, d.Fresh)
				}
				return
			}
			switch {
			case w.line == "" && !newLine.MatchString(d.Line.Line):
				t.Errorf("line %q; want a new line", d.Line.Line)
			case w.line != "" && d.Line.Line != w.line:
				t.Errorf("line %q; want %q", d.Line.Line, w.line)
			}
			if d.Line.WorldSize != c.f.WorldSize {
				t.Errorf("line's world size %d; want %d", d.Line.WorldSize, c.f.WorldSize)
			}
			if fmt.Sprint(d.Line.From) != fmt.Sprint(w.from) {
				t.Errorf("line from %v; want %v", d.Line.From, w.from)
			}
			switch {
			case w.freshWarn == "" && d.Fresh != nil:
				t.Errorf("fresh %+v; want none", d.Fresh)
			case w.freshWarn != "" && (d.Fresh == nil || !d.Fresh.Warn || !strings.Contains(d.Fresh.Reason.String(), w.freshWarn) || d.Fresh.Hint.IsZero()):
				t.Errorf("fresh %+v; want a warning naming %q, with a hint", d.Fresh, w.freshWarn)
			case w.freshWarn != "" && (!d.Fresh.Reason.Mentions(setting.Restore) || !d.Fresh.Hint.Mentions(setting.Restore)):
				t.Errorf("fresh %+v; want the reason and the hint to name the setting %s", d.Fresh, setting.Restore)
			}
		})
	}
	if file.Source != "" {
		t.Errorf("Decide changed the resume file it was given: source %q", file.Source)
	}
}

// TestWants: a start scans the directory only when it is to restore, and
// reads the resume file only when it is not; neither after finishing an
// interrupted restore.
func TestWants(t *testing.T) {
	for _, c := range []struct{ restore, finished, local, file bool }{
		{true, false, true, false},
		{false, false, false, true},
		{true, true, false, false},
		{false, true, false, false},
	} {
		if local, file := Wants(c.restore, c.finished); local != c.local || file != c.file {
			t.Errorf("Wants(%v, %v) = %v, %v; want %v, %v", c.restore, c.finished, local, file, c.local, c.file)
		}
	}
}

// TestAfterRestore covers every branch of what a restore's error means.
func TestAfterRestore(t *testing.T) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	// Line A's step 9000 of two ranks, then line B's step 100 of two
	// ranks, committed an hour later: a restore of two ranks takes 100,
	// by the rule of newest, not the highest number.
	stored := []checkpoint.Snapshot{
		{Step: 9000, WorldSize: 2, Line: "aaaaaaaaaaaaaaaa", Complete: true, Created: at, Committed: at},
		{Step: 100, WorldSize: 2, Line: "bbbbbbbbbbbbbbbb", Complete: true, Created: at.Add(time.Hour), Committed: at.Add(time.Hour)},
		{Step: 3, WorldSize: 4, Complete: true, Created: at, Committed: at},
		{Step: 5, WorldSize: 1, Complete: false, Created: at, Committed: at},
	}
	nothing := fmt.Errorf("checkpoint: restore rank 0: %w: all 2 steps failed", checkpoint.ErrNothingRestorable)
	tooBig := fmt.Errorf("%w: %w", nothing, checkpoint.ErrTooBig)
	noSpace := fmt.Errorf("%w: write: %w", nothing, syscall.ENOSPC)
	noneOfSize := fmt.Errorf("checkpoint: restore rank 0: %w", checkpoint.ErrNoCheckpoint)
	both := fmt.Errorf("%w (%w)", nothing, checkpoint.ErrNoCheckpoint)
	other := errors.New("access denied")
	for _, c := range []struct {
		name       string
		err        error
		worldSize  int
		stored     []checkpoint.Snapshot
		fresh      *FreshStart // Reason as its text, Hint by its text's prefix and the settings it names
		refuse     bool
		wantReason string
	}{
		{name: "restored", err: nil, worldSize: 1, stored: stored},
		{name: "nothing restorable", err: nothing, worldSize: 1,
			fresh: &FreshStart{Warn: true, Reason: setting.Textf("%s", nothing.Error()), Hint: setting.Textf("see each resume.fallback line")}},
		{name: "nothing restorable that fits the volume", err: tooBig, worldSize: 1,
			fresh: &FreshStart{Warn: true, Reason: setting.Textf("%s", tooBig.Error()), Hint: setting.Textf("make %s's volume larger", setting.Dir)}},
		{name: "nothing restorable for a full disk", err: noSpace, worldSize: 1,
			fresh: &FreshStart{Warn: true, Reason: setting.Textf("%s", noSpace.Error()), Hint: setting.Textf("make %s's volume larger", setting.Dir)}},
		{name: "nothing restorable wins over none of this size", err: both, worldSize: 1, stored: stored,
			fresh: &FreshStart{Warn: true, Reason: setting.Textf("%s", both.Error()), Hint: setting.Textf("see each resume.fallback line")}},
		{name: "none of this size, others stored", err: noneOfSize, worldSize: 1, stored: stored,
			fresh: &FreshStart{Warn: true, Reason: setting.Textf("no complete checkpoint for world size 1"), WorldSizes: "2 (newest step 100), 4 (newest step 3)",
				Hint: setting.Textf("run with the world size those steps were saved with (%s); or, if the format reshards on load, load every old rank's files with %s all; or start this world size fresh on purpose with %s never", setting.WorldSize, setting.AllRanks, setting.Restore)}},
		{name: "none of this size, only this size's incomplete step", err: noneOfSize, worldSize: 1, stored: stored[3:],
			fresh: &FreshStart{Reason: setting.Textf("%s", noneOfSize.Error())}},
		{name: "none at all", err: noneOfSize, worldSize: 2,
			fresh: &FreshStart{Reason: setting.Textf("%s", noneOfSize.Error())}},
		{name: "other sizes exclude this one", err: noneOfSize, worldSize: 2, stored: stored,
			fresh: &FreshStart{Warn: true, Reason: setting.Textf("no complete checkpoint for world size 2"), WorldSizes: "4 (newest step 3)",
				Hint: setting.Textf("run with the world size those steps were saved with (%s); or, if the format reshards on load, load every old rank's files with %s all; or start this world size fresh on purpose with %s never", setting.WorldSize, setting.AllRanks, setting.Restore)}},
		{name: "any other error fails the start", err: other, worldSize: 1, stored: stored, refuse: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			fresh, err := AfterRestore(c.err, c.worldSize, c.stored)
			if c.refuse {
				if fresh != nil || !errors.Is(err, c.err) {
					t.Fatalf("AfterRestore = %+v, %v; want the error %v", fresh, err, c.err)
				}
				return
			}
			if err != nil {
				t.Fatalf("AfterRestore error %v; want none", err)
			}
			switch {
			case c.fresh == nil && fresh != nil:
				t.Fatalf("fresh %+v; want none (restored)", fresh)
			case c.fresh == nil:
				return
			case fresh == nil:
				t.Fatalf("no fresh start; want %+v", c.fresh)
			}
			if fresh.Warn != c.fresh.Warn || fresh.Reason.String() != c.fresh.Reason.String() || fresh.WorldSizes != c.fresh.WorldSizes ||
				!strings.HasPrefix(fresh.Hint.String(), c.fresh.Hint.String()) || c.fresh.Hint.IsZero() != fresh.Hint.IsZero() ||
				!slices.Equal(fresh.Hint.Names(), c.fresh.Hint.Names()) {
				t.Errorf("fresh %+v; want %+v (hint by prefix)", fresh, c.fresh)
			}
		})
	}
}
