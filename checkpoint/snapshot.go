package checkpoint

import (
	"cmp"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/semaphore"

	"github.com/lifeboat-project/lifeboat/storage"
)

// ErrNoCheckpoint: the store holds no complete checkpoint (that could be
// restored). A trainer then starts from scratch.
var ErrNoCheckpoint = errors.New("no complete checkpoint")

// RankInfo describes one rank's manifest of a step: its highest revision.
type RankInfo struct {
	Rank       int
	Key        string
	Revision   int       // the revision of the manifest at Key
	Counter    bool      // the manifest is a counter checkpoint's (Target.Counter)
	Generation string    // the manifest's job-wide save generation, if any
	ID         string    // the manifest's id; empty when Err is set
	Created    time.Time // from the manifest; the object's ModTime when Err is set
	Bytes      int64
	Files      int
	Err        error // the manifest could not be read or is invalid
}

// Snapshot describes one step of a job of WorldSize ranks: for each rank,
// its highest revision.
type Snapshot struct {
	Step      int64
	WorldSize int
	Ranks     []RankInfo // the manifests present, by rank
	// Complete is true when every rank 0..WorldSize-1 has a manifest that
	// decodes and the ranks provably describe the same iteration of the
	// trainer: one rank, or no counter checkpoint among them, or the same
	// job-wide save generation on all (docs/FORMAT.md). Incomplete says
	// why not ("missing ranks 1,3"); it is empty when Complete.
	Complete   bool
	Incomplete string
	// PassedOver, when set, says why the ranks' highest revisions could
	// not be paired: the step is described (Ranks, Revision, Complete) by
	// each rank's highest named revision instead, and counter revisions
	// stored above them are not restored (docs/FORMAT.md).
	PassedOver string
	Created    time.Time // newest Created of the ranks, by the uploaders' clocks
	// Committed is the newest trusted commit time of the ranks: Created,
	// unless a created time lies in the future of the store's time of its
	// manifest (docs/FORMAT.md). The rule of newest orders lines by it.
	Committed time.Time
	// Line is the step's line of work (its rank 0's manifest's); empty for
	// the legacy line.
	Line     string
	Bytes    int64 // file bytes of all ranks
	Revision int   // highest revision of the ranks
	Counter  bool  // a rank's manifest is a counter checkpoint's
	// ChunksChecked: the chunks were listed (ListChecked), and
	// MissingChunks and WrongSizeChunks count, over the ranks' manifests,
	// the distinct chunks the store lacks or holds with another size than
	// a manifest says. List leaves all three zero.
	ChunksChecked   bool
	MissingChunks   int
	WrongSizeChunks int
}

// Restorable reports whether nothing found makes the snapshot impossible
// to restore: it is complete and, when its chunks were checked, none is
// missing or of the wrong size. (Whether the chunks' content is right,
// Verify with ReadData tells; whether it fits a volume, the restore.)
func (sn *Snapshot) Restorable() bool {
	return sn.Complete && sn.MissingChunks == 0 && sn.WrongSizeChunks == 0
}

// ErrNotPaired marks a step of several ranks whose snapshots cannot be
// shown to describe the same iteration of the trainer: a rank's is a
// counter checkpoint, numbered by that rank's lifeboat alone. Such a step
// is stored and listed, never complete; RestoreLatest falls back past it.
var ErrNotPaired = errors.New("the ranks' checkpoints cannot be paired")

// revisionKey is one revision's manifest key, as listed.
type revisionKey struct {
	revision int
	info     storage.ObjectInfo
}

// stepGroup is the manifest keys of one step for one world size.
type stepGroup struct {
	step      int64
	worldSize int
	keys      map[int]storage.ObjectInfo // by rank: its highest revision
	revisions map[int]int                // by rank: the revision in keys
	older     map[int][]revisionKey      // by rank: lower revisions, ascending
	// Set by readGroups, for each rank in keys: what the choosing of steps
	// keeps of its manifest, or why it could not be read (a data error:
	// ErrCorrupt or storage.ErrNotExist). The files and chunks are not
	// kept: full reads the manifest again, unless readGroups kept it
	// whole in decoded (small manifests, within keptBudget).
	manifests map[int]*manifestInfo
	errs      map[int]error
	decoded   map[int]*Manifest
	// Set by pairNamed when the ranks' highest revisions could not be
	// paired and their highest named ones were taken instead: by rank,
	// the counter revisions above the one in keys, ascending, and why the
	// highest revisions were passed over.
	above      map[int][]revisionKey
	passedOver string
	// torn maps the key of each manifest of the group that carries a
	// torn mark (MarkTorn) to the mark's object.
	torn map[string]storage.ObjectInfo
	// records are the group's completion records as listed (record.go);
	// rec, set by useRecord, is the one that holds for the listing: the
	// group is then judged by it, its manifests not read.
	records []stepRecord
	rec     *stepRecord
	// state is listingState as listed, before pairNamed changed keys.
	state string
}

// allRanks reports whether every rank has a manifest key.
func (g *stepGroup) allRanks() bool { return len(g.keys) == g.worldSize }

// revision is the highest revision of the group's ranks.
func (g *stepGroup) revision() int {
	rev := 0
	for _, r := range g.revisions {
		rev = max(rev, r)
	}
	return rev
}

// add records a listed manifest key of the group's step and world size.
func (g *stepGroup) add(rank, revision int, oi storage.ObjectInfo) {
	cur, ok := g.keys[rank]
	switch {
	case !ok:
		g.keys[rank], g.revisions[rank] = oi, revision
	case revision > g.revisions[rank]:
		g.older[rank] = append(g.older[rank], revisionKey{g.revisions[rank], cur})
		g.keys[rank], g.revisions[rank] = oi, revision
	default:
		g.older[rank] = append(g.older[rank], revisionKey{revision, oi})
	}
}

// committed is when the step was committed, as far as the store tells:
// the newest trusted commit time (commitTime) of its ranks' manifests,
// read by readGroups; a manifest that could not be read counts with its
// object's ModTime. now is the reader's clock, for a store that keeps no
// object times. The rule of newest (newestOrder) orders lines by it.
func (g *stepGroup) committed(now time.Time) time.Time {
	if g.rec != nil {
		return g.rec.at
	}
	var t time.Time
	for r, oi := range g.keys {
		if c, _ := commitTime(g.manifests[r], oi, now); c.After(t) {
			t = c
		}
	}
	return t
}

// verdict says whether a step whose manifests were read is complete.
type verdict int

const (
	verdictComplete  verdict = iota
	verdictMissing           // a rank has no manifest
	verdictBad               // a rank's manifest cannot be read or is invalid
	verdictNotPaired         // the ranks cannot be shown to be one iteration
)

// judge applies the consistency rule (docs/FORMAT.md) to a group read by
// readGroups: the verdict, and why it is not complete ("" when it is).
// A step is complete when every rank has a manifest, every manifest
// decodes, and either there is one rank, or no rank's manifest is a
// counter checkpoint, or all ranks carry the same non-empty generation.
// Named steps compare across ranks whatever their revisions: the trainer
// numbered them, so a rank whose step was committed again after more
// files appeared (a split save) is the same iteration at another
// revision. Counter checkpoints are numbered by each rank's lifeboat on
// its own and prove nothing.
func (g *stepGroup) judge() (verdict, string) {
	if g.rec != nil {
		return verdictComplete, "" // judged so by the writer of its record
	}
	var missing, bad, counters []int
	for r := range g.worldSize {
		switch _, ok := g.keys[r]; {
		case !ok:
			missing = append(missing, r)
		case g.manifests[r] == nil:
			bad = append(bad, r)
		case g.manifests[r].Counter:
			counters = append(counters, r)
		}
	}
	switch {
	case len(missing) > 0:
		return verdictMissing, "missing " + rankList(missing)
	case len(bad) > 0:
		return verdictBad, "bad manifest of " + rankList(bad)
	case g.worldSize == 1 || len(counters) == 0 || g.sameGeneration():
		return verdictComplete, ""
	}
	what := rankList(counters) + " is a counter checkpoint"
	if len(counters) > 1 {
		what = rankList(counters) + " are counter checkpoints"
	}
	for _, m := range g.manifests {
		if m.Generation != "" {
			what += " and the ranks' save generations differ"
			break
		}
	}
	return verdictNotPaired, what + ": ranks cannot be paired"
}

// sameGeneration reports whether every rank's manifest carries the same
// non-empty generation.
func (g *stepGroup) sameGeneration() bool {
	gen := g.manifests[0].Generation
	for r := 1; r < g.worldSize; r++ {
		if g.manifests[r].Generation != gen {
			return false
		}
	}
	return gen != ""
}

// rankList renders ranks for a reason: "rank 1", "ranks 1,3", and at
// most 8 of them ("ranks 0,1,...,7 and 992 more").
func rankList(ranks []int) string {
	const shown = 8
	var b strings.Builder
	b.WriteString("rank")
	if len(ranks) > 1 {
		b.WriteString("s")
	}
	for i, r := range ranks[:min(len(ranks), shown)] {
		if i == 0 {
			b.WriteString(" ")
		} else {
			b.WriteString(",")
		}
		b.WriteString(strconv.Itoa(r))
	}
	if len(ranks) > shown {
		fmt.Fprintf(&b, " and %d more", len(ranks)-shown)
	}
	return b.String()
}

// listSteps groups the manifest keys by (step, world size), in ascending
// order of step and then world size, each rank with its highest revision.
// Keys that are not manifest keys are ignored.
func listSteps(ctx context.Context, s storage.Store, prefix string) ([]*stepGroup, error) {
	groups, _, err := listStepsRecords(ctx, s, prefix)
	return groups, err
}

// listStepsRecords is listSteps that also returns the completion records
// listed of no group (orphans: their step's manifests of their world
// size are gone).
func listStepsRecords(ctx context.Context, s storage.Store, prefix string) ([]*stepGroup, []storage.ObjectInfo, error) {
	var groups []*stepGroup
	byKey := make(map[[2]int64]*stepGroup)
	torn := map[string]storage.ObjectInfo{} // by the manifest key it marks
	records := map[[2]int64][]stepRecord{}
	err := s.List(ctx, prefix, func(oi storage.ObjectInfo) error {
		if m, ok := parseTornKey(oi.Key); ok {
			torn[m] = oi
			return nil
		}
		if step, n, rec, ok := parseRecordKey(oi.Key); ok {
			rec.info = oi
			records[[2]int64{step, int64(n)}] = append(records[[2]int64{step, int64(n)}], rec)
			return nil
		}
		t, rev, ok := parseManifestKey(oi.Key)
		if !ok {
			return nil
		}
		g := byKey[[2]int64{t.Step, int64(t.WorldSize)}]
		if g == nil {
			g = &stepGroup{step: t.Step, worldSize: t.WorldSize, keys: make(map[int]storage.ObjectInfo),
				revisions: make(map[int]int), older: make(map[int][]revisionKey)}
			byKey[[2]int64{t.Step, int64(t.WorldSize)}] = g
			groups = append(groups, g)
		}
		g.add(t.Rank, rev, oi)
		return nil
	})
	if err != nil {
		return nil, nil, fmt.Errorf("checkpoint: list %s in %s: %w", prefix, s, err)
	}
	var orphans []storage.ObjectInfo
	for k, recs := range records {
		if g := byKey[k]; g != nil {
			g.records = recs
			continue
		}
		for _, rec := range recs {
			orphans = append(orphans, rec.info)
		}
	}
	slices.SortFunc(orphans, func(a, b storage.ObjectInfo) int { return cmp.Compare(a.Key, b.Key) })
	for _, g := range groups {
		for _, older := range g.older {
			slices.SortFunc(older, func(a, b revisionKey) int { return cmp.Compare(a.revision, b.revision) })
		}
		if len(torn) > 0 {
			g.markTorn(torn)
		}
		g.state = g.listingState()
	}
	slices.SortFunc(groups, func(a, b *stepGroup) int {
		return cmp.Or(cmp.Compare(a.step, b.step), cmp.Compare(a.worldSize, b.worldSize))
	})
	return groups, orphans, nil
}

// markTorn records which of g's manifests carry a torn mark, of the marks
// listed (torn, by the manifest key each marks).
func (g *stepGroup) markTorn(torn map[string]storage.ObjectInfo) {
	g.torn = map[string]storage.ObjectInfo{}
	mark := func(key string) {
		if oi, ok := torn[key]; ok {
			g.torn[key] = oi
		}
	}
	for r, oi := range g.keys {
		mark(oi.Key)
		for _, rk := range g.older[r] {
			mark(rk.info.Key)
		}
	}
}

// manifestReaders is how many manifests readGroups reads at a time, at
// most: fewer when they are large (readBudget).
const manifestReaders = 16

// Memory for manifests (docs/FORMAT.md, "Memory: what a reader holds").
// Choosing a step keeps a manifestInfo of each manifest, not its files and
// chunks. readBudget bounds the listed bytes of the manifests being read
// and decoded at once (a manifest listed larger than it, or of unknown
// size, is read alone), and keptBudget those kept decoded after reading,
// so that restoring, checking or pruning a small store reads no manifest
// twice.
const readBudget = MaxManifestSize

// keptBudget is a variable only so that tests can have every manifest
// read again.
var keptBudget int64 = 16 << 20

// manifestInfo is what listing and choosing steps keep of a manifest: what
// the rules of completeness and of newest, and ls, look at.
type manifestInfo struct {
	ID         string
	Line       string
	Generation string
	Counter    bool
	Created    time.Time
	Bytes      int64 // the files' total size
	Files      int
}

// info is what listing and choosing keep of m.
func (m *Manifest) info() *manifestInfo {
	return &manifestInfo{ID: m.ID, Line: m.Line, Generation: m.Generation, Counter: m.Counter, Created: m.Created, Bytes: m.Bytes(), Files: len(m.Files)}
}

// readGroups reads the highest revision of every rank of groups, several
// at a time within readBudget, into each group's manifests (and, within
// keptBudget, decoded), or its errs for a manifest that is invalid or
// vanished. Any other failure (the store, after retries; ctx) is
// returned.
func readGroups(ctx context.Context, s storage.Store, groups []*stepGroup) error {
	type job struct {
		g    *stepGroup
		rank int
	}
	type result struct {
		job
		info *manifestInfo
		m    *Manifest // when kept decoded
		err  error
	}
	var jobs []job
	for _, g := range groups {
		g.manifests, g.errs, g.decoded = make(map[int]*manifestInfo, len(g.keys)), map[int]error{}, map[int]*Manifest{}
		for r := range g.keys {
			jobs = append(jobs, job{g, r})
		}
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	next := make(chan job)
	results := make(chan result)
	reading := semaphore.NewWeighted(readBudget)
	var kept atomic.Int64
	var wg sync.WaitGroup
	for range min(manifestReaders, len(jobs)) {
		wg.Go(func() {
			for j := range next {
				oi := j.g.keys[j.rank]
				weight := oi.Size
				if weight <= 0 || weight > readBudget {
					weight = readBudget
				}
				if err := reading.Acquire(ctx, weight); err != nil {
					results <- result{job: j, err: err}
					continue
				}
				m, err := j.g.readManifest(ctx, s, oi.Key)
				reading.Release(weight)
				if err != nil && !errors.Is(err, ErrCorrupt) && !errors.Is(err, storage.ErrNotExist) {
					cancel(err)
				}
				res := result{job: j, err: err}
				if err == nil {
					res.info = m.info()
					if oi.Size > 0 && kept.Add(oi.Size) <= keptBudget {
						res.m = m
					}
				}
				results <- res
			}
		})
	}
	go func() {
		defer close(next)
		for _, j := range jobs {
			select {
			case next <- j:
			case <-ctx.Done():
				return
			}
		}
	}()
	go func() {
		wg.Wait()
		close(results)
	}()
	for r := range results {
		switch {
		case r.err != nil:
			r.g.errs[r.rank] = r.err
		case r.m != nil:
			r.g.decoded[r.rank] = r.m
			fallthrough
		default:
			r.g.manifests[r.rank] = r.info
		}
	}
	if err := context.Cause(ctx); err != nil {
		return err
	}
	for _, g := range groups {
		if v, why := g.judge(); v == verdictNotPaired {
			if err := g.pairNamed(ctx, s, why); err != nil {
				return err
			}
		}
	}
	return nil
}

// full returns rank's whole manifest of g, whose manifests readGroups
// read: the one it kept decoded, or the manifest read again. One that
// vanished since, or no longer has the id read before, is a data error
// (storage.ErrNotExist, ErrCorrupt).
func (g *stepGroup) full(ctx context.Context, s storage.Store, rank int) (*Manifest, error) {
	if m := g.decoded[rank]; m != nil {
		return m, nil
	}
	key := g.keys[rank].Key
	m, err := g.readManifest(ctx, s, key)
	if err != nil {
		return nil, err
	}
	if want := g.manifests[rank]; want == nil || m.ID != want.ID {
		return nil, fmt.Errorf("checkpoint: manifest %s changed since it was read: %w", key, ErrCorrupt)
	}
	return m, nil
}

// readManifest reads the manifest at key, one of g's; a revision marked
// torn is not read: ErrTorn.
func (g *stepGroup) readManifest(ctx context.Context, s storage.Store, key string) (*Manifest, error) {
	if _, torn := g.torn[key]; torn {
		return nil, fmt.Errorf("checkpoint: manifest %s: %w", key, ErrTorn)
	}
	return readManifest(ctx, s, key)
}

// pairNamed makes a step whose ranks' highest revisions cannot be paired
// (a rank's is a counter checkpoint: each rank's lifeboat numbered its
// SIGTERM save alone) complete with each rank's highest named revision,
// when every rank has one that decodes: the trainer numbered those, so
// they are one iteration whatever their revisions (judge). The counter
// revisions above them stay in the store and prove nothing. why is the
// verdict on the highest revisions. It reads the lower revisions of the
// ranks whose highest is a counter one, highest first, until a named one;
// a revision that does not decode or vanished is passed over, and any
// other failure (the store's, ctx's) returned. Without a named revision
// of every rank, g stays as it was.
func (g *stepGroup) pairNamed(ctx context.Context, s storage.Store, why string) error {
	type pick struct {
		at int // index in older
		m  *manifestInfo
	}
	picks := map[int]pick{}
	for r := range g.worldSize {
		if !g.manifests[r].Counter {
			continue
		}
		older := g.older[r]
		for i := len(older) - 1; i >= 0; i-- {
			m, err := g.readManifest(ctx, s, older[i].info.Key)
			if err != nil && !errors.Is(err, ErrCorrupt) && !errors.Is(err, storage.ErrNotExist) {
				return err
			}
			if err == nil && !m.Counter {
				picks[r] = pick{i, m.info()}
				break
			}
		}
		if _, ok := picks[r]; !ok {
			return nil
		}
	}
	g.above = map[int][]revisionKey{}
	for r, p := range picks {
		older := g.older[r]
		g.above[r] = append(slices.Clone(older[p.at+1:]), revisionKey{g.revisions[r], g.keys[r]})
		g.keys[r], g.revisions[r], g.manifests[r] = older[p.at].info, older[p.at].revision, p.m
		delete(g.decoded, r) // read again when needed: its size counts in no budget
		g.older[r] = older[:p.at]
	}
	g.passedOver = why
	return nil
}

// Latest returns the newest complete step of worldSize ranks (worldSize
// 0: any world size), or an error wrapping ErrNoCheckpoint. Newest is by
// the rule of docs/FORMAT.md: the highest step of the line of work
// committed last (newestOrder). It lists snapshots/ one level deep (step
// folders and completion records), then the folder of each step it
// looks at, newest first, and reads the manifests of a step only where
// no record holds for its folder's listing (stepChooser). Restore checks
// the chunks.
func Latest(ctx context.Context, s storage.Store, worldSize int) (int64, error) {
	c, err := newStepChooser(ctx, s, time.Now(), func(n int) bool { return worldSize == 0 || n == worldSize }, nil)
	if err != nil {
		return 0, err
	}
	for {
		g, err := c.next(ctx)
		if err != nil {
			return 0, err
		}
		if g == nil {
			break
		}
		if v, _ := g.judge(); v == verdictComplete {
			return g.step, nil
		}
	}
	return 0, fmt.Errorf("checkpoint: latest in %s for world size %d: %w", s, worldSize, ErrNoCheckpoint)
}

// List describes every step in the store, in ascending order of step (and
// world size), reading each rank's highest revision (for lifeboat ls). A
// manifest that cannot be decoded is reported in its RankInfo.Err, not as
// List's error. It reads the manifests only; ListChecked also checks the
// chunks.
func List(ctx context.Context, s storage.Store) ([]Snapshot, error) {
	groups, err := readSteps(ctx, s)
	if err != nil {
		return nil, err
	}
	return describe(ctx, s, groups, nil, time.Now())
}

// ListChecked is List that also lists every chunk in the store once and
// counts, for each step, the chunks its manifests name that are missing or
// stored with another size (Snapshot.MissingChunks, WrongSizeChunks). It
// costs one listing of chunks/ more than List, memory for each chunk's
// size, and reading again each manifest readGroups did not keep decoded.
func ListChecked(ctx context.Context, s storage.Store) ([]Snapshot, error) {
	groups, err := readSteps(ctx, s)
	if err != nil {
		return nil, err
	}
	// The chunks are listed after the manifests: a manifest's chunks were
	// stored before it was committed, so the listing finds each one that
	// was not removed since.
	stored, err := listChunks(ctx, s)
	if err != nil {
		return nil, err
	}
	return describe(ctx, s, groups, stored, time.Now())
}

// readSteps lists every step and reads each rank's highest manifest.
func readSteps(ctx context.Context, s storage.Store) ([]*stepGroup, error) {
	groups, err := listSteps(ctx, s, snapshotsPrefix)
	if err != nil {
		return nil, err
	}
	if err := readGroups(ctx, s, groups); err != nil {
		return nil, fmt.Errorf("checkpoint: read manifests in %s: %w", s, err)
	}
	return groups, nil
}

// describe is the Snapshot of each of groups, whose manifests readGroups
// read; with stored (a listing of the chunks; nil: none) it counts each
// step's chunks that are missing or of another size, reading the
// manifests of one rank at a time (stepGroup.full). A manifest that can no
// longer be read then counts as one that could not be read at all; any
// other failure to read it is returned.
func describe(ctx context.Context, s storage.Store, groups []*stepGroup, stored chunkSizes, now time.Time) ([]Snapshot, error) {
	checkChunks := stored != nil
	out := make([]Snapshot, 0, len(groups))
	for _, g := range groups {
		var check *chunkCheck
		if checkChunks {
			check = stored.checker()
			for r := range g.worldSize {
				if g.manifests[r] == nil {
					continue
				}
				m, err := g.full(ctx, s, r)
				switch {
				case errors.Is(err, ErrCorrupt) || errors.Is(err, storage.ErrNotExist):
					delete(g.manifests, r)
					g.errs[r] = err
					continue
				case err != nil:
					return nil, fmt.Errorf("checkpoint: read manifests in %s: %w", s, err)
				}
				check.add(m)
			}
		}
		snap := Snapshot{Step: g.step, WorldSize: g.worldSize, ChunksChecked: checkChunks, Line: g.line(), Committed: g.committed(now)}
		for r := range g.worldSize {
			oi, ok := g.keys[r]
			if !ok {
				continue
			}
			ri := RankInfo{Rank: r, Key: oi.Key, Revision: g.revisions[r], Created: oi.ModTime}
			if m := g.manifests[r]; m != nil {
				ri.ID, ri.Created, ri.Bytes, ri.Files, ri.Counter, ri.Generation = m.ID, m.Created, m.Bytes, m.Files, m.Counter, m.Generation
			} else {
				ri.Err = g.errs[r]
			}
			snap.Revision = max(snap.Revision, ri.Revision)
			snap.Counter = snap.Counter || ri.Counter
			snap.Ranks = append(snap.Ranks, ri)
			snap.Bytes += ri.Bytes
			if ri.Created.After(snap.Created) {
				snap.Created = ri.Created
			}
		}
		v, why := g.judge()
		snap.Complete, snap.Incomplete, snap.PassedOver = v == verdictComplete, why, g.passedOver
		if checkChunks {
			snap.MissingChunks, snap.WrongSizeChunks = check.missing, check.wrongSize
		}
		out = append(out, snap)
	}
	return out, nil
}

// chunkSizes maps each stored chunk's SHA-256 to its stored size.
type chunkSizes map[[32]byte]int64

// listChunks lists chunks/ once.
func listChunks(ctx context.Context, s storage.Store) (chunkSizes, error) {
	sizes := chunkSizes{}
	err := s.List(ctx, chunksPrefix, func(oi storage.ObjectInfo) error {
		if sum, ok := parseChunkKey(oi.Key); ok {
			sizes[sumKey(sum)] = oi.Size
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("checkpoint: list %s in %s: %w", chunksPrefix, s, err)
	}
	return sizes, nil
}

// chunkCheck counts, over the manifests added to it, the distinct chunks
// that are not stored and those stored with another size than a manifest
// says. It remembers only those chunks, not the ones found whole.
type chunkCheck struct {
	stored             chunkSizes
	bad                map[[32]byte]bool
	missing, wrongSize int
}

// has reports whether the chunk k was listed.
func (c chunkSizes) has(k [32]byte) bool {
	_, ok := c[k]
	return ok
}

// checker starts a chunkCheck against c.
func (c chunkSizes) checker() *chunkCheck {
	return &chunkCheck{stored: c, bad: map[[32]byte]bool{}}
}

// add counts m's chunks.
func (c *chunkCheck) add(m *Manifest) {
	for _, f := range m.Files {
		for _, ch := range f.Chunks {
			k := sumKey(ch.SHA256)
			size, ok := c.stored[k]
			if ok && size == ch.Size || c.bad[k] {
				continue
			}
			c.bad[k] = true
			if !ok {
				c.missing++
			} else {
				c.wrongSize++
			}
		}
	}
}

// sumKey is the 32 bytes of a hex SHA-256 that isHexSHA256 accepted.
func sumKey(sum string) [32]byte {
	var k [32]byte
	_, _ = hex.Decode(k[:], []byte(sum))
	return k
}

// readManifest gets, decodes and validates the manifest at key, and checks
// that it names the step, rank, world size and revision its key does. Invalid data
// wraps ErrCorrupt; a missing key wraps storage.ErrNotExist.
func readManifest(ctx context.Context, s storage.Store, key string) (*Manifest, error) {
	rc, err := s.Get(ctx, key, 0, -1)
	if err != nil {
		return nil, fmt.Errorf("checkpoint: read manifest %s: %w", key, err)
	}
	defer rc.Close()
	m, err := readManifestFrom(rc)
	if err != nil {
		return nil, fmt.Errorf("checkpoint: read manifest %s: %w", key, err)
	}
	if t, rev, ok := parseManifestKey(key); !ok || m.Step != t.Step || m.Rank != t.Rank || m.WorldSize != t.WorldSize || m.Revision != rev {
		return nil, fmt.Errorf("checkpoint: read manifest %s: it says step %d rank %d of %d revision %d: %w", key, m.Step, m.Rank, m.WorldSize, m.Revision, ErrCorrupt)
	}
	return m, nil
}
