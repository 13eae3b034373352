package main

import (
	"context"
	"fmt"
	"io"

	"github.com/lifeboat-project/lifeboat/checkpoint"
)

// pruneOptions are the flags of `lifeboat prune`.
type pruneOptions struct {
	common commonOptions
	store  storeOptions
	keep   int
	dryRun bool
}

func pruneCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	o := &pruneOptions{}
	fs := newFlagSet("prune", stderr)
	o.common.register(fs)
	o.store.register(fs)
	fs.IntVar(&o.keep, "keep", 3, "keep the newest N restorable checkpoints")
	fs.BoolVar(&o.dryRun, "dry-run", false, "say what would be deleted, delete nothing")
	fs.Usage = flagUsage(fs, stderr, "lifeboat prune --store URL [--keep N] [--dry-run]\n\n"+
		"Keeps the newest N restorable steps and every step newer than the oldest of them, and\n"+
		"deletes the older steps and the chunks no remaining step uses. A step is restorable\n"+
		"when it is complete, its manifests decode and every chunk they name is stored with\n"+
		"the size they say (prune lists the chunks to tell); one that is not counts toward no\n"+
		"--keep, so a restorable step is never deleted to keep it.")
	if code := parseCmd(fs, args, stderr); code >= 0 {
		return code
	}
	if code := checkCmd("prune", o.validate(), stderr); code >= 0 {
		return code
	}
	if o.keep < 1 {
		fmt.Fprintf(stderr, "lifeboat prune: --keep (LIFEBOAT_KEEP) is %d; keep at least 1\n", o.keep)
		return 2
	}
	log, ok := o.common.logger("prune", stderr)
	if !ok {
		return 2
	}
	s, err := o.store.open(ctx)
	if err != nil {
		fmt.Fprintf(stderr, "lifeboat prune: %v\n", err)
		return 1
	}
	res, err := checkpoint.Prune(ctx, s, checkpoint.PruneOptions{Keep: o.keep, DryRun: o.dryRun, Log: log})
	if err != nil {
		fmt.Fprintf(stderr, "lifeboat prune: %v\n", err)
		return 1
	}
	verb := "deleted"
	if o.dryRun {
		verb = "would delete"
	}
	fmt.Fprintf(stdout, "kept steps %v; %s steps %v (%d manifests, %d chunks, %d bytes); %d unreferenced chunks kept inside the safety window\n",
		res.Kept, verb, res.DeletedSteps, res.DeletedManifests, res.DeletedChunks, res.DeletedBytes, res.YoungUnreferenced)
	if len(res.Unrestorable) > 0 {
		fmt.Fprintf(stdout, "steps %v cannot be restored (lifeboat ls --check says why); they count toward no --keep and are kept while newer than a kept step\n", res.Unrestorable)
	}
	return 0
}
