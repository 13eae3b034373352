package pipeline

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"time"

	"github.com/lifeboat-project/lifeboat/checkpoint"
	"github.com/lifeboat-project/lifeboat/resume"
	"github.com/lifeboat-project/lifeboat/storage"
)

// RestoreConfig says which checkpoint files a restore takes and how.
type RestoreConfig struct {
	Rank, WorldSize int
	// AllRanks restores every rank's files of the newest complete step
	// of any world size, each under the directory's checkpoint.RanksDir
	// (checkpoint.RestoreOptions.AllRanks).
	AllRanks bool
	Workers  int              // parallel chunk downloads; 0: the default
	Check    checkpoint.Check // how each downloaded chunk is checked
	Log      *slog.Logger
	// ProgressTo gets a bar when it is a terminal; otherwise progress is
	// logged every ProgressEvery (5s when 0).
	ProgressTo    io.Writer
	ProgressEvery time.Duration
}

func (c RestoreConfig) progress() *progress {
	every := c.ProgressEvery
	if every <= 0 {
		every = 5 * time.Second
	}
	to := c.ProgressTo
	if to == nil {
		to = io.Discard
	}
	return newProgress(to, c.Log, every)
}

// Restore restores the newest complete checkpoint of c's rank from s into
// dir, falling back to older ones on corruption, without writing the
// resume file. nil, nil, nil means there is none this rank can restore: a
// fresh start (AfterRestore), logged as resume.fresh_start, and an earlier
// restore's resume file is removed so that it is not resumed.
func Restore(ctx context.Context, s storage.Store, dir string, c RestoreConfig) (*resume.Point, *checkpoint.RestoreResult, error) {
	log := c.Log
	t0 := time.Now()
	pr := c.progress()
	res, err := checkpoint.RestoreLatest(ctx, s, c.Rank, dir, checkpoint.RestoreOptions{WorldSize: c.WorldSize, Workers: c.Workers, Check: c.Check, Log: log, Progress: pr.update, AllRanks: c.AllRanks})
	pr.stop()
	if res != nil {
		for _, f := range res.Fallbacks {
			log.Warn("resume.fallback", "skipped_step", f.Step, "reason", f.Err.Error())
		}
	}
	var stored []checkpoint.Snapshot
	if errors.Is(err, checkpoint.ErrNoCheckpoint) {
		stored, _ = checkpoint.List(ctx, s) // a failed listing names no other world size
	}
	fresh, err := AfterRestore(err, c.WorldSize, stored)
	if err != nil {
		return nil, nil, fmt.Errorf("restore from %s into %s: %w", s, dir, err)
	}
	if fresh != nil {
		logFresh(log, s, fresh)
		_ = resume.Remove(dir) // an earlier restore's file must not be resumed
		return nil, nil, nil
	}
	logMovedAside(log, dir, res)
	r := resume.Restored(dir, res, c.AllRanks)
	el := time.Since(t0)
	log.Info("resume.restored", "step", res.Step, "rank", c.Rank, "files", res.Files, "bytes", res.Bytes,
		"seconds", el.Seconds(), "mb_per_s", float64(res.Bytes)/1e6/max(el.Seconds(), 1e-9), "dir", r.Dir, "manifest_id", r.ID, "line", checkpoint.ShortLine(res.Line),
		"verify_restore", c.Check.String(), "chunks_crc32c", res.Checked.CRC32C, "chunks_sha256", res.Checked.SHA256)
	return r, res, nil
}

// restoreAndHandOn is Restore, then the resume file for what it restored
// (a failure to write it is logged: the trainer is told by its variables).
func restoreAndHandOn(ctx context.Context, s storage.Store, dir string, c RestoreConfig) (*resume.Point, *checkpoint.RestoreResult, error) {
	r, res, err := Restore(ctx, s, dir, c)
	if r != nil {
		writeResumeFile(dir, r, c.Log)
	}
	return r, res, err
}

// RestoreStep restores exactly step from s into dir (of its own world
// size with c.AllRanks, else of c.WorldSize), without writing the resume
// file, and returns what the trainer resumes from.
func RestoreStep(ctx context.Context, s storage.Store, dir string, step int64, c RestoreConfig) (*resume.Point, *checkpoint.RestoreResult, error) {
	pr := c.progress()
	ws := c.WorldSize
	if c.AllRanks {
		ws = 0 // the step's own world size
	}
	res, err := checkpoint.Restore(ctx, s, step, c.Rank, dir, checkpoint.RestoreOptions{WorldSize: ws, Workers: c.Workers, Check: c.Check, Log: c.Log, Progress: pr.update, AllRanks: c.AllRanks})
	pr.stop()
	if err != nil {
		return nil, nil, err
	}
	logMovedAside(c.Log, dir, res)
	return resume.Restored(dir, res, c.AllRanks), res, nil
}

// logFresh logs a fresh start: resume.fresh_start, a WARN when the store
// holds progress the trainer does not resume.
func logFresh(log *slog.Logger, s storage.Store, f *FreshStart) {
	args := []any{"store", s.String(), "reason", f.Reason}
	if f.WorldSizes != "" {
		args = append(args, "complete_for_world_sizes", f.WorldSizes)
	}
	if !f.Hint.IsZero() {
		args = append(args, "hint", f.Hint)
	}
	if f.Warn {
		log.Warn("resume.fresh_start", args...)
	} else {
		log.Info("resume.fresh_start", args...)
	}
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

// FinishInterrupted finishes a restore into dir that a kill cut short
// while it moved files into place (checkpoint.FinishInterrupted), writes
// the resume file for it, and returns what the trainer resumes from: the
// restored checkpoint, whole. nil when there was none, or when it could
// not be finished (then its files are moved aside, and logged).
func FinishInterrupted(dir string, log *slog.Logger) *resume.Point {
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
