package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/lifeboat-project/lifeboat/checkpoint"
)

// verifyOptions are the flags of `lifeboat verify`.
type verifyOptions struct {
	common commonOptions
	store  storeOptions
	subset string
	json   bool
	which  string // the argument: STEP, latest, all or empty (all)
}

// verifyEntry is one step of `lifeboat verify --json`.
type verifyEntry struct {
	Step      int64 `json:"step"`
	WorldSize int   `json:"world_size"`
	// Revision is the highest revision of the ranks' manifests checked.
	Revision int `json:"revision"`
	// Ranks are the revisions checked: the ones a restore of the step
	// takes, each rank's highest, or with PassedOver its highest named.
	Ranks []verifyRank `json:"ranks"`
	// PassedOver, when set, says why the ranks' highest revisions (counter
	// checkpoints) were passed over, as a restore passes them over.
	PassedOver string          `json:"passed_over,omitempty"`
	ReadData   string          `json:"read_data"`
	DataCheck  string          `json:"data_check"` // how the chunks read were checked: sha256
	Manifests  int             `json:"manifests"`
	Chunks     int             `json:"chunks"`
	ChunksRead int             `json:"chunks_read"`
	BytesRead  int64           `json:"bytes_read"`
	OK         bool            `json:"ok"`
	Problems   []verifyProblem `json:"problems"`
}

// verifyRank is the revision checked of one rank.
type verifyRank struct {
	Rank     int    `json:"rank"`
	Revision int    `json:"revision"`
	Counter  bool   `json:"counter"`
	Manifest string `json:"manifest"` // its key
}

// verifyProblem is one problem found.
type verifyProblem struct {
	Kind   string `json:"kind"`
	Key    string `json:"key"`
	Detail string `json:"detail"`
}

func newVerifyEntry(rep *checkpoint.VerifyReport) verifyEntry {
	e := verifyEntry{Step: rep.Step, WorldSize: rep.WorldSize, Revision: rep.Revision, Ranks: []verifyRank{}, PassedOver: rep.PassedOver,
		ReadData: rep.ReadData.String(), DataCheck: rep.Check.String(), Manifests: rep.Manifests, Chunks: rep.Chunks, ChunksRead: rep.ChunksRead, BytesRead: rep.BytesRead,
		OK: rep.OK(), Problems: []verifyProblem{}}
	for _, r := range rep.Ranks {
		e.Ranks = append(e.Ranks, verifyRank{Rank: r.Rank, Revision: r.Revision, Counter: r.Counter, Manifest: r.Key})
	}
	for _, p := range rep.Problems {
		e.Problems = append(e.Problems, verifyProblem{Kind: string(p.Kind), Key: p.Key, Detail: p.Detail})
	}
	return e
}

// checkedRevisions says, for a report whose ranks' highest revisions were
// passed over, which revisions were checked instead: "rank 0 rev 0, rank 1
// rev 2", at most 8 ranks shown.
func checkedRevisions(rep *checkpoint.VerifyReport) string {
	const shown = 8
	var parts []string
	for _, r := range rep.Ranks[:min(len(rep.Ranks), shown)] {
		parts = append(parts, fmt.Sprintf("rank %d rev %d", r.Rank, r.Revision))
	}
	if len(rep.Ranks) > shown {
		parts = append(parts, fmt.Sprintf("and %d more", len(rep.Ranks)-shown))
	}
	return strings.Join(parts, ", ")
}

// verifyHelp explains the forms verify accepts and what each level checks.
const verifyHelp = `lifeboat verify --store URL [--read-data-subset all|none|n/t] [--json] [STEP|latest|all]

Checks checkpoints the way a restore would take them: each rank's highest
revision of a step, except where the ranks' highest revisions are counter
checkpoints that cannot be paired and each rank has a named revision
beneath them: a restore takes those named revisions, so verify checks
them, and says so ("named revisions checked"; JSON: ranks, passed_over).
Which steps:
  STEP     that step (a number, as lifeboat ls shows it)
  latest   the newest complete step (the one a restore takes first)
  all      every step in the store, oldest first (the default)
What is checked at every level: every rank of the step has a manifest that
decodes and is valid, and every chunk the manifests name is stored with the
size they say (and the SHA-256 the store reports, where it reports one).
--read-data-subset then sets which chunks are also downloaded and checked
by their SHA-256, the content address the manifests name, and the CRC32C
they record (whatever --verify-restore a restore uses: verify is the check
that trusts no one):
  all      every chunk (the default): a chunk whose bytes were altered is found
  none     none: presence and sizes only (cheap: one Stat per chunk); a chunk
           altered in place with its size kept is NOT found
  n/t      part n of t of the chunks, chosen by hash: running 1/t to t/t
           reads every chunk once (spread a large store's cost over t runs)
The format checks a restore runs (pickle, zip, safetensors) are not run.
--json prints one JSON array, a report per step: the revision checked of
each rank (ranks), why the highest were passed over (passed_over), the
counts, ok, and the problems.
Exit 0: no problem found; 1: a problem found (each is printed) or the store
could not be read; 2: a bad command line.`

func verifyCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	o := &verifyOptions{}
	fs := newFlagSet("verify", stderr)
	o.common.register(fs)
	o.store.register(fs)
	fs.StringVar(&o.subset, "read-data-subset", "all", "which chunks to download and hash besides checking they are stored with their size: all, none, or part n/t")
	fs.BoolVar(&o.json, "json", false, "print JSON, one array of reports, one per step")
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
	var entries []verifyEntry
	for _, step := range steps {
		rep, err := checkpoint.Verify(ctx, s, step, checkpoint.VerifyOptions{ReadData: subset})
		if err != nil {
			return fmt.Errorf("step %d: %w", step, err)
		}
		if !rep.OK() {
			bad++
		}
		if o.json {
			entries = append(entries, newVerifyEntry(rep))
			continue
		}
		if rep.OK() {
			fmt.Fprintf(stdout, "step %d rev %d: ok (%d manifests, %d chunks stored with their sizes; read-data %s: %d chunks, %d bytes read and checked (%s))\n",
				step, rep.Revision, rep.Manifests, rep.Chunks, rep.ReadData, rep.ChunksRead, rep.BytesRead, rep.Check)
		} else {
			fmt.Fprintf(stdout, "step %d rev %d: %d problems\n", step, rep.Revision, len(rep.Problems))
		}
		if rep.PassedOver != "" {
			fmt.Fprintf(stdout, "  named revisions checked (%s), as a restore takes them: the highest revisions are not restored (%s)\n", checkedRevisions(rep), rep.PassedOver)
		}
		for _, p := range rep.Problems {
			fmt.Fprintf(stdout, "  %s\n", p)
		}
	}
	if o.json {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if entries == nil {
			entries = []verifyEntry{}
		}
		if err := enc.Encode(entries); err != nil {
			return err
		}
	}
	if bad > 0 {
		return fmt.Errorf("%d of %d checkpoints have problems; restore falls back past them", bad, len(steps))
	}
	return nil
}
