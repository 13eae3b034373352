package checkpoint

import (
	"cmp"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/lifeboat-project/lifeboat/storage"
)

// A line of work is the chain of checkpoints one training run and the runs
// that resumed it wrote. A run continues the line of the checkpoint it
// restored, or starts a new line (NewLine) on a fresh start, and records
// its line in every manifest it commits (Manifest.Line). Step numbers
// compare only within a line: another line's step 9000 is another
// experiment's, not progress of this one. docs/FORMAT.md states the rule;
// orderNewest implements it for Latest, RestoreLatest, List's Newest and
// Prune alike.

// LegacyLine is the line of the manifests written before lines existed
// (no "line" field): they form one line of their own.
const LegacyLine = ""

// ClockAllowance is how far a manifest's created time, written by the
// uploading pod's clock, may lie after the store's own time of the
// manifest object (or, for a store that keeps none, after the reader's
// clock) before it is not trusted: the store's time is used instead and
// the manifest is logged (checkpoint.future_created).
const ClockAllowance = 2 * time.Minute

// NewLine returns the id of a new line of work: 16 random lower-case hex
// digits.
func NewLine() string { return newID() }

// CheckLine reports a line id no manifest may carry: anything but empty
// (the legacy line) or 16 lower-case hex digits.
func CheckLine(line string) error {
	if line != "" && (len(line) != 16 || !isHex(line)) {
		return fmt.Errorf("line %q is not 16 lower-case hex digits", line)
	}
	return nil
}

// ShortLine renders a line for people: its id, or "legacy".
func ShortLine(line string) string {
	if line == LegacyLine {
		return "legacy"
	}
	return line
}

// commitTime is when the manifest m, stored as oi, was committed, as far
// as it can be trusted: m.Created, unless it lies more than ClockAllowance
// after the store's time of the object (oi.ModTime) or, when the store
// gives none, after now; then the store's time (or now). future says the
// created time was not trusted. A manifest that could not be read (m nil)
// counts with its object's time.
func commitTime(m *manifestInfo, oi storage.ObjectInfo, now time.Time) (t time.Time, future bool) {
	if m == nil {
		return oi.ModTime, false
	}
	ref := oi.ModTime
	if ref.IsZero() {
		ref = now
	}
	if m.Created.After(ref.Add(ClockAllowance)) {
		return ref, true
	}
	return m.Created, false
}

// orderKey is what the rule of newest looks at in a step of a world size.
type orderKey struct {
	line      string
	step      int64
	worldSize int
	at        time.Time // trusted commit time (commitTime) of its newest rank
	complete  bool
}

// newestOrder returns the indexes of keys newest first, by the rule of
// docs/FORMAT.md:
//
//   - Lines are ordered by when they were last committed: the newest
//     trusted commit time of their complete steps (of any world size), or
//     of any of their steps when none is complete.
//   - Within a line, the higher step is newer, whatever the times; equal
//     steps by commit time, then the larger world size. Step numbers of
//     one line count the same run's progress; clocks may be wrong.
//   - Within the legacy line (manifests without a line, which may hold
//     several runs), by commit time, then step, as before lines.
func newestOrder(keys []orderKey) []int {
	lineAt := map[string]time.Time{}
	lineComplete := map[string]bool{}
	for _, k := range keys {
		switch {
		case k.complete && !lineComplete[k.line]:
			lineComplete[k.line], lineAt[k.line] = true, k.at
		case k.complete == lineComplete[k.line] && k.at.After(lineAt[k.line]):
			lineAt[k.line] = k.at
		}
	}
	idx := make([]int, len(keys))
	for i := range idx {
		idx[i] = i
	}
	slices.SortStableFunc(idx, func(i, j int) int {
		a, b := keys[i], keys[j]
		if a.line != b.line {
			return cmp.Or(lineAt[b.line].Compare(lineAt[a.line]), cmp.Compare(b.line, a.line))
		}
		if a.line == LegacyLine {
			return cmp.Or(b.at.Compare(a.at), cmp.Compare(b.step, a.step), cmp.Compare(b.worldSize, a.worldSize))
		}
		return cmp.Or(cmp.Compare(b.step, a.step), b.at.Compare(a.at), cmp.Compare(b.worldSize, a.worldSize))
	})
	return idx
}

// line is the group's line of work: its rank 0's manifest's (each rank of
// a job that started fresh may have drawn its own line; rank 0's, whose
// lifeboat prunes, names the step's), or the lowest rank's that decodes.
func (g *stepGroup) line() string {
	if g.rec != nil {
		return g.rec.line
	}
	for r := range g.worldSize {
		if m := g.manifests[r]; m != nil {
			return m.Line
		}
	}
	return LegacyLine
}

// orderKey is g's key for the rule, its manifests read; now is the
// reader's clock, for stores that keep no object times.
func (g *stepGroup) orderKey(now time.Time) orderKey {
	v, _ := g.judge()
	return orderKey{line: g.line(), step: g.step, worldSize: g.worldSize, at: g.committed(now), complete: v == verdictComplete}
}

// orderGroups sorts groups, their manifests read, newest first by the
// rule (newestOrder).
func orderGroups(groups []*stepGroup, now time.Time) {
	keys := make([]orderKey, len(groups))
	for i, g := range groups {
		keys[i] = g.orderKey(now)
	}
	sorted := make([]*stepGroup, len(groups))
	for i, j := range newestOrder(keys) {
		sorted[i] = groups[j]
	}
	copy(groups, sorted)
}

// logFutureCreated logs, at WARN and once per manifest in the process,
// each manifest of groups whose created time is not trusted (commitTime).
func logFutureCreated(log *slog.Logger, groups []*stepGroup, now time.Time) {
	for _, g := range groups {
		for r, oi := range g.keys {
			m := g.manifests[r]
			if _, future := commitTime(m, oi, now); !future {
				continue
			}
			if _, seen := futureLogged.LoadOrStore(oi.Key+"\x00"+m.ID, true); seen {
				continue
			}
			args := []any{"manifest", oi.Key, "created", m.Created.UTC().Format(time.RFC3339Nano)}
			if !oi.ModTime.IsZero() {
				args = append(args, "stored", oi.ModTime.UTC().Format(time.RFC3339Nano))
			}
			log.Warn("checkpoint.future_created", append(args, "allowance", ClockAllowance.String(),
				"effect", "its created time is not trusted: the store's time of the manifest is used; check the clock of the pod that committed it")...)
		}
	}
}

// futureLogged holds the manifests (key and id) logged as from the future.
var futureLogged sync.Map

// Newest returns the newest complete snapshot of worldSize (0: any) among
// snaps, as List returned them, by the rule Latest and RestoreLatest
// follow; nil when none is complete. It is the one definition of the
// newest step over a listing: doctor's latest complete step, the step a
// start with --restore never leaves beside it, the store's newest that a
// local checkpoint must be newer than (resume.NewerLocal) and the newest
// of each other world size (NewestByWorldSize) are all its answer.
func Newest(snaps []Snapshot, worldSize int) *Snapshot {
	for _, sn := range newestComplete(snaps) {
		if worldSize == 0 || sn.WorldSize == worldSize {
			return sn
		}
	}
	return nil
}

// NewestByWorldSize returns Newest(snaps, n) for each world size n that
// has a complete step among snaps, in ascending order of n: what a
// restore of each world size would take first.
func NewestByWorldSize(snaps []Snapshot) []*Snapshot {
	var out []*Snapshot
	for _, sn := range newestComplete(snaps) {
		if !slices.ContainsFunc(out, func(o *Snapshot) bool { return o.WorldSize == sn.WorldSize }) {
			out = append(out, sn)
		}
	}
	slices.SortFunc(out, func(a, b *Snapshot) int { return cmp.Compare(a.WorldSize, b.WorldSize) })
	return out
}

// newestComplete returns the complete snapshots of snaps, newest first by
// the rule (newestOrder).
func newestComplete(snaps []Snapshot) []*Snapshot {
	keys := make([]orderKey, len(snaps))
	for i, sn := range snaps {
		keys[i] = orderKey{line: sn.Line, step: sn.Step, worldSize: sn.WorldSize, at: sn.Committed, complete: sn.Complete}
	}
	var out []*Snapshot
	for _, i := range newestOrder(keys) {
		if snaps[i].Complete {
			out = append(out, &snaps[i])
		}
	}
	return out
}

// StepRef names a step of one world size in one line of work.
type StepRef struct {
	Line      string
	Step      int64
	WorldSize int
}

func (r StepRef) String() string {
	return fmt.Sprintf("step %d of world size %d, line %s", r.Step, r.WorldSize, ShortLine(r.Line))
}

// LineScope is what a run's own prune may delete: what its line of work
// has superseded. Prune with a LineScope (PruneOptions.Line) considers
// only the steps of Line and WorldSize, and those of From's line and world
// size at or below From's step (the work the run continued from, when it
// came from another line: a legacy step, or every rank of another world
// size); it never deletes a step of Skip, nor counts it toward Keep.
type LineScope struct {
	Line      string // the run's line, written into its manifests
	WorldSize int    // the run's world size
	// From is the checkpoint the run restored; nil on a fresh start.
	From *StepRef
	// Skip lists the steps the run could not restore (too big for its
	// volume, for example): another pod may.
	Skip []StepRef
}

// Continue returns the scope of a run of worldSize that restored res (nil:
// a fresh start). It continues res's line, or, for a legacy checkpoint or
// a fresh start, starts a new one (NewLine). The steps res fell back past
// are its Skip.
func Continue(res *RestoreResult, worldSize int) LineScope {
	if res == nil || res.Manifest == nil {
		return ContinueFrom(nil, worldSize, nil)
	}
	return ContinueFrom(&StepRef{Line: res.Line, Step: res.Step, WorldSize: res.Manifest.WorldSize}, worldSize, skipped(res.Fallbacks))
}

// ContinueFrom returns the scope of a run of worldSize that resumes from
// (nil: a fresh start), with the steps it could not restore: from's line,
// or a new line when from is nil or of the legacy line.
func ContinueFrom(from *StepRef, worldSize int, skip []StepRef) LineScope {
	sc := LineScope{WorldSize: worldSize, From: from, Skip: skip}
	if from != nil && from.Line != LegacyLine {
		sc.Line = from.Line
	} else {
		sc.Line = NewLine()
	}
	return sc
}

func skipped(fbs []Fallback) []StepRef {
	var out []StepRef
	for _, f := range fbs {
		out = append(out, StepRef{Line: f.Line, Step: f.Step, WorldSize: f.WorldSize})
	}
	return out
}

// owns reports whether g is the scope's to prune: a step of its own line
// and world size, or one its run continued from.
func (sc *LineScope) owns(g *stepGroup) bool {
	ref := StepRef{Line: g.line(), Step: g.step, WorldSize: g.worldSize}
	if slices.Contains(sc.Skip, ref) {
		return false
	}
	if ref.Line == sc.Line && ref.WorldSize == sc.WorldSize {
		return true
	}
	f := sc.From
	return f != nil && ref.Line == f.Line && ref.WorldSize == f.WorldSize && ref.Step <= f.Step
}

// LastInLine returns the highest complete step of the scope's line and
// world size among snaps, and the step it continued from; -1 when there
// is neither. A counter checkpoint of the run follows it.
func (sc *LineScope) LastInLine(snaps []Snapshot) int64 {
	last := int64(-1)
	if sc.From != nil {
		last = sc.From.Step
	}
	for _, sn := range snaps {
		if sn.Complete && sn.Line == sc.Line && sn.WorldSize == sc.WorldSize {
			last = max(last, sn.Step)
		}
	}
	return last
}
