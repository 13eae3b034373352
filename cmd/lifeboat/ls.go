package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/lifeboat-project/lifeboat/checkpoint"
)

// lsOptions are the flags of `lifeboat ls`.
type lsOptions struct {
	common commonOptions
	store  storeOptions
	json   bool
}

// lsEntry is one line of `lifeboat ls --json`.
type lsEntry struct {
	Step int64 `json:"step"`
	// Revision is the highest revision of the step's ranks: each rank's
	// snapshot is its highest revision.
	Revision int `json:"revision"`
	// Counter: the trainer did not number this checkpoint; it follows the
	// named step Step.
	Counter   bool      `json:"counter"`
	IDs       []string  `json:"ids"`
	Created   time.Time `json:"created"`
	Ranks     []int     `json:"ranks"`
	WorldSize int       `json:"world_size"`
	Bytes     int64     `json:"bytes"`
	Complete  bool      `json:"complete"`
	Errors    []string  `json:"errors,omitempty"`
}

func lsCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	o := &lsOptions{}
	fs := newFlagSet("ls", stderr)
	o.common.register(fs)
	o.store.register(fs)
	fs.BoolVar(&o.json, "json", false, "print JSON, one array of checkpoints")
	fs.Usage = flagUsage(fs, stderr, "lifeboat ls --store URL [--json]\n\n"+
		"Lists every step, oldest first. REV is the step's highest revision: a step whose files\n"+
		"changed after it was committed is stored again as revision 1, 2, ..., and each rank's\n"+
		"highest revision is what a restore takes. KIND is named, or counter for a checkpoint the\n"+
		"trainer did not number, stored as a revision of the named step it follows.")
	if code := parseCmd(fs, args, stderr); code >= 0 {
		return code
	}
	s, err := o.store.open(ctx)
	if err != nil {
		fmt.Fprintf(stderr, "lifeboat ls: %v\n", err)
		return 1
	}
	snaps, err := checkpoint.List(ctx, s)
	if err != nil {
		fmt.Fprintf(stderr, "lifeboat ls: %v\n", err)
		return 1
	}
	entries := make([]lsEntry, 0, len(snaps))
	for _, sn := range snaps {
		e := lsEntry{Step: sn.Step, Revision: sn.Revision, Counter: sn.Counter, Created: sn.Created, WorldSize: sn.WorldSize, Bytes: sn.Bytes, Complete: sn.Complete, IDs: []string{}, Ranks: []int{}}
		for _, r := range sn.Ranks {
			e.Ranks = append(e.Ranks, r.Rank)
			if r.Err != nil {
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
		if err := enc.Encode(entries); err != nil {
			fmt.Fprintf(stderr, "lifeboat ls: %v\n", err)
			return 1
		}
		return 0
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "STEP\tREV\tKIND\tCREATED\tRANKS\tBYTES\tSTATE\tID")
	for _, e := range entries {
		state := "complete"
		if !e.Complete {
			state = "incomplete"
		}
		kind := "named"
		if e.Counter {
			kind = "counter"
		}
		id := ""
		if len(e.IDs) > 0 {
			id = e.IDs[0]
		}
		fmt.Fprintf(tw, "%d\t%d\t%s\t%s\t%d/%d\t%d\t%s\t%s\n", e.Step, e.Revision, kind, e.Created.UTC().Format(time.RFC3339), len(e.Ranks), e.WorldSize, e.Bytes, state, id)
	}
	return exitOnErr(tw.Flush(), "ls", stderr)
}

func exitOnErr(err error, name string, stderr io.Writer) int {
	if err != nil {
		fmt.Fprintf(stderr, "lifeboat %s: %v\n", name, err)
		return 1
	}
	return 0
}
