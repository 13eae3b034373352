package main

import (
	"context"
	"fmt"
	"io"
	"strconv"

	"github.com/lifeboat-project/lifeboat/checkpoint"
)

// verifyOptions are the flags of `lifeboat verify`.
type verifyOptions struct {
	common commonOptions
	store  storeOptions
	subset string
}

func verifyCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	o := &verifyOptions{}
	fs := newFlagSet("verify", stderr)
	o.common.register(fs)
	o.store.register(fs)
	fs.StringVar(&o.subset, "read-data-subset", "", "also download and hash part n of t of the chunks (n/t), or all; default: check existence and sizes only")
	fs.Usage = flagUsage(fs, stderr, "lifeboat verify --store URL [--read-data-subset n/t] [STEP|latest|all]\n\nChecks each rank's highest revision of the step: the snapshot a restore takes.")
	if code := parseCmd(fs, args, stderr); code >= 0 {
		return code
	}
	if code := checkCmd("verify", o.validate(), stderr); code >= 0 {
		return code
	}
	if fs.NArg() > 1 {
		fmt.Fprintln(stderr, "lifeboat verify: give at most one step")
		return 2
	}
	var subset checkpoint.Subset
	if o.subset != "" {
		var err error
		if subset, err = checkpoint.ParseSubset(o.subset); err != nil {
			fmt.Fprintf(stderr, "lifeboat verify: --read-data-subset (LIFEBOAT_READ_DATA_SUBSET): %v\n", err)
			return 2
		}
	}
	s, err := o.store.open(ctx)
	if err != nil {
		fmt.Fprintf(stderr, "lifeboat verify: %v\n", err)
		return 1
	}
	var steps []int64
	switch arg := fs.Arg(0); arg {
	case "", "all":
		snaps, err := checkpoint.List(ctx, s)
		if err != nil {
			fmt.Fprintf(stderr, "lifeboat verify: %v\n", err)
			return 1
		}
		for _, sn := range snaps {
			steps = append(steps, sn.Step)
		}
	case "latest":
		step, err := checkpoint.Latest(ctx, s, 0)
		if err != nil {
			fmt.Fprintf(stderr, "lifeboat verify: %v\n", err)
			return 1
		}
		steps = []int64{step}
	default:
		step, err := strconv.ParseInt(arg, 10, 64)
		if err != nil || step < 0 {
			fmt.Fprintf(stderr, "lifeboat verify: %q is not a step: give a number, latest or all\n", arg)
			return 2
		}
		steps = []int64{step}
	}
	bad := 0
	for _, step := range steps {
		rep, err := checkpoint.Verify(ctx, s, step, checkpoint.VerifyOptions{ReadData: subset})
		if err != nil {
			fmt.Fprintf(stderr, "lifeboat verify: step %d: %v\n", step, err)
			return 1
		}
		if rep.OK() {
			fmt.Fprintf(stdout, "step %d rev %d: ok (%d manifests, %d chunks, %d read, %d bytes read)\n", step, rep.Revision, rep.Manifests, rep.Chunks, rep.ChunksRead, rep.BytesRead)
			continue
		}
		bad++
		fmt.Fprintf(stdout, "step %d rev %d: %d problems\n", step, rep.Revision, len(rep.Problems))
		for _, p := range rep.Problems {
			fmt.Fprintf(stdout, "  %s\n", p)
		}
	}
	if bad > 0 {
		fmt.Fprintf(stderr, "lifeboat verify: %d of %d checkpoints have problems; restore falls back past them\n", bad, len(steps))
		return 1
	}
	return 0
}
