package checkpoint

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"time"

	"github.com/lifeboat-project/lifeboat/storage"
)

// folderListings is how many step folders without a completion record
// a stepChooser lists one by one; with more (a store written before
// records, or many steps whose records are missing) it lists all of
// snapshots/ at once instead, as readers did before records.
const folderListings = 4

// stepChooser hands out the steps whose ranks are all present, newest
// first by the rule (newestOrder), over the steps of every world size,
// for Latest and RestoreLatest. It starts from one listing of snapshots/
// one level deep (storage.ListDirs): the step folders and the completion
// records beside them. A folder without a record is listed and its
// steps read in full at once (so is one whose records are all of world
// sizes the caller does not take). A recorded step is ordered by its record's
// line and commit time, and its folder is listed only when it comes
// first: then a record whose state is that listing's own makes it
// complete without its manifests read (useRecord), and a step with none
// that holds is read in full and ordered again by what its manifests
// say. So a record never alone makes a step complete: the step handed
// out was judged on its folder's listing. Records of the steps not
// handed out order the lines of work only.
//
// With heal set (a restore), a step read in full that is complete and has
// no record that holds for its listing gets one (putRecord): a step whose
// record writer died after its commit, or left the record to a rank that
// listed before every manifest was visible, is read in full once, not at
// every restore.
type stepChooser struct {
	s    storage.Store
	now  time.Time
	want func(worldSize int) bool // the world sizes the caller takes
	heal *slog.Logger             // nil: write no record
	// groups are the steps listed, each judged by its record or its
	// manifests read; pending are the records of the steps whose folders
	// are not listed yet, by step.
	groups  []*stepGroup
	pending map[int64][]pendingRecord
	handed  map[*stepGroup]bool
	// records are every record the first listing gave, by step: a
	// folder's listing takes them from here, not from a listing of its
	// own (which would hold them beside the manifests).
	records map[int64][]pendingRecord
}

// pendingRecord is a completion record of a step whose folder is not
// listed yet.
type pendingRecord struct {
	worldSize int
	rec       stepRecord
}

// newStepChooser lists the store's steps for the world sizes want takes;
// heal (nil: none) is the logger of the records it writes and of the
// manifests it reads whose created time is not trusted
// (logFutureCreated).
func newStepChooser(ctx context.Context, s storage.Store, now time.Time, want func(worldSize int) bool, heal *slog.Logger) (*stepChooser, error) {
	c := &stepChooser{s: s, now: now, want: want, heal: heal, pending: map[int64][]pendingRecord{}, handed: map[*stepGroup]bool{}, records: map[int64][]pendingRecord{}}
	var folders []int64
	err := storage.ListDirs(ctx, s, snapshotsPrefix, func(oi storage.ObjectInfo) error {
		if step, ok := parseStepFolder(oi.Key); ok {
			folders = append(folders, step)
		} else if step, n, rec, ok := parseRecordKey(oi.Key); ok {
			rec.info = oi
			c.records[step] = append(c.records[step], pendingRecord{n, rec})
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("checkpoint: list %s in %s: %w", snapshotsPrefix, s, err)
	}
	maps.Copy(c.pending, c.records)
	// Folders without a record of a world size the caller takes are
	// listed now: they may hold such a step whose record is missing.
	var bare []int64
	for _, step := range folders {
		if !slices.ContainsFunc(c.pending[step], func(pr pendingRecord) bool { return want(pr.worldSize) }) {
			bare = append(bare, step)
			delete(c.pending, step)
		}
	}
	for step := range c.pending {
		if !slices.Contains(folders, step) {
			delete(c.pending, step) // a record without its folder: never a step
		}
	}
	if len(bare) > folderListings {
		// List everything once: every folder's listing, records beside.
		groups, err := listSteps(ctx, s, snapshotsPrefix)
		if err != nil {
			return nil, err
		}
		clear(c.pending)
		return c, c.add(ctx, groups)
	}
	var groups []*stepGroup
	for _, step := range bare {
		gs, err := c.listFolder(ctx, step)
		if err != nil {
			return nil, err
		}
		groups = append(groups, gs...)
	}
	return c, c.add(ctx, groups)
}

// listFolder lists step's folder and gives each of its groups the records
// of its world size that the first listing found.
func (c *stepChooser) listFolder(ctx context.Context, step int64) ([]*stepGroup, error) {
	groups, err := listSteps(ctx, c.s, stepPrefix(step))
	if err != nil {
		return nil, err
	}
	for _, g := range groups {
		for _, pr := range c.records[step] {
			if pr.worldSize == g.worldSize {
				g.records = append(g.records, pr.rec)
			}
		}
	}
	return groups, nil
}

// add judges groups, as listed with their records, by the record that
// holds for the listing or, without one, by their manifests read; the
// steps whose ranks are not all present are dropped.
func (c *stepChooser) add(ctx context.Context, groups []*stepGroup) error {
	groups = slices.DeleteFunc(groups, func(g *stepGroup) bool { return !g.allRanks() })
	var unread []*stepGroup
	for _, g := range groups {
		if !g.useRecord() {
			unread = append(unread, g)
		}
	}
	if err := readGroups(ctx, c.s, unread); err != nil {
		return fmt.Errorf("checkpoint: read manifests in %s: %w", c.s, err)
	}
	if c.heal != nil {
		logFutureCreated(c.heal, unread, c.now)
		for _, g := range unread {
			rk, err := putRecord(ctx, c.s, g)
			switch {
			case err != nil && ctx.Err() == nil:
				c.heal.Warn("checkpoint.record_failed", "step", g.step, "world_size", g.worldSize, "err", err,
					"effect", "the step has no completion record: a restore reads every rank's manifest of it")
			case rk != "":
				c.heal.Debug("checkpoint.step_recorded", "step", g.step, "world_size", g.worldSize, "record", rk)
			}
		}
	}
	c.groups = append(c.groups, groups...)
	return nil
}

// next returns the newest step not handed out yet of a world size the
// chooser takes, whose ranks are all present and which was judged
// (judge tells whether it is complete), or nil when there is none. It
// lists the folder of a recorded step when that step comes first.
func (c *stepChooser) next(ctx context.Context) (*stepGroup, error) {
	for {
		type entry struct {
			g    *stepGroup // nil: a pending record's step
			step int64
		}
		var entries []entry
		var keys []orderKey
		for _, g := range c.groups {
			entries = append(entries, entry{g: g, step: g.step})
			keys = append(keys, g.orderKey(c.now))
		}
		for step, recs := range c.pending {
			for _, pr := range recs {
				entries = append(entries, entry{step: step})
				keys = append(keys, orderKey{line: pr.rec.line, step: step, worldSize: pr.worldSize, at: pr.rec.at, complete: true})
			}
		}
		var first *entry
		for _, i := range newestOrder(keys) {
			if !c.want(keys[i].worldSize) || entries[i].g != nil && c.handed[entries[i].g] {
				continue
			}
			first = &entries[i]
			break
		}
		switch {
		case first == nil:
			return nil, nil
		case first.g != nil:
			c.handed[first.g] = true
			return first.g, nil
		}
		// A recorded step comes first: list its folder.
		delete(c.pending, first.step)
		groups, err := c.listFolder(ctx, first.step)
		if err != nil {
			return nil, err
		}
		if err := c.add(ctx, groups); err != nil {
			return nil, err
		}
	}
}
