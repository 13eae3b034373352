package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/lifeboat-project/lifeboat/checkpoint"
	"github.com/lifeboat-project/lifeboat/internal/printable"
)

// lsOptions are the flags of `lifeboat ls`.
type lsOptions struct {
	common commonOptions
	store  storeOptions
	json   bool
	check  bool
}

// lsEntry is one line of `lifeboat ls --json`.
type lsEntry struct {
	Step int64 `json:"step"`
	// Revision is the highest revision of the step's ranks' snapshots:
	// each rank's snapshot is its highest revision (with PassedOver, its
	// highest named one).
	Revision int `json:"revision"`
	// Counter: the trainer did not number this checkpoint; it follows the
	// named step Step.
	Counter bool `json:"counter"`
	// Line is the step's line of work ("legacy": written before lines);
	// docs/FORMAT.md says how lines decide which step is newest.
	Line      string    `json:"line"`
	IDs       []string  `json:"ids"`
	Created   time.Time `json:"created"`
	Ranks     []int     `json:"ranks"`
	WorldSize int       `json:"world_size"`
	Bytes     int64     `json:"bytes"`
	// Complete: every rank's manifest is there, decodes, and the ranks
	// provably describe one iteration (docs/FORMAT.md); Incomplete says
	// why not ("missing ranks 1,3", "rank 1 is a counter checkpoint:
	// ranks cannot be paired").
	Complete   bool   `json:"complete"`
	Incomplete string `json:"incomplete,omitempty"`
	// PassedOver, when set, says why the ranks' highest revisions could
	// not be paired: the step is its ranks' highest named revisions
	// (Revision, IDs), and the counter revisions above them are stored
	// but never restored (docs/FORMAT.md).
	PassedOver string `json:"passed_over,omitempty"`
	// Torn: a rank's snapshot is a revision its writer found torn after
	// committing it (a file grew afterwards); Errors says which.
	Torn bool `json:"torn,omitempty"`
	// Restorable: nothing ls found keeps the step from being restored:
	// it is complete, every manifest decodes and, with --check, every
	// chunk is stored with its size. (Content is verify's; whether it fits
	// the volume, the restore's.)
	Restorable bool `json:"restorable"`
	// ChunksChecked: --check listed the chunks; MissingChunks and
	// WrongSizeChunks count the step's chunks not stored or stored with
	// another size than its manifests say.
	ChunksChecked   bool     `json:"chunks_checked"`
	MissingChunks   int      `json:"missing_chunks,omitempty"`
	WrongSizeChunks int      `json:"wrong_size_chunks,omitempty"`
	Errors          []string `json:"errors,omitempty"`
}

func lsCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	o := &lsOptions{}
	fs := newFlagSet("ls", stderr)
	o.common.register(fs)
	o.store.register(fs)
	fs.BoolVar(&o.json, "json", false, "print JSON, one array of checkpoints")
	fs.BoolVar(&o.check, "check", false, "also list every chunk once and mark steps whose chunks are missing or of the wrong size")
	fs.Usage = flagUsage(fs, stderr, "lifeboat ls --store URL [--json] [--check]\n\n"+
		"Lists every step, oldest first. REV is the step's highest revision: a step whose files\n"+
		"changed after it was committed is stored again as revision 1, 2, ..., and each rank's\n"+
		"highest revision is what a restore takes, except where the ranks' highest revisions\n"+
		"cannot be paired and their named ones can: then the step is those. KIND is named, or\n"+
		"counter for a checkpoint the trainer did not number, stored as a revision of the named\n"+
		"step it follows. LINE is the step's line of work (legacy: written before lines): steps\n"+
		"compare by number only within a line, and the line committed last is the newest\n"+
		"(docs/FORMAT.md). STATE is complete, incomplete (ranks missing: an upload in progress,\n"+
		"or one that died; or ranks that cannot be paired: a rank's snapshot is a counter\n"+
		"checkpoint, whose iteration no other rank's is known to match), torn (a rank's revision\n"+
		"was committed while a file of it was still being written), bad-manifest (a manifest\n"+
		"does not decode), or with --check missing-chunks or wrong-size-chunks; a restore skips\n"+
		"every state but complete. WHY says why a step is not complete, or why its counter\n"+
		"revisions are not restored. ls reads the manifests only; --check also lists every chunk\n"+
		"once (lifeboat verify reads their content).")
	if code := setup(fs, args, &o.common, stdout, stderr, o.validate); code >= 0 {
		return code
	}
	return exitCode("ls", runLs(ctx, o), 1, stderr)
}

// runLs lists the store's checkpoints, as a table or JSON.
func runLs(ctx context.Context, o *lsOptions) error {
	stdout := o.common.stdout
	s, err := o.store.open(ctx)
	if err != nil {
		return err
	}
	list := checkpoint.List
	if o.check {
		list = checkpoint.ListChecked
	}
	snaps, err := list(ctx, s)
	if err != nil {
		return err
	}
	entries := make([]lsEntry, 0, len(snaps))
	for _, sn := range snaps {
		e := lsEntry{Step: sn.Step, Revision: sn.Revision, Counter: sn.Counter, Line: checkpoint.ShortLine(sn.Line), Created: sn.Created, WorldSize: sn.WorldSize, Bytes: sn.Bytes, Complete: sn.Complete, Incomplete: sn.Incomplete, PassedOver: sn.PassedOver,
			Restorable: sn.Restorable(), ChunksChecked: sn.ChunksChecked, MissingChunks: sn.MissingChunks, WrongSizeChunks: sn.WrongSizeChunks, IDs: []string{}, Ranks: []int{}}
		for _, r := range sn.Ranks {
			e.Ranks = append(e.Ranks, r.Rank)
			if r.Err != nil {
				e.Torn = e.Torn || errors.Is(r.Err, checkpoint.ErrTorn)
				e.Errors = append(e.Errors, fmt.Sprintf("rank %d: %v", r.Rank, r.Err))
			} else {
				e.IDs = append(e.IDs, r.ID)
			}
		}
		entries = append(entries, e)
	}
	if o.json {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(entries)
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "STEP\tREV\tKIND\tLINE\tCREATED\tRANKS\tBYTES\tSTATE\tID\tWHY")
	for _, e := range entries {
		state := e.state()
		kind := "named"
		if e.Counter {
			kind = "counter"
		}
		id := ""
		if len(e.IDs) > 0 {
			id = e.IDs[0]
		}
		why := e.Incomplete
		switch {
		case e.PassedOver != "":
			why = "counter revisions above not restored: " + e.PassedOver
		case why == "":
			why = "-"
		}
		fmt.Fprintf(tw, "%d\t%d\t%s\t%s\t%s\t%d/%d\t%d\t%s\t%s\t%s\n", e.Step, e.Revision, kind, printable.String(e.Line), e.Created.UTC().Format(time.RFC3339), len(e.Ranks), e.WorldSize, e.Bytes, state, printable.String(id), printable.String(why))
	}
	return tw.Flush()
}

// state is the STATE column: the first thing found that keeps the step
// from being restored, or complete.
func (e lsEntry) state() string {
	switch {
	case e.Torn:
		return "torn"
	case len(e.Errors) > 0:
		return "bad-manifest"
	case !e.Complete:
		return "incomplete"
	case e.MissingChunks > 0:
		return "missing-chunks"
	case e.WrongSizeChunks > 0:
		return "wrong-size-chunks"
	}
	return "complete"
}
