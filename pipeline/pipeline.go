package pipeline

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/lifeboat-project/lifeboat/agent"
	"github.com/lifeboat-project/lifeboat/checkpoint"
	"github.com/lifeboat-project/lifeboat/resume"
	"github.com/lifeboat-project/lifeboat/setting"
	"github.com/lifeboat-project/lifeboat/storage"
	"github.com/lifeboat-project/lifeboat/watch"
)

// Pipeline is the checkpoint machinery of one lifeboat: the store, what
// the trainer resumes from, and the agent that uploads.
type Pipeline struct {
	Store    storage.Store
	Agent    *agent.Agent
	Uploader *checkpoint.Uploader // the agent's
	// Dir is the checkpoint directory, absolute, its links resolved.
	Dir             string
	Rank, WorldSize int
	// Resume is what the trainer resumes from (nil: a fresh start);
	// ResumeSource is resume.SourceStore (restored here), SourceLocal or
	// SourceInit (by an init container); ResumeSeconds how long the
	// restore took.
	Resume        *resume.Point
	ResumeSource  string
	ResumeSeconds float64
	// FreshOver is the store's newest complete step when the trainer
	// starts from scratch although the store holds one (any world size),
	// else nil.
	FreshOver *checkpoint.Snapshot
	// Env is the trainer's LIFEBOAT_* variables: the resume point's, the
	// directory, the marker, the rank and the world size.
	Env []string

	restore RestoreConfig // how a restart restores
	retries atomic.Int64  // store calls retried after a transient failure
}

// Retries is how many store calls were retried after a transient failure.
func (p *Pipeline) Retries() int64 { return p.retries.Load() }

// Open opens the store, finishes a restore a kill cut short, decides what
// the trainer resumes from and does it (resumeAtStart), and builds the agent; it
// does not start it (Agent.Run).
func Open(ctx context.Context, o Options) (*Pipeline, error) {
	log := o.Log
	if o.Dir == "" {
		return nil, &FieldError{Field: FieldDir, Err: ErrNoDir}
	}
	dir, err := checkpointDir(o.Dir, log)
	if err != nil {
		return nil, err
	}
	if o.Store.Location.Scheme == "file" {
		if p := resolveExisting(o.Store.Location.Path); p == dir || strings.HasPrefix(p, dir+string(filepath.Separator)) {
			return nil, &FieldError{Field: FieldDir, Value: dir, Err: ErrHoldsStore}
		}
	}
	p := &Pipeline{Dir: dir, Rank: o.Rank, WorldSize: o.WorldSize,
		restore: RestoreConfig{Rank: o.Rank, WorldSize: o.WorldSize, AllRanks: o.AllRanks, Workers: o.Workers, Check: o.Check, Log: log}}
	sc := o.Store
	sc.OnRetry = func(storage.RetryEvent) { p.retries.Add(1) }
	s, err := OpenStore(ctx, sc)
	if err != nil {
		return nil, err
	}
	if o.Opened != nil {
		o.Opened(s)
	}
	if err := CheckConditionalWrites(ctx, s, sc, log); err != nil {
		return nil, err
	}
	p.Store = s
	var finished *resume.Point // a restore a kill cut short, finished now
	finishedAt := time.Now()
	if !o.Sidecar {
		finished = FinishInterrupted(dir, log)
		removed, err := checkpoint.RemoveStaleRestores(dir)
		if len(removed) > 0 {
			log.Info("resume.stale_removed", "dir", dir, "entries", removed,
				"reason", "left by a restore that was killed before it could clean up")
		}
		if err != nil {
			log.Warn("resume.stale_remove_failed", "dir", dir, "err", err)
		}
	}
	w, err := newWatcher(o, dir)
	if err != nil {
		return nil, err
	}
	snaps, err := checkpoint.List(ctx, s)
	if err != nil {
		return nil, fmt.Errorf("list checkpoints in %s: %w", s, err)
	}
	rc := p.restore
	rc.ProgressTo = o.ProgressTo
	got, err := resumeAtStart(ctx, s, w, snaps, resumeConfig{RestoreConfig: rc, Dir: dir,
		Restore: o.Restore, Sidecar: o.Sidecar, VerifyFormat: o.VerifyFormat, Finished: finished, FinishedAt: finishedAt})
	if err != nil {
		return nil, err
	}
	p.Resume, p.ResumeSource, p.ResumeSeconds = got.Point, got.Source, got.Seconds
	line := got.Line
	// A fresh start beside complete steps in the store stays visible.
	if p.Resume == nil {
		p.FreshOver = checkpoint.Newest(snaps, 0)
	}
	// An unnumbered checkpoint is numbered with the newest step of the
	// line it continues (complete steps of its world size only), or the
	// newest named step on disk, and stored as a new revision of it.
	if last := line.LastInLine(snaps); last >= 0 {
		w.SetLastStep(last)
	}
	p.Uploader = &checkpoint.Uploader{Store: s, Workers: o.Workers, Producer: o.Producer, Log: log, SkipFormatCheck: !o.VerifyFormat}
	p.Agent, err = agent.New(agent.Config{Dir: dir, Watcher: w, Uploader: p.Uploader, Rank: o.Rank, WorldSize: o.WorldSize,
		Interval: o.Interval, Keep: o.Keep, Log: log, Settle: o.Settle, VerifyFormat: o.VerifyFormat, Line: line})
	if err != nil {
		return nil, err
	}
	if p.Resume != nil && p.ResumeSource != resume.SourceLocal {
		p.Agent.Restored(p.Resume.Step, p.Resume.Files, got.At)
	}
	log.Info("resume.line", "line", checkpoint.ShortLine(line.Line), "world_size", line.WorldSize, "from", fromString(line.From))
	p.Env = append(p.Resume.Env(), "LIFEBOAT_DIR="+dir, "LIFEBOAT_MARKER="+o.Marker,
		"LIFEBOAT_RANK="+strconv.Itoa(o.Rank), "LIFEBOAT_WORLD_SIZE="+strconv.Itoa(o.WorldSize))
	return p, nil
}

// BeforeRestart runs between a trainer crash and its restart: it commits
// the newest checkpoint the trainer completed, then restores the newest
// committed one, and returns the new LIFEBOAT_RESUME_* variables.
func (p *Pipeline) BeforeRestart(ctx context.Context, attempt int) ([]string, error) {
	if err := p.Agent.Sync(ctx); err != nil {
		p.restore.Log.Warn("resume.sync_failed", "err", err, "effect", "restarting from the newest committed checkpoint")
	}
	t0 := time.Now()
	rc := p.restore
	rc.ProgressTo = io.Discard
	r, res, err := restoreAndHandOn(ctx, p.Store, p.Dir, rc)
	if err != nil {
		return nil, err
	}
	if r != nil {
		p.Agent.Restored(r.Step, r.Files, t0)
		p.Agent.SetLine(checkpoint.Continue(res, p.WorldSize))
	}
	// Nothing restored: the run goes on with its line (a fresh start's
	// line is carried across the restarts of the pod).
	return r.Env(), nil
}

// ReportTo has pod told of the restore done before the trainer started,
// of a fresh start beside complete steps in the store, and of what the
// agent does from now on (commits, failed uploads, interrupted saves,
// restores before a restart).
func (p *Pipeline) ReportTo(pod Pod) {
	if p.Resume != nil {
		pod.Restored(p.Resume.Step, p.ResumeSource, p.ResumeSeconds)
	}
	if n := p.FreshOver; n != nil {
		pod.FreshStartOverProgress(n.Step, checkpoint.ShortLine(n.Line))
	}
	p.Agent.Notify(func(e agent.Event) {
		switch e.Kind {
		case agent.EventCommitted:
			pod.Committed(e.Step, e.Bytes, e.Seconds, e.Saved, e.Final)
		case agent.EventUploadFailed:
			pod.UploadFailed(e.Step, e.Err)
		case agent.EventInterrupted:
			pod.Interrupted(e.Step, e.Path, e.Why)
		case agent.EventRestored:
			pod.Restored(e.Step, "store", 0)
		}
	})
}

// newWatcher watches dir for o's checkpoints. A sidecar that cannot see
// the trainer's processes (no shared PID namespace) says so, and its
// watcher relies on markers, format checks and the settle time.
func newWatcher(o Options, dir string) (*watch.Watcher, error) {
	wcfg := watch.Config{Dir: dir, Marker: o.Marker, StepPattern: o.StepPattern, Settle: o.Settle, Log: o.Log,
		Exclude: o.Exclude, MarkerOnly: o.MarkerOnly}
	w, err := watch.New(wcfg)
	if err != nil || !o.Sidecar || w.WritersVisible() {
		return w, err
	}
	o.Log.Warn("sidecar.writers_invisible", "dir", dir,
		"effect", setting.Textf("the trainer's processes are not visible (no shared PID namespace): lifeboat cannot see which files are still being written or which writer died; it relies on markers, format checks and %s, also for the final upload", setting.Settle),
		"hint", "set shareProcessNamespace: true in the pod spec, or write a marker after each save")
	wcfg.WritersInvisible = true
	return watch.New(wcfg)
}

// checkpointDir makes dir absolute, creates it, and resolves symbolic
// links (a dir that is a link, "/ckpt -> /mnt/pvc/x", is watched where it
// points: the trainer's open files name the real path). Its errors are
// *FieldError values of FieldDir.
func checkpointDir(dir string, log *slog.Logger) (string, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", &FieldError{Field: FieldDir, Value: dir, Err: err}
	}
	if err := os.MkdirAll(abs, 0o755); err != nil {
		return "", &FieldError{Field: FieldDir, Value: abs, Err: err}
	}
	real, err := filepath.EvalSymlinks(abs)
	if err != nil {
		return "", &FieldError{Field: FieldDir, Value: abs, Err: err}
	}
	if real != abs {
		log.Info("watch.dir_resolved", "dir", abs, "resolved", real)
	}
	return real, nil
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

// fromString names where a line of work continues from, for the log.
func fromString(f *checkpoint.StepRef) string {
	if f == nil {
		return "a fresh start"
	}
	return f.String()
}
