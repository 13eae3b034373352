package main

import (
	"context"
	"fmt"
	"io"
	"maps"
	"slices"
	"time"

	"github.com/lifeboat-project/lifeboat/checkpoint"
)

// pruneOptions are the flags of `lifeboat prune`.
type pruneOptions struct {
	common      commonOptions
	store       storeOptions
	keep        int
	minChunkAge time.Duration
	dryRun      bool
}

// pruneHelp says exactly what a prune leaves in the store.
const pruneHelp = `lifeboat prune --store URL [--keep N] [--min-chunk-age D] [--dry-run]

Keeps the newest N restorable steps and deletes the older steps and the chunks
no remaining step uses, of every line of work (newest: the line committed last
first, steps within a line by number; docs/FORMAT.md), and says which lines it
deletes from. The automatic prune of lifeboat run and sidecar (--keep) deletes
only what its own line of work superseded. A step is restorable when it
is complete, its manifests decode and every chunk they name is stored with the
size they say (prune lists the chunks to tell); one that is not counts toward no
--keep, so a restorable step is never deleted to keep it.
After a prune the store holds:
  - the N kept steps: each rank's highest revision, and lower revisions whose
    next revision is younger than --min-chunk-age;
  - steps committed after the oldest kept one that are not restorable: those
    with every rank committed (shown by the prune and by lifeboat ls --check),
    and incomplete ones (a rank has no manifest) whose last commit is younger
    than --min-chunk-age, since their other ranks may still be uploading;
    older incomplete steps are abandoned uploads and are deleted;
  - every chunk those manifests name, and chunks no manifest names that are
    younger than --min-chunk-age (uploads in progress have not committed
    their manifests yet);
  - what uploads killed in the middle left (a file:// store's temporary
    files, open S3 multipart uploads) that is younger than --min-chunk-age;
  - the job's stop records under coord/, and any key lifeboat does not write.
--min-chunk-age protects uploads running at the same time: an uploader stores
chunks before its manifest and reuses stored chunks younger than 3/4 of 6h.
Below 6h (the uploaders' window), run prune only while nothing uploads to the
store (the job has stopped), or a checkpoint being committed may lose chunks.`

func pruneCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	o := &pruneOptions{}
	fs := newFlagSet("prune", stderr)
	o.common.register(fs)
	o.store.register(fs)
	fs.IntVar(&o.keep, "keep", 3, "keep the newest N restorable checkpoints")
	positiveDurationVar(fs, &o.minChunkAge, "min-chunk-age", checkpoint.DefaultSafetyWindow,
		"delete an unreferenced chunk, an incomplete step or a superseded revision only when older than this; below 6h only while nothing uploads")
	fs.BoolVar(&o.dryRun, "dry-run", false, "say what would be deleted, delete nothing")
	fs.Usage = flagUsage(fs, stderr, pruneHelp)
	if code := setup(fs, args, &o.common, stdout, stderr, o.validate); code >= 0 {
		return code
	}
	return exitCode("prune", runPrune(ctx, o), 1, stderr)
}

// runPrune deletes what --keep and --min-chunk-age allow, and says what.
func runPrune(ctx context.Context, o *pruneOptions) error {
	log, stdout := o.common.log, o.common.stdout
	s, err := o.store.open(ctx)
	if err != nil {
		return err
	}
	if o.minChunkAge < checkpoint.DefaultSafetyWindow {
		log.Warn("prune.short_chunk_age", "min_chunk_age", o.minChunkAge.String(), "uploaders_window", checkpoint.DefaultSafetyWindow.String(),
			"effect", "chunks of an upload running now may be deleted before its manifest is committed; prune with it only while nothing uploads to this store")
	}
	res, err := checkpoint.Prune(ctx, s, checkpoint.PruneOptions{Keep: o.keep, SafetyWindow: o.minChunkAge, DryRun: o.dryRun, Log: log})
	if err != nil {
		return err
	}
	verb := "deleted"
	if o.dryRun {
		verb = "would delete"
	}
	fmt.Fprintf(stdout, "kept steps %v; %s steps %v (%d manifests, %d chunks, %d bytes); %d unreferenced chunks younger than --min-chunk-age %s kept\n",
		res.Kept, verb, res.DeletedSteps, res.DeletedManifests, res.DeletedChunks, res.DeletedBytes, res.YoungUnreferenced, o.minChunkAge)
	for _, line := range slices.Sorted(maps.Keys(res.DeletedLines)) {
		fmt.Fprintf(stdout, "%s from line %s: steps %v\n", verb, checkpoint.ShortLine(line), res.DeletedLines[line])
	}
	if res.DeletedLeftovers > 0 || res.YoungLeftovers > 0 {
		fmt.Fprintf(stdout, "%s %d leftovers of unfinished uploads (%d bytes: temporary files, open multipart uploads); %d younger than --min-chunk-age %s kept\n",
			verb, res.DeletedLeftovers, res.DeletedLeftoverBytes, res.YoungLeftovers, o.minChunkAge)
	}
	if len(res.Abandoned) > 0 {
		fmt.Fprintf(stdout, "steps %v were incomplete (a rank has no manifest) since before --min-chunk-age: abandoned uploads, %s\n", res.Abandoned, verb)
	}
	if len(res.Unrestorable) > 0 {
		fmt.Fprintf(stdout, "steps %v cannot be restored (lifeboat ls --check says why); they count toward no --keep and are kept while newer than a kept step\n", res.Unrestorable)
	}
	return nil
}
