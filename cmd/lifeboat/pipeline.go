package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"regexp"
	"strings"
	"time"

	"github.com/lifeboat-project/lifeboat/checkpoint"
	"github.com/lifeboat-project/lifeboat/pipeline"
	"github.com/lifeboat-project/lifeboat/storage"
	"github.com/lifeboat-project/lifeboat/watch"
)

// checkpointOptions say which directory the trainer saves into and how its
// checkpoints are recognised, uploaded and kept.
type checkpointOptions struct {
	dir          string
	keep         int
	settle       time.Duration
	interval     time.Duration
	marker       string
	stepPattern  string
	restore      string
	restoreRanks string
	workers      int
	verify       checkFlag // --verify-restore
	exclude      string
	markerOnly   bool
	verifyFormat string
	// sidecar is set by `lifeboat sidecar`: the trainer runs in another
	// container, so its processes may be invisible and its deaths unknown.
	sidecar bool

	// Parsed by validate: --step-pattern, --exclude's globs and
	// --restore-ranks all.
	pattern  *regexp.Regexp
	excludes []string
	all      bool
}

func (o *checkpointOptions) register(fs *flag.FlagSet) {
	fs.StringVar(&o.dir, "dir", "", "the directory the trainer saves checkpoints into (exported to it as LIFEBOAT_DIR)")
	fs.IntVar(&o.keep, "keep", 3, "keep the newest N complete checkpoints in the store (0: keep all)")
	fs.DurationVar(&o.settle, "settle", watch.DefaultSettle, "how long a checkpoint's files must stay unchanged to count as complete")
	fs.DurationVar(&o.interval, "scan-interval", 2*time.Second, "how often --dir is scanned for new checkpoints")
	fs.StringVar(&o.marker, "marker", watch.DefaultMarker, "file whose presence marks a directory as a complete checkpoint; its content is the step")
	fs.StringVar(&o.stepPattern, "step-pattern", watch.DefaultStepPattern.String(), "regular expression whose first group is the step in a checkpoint's name")
	fs.StringVar(&o.restore, "restore", "auto", "auto: restore the newest complete checkpoint into --dir before starting; never: start fresh")
	fs.StringVar(&o.restoreRanks, "restore-ranks", "own", restoreRanksUsage)
	fs.StringVar(&o.exclude, "exclude", strings.Join(watch.DefaultExclude, ","),
		"comma-separated globs of files under --dir that are never part of a checkpoint (logs, temporary files); empty: none")
	fs.BoolVar(&o.markerOnly, "marker-only", false, "only directories holding the --marker file are checkpoints (otherwise this holds from the first marker seen)")
	fs.StringVar(&o.verifyFormat, "verify-format", "auto",
		"auto: a file whose content a format check recognises (pickle, torch legacy, zip, safetensors, npy, JSON) and finds not whole makes its checkpoint an interrupted save, never committed or resumed; off: no format checks")
	fs.IntVar(&o.workers, "workers", 0, fmt.Sprintf("parallel chunk uploads and downloads; 0: %d uploads, %d downloads", checkpoint.DefaultUploadWorkers, checkpoint.DefaultDownloadWorkers))
	o.verify.register(fs)
}

const restoreRanksUsage = "own: restore this rank's files of the newest complete checkpoint of this world size; " +
	"all: every rank's files of the newest complete checkpoint of any world size, each under --dir/" + checkpoint.RanksDir + "/rank-NNNNN/ " +
	"(for formats that reshard on load, such as Paddle's save_state_dict), with LIFEBOAT_RESUME_DIR pointing there"

// allRanks reads --restore-ranks: own (false) or all (true).
func allRanks(v string) (bool, error) {
	switch v {
	case "own", "":
		return false, nil
	case "all":
		return true, nil
	}
	return false, usageError{fmt.Errorf("--restore-ranks (LIFEBOAT_RESTORE_RANKS) is %q; use own or all", v)}
}

// openPipeline opens the checkpoint pipeline the options ask for
// (pipeline.Open): the store, the restore (unless told not to) and the
// agent, which it does not start. progressTo gets a restore's progress
// bar when it is a terminal.
func openPipeline(ctx context.Context, so *storeOptions, co *checkpointOptions, ro rankOptions, log *slog.Logger, progressTo io.Writer) (*pipeline.Pipeline, error) {
	sc, err := so.config()
	if err != nil {
		return nil, err
	}
	p, err := pipeline.Open(ctx, pipeline.Options{Store: sc, Dir: co.dir, Rank: ro.rank, WorldSize: ro.worldSize,
		Restore: co.restore == "auto", AllRanks: co.all, Workers: co.workers, Check: co.verify.check, Keep: co.keep,
		Settle: co.settle, Interval: co.interval, Marker: co.marker, StepPattern: co.pattern, Exclude: co.excludes, MarkerOnly: co.markerOnly,
		VerifyFormat: co.verifyFormat != "off", Sidecar: co.sidecar, Producer: "lifeboat " + version, Log: log, ProgressTo: progressTo,
		Opened: func(s storage.Store) { so.opened = s }})
	return p, pipelineError(err, so)
}

// pipelineError names the flags and variables of pipeline.Open's
// *pipeline.FieldError and of watch.New's (dirError); other errors are
// returned as they are.
func pipelineError(err error, so *storeOptions) error {
	var fe *pipeline.FieldError
	switch {
	case err == nil:
		return nil
	case !errors.As(err, &fe):
		return dirError(err)
	case errors.Is(err, pipeline.ErrNoDir):
		return errors.New("--store is set but --dir is not: set --dir (LIFEBOAT_DIR) to the directory the trainer saves checkpoints into")
	case errors.Is(err, pipeline.ErrHoldsStore):
		return usageError{fmt.Errorf("--store (LIFEBOAT_STORE) %s is inside --dir (LIFEBOAT_DIR) %s: lifeboat would upload its own store as a checkpoint; put the store outside the directory the trainer saves into", so.url, fe.Value)}
	case fe.Field == pipeline.FieldDir:
		return fmt.Errorf("--dir (LIFEBOAT_DIR) %s: %w", fe.Value, fe.Err)
	}
	return so.fieldError(err)
}

// dirError names --dir (LIFEBOAT_DIR) in watch.New's *watch.FieldError;
// other errors are returned as they are.
func dirError(err error) error {
	var fe *watch.FieldError
	switch {
	case !errors.As(err, &fe):
		return err
	case fe.Value == "":
		return errors.New("no directory to watch: set --dir (LIFEBOAT_DIR)")
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("--dir (LIFEBOAT_DIR) %s does not exist; create it or point --dir at the directory the trainer saves checkpoints into", fe.Value)
	case errors.Is(err, watch.ErrNotDir):
		return fmt.Errorf("--dir (LIFEBOAT_DIR) %s is not a directory; point --dir at the directory the trainer saves checkpoints into", fe.Value)
	}
	return fmt.Errorf("--dir (LIFEBOAT_DIR) %s: %w", fe.Value, fe.Err)
}

// splitList splits a comma-separated flag value, dropping empty items.
func splitList(v string) []string {
	out := []string{}
	for _, part := range strings.Split(v, ",") {
		if part = strings.TrimSpace(part); part != "" {
			out = append(out, part)
		}
	}
	return out
}
