package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/lifeboat-project/lifeboat/agent"
	"github.com/lifeboat-project/lifeboat/checkpoint"
	lbpipeline "github.com/lifeboat-project/lifeboat/pipeline"
	"github.com/lifeboat-project/lifeboat/resume"
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

// pipeline is the checkpoint machinery of one lifeboat: the store, what was
// restored, and the agent that uploads.
type pipeline struct {
	store    storage.Store
	agent    *agent.Agent
	uploader *checkpoint.Uploader // the agent's
	resume   *resume.Point
	env      []string // for the trainer
	dir      string
	ranks    rankOptions
	workers  int
	check    checkpoint.Check // --verify-restore
	allRanks bool             // --restore-ranks all
	log      *slog.Logger
	// resumeSource is "store" (restored here), "init" (by an init
	// container) or "none"; resumeSeconds how long the restore took.
	resumeSource  string
	resumeSeconds float64
	// freshOverProgress: the trainer starts from scratch although the
	// store holds a complete checkpoint (lifeboat_fresh_start_over_progress).
	freshOverProgress bool
	freshOver         *checkpoint.Snapshot // the newest complete step then
	retries           atomic.Int64         // store calls retried after a transient failure (storeOptions.onRetry)
}

// beforeRestart runs between a trainer crash and its restart: it commits
// the newest checkpoint the trainer completed, then restores the newest
// committed one, and returns the new LIFEBOAT_RESUME_* variables.
func (p *pipeline) beforeRestart(ctx context.Context, attempt int) ([]string, error) {
	if err := p.agent.Sync(ctx); err != nil {
		p.log.Warn("resume.sync_failed", "err", err, "effect", "restarting from the newest committed checkpoint")
	}
	t0 := time.Now()
	r, res, err := lbpipeline.Restore(ctx, p.store, p.dir, p.restoreConfig(io.Discard))
	if r != nil {
		lbpipeline.WriteResumeFile(p.dir, r, p.log)
	}
	if err != nil {
		return nil, err
	}
	if r != nil {
		p.agent.Restored(r.Step, r.Files, t0)
		p.agent.SetLine(checkpoint.Continue(res, p.ranks.worldSize))
	}
	// Nothing restored: the run goes on with its line (a fresh start's
	// line is carried across the restarts of the pod).
	return r.Env(), nil
}

// restoreConfig is how the pipeline restores, with progress to
// progressTo (a bar on a terminal) or the log.
func (p *pipeline) restoreConfig(progressTo io.Writer) lbpipeline.RestoreConfig {
	return lbpipeline.RestoreConfig{Rank: p.ranks.rank, WorldSize: p.ranks.worldSize, AllRanks: p.allRanks, Workers: p.workers, Check: p.check,
		Log: p.log, ProgressTo: progressTo}
}

// newPipeline opens the store, restores (unless told not to) and builds the
// agent; it does not start it.
func newPipeline(ctx context.Context, so *storeOptions, co *checkpointOptions, ro rankOptions, log *slog.Logger, progressTo io.Writer) (*pipeline, error) {
	if co.dir == "" {
		return nil, errors.New("--store is set but --dir is not: set --dir (LIFEBOAT_DIR) to the directory the trainer saves checkpoints into")
	}
	if co.restore != "auto" && co.restore != "never" {
		return nil, fmt.Errorf("--restore (LIFEBOAT_RESTORE) is %q; use auto or never", co.restore)
	}
	all, err := allRanks(co.restoreRanks)
	if err != nil {
		return nil, err
	}
	pattern, err := regexp.Compile(co.stepPattern)
	if err != nil {
		return nil, fmt.Errorf("--step-pattern (LIFEBOAT_STEP_PATTERN) %q: %v", co.stepPattern, err)
	}
	if co.verifyFormat != "auto" && co.verifyFormat != "off" {
		return nil, usageError{fmt.Errorf("--verify-format (LIFEBOAT_VERIFY_FORMAT) is %q; use auto or off", co.verifyFormat)}
	}
	exclude := splitList(co.exclude)
	for _, g := range exclude {
		if _, err := path.Match(g, ""); err != nil {
			return nil, usageError{fmt.Errorf("--exclude (LIFEBOAT_EXCLUDE) %q: %v; use shell globs such as *.log", g, err)}
		}
	}
	dir, err := checkpointDir(co.dir, log)
	if err != nil {
		return nil, err
	}
	if err := storeOutside(so, dir); err != nil {
		return nil, err
	}
	p := &pipeline{dir: dir, ranks: ro, workers: co.workers, check: co.verify.check, allRanks: all, log: log}
	so.onRetry = func(storage.RetryEvent) { p.retries.Add(1) }
	s, err := so.open(ctx)
	if err != nil {
		return nil, err
	}
	if err := so.checkConditionalWrites(ctx, s, log); err != nil {
		return nil, err
	}
	p.store = s
	var finished *resume.Point // a restore a kill cut short, finished now
	finishedAt := time.Now()
	if !co.sidecar {
		finished = lbpipeline.FinishInterrupted(dir, log)
		removed, err := checkpoint.RemoveStaleRestores(dir)
		if len(removed) > 0 {
			log.Info("resume.stale_removed", "dir", dir, "entries", removed,
				"reason", "left by a restore that was killed before it could clean up")
		}
		if err != nil {
			log.Warn("resume.stale_remove_failed", "dir", dir, "err", err)
		}
	}
	wcfg := watch.Config{Dir: dir, Marker: co.marker, StepPattern: pattern, Settle: co.settle, Log: log,
		Exclude: exclude, MarkerOnly: co.markerOnly}
	w, err := watch.New(wcfg)
	if err != nil {
		return nil, dirError(err)
	}
	if co.sidecar && !w.WritersVisible() {
		log.Warn("sidecar.writers_invisible", "dir", dir,
			"effect", "the trainer's processes are not visible (no shared PID namespace): lifeboat cannot see which files are still being written or which writer died; it relies on markers, format checks and --settle, also for the final upload",
			"hint", "set shareProcessNamespace: true in the pod spec, or write a marker after each save")
		wcfg.WritersInvisible = true
		if w, err = watch.New(wcfg); err != nil {
			return nil, dirError(err)
		}
	}
	snaps, err := checkpoint.List(ctx, s)
	if err != nil {
		return nil, fmt.Errorf("list checkpoints in %s: %w", s, err)
	}
	got, err := lbpipeline.Resume(ctx, s, w, snaps, lbpipeline.ResumeConfig{RestoreConfig: p.restoreConfig(progressTo), Dir: dir,
		Restore: co.restore == "auto", Sidecar: co.sidecar, VerifyFormat: co.verifyFormat != "off", Finished: finished, FinishedAt: finishedAt})
	if err != nil {
		return nil, err
	}
	p.resume, p.resumeSource, p.resumeSeconds = got.Point, got.Source, got.Seconds
	line, restoredAt := got.Line, got.At
	// A fresh start beside complete steps in the store stays visible.
	if p.resume == nil {
		p.freshOver = checkpoint.Newest(snaps, 0)
	}
	p.freshOverProgress = p.freshOver != nil
	// An unnumbered checkpoint is numbered with the newest step of the
	// line it continues (complete steps of its world size only), or the
	// newest named step on disk, and stored as a new revision of it.
	if last := line.LastInLine(snaps); last >= 0 {
		w.SetLastStep(last)
	}
	u := &checkpoint.Uploader{Store: s, Workers: co.workers, Producer: "lifeboat " + version, Log: log,
		SkipFormatCheck: co.verifyFormat == "off"}
	p.uploader = u
	p.agent, err = agent.New(agent.Config{Dir: dir, Watcher: w, Uploader: u, Rank: ro.rank, WorldSize: ro.worldSize,
		Interval: co.interval, Keep: co.keep, Log: log, Settle: co.settle, VerifyFormat: co.verifyFormat != "off", Line: line})
	if err != nil {
		return nil, err
	}
	if p.resume != nil && p.resumeSource != resume.SourceLocal {
		p.agent.Restored(p.resume.Step, p.resume.Files, restoredAt)
	}
	log.Info("resume.line", "line", checkpoint.ShortLine(line.Line), "world_size", line.WorldSize, "from", fromString(line.From))
	p.env = append(p.resume.Env(), "LIFEBOAT_DIR="+dir, "LIFEBOAT_MARKER="+co.marker,
		"LIFEBOAT_RANK="+strconv.Itoa(ro.rank), "LIFEBOAT_WORLD_SIZE="+strconv.Itoa(ro.worldSize))
	return p, nil
}

// checkpointDir makes --dir absolute, creates it, and resolves symbolic
// links (a --dir that is a link, "/ckpt -> /mnt/pvc/x", is watched where it
// points: the trainer's open files name the real path).
func checkpointDir(dir string, log *slog.Logger) (string, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", fmt.Errorf("--dir %q: %w", dir, err)
	}
	if err := os.MkdirAll(abs, 0o755); err != nil {
		return "", fmt.Errorf("--dir (LIFEBOAT_DIR): create %s: %w", abs, err)
	}
	real, err := filepath.EvalSymlinks(abs)
	if err != nil {
		return "", fmt.Errorf("--dir (LIFEBOAT_DIR) %s: %w", abs, err)
	}
	if real != abs {
		log.Info("watch.dir_resolved", "dir", abs, "resolved", real)
	}
	return real, nil
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

// storeOutside refuses a file:// store inside the checkpoint directory:
// lifeboat would upload its own store as a checkpoint at every scan.
func storeOutside(so *storeOptions, dir string) error {
	loc, err := so.location()
	if err != nil || loc.Scheme != "file" {
		return nil // open reports a bad URL
	}
	p := resolveExisting(loc.Path)
	if p == dir || strings.HasPrefix(p, dir+string(filepath.Separator)) {
		return usageError{fmt.Errorf("--store (LIFEBOAT_STORE) %s is inside --dir (LIFEBOAT_DIR) %s: lifeboat would upload its own store as a checkpoint; put the store outside the directory the trainer saves into", so.url, dir)}
	}
	return nil
}

// resolveExisting resolves the symbolic links of the longest existing
// prefix of the absolute path p and appends the rest.
func resolveExisting(p string) string {
	rest := ""
	for q := p; ; q = filepath.Dir(q) {
		if r, err := filepath.EvalSymlinks(q); err == nil {
			return filepath.Join(r, rest)
		}
		if q == filepath.Dir(q) {
			return p
		}
		rest = filepath.Join(filepath.Base(q), rest)
	}
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

// fromString names where a line of work continues from, for the log.
func fromString(f *checkpoint.StepRef) string {
	if f == nil {
		return "a fresh start"
	}
	return f.String()
}
