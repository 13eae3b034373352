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
	"syscall"
	"time"

	"github.com/lifeboat-project/lifeboat/agent"
	"github.com/lifeboat-project/lifeboat/checkpoint"
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

// restoreLatest restores the newest complete checkpoint of rank into dir,
// falling back to older ones on corruption, and writes the resume file (a
// failure to is logged: the trainer is told by its variables). nil, nil,
// nil means there is none: a fresh start.
func restoreLatest(ctx context.Context, s storage.Store, dir string, ro rankOptions, tune restoreTuning, all bool, log *slog.Logger, progressTo io.Writer) (*resume.Point, *checkpoint.RestoreResult, error) {
	r, res, err := restoreLatestEvery(ctx, s, dir, ro, tune, all, log, progressTo, 5*time.Second)
	if r != nil {
		writeResumeFile(dir, r, log)
	}
	return r, res, err
}

// restoreLatestEvery is restoreLatest reporting progress to progressTo (a
// bar on a terminal) or, every interval, to log, without writing the
// resume file. With all, it restores every rank's files of the newest
// complete step of any world size into --dir/.lifeboat-ranks
// (checkpoint.RestoreOptions.AllRanks).
func restoreLatestEvery(ctx context.Context, s storage.Store, dir string, ro rankOptions, tune restoreTuning, all bool, log *slog.Logger, progressTo io.Writer, interval time.Duration) (*resume.Point, *checkpoint.RestoreResult, error) {
	t0 := time.Now()
	pr := newProgress(progressTo, log, interval)
	res, err := checkpoint.RestoreLatest(ctx, s, ro.rank, dir, checkpoint.RestoreOptions{WorldSize: ro.worldSize, Workers: tune.workers, Check: tune.check, Log: log, Progress: pr.update, AllRanks: all})
	pr.stop()
	if res != nil {
		for _, f := range res.Fallbacks {
			log.Warn("resume.fallback", "skipped_step", f.Step, "reason", f.Err.Error())
		}
	}
	switch {
	case errors.Is(err, checkpoint.ErrNothingRestorable):
		// Failing the start would fail every retry the same way and wedge
		// the Job: the trainer starts fresh, loudly. Nothing in the store
		// is deleted to make room for the new run's checkpoints.
		hint := "see each resume.fallback line; the steps stay in the store"
		if errors.Is(err, checkpoint.ErrTooBig) || errors.Is(err, syscall.ENOSPC) {
			hint = "make --dir's volume larger; the steps stay in the store"
		}
		log.Warn("resume.fresh_start", "store", s.String(), "reason", err.Error(), "hint", hint)
		_ = resume.Remove(dir) // an earlier restore's file must not be resumed
		return nil, nil, nil
	case errors.Is(err, checkpoint.ErrNoCheckpoint):
		if other := otherWorldSizes(ctx, s, ro.worldSize); other != "" {
			log.Warn("resume.fresh_start", "store", s.String(), "reason", "no complete checkpoint for world size "+strconv.Itoa(ro.worldSize),
				"complete_for_world_sizes", other,
				"hint", "run with the world size those steps were saved with (--world-size); or, if the format reshards on load, load every old rank's files with --restore-ranks all; or start this world size fresh on purpose with --restore never")
		} else {
			log.Info("resume.fresh_start", "store", s.String(), "reason", err.Error())
		}
		_ = resume.Remove(dir) // an earlier restore's file must not be resumed
		return nil, nil, nil
	case err != nil:
		return nil, nil, fmt.Errorf("restore from %s into %s: %w", s, dir, err)
	}
	logMovedAside(log, dir, res)
	r := resume.Restored(dir, res, all)
	el := time.Since(t0)
	log.Info("resume.restored", "step", res.Step, "rank", ro.rank, "files", res.Files, "bytes", res.Bytes,
		"seconds", el.Seconds(), "mb_per_s", float64(res.Bytes)/1e6/max(el.Seconds(), 1e-9), "dir", r.Dir, "manifest_id", r.ID, "line", checkpoint.ShortLine(res.Line),
		"verify_restore", tune.check.String(), "chunks_crc32c", res.Checked.CRC32C, "chunks_sha256", res.Checked.SHA256)
	return r, res, nil
}

// maxLoggedPaths bounds the paths one log line lists.
const maxLoggedPaths = 20

// logMovedAside logs what a restore moved out of the restored
// checkpoint's directory (checkpoint.RestoreResult.MovedAside), if
// anything.
func logMovedAside(log *slog.Logger, dir string, res *checkpoint.RestoreResult) {
	if res == nil || len(res.MovedAside) == 0 {
		return
	}
	paths := res.MovedAside[:min(len(res.MovedAside), maxLoggedPaths)]
	log.Warn("resume.moved_aside", "to", filepath.Join(dir, filepath.FromSlash(res.Aside)), "entries", len(res.MovedAside), "paths", paths,
		"reason", "the restored checkpoint's directory held these beyond the snapshot; the resume directory holds the snapshot and nothing else")
}

// finishInterrupted finishes a restore into dir that a kill cut short
// while it moved files into place (checkpoint.FinishInterrupted), writes
// the resume file for it, and returns what the trainer resumes from: the
// restored checkpoint, whole. nil when there was none, or when it could
// not be finished (then its files are moved aside, and logged).
func finishInterrupted(dir string, log *slog.Logger) *resume.Point {
	res, err := checkpoint.FinishInterrupted(dir)
	if err != nil {
		args := []any{"dir", dir, "err", err.Error(), "effect", "its files are moved aside; the checkpoint is restored anew"}
		if res != nil && len(res.MovedAside) > 0 {
			args = append(args, "to", filepath.Join(dir, filepath.FromSlash(res.Aside)), "entries", len(res.MovedAside))
		}
		log.Warn("resume.interrupted_restore_failed", args...)
		return nil
	}
	if res == nil {
		return nil
	}
	logMovedAside(log, dir, res)
	r := resume.Restored(dir, res, len(res.Ranks) > 0)
	writeResumeFile(dir, r, log)
	log.Warn("resume.interrupted_restore_finished", "step", res.Step, "rank", res.Rank, "files", res.Files, "dir", r.Dir, "manifest_id", r.ID,
		"reason", "a restore was killed while it moved files into place; the rest are moved now, so the checkpoint is whole before anything reads or uploads it")
	return r
}

// readResumeFile reads what an earlier restore (an init container's)
// wrote into dir; nil when there is none or it cannot be read.
func readResumeFile(dir string, log *slog.Logger) *resume.Point {
	r, err := resume.Read(dir)
	if err != nil {
		log.Warn("resume.bad_file", "path", filepath.Join(dir, resume.FileName), "err", err)
		return nil
	}
	return r
}

// writeResumeFile writes r into dir's resume file, for a trainer started
// elsewhere (lifeboat run --restore never after an init container); a
// failure is logged, the restore stands.
func writeResumeFile(dir string, r *resume.Point, log *slog.Logger) {
	if err := resume.Write(dir, r); err != nil {
		log.Warn("resume.write_file_failed", "err", err)
	}
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
	r, res, err := restoreLatest(ctx, p.store, p.dir, p.ranks, restoreTuning{p.workers, p.check}, p.allRanks, p.log, io.Discard)
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
		finished = finishInterrupted(dir, log)
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
	var line checkpoint.LineScope
	restoredAt := time.Time{}
	switch {
	case finished != nil:
		// The restore that was cut short is the one that was chosen:
		// its checkpoint is neither new work nor taken as newer, and its
		// line is continued.
		p.resume, p.resumeSource, restoredAt = finished, resume.SourceStore, finishedAt
		line = checkpoint.ContinueFrom(&checkpoint.StepRef{Line: finished.Line, Step: finished.Step, WorldSize: ro.worldSize}, ro.worldSize, nil)
	case co.restore == "auto":
		local, why, newest := resume.NewerLocal(w, snaps, ro.worldSize, co.verifyFormat != "off", log)
		if local != nil {
			var from *checkpoint.StepRef
			if newest != nil {
				from = &checkpoint.StepRef{Line: newest.Line, Step: newest.Step, WorldSize: newest.WorldSize}
			}
			line = checkpoint.ContinueFrom(from, ro.worldSize, nil)
			p.resume, p.resumeSource = resume.Local(dir, *local, line.Line, why), resume.SourceLocal
			writeResumeFile(dir, p.resume, log)
			break
		}
		t0 := time.Now()
		var res *checkpoint.RestoreResult
		p.resume, res, err = restoreLatest(ctx, s, dir, ro, restoreTuning{co.workers, co.verify.check}, all, log, progressTo)
		if err != nil {
			return nil, err
		}
		line = checkpoint.Continue(res, ro.worldSize)
		p.resumeSource, p.resumeSeconds, restoredAt = resume.SourceStore, time.Since(t0).Seconds(), t0
	default:
		// An init container may have restored (lifeboat restore): its
		// files are not new checkpoints, and its line is continued.
		p.resume = readResumeFile(dir, log)
		p.resumeSource = resume.SourceInit
		var from *checkpoint.StepRef
		if p.resume != nil {
			p.resume.Source, restoredAt = resume.SourceInit, p.resume.Written
			from = &checkpoint.StepRef{Line: p.resume.Line, Step: p.resume.Step, WorldSize: ro.worldSize}
		}
		line = checkpoint.ContinueFrom(from, ro.worldSize, nil)
		if n := checkpoint.Newest(snaps, ro.worldSize); p.resume == nil && n != nil && !co.sidecar {
			log.Warn("resume.fresh_start", "store", s.String(),
				"reason", fmt.Sprintf("--restore never and no resume file from lifeboat restore, although the store holds complete step %d of this world size (line %s)", n.Step, checkpoint.ShortLine(n.Line)),
				"hint", "the trainer starts a new line of work beside it; set --restore auto to resume it; lifeboat ls shows the lines")
		}
	}
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

// otherWorldSizes lists the world sizes other than worldSize that the
// store holds complete steps for, each with the step a restore of that
// size takes first ("2 (newest step 5031), 4 (...)"), or "".
func otherWorldSizes(ctx context.Context, s storage.Store, worldSize int) string {
	snaps, err := checkpoint.List(ctx, s)
	if err != nil {
		return ""
	}
	var parts []string
	for _, n := range checkpoint.NewestByWorldSize(snaps) {
		if n.WorldSize != worldSize {
			parts = append(parts, fmt.Sprintf("%d (newest step %d)", n.WorldSize, n.Step))
		}
	}
	return strings.Join(parts, ", ")
}
