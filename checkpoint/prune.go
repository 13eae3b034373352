package checkpoint

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/lifeboat-project/lifeboat/storage"
)

// PruneOptions tune Prune.
type PruneOptions struct {
	// Keep is how many of the newest restorable steps to keep (at least
	// 1): complete, every rank's manifest decodes, and every chunk they
	// name is stored with the size they say. Newest is by the rule of
	// docs/FORMAT.md (newestOrder): lines of work by when they were last
	// committed, steps within a line by number. A step newer than the
	// oldest kept one that is not kept itself stays too, except an
	// incomplete one (a rank has no manifest) committed before the safety
	// window: that upload is over and the step will never be restored.
	Keep int
	// Line, when set, limits the prune to what one run's line of work has
	// superseded (the automatic prune of lifeboat run and sidecar): only
	// the steps LineScope owns are considered, kept or deleted; a step of
	// another line or world size, or one the run could not restore, is
	// never touched. Nil: every step (lifeboat prune).
	Line *LineScope
	// SafetyWindow: a chunk no remaining manifest references is deleted
	// only when it is older than this, and an incomplete step only when
	// its last rank's manifest is. It must be at least the Uploader's (an
	// upload's chunks are referenced by no manifest until it commits, and
	// a stored chunk may be reused while younger than 3/4 of the
	// Uploader's window): a shorter one is safe only while nothing uploads
	// to the store. Default DefaultSafetyWindow.
	SafetyWindow time.Duration
	Clock        Clock // default time.Now
	DryRun       bool  // report what would be deleted, delete nothing
	Log          *slog.Logger
}

// withDefaults fills in what the caller left zero: the safety window, the
// clock and a logger that discards.
func (o PruneOptions) withDefaults() PruneOptions {
	o.SafetyWindow = safetyWindow(o.SafetyWindow)
	o.Clock = orDefaultClock(o.Clock)
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	return o
}

// PruneResult reports what Prune deleted (or, with DryRun, would delete).
type PruneResult struct {
	Kept []int64 // restorable steps kept, newest (committed last) first
	// Unrestorable lists the complete steps newer than the oldest kept one
	// that cannot be restored (a manifest that does not decode, chunks
	// missing or of the wrong size), newest first: they count toward no
	// Keep and are kept, like any step newer than a kept one. Older ones
	// are deleted with the other old steps.
	Unrestorable []int64
	// Abandoned lists the incomplete steps (a rank has no manifest) newer
	// than the oldest kept one whose last manifest was committed before
	// the safety window, newest first: they are deleted (and are in
	// DeletedSteps). Younger ones are kept: their ranks may be uploading.
	Abandoned    []int64
	DeletedSteps []int64
	// DeletedLines maps each line of work (LegacyLine for manifests
	// without one) to the steps deleted from it, ascending.
	DeletedLines     map[string][]int64
	DeletedManifests int // all manifests deleted, of deleted steps and superseded revisions
	// DeletedRevisions counts superseded revisions deleted from steps that
	// are kept (a higher revision of the same rank replaced them more than
	// the safety window ago).
	DeletedRevisions int
	// DeletedRecords counts completion records deleted: those of deleted
	// steps, those of kept steps that no longer hold (a revision was
	// committed after them), and those whose step has no manifests left.
	DeletedRecords int
	DeletedChunks  int
	DeletedBytes   int64
	// YoungUnreferenced counts chunks no manifest references that were kept
	// because they are inside the safety window (uploads in progress), of
	// those stored when the prune listed the chunks first.
	YoungUnreferenced int
	// DeletedLeftovers counts what unfinished Puts left under chunks/ and
	// snapshots/ (a directory store's temporary files, S3's open
	// multipart uploads; storage.Sweeper) that was older than the safety
	// window and removed; DeletedLeftoverBytes sums the sizes the store
	// knows (a temporary file's; an S3 upload's parts count 0).
	DeletedLeftovers     int
	DeletedLeftoverBytes int64
	// YoungLeftovers counts those kept because they are inside the safety
	// window (a Put in progress may still finish them).
	YoungLeftovers int
}

// Prune keeps the opts.Keep newest restorable steps (committed last, of
// any world size) and deletes the steps committed before them: first the
// manifests of older steps (every revision), of abandoned steps (newer,
// but a rank has no manifest and the last rank's commit is older than the
// safety window), and the superseded revisions of the steps it keeps once
// the revision above them is older than the safety window, then the
// chunks that no remaining manifest references and that are older than
// the safety window. It reads every rank's
// highest manifest to tell when each step was committed. Listing the
// manifests again after deleting, and the window, make it safe to run while
// uploads and restores are in progress (docs/FORMAT.md). A manifest that
// cannot be decoded protects no chunk. Which steps are restorable it tells
// from one listing of the chunks, before it deletes anything: a step whose
// chunks are missing or of another size than its manifests say never
// counts toward Keep, so a restorable step is never deleted to keep it.
func Prune(ctx context.Context, s storage.Store, opts PruneOptions) (*PruneResult, error) {
	if opts.Keep < 1 {
		return nil, errors.New("checkpoint: prune: keep must be at least 1, or every checkpoint would be deleted")
	}
	opts = opts.withDefaults()
	p := &pruner{s: s, opts: opts, log: opts.Log, res: &PruneResult{DeletedLines: map[string][]int64{}}}
	p.now = opts.Clock()
	p.cutoff = p.now.Add(-opts.SafetyWindow)

	groups, orphans, err := listStepsRecords(ctx, s, snapshotsPrefix)
	if err != nil {
		return nil, err
	}
	if err := readGroups(ctx, s, groups); err != nil {
		return nil, fmt.Errorf("checkpoint: prune: read manifests in %s: %w", s, err)
	}
	p.orphans = orphans
	logFutureCreated(p.log, groups, p.now)
	stored, err := listChunks(ctx, s)
	if err != nil {
		return nil, fmt.Errorf("checkpoint: prune: %w", err)
	}
	old, err := p.chooseSteps(ctx, groups, stored)
	if err != nil {
		return nil, err
	}
	doomed := p.manifestsToDelete(groups, old)
	if len(p.res.Kept) != opts.Keep {
		p.log.Info("checkpoint.prune_short_of_keep",
			"restorable", len(p.res.Kept), "keep", opts.Keep)
	}
	if err := p.deleteManifests(ctx, doomed); err != nil {
		return p.res, err
	}
	referenced, err := p.referencedChunks(ctx, groups, doomed, stored)
	if err != nil {
		return p.res, err
	}
	if err := p.deleteChunks(ctx, referenced, stored); err != nil {
		return p.res, err
	}
	if err := p.sweep(ctx); err != nil {
		return p.res, err
	}
	res := p.res
	lines := map[string][]int64{}
	for l, steps := range res.DeletedLines {
		lines[ShortLine(l)] = steps
	}
	line := "all"
	if opts.Line != nil {
		line = ShortLine(opts.Line.Line)
	}
	p.log.Info("checkpoint.pruned", "line", line, "kept", res.Kept, "deleted_from_lines", lines, "unrestorable", res.Unrestorable, "abandoned", res.Abandoned, "deleted_steps", len(res.DeletedSteps), "deleted_revisions", res.DeletedRevisions, "deleted_records", res.DeletedRecords,
		"deleted_chunks", res.DeletedChunks, "deleted_bytes", res.DeletedBytes,
		"deleted_leftovers", res.DeletedLeftovers, "deleted_leftover_bytes", res.DeletedLeftoverBytes, "young_leftovers", res.YoungLeftovers, "dry_run", opts.DryRun)
	return res, nil
}

// pruner is one Prune in progress: its options, the time before which
// unreferenced objects are old enough to delete, and its result so far.
type pruner struct {
	s      storage.Store
	opts   PruneOptions
	log    *slog.Logger
	now    time.Time // when the prune started, by opts.Clock
	cutoff time.Time // now less the safety window
	res    *PruneResult
	// orphans are the completion records listed whose step has no
	// manifest of their world size left.
	orphans []storage.ObjectInfo
}

// chooseSteps goes through groups newest first (committed last, whatever
// the step number: a run started afresh, of another world size or with
// --restore never, commits lower steps than the run before it, and its
// steps are the newer work) and records the Keep restorable ones to keep,
// the unrestorable ones and the abandoned ones. It returns the steps to
// delete: those older than the oldest kept one once Keep are kept, and
// the abandoned ones.
func (p *pruner) chooseSteps(ctx context.Context, groups []*stepGroup, stored chunkSizes) (old map[*stepGroup]bool, err error) {
	res := p.res
	order := slices.Clone(groups)
	orderGroups(order, p.now)
	if sc := p.opts.Line; sc != nil {
		// Only what the line has superseded: its own steps, newest first
		// by step, then the steps it continued from.
		own := slices.DeleteFunc(slices.Clone(order), func(g *stepGroup) bool { return !sc.owns(g) || g.line() != sc.Line || g.worldSize != sc.WorldSize })
		from := slices.DeleteFunc(order, func(g *stepGroup) bool { return !sc.owns(g) || g.line() == sc.Line && g.worldSize == sc.WorldSize })
		order = append(own, from...)
	}
	old = map[*stepGroup]bool{}
	for i, g := range order {
		if len(res.Kept) == p.opts.Keep {
			for _, o := range order[i:] {
				old[o] = true
			}
			break
		}
		switch v, _ := g.judge(); v {
		case verdictMissing:
			// A rank has no manifest. Its upload may be in progress while
			// the other ranks' commits are younger than the window; after
			// that it is over (an upload commits within a quarter of the
			// window of its start), and the step never completes.
			if g.committed(p.now).Before(p.cutoff) {
				old[g] = true
				res.Abandoned = append(res.Abandoned, g.step)
			}
			continue
		case verdictNotPaired:
			continue // kept while newer than a kept step
		}
		decoded, check := 0, stored.checker() // the manifests that decode, one at a time
		for r := range g.worldSize {
			if g.manifests[r] == nil {
				continue
			}
			m, err := g.full(ctx, p.s, r)
			switch {
			case errors.Is(err, ErrCorrupt) || errors.Is(err, storage.ErrNotExist):
				continue
			case err != nil:
				return nil, fmt.Errorf("checkpoint: prune: %w", err)
			}
			decoded++
			check.add(m)
		}
		missing, wrongSize := check.missing, check.wrongSize
		if decoded < g.worldSize || missing > 0 || wrongSize > 0 {
			p.log.Warn("checkpoint.prune_unrestorable", "step", g.step,
				"bad_manifests", g.worldSize-decoded, "missing_chunks", missing, "wrong_size_chunks", wrongSize)
			res.Unrestorable = append(res.Unrestorable, g.step)
			continue
		}
		res.Kept = append(res.Kept, g.step)
	}
	return old, nil
}

// manifestsToDelete returns the manifests to delete, in order: every
// revision of the old steps, and the superseded revisions of the others
// whose revision above was committed before the window. For each rank
// its lower revisions come first, so that a reader never sees an older
// revision become a rank's highest while it is deleted.
func (p *pruner) manifestsToDelete(groups []*stepGroup, old map[*stepGroup]bool) []storage.ObjectInfo {
	var deleted []storage.ObjectInfo
	for _, g := range groups {
		if p.opts.Line != nil && !p.opts.Line.owns(g) {
			continue // another line's: not this prune's to touch
		}
		if old[g] {
			p.res.DeletedSteps = append(p.res.DeletedSteps, g.step)
			p.res.DeletedLines[g.line()] = append(p.res.DeletedLines[g.line()], g.step)
			// Rank 0 first: the step stops being complete with its
			// highest revision.
			for r := range g.worldSize {
				for _, rk := range g.older[r] {
					deleted = append(deleted, g.withMark(rk.info)...)
				}
				if oi, ok := g.keys[r]; ok {
					deleted = append(deleted, g.withMark(oi)...)
				}
				for _, rk := range g.above[r] {
					deleted = append(deleted, g.withMark(rk.info)...)
				}
			}
			// Its completion records last: a record outlives its
			// manifests only while they are deleted, and one of a step
			// whose ranks are not all listed is never used.
			for _, rec := range g.records {
				deleted = append(deleted, rec.info)
			}
			continue
		}
		// Records of a kept step that no longer hold for its listing (a
		// revision was committed since): the listing holds every
		// manifest their writer listed, so they never hold again.
		for _, rec := range g.records {
			if rec.state != g.state {
				deleted = append(deleted, rec.info)
			}
		}
		// A superseded revision goes once a revision above it was
		// committed more than the window ago: a restore that chose it
		// has long finished reading it (docs/FORMAT.md).
		for r, older := range g.older {
			above := g.keys[r].ModTime
			for i := len(older) - 1; i >= 0; i-- {
				if above.Before(p.cutoff) {
					deleted = append(deleted, g.withMark(older[i].info)...)
					p.res.DeletedRevisions++
				}
				if t := older[i].info.ModTime; t.Before(above) {
					above = t
				}
			}
		}
	}
	for _, oi := range p.orphans {
		_, n, rec, _ := parseRecordKey(oi.Key)
		if sc := p.opts.Line; sc == nil || rec.line == sc.Line && n == sc.WorldSize {
			deleted = append(deleted, oi)
		}
	}
	p.res.DeletedSteps = slices.Compact(p.res.DeletedSteps)
	return deleted
}

// withMark is the manifest oi, followed by its torn mark when it has one:
// the mark goes after the manifest, so that a reader never sees a torn
// revision without its mark.
func (g *stepGroup) withMark(oi storage.ObjectInfo) []storage.ObjectInfo {
	if m, ok := g.torn[oi.Key]; ok {
		return []storage.ObjectInfo{oi, m}
	}
	return []storage.ObjectInfo{oi}
}

// deleteManifests deletes the manifests doomed, in their order (with
// DryRun, only counts them).
func (p *pruner) deleteManifests(ctx context.Context, doomed []storage.ObjectInfo) error {
	for _, oi := range doomed {
		if !p.opts.DryRun {
			if err := deleteKey(ctx, p.s, oi.Key); err != nil {
				return err
			}
		}
		if _, _, ok := parseManifestKey(oi.Key); ok {
			p.res.DeletedManifests++
		} else if _, _, _, ok := parseRecordKey(oi.Key); ok {
			p.res.DeletedRecords++
		}
	}
	return nil
}

// referencedChunks lists the manifests again, so that those committed
// since the first listing protect their chunks too, and returns the
// chunks of stored (the listing of chunks taken before anything was
// deleted) that the manifests not doomed reference. It reads one manifest
// at a time; those of groups that readGroups kept decoded, or could not
// read, are not read again. A manifest that cannot be decoded references
// none.
func (p *pruner) referencedChunks(ctx context.Context, groups []*stepGroup, doomed []storage.ObjectInfo, stored chunkSizes) (map[[32]byte]bool, error) {
	decoded := map[string]*Manifest{} // by key; nil: could not be read (a torn revision among them)
	for _, g := range groups {
		for r, m := range g.decoded {
			decoded[g.keys[r].Key] = m
		}
		for r := range g.errs {
			decoded[g.keys[r].Key] = nil
		}
	}
	doomedKey := make(map[string]bool, len(doomed))
	for _, oi := range doomed {
		doomedKey[oi.Key] = true
	}
	referenced := map[[32]byte]bool{}
	err := p.s.List(ctx, snapshotsPrefix, func(oi storage.ObjectInfo) error {
		if _, _, ok := parseManifestKey(oi.Key); !ok || doomedKey[oi.Key] {
			return nil
		}
		m, known := decoded[oi.Key]
		if !known {
			var err error
			m, err = readManifest(ctx, p.s, oi.Key)
			if err != nil && !errors.Is(err, ErrCorrupt) && !errors.Is(err, storage.ErrNotExist) {
				return err
			}
		}
		if m != nil {
			for _, f := range m.Files {
				for _, c := range f.Chunks {
					if k := sumKey(c.SHA256); stored.has(k) {
						referenced[k] = true
					}
				}
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("checkpoint: prune: list %s in %s: %w", snapshotsPrefix, p.s, err)
	}
	return referenced, nil
}

// deleteChunks deletes the chunks of stored, the listing taken before
// anything was deleted, that are not referenced and are older than the
// safety window (with DryRun, only counts them), and counts the younger
// ones it keeps. A chunk listed now that was not then is kept and not
// counted: it was stored while the prune ran.
func (p *pruner) deleteChunks(ctx context.Context, referenced map[[32]byte]bool, stored chunkSizes) error {
	var doomed []storage.ObjectInfo
	err := p.s.List(ctx, chunksPrefix, func(oi storage.ObjectInfo) error {
		sum, ok := parseChunkKey(oi.Key)
		if !ok {
			return nil
		}
		if k := sumKey(sum); referenced[k] || !stored.has(k) {
			return nil
		}
		if !oi.ModTime.Before(p.cutoff) {
			p.res.YoungUnreferenced++
			return nil
		}
		doomed = append(doomed, oi)
		return nil
	})
	if err != nil {
		return fmt.Errorf("checkpoint: prune: list %s in %s: %w", chunksPrefix, p.s, err)
	}
	for _, oi := range doomed {
		if !p.opts.DryRun {
			if err := deleteKey(ctx, p.s, oi.Key); err != nil {
				return err
			}
		}
		p.res.DeletedChunks++
		p.res.DeletedBytes += oi.Size
	}
	return nil
}

// sweep removes what unfinished Puts left under chunks/ and snapshots/
// (storage.Sweeper) once it is older than the safety window (with DryRun,
// only counts it). Keys outside the format are not swept. A sweep that
// fails is logged, not the prune's failure: the steps and chunks are
// already done, and the next prune sweeps again.
//
// Why the window is safe for a live writer: a leftover is offered with the
// last time its Put is known to have worked on it. A directory store's
// temporary file takes a new modification time with every write of the
// Put, which after its last write only syncs, closes and renames it; an
// S3 upload is dated by its initiation, so it is older than W only when
// one Put has taken longer than W, whose checkpoint could not commit
// anyway: an upload commits within W/4 of its start or fails
// (docs/FORMAT.md). What is older than W therefore belongs to a Put that
// is dead, or one that has been stuck without writing a byte (or, on S3,
// running) for longer than any upload that can still commit. And should a
// live Put's leftover be removed all the same (prune's window shorter than
// the uploaders'), that Put fails at its rename or Complete and is
// retried: no partial object ever appears.
func (p *pruner) sweep(ctx context.Context) error {
	for _, prefix := range []string{chunksPrefix, snapshotsPrefix} {
		err := storage.Sweep(ctx, p.s, prefix, func(l storage.Leftover) (bool, error) {
			if !l.ModTime.Before(p.cutoff) {
				p.res.YoungLeftovers++
				return false, nil
			}
			p.res.DeletedLeftovers++
			p.res.DeletedLeftoverBytes += max(l.Size, 0)
			return !p.opts.DryRun, nil
		})
		if err != nil {
			if ctx.Err() != nil {
				return fmt.Errorf("checkpoint: prune: sweep %s in %s: %w", prefix, p.s, err)
			}
			p.log.Warn("checkpoint.prune_sweep_failed", "prefix", prefix, "err", err)
		}
	}
	return nil
}

func deleteKey(ctx context.Context, s storage.Store, key string) error {
	if err := s.Delete(ctx, key); err != nil {
		return fmt.Errorf("checkpoint: prune: delete %s: %w", key, err)
	}
	return nil
}
