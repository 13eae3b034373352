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
	// name is stored with the size they say. Newest means committed last
	// (the newest Created of a step's ranks), of any world size, whatever
	// the step number: a run started afresh commits lower steps than the
	// run before it, and they are the newer work. A step newer than the
	// oldest kept one that is not kept itself stays too, except an
	// incomplete one (a rank has no manifest) committed before the safety
	// window: that upload is over and the step will never be restored.
	Keep int
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
	Abandoned        []int64
	DeletedSteps     []int64
	DeletedManifests int // all manifests deleted, of deleted steps and superseded revisions
	// DeletedRevisions counts superseded revisions deleted from steps that
	// are kept (a higher revision of the same rank replaced them more than
	// the safety window ago).
	DeletedRevisions int
	DeletedChunks    int
	DeletedBytes     int64
	// YoungUnreferenced counts chunks no manifest references that were kept
	// because they are inside the safety window (uploads in progress).
	YoungUnreferenced int
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
	window := safetyWindow(opts.SafetyWindow)
	log := opts.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	cutoff := orDefaultClock(opts.Clock)().Add(-window)

	groups, err := listSteps(ctx, s, snapshotsPrefix)
	if err != nil {
		return nil, err
	}
	if err := readGroups(ctx, s, groups); err != nil {
		return nil, fmt.Errorf("checkpoint: prune: read manifests in %s: %w", s, err)
	}
	manifests := map[string]*Manifest{} // key -> decoded; nil when invalid
	for _, g := range groups {
		for r, oi := range g.keys {
			manifests[oi.Key] = g.manifests[r]
		}
	}
	read := func(key string) error {
		if _, ok := manifests[key]; ok {
			return nil
		}
		m, err := readManifest(ctx, s, key)
		if err != nil && !errors.Is(err, ErrCorrupt) && !errors.Is(err, storage.ErrNotExist) {
			return err
		}
		manifests[key] = m
		return nil
	}
	stored, err := listChunks(ctx, s)
	if err != nil {
		return nil, fmt.Errorf("checkpoint: prune: %w", err)
	}
	res := &PruneResult{}
	// Newest means committed last, whatever the step number: a run started
	// afresh (another world size, or --restore never) commits lower steps
	// than the run before it, and its steps are the newer work.
	order := slices.Clone(groups)
	newestFirst(order)
	old := map[*stepGroup]bool{} // older than the oldest kept step, once Keep are kept
	for i, g := range order {
		if len(res.Kept) == opts.Keep {
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
			if g.committed().Before(cutoff) {
				old[g] = true
				res.Abandoned = append(res.Abandoned, g.step)
			}
			continue
		case verdictNotPaired:
			continue // kept while newer than a kept step
		}
		var ms []*Manifest // those that decode
		for _, m := range g.manifests {
			ms = append(ms, m)
		}
		missing, wrongSize := stored.check(ms)
		if len(ms) < g.worldSize || missing > 0 || wrongSize > 0 {
			log.Warn("checkpoint: prune: step cannot be restored; it counts toward no --keep", "step", g.step,
				"bad_manifests", g.worldSize-len(ms), "missing_chunks", missing, "wrong_size_chunks", wrongSize)
			res.Unrestorable = append(res.Unrestorable, g.step)
			continue
		}
		res.Kept = append(res.Kept, g.step)
	}
	// deleted holds the manifests to delete, in order: for each rank, its
	// lower revisions first, so that a reader never sees an older revision
	// become a rank's highest while it is deleted.
	var deleted []storage.ObjectInfo
	enough := len(res.Kept) == opts.Keep
	for _, g := range groups {
		if old[g] {
			res.DeletedSteps = append(res.DeletedSteps, g.step)
			// Rank 0 first: the step stops being complete with its
			// highest revision.
			for r := range g.worldSize {
				for _, rk := range g.older[r] {
					deleted = append(deleted, rk.info)
				}
				if oi, ok := g.keys[r]; ok {
					deleted = append(deleted, oi)
				}
			}
			continue
		}
		// A superseded revision goes once a revision above it was
		// committed more than the window ago: a restore that chose it
		// has long finished reading it (docs/FORMAT.md).
		for r, older := range g.older {
			above := g.keys[r].ModTime
			for i := len(older) - 1; i >= 0; i-- {
				if above.Before(cutoff) {
					deleted = append(deleted, older[i].info)
					res.DeletedRevisions++
				}
				if t := older[i].info.ModTime; t.Before(above) {
					above = t
				}
			}
		}
	}
	res.DeletedSteps = slices.Compact(res.DeletedSteps)
	if !enough {
		log.Info("checkpoint: prune: fewer restorable steps than to keep; only abandoned steps, superseded revisions and unreferenced chunks older than the safety window are deleted",
			"restorable", len(res.Kept), "keep", opts.Keep)
	}
	doomedKey := make(map[string]bool, len(deleted))
	for _, oi := range deleted {
		doomedKey[oi.Key] = true
		if !opts.DryRun {
			if err := deleteKey(ctx, s, oi.Key); err != nil {
				return res, err
			}
		}
		res.DeletedManifests++
	}

	// List again: manifests committed since the first listing protect
	// their chunks too.
	referenced := map[string]bool{}
	err = s.List(ctx, snapshotsPrefix, func(oi storage.ObjectInfo) error {
		if _, _, _, _, ok := parseManifestKey(oi.Key); !ok || doomedKey[oi.Key] {
			return nil
		}
		if err := read(oi.Key); err != nil {
			return err
		}
		if m := manifests[oi.Key]; m != nil {
			for _, f := range m.Files {
				for _, c := range f.Chunks {
					referenced[c.SHA256] = true
				}
			}
		}
		return nil
	})
	if err != nil {
		return res, fmt.Errorf("checkpoint: prune: list %s in %s: %w", snapshotsPrefix, s, err)
	}

	var doomed []storage.ObjectInfo
	err = s.List(ctx, chunksPrefix, func(oi storage.ObjectInfo) error {
		sum, ok := parseChunkKey(oi.Key)
		if !ok || referenced[sum] {
			return nil
		}
		if !oi.ModTime.Before(cutoff) {
			res.YoungUnreferenced++
			return nil
		}
		doomed = append(doomed, oi)
		return nil
	})
	if err != nil {
		return res, fmt.Errorf("checkpoint: prune: list %s in %s: %w", chunksPrefix, s, err)
	}
	for _, oi := range doomed {
		if !opts.DryRun {
			if err := deleteKey(ctx, s, oi.Key); err != nil {
				return res, err
			}
		}
		res.DeletedChunks++
		res.DeletedBytes += oi.Size
	}
	log.Info("checkpoint: pruned", "kept", res.Kept, "unrestorable", res.Unrestorable, "abandoned", res.Abandoned, "deleted_steps", len(res.DeletedSteps), "deleted_revisions", res.DeletedRevisions,
		"deleted_chunks", res.DeletedChunks, "deleted_bytes", res.DeletedBytes, "dry_run", opts.DryRun)
	return res, nil
}

func deleteKey(ctx context.Context, s storage.Store, key string) error {
	if err := s.Delete(ctx, key); err != nil {
		return fmt.Errorf("checkpoint: prune: delete %s: %w", key, err)
	}
	return nil
}
