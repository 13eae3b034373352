package main

import (
	"context"
	"errors"
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
	which  string // the argument: STEP, latest, all or empty (all)
}

// verifyHelp explains the forms verify accepts and what each level checks.
const verifyHelp = `lifeboat verify --store URL [--read-data-subset all|none|n/t] [STEP|latest|all]

Checks checkpoints the way a restore would take them: each rank's highest
revision of a step. Which steps:
  STEP     that step (a number, as lifeboat ls shows it)
  latest   the newest complete step (the one a restore takes first)
  all      every step in the store, oldest first (the default)
What is checked at every level: every rank of the step has a manifest that
decodes and is valid, and every chunk the manifests name is stored with the
size they say (and the SHA-256 the store reports, where it reports one).
--read-data-subset then sets which chunks are also downloaded and hashed:
  all      every chunk (the default): a chunk whose bytes were altered is found
  none     none: presence and sizes only (cheap: one Stat per chunk); a chunk
           altered in place with its size kept is NOT found
  n/t      part n of t of the chunks, chosen by hash: running 1/t to t/t
           reads every chunk once (spread a large store's cost over t runs)
The format checks a restore runs (pickle, zip, safetensors) are not run.
Exit 0: no problem found; 1: a problem found (each is printed) or the store
could not be read; 2: a bad command line.`

func verifyCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	o := &verifyOptions{}
	fs := newFlagSet("verify", stderr)
	o.common.register(fs)
	o.store.register(fs)
	fs.StringVar(&o.subset, "read-data-subset", "all", "which chunks to download and hash besides checking they are stored with their size: all, none, or part n/t")
	fs.Usage = flagUsage(fs, stderr, verifyHelp)
	check := func() error {
		if err := o.validate(); err != nil {
			return err
		}
		if fs.NArg() > 1 {
			return errors.New("give at most one step: STEP, latest or all")
		}
		o.which = fs.Arg(0)
		switch o.which {
		case "", "all", "latest":
			return nil
		}
		if step, err := strconv.ParseInt(o.which, 10, 64); err != nil || step < 0 {
			return fmt.Errorf("%q is not a step: give a number, latest or all", o.which)
		}
		return nil
	}
	if code := setup(fs, args, &o.common, stdout, stderr, check); code >= 0 {
		return code
	}
	return exitCode("verify", runVerify(ctx, o), 1, stderr)
}

// runVerify checks the steps o.which names; a step with problems prints
// them and makes the result exit 1.
func runVerify(ctx context.Context, o *verifyOptions) error {
	stdout := o.common.stdout
	subset, err := checkpoint.ParseSubset(o.subset)
	if err != nil {
		return usageError{fmt.Errorf("--read-data-subset (LIFEBOAT_READ_DATA_SUBSET): %v", err)}
	}
	s, err := o.store.open(ctx)
	if err != nil {
		return err
	}
	var steps []int64
	switch arg := o.which; arg {
	case "", "all":
		snaps, err := checkpoint.List(ctx, s)
		if err != nil {
			return err
		}
		for _, sn := range snaps {
			steps = append(steps, sn.Step)
		}
	case "latest":
		step, err := checkpoint.Latest(ctx, s, 0)
		if err != nil {
			return err
		}
		steps = []int64{step}
	default:
		step, _ := strconv.ParseInt(arg, 10, 64) // checked by verifyCmd
		steps = []int64{step}
	}
	bad := 0
	for _, step := range steps {
		rep, err := checkpoint.Verify(ctx, s, step, checkpoint.VerifyOptions{ReadData: subset})
		if err != nil {
			return fmt.Errorf("step %d: %w", step, err)
		}
		if rep.OK() {
			fmt.Fprintf(stdout, "step %d rev %d: ok (%d manifests, %d chunks stored with their sizes; read-data %s: %d chunks, %d bytes read and hashed)\n",
				step, rep.Revision, rep.Manifests, rep.Chunks, rep.ReadData, rep.ChunksRead, rep.BytesRead)
			continue
		}
		bad++
		fmt.Fprintf(stdout, "step %d rev %d: %d problems\n", step, rep.Revision, len(rep.Problems))
		for _, p := range rep.Problems {
			fmt.Fprintf(stdout, "  %s\n", p)
		}
	}
	if bad > 0 {
		return fmt.Errorf("%d of %d checkpoints have problems; restore falls back past them", bad, len(steps))
	}
	return nil
}
