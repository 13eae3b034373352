// Package agent runs lifeboat's checkpoint pipeline next to the trainer: a
// background loop that uploads each checkpoint the trainer completes, and
// the final flush that commits the last one when the trainer is gone.
//
// Rules (docs/FORMAT.md has the storage side):
//   - Newest wins. When several checkpoints are complete at once, only the
//     newest is uploaded; the older ones are marked superseded. A named
//     step is never superseded by a counter checkpoint of the same moment
//     (see Agent.newest).
//   - An upload in flight is finished, not cancelled, when a newer
//     checkpoint appears during training: its chunks are mostly what the
//     next one needs anyway, and cancelling could starve uploads when
//     checkpoints come faster than they upload. At the final flush it is
//     cancelled only when a newer checkpoint is waiting.
//   - Failures are retried with backoff and never stop the loop; they are
//     logged and counted. A checkpoint is committed (its manifest written)
//     only when all its chunks are stored.
package agent

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path"
	"path/filepath"
	"sync"
	"time"

	"github.com/lifeboat-project/lifeboat/checkpoint"
	"github.com/lifeboat-project/lifeboat/internal/beneath"
	"github.com/lifeboat-project/lifeboat/setting"
	"github.com/lifeboat-project/lifeboat/storage"
	"github.com/lifeboat-project/lifeboat/watch"
)

// Config wires an Agent. Zero fields take the defaults.
type Config struct {
	Dir       string // the watched directory; the watcher's Dir
	Watcher   *watch.Watcher
	Uploader  *checkpoint.Uploader
	Rank      int
	WorldSize int
	// Interval between scans. Default 2s.
	Interval time.Duration
	// Keep prunes the store to the newest Keep complete steps of the
	// run's line of work after each commit, on rank 0 only, with the
	// Uploader's SafetyWindow (so that the two match): only what the line
	// superseded (checkpoint.LineScope). 0 never prunes.
	Keep int
	// Line is the run's line of work: written into every manifest, and
	// what the prune may delete. SetLine changes it (a restart that
	// restored another line's checkpoint).
	Line checkpoint.LineScope
	// AssumedThroughput is used for the grace reserve until an upload has
	// been measured, in bytes per second. Default 50 MB/s.
	AssumedThroughput float64
	// Settle is the watcher's settle time: a file that changed less than
	// this before a process of the trainer died abnormally is an
	// interrupted save (unless a format check covers it). Default
	// watch.DefaultSettle.
	Settle time.Duration
	// VerifyFormat says the uploader checks file formats (pickle, zip,
	// safetensors), so such files are judged by their check, not by when
	// a process died.
	VerifyFormat bool
	Log          *slog.Logger
	Clock        func() time.Time
}

// Stats is what the agent has done so far.
type Stats struct {
	Commits         int       // checkpoints committed (or found already committed)
	Failures        int       // failed upload attempts
	Superseded      int       // checkpoints skipped because a newer one was complete
	Interrupted     int       // checkpoints never stored because their save was cut short
	Torn            int       // commits found torn afterwards (a file grew): marked never to restore
	LastStep        int64     // step of the last commit, -1 before any
	LastCommit      time.Time // when it was committed
	UploadedBytes   int64     // chunk bytes Put
	DedupedBytes    int64     // chunk bytes found already stored
	LastBytes       int64     // size of the newest checkpoint seen
	Throughput      float64   // bytes/s of new data, measured; 0 before any
	PendingBytes    int64     // size of the checkpoint being uploaded, 0 if none
	InFlightStep    int64     // its step
	RestoredStep    int64     // step restored at start, -1 if none
	LastUploadError string    // the last failure, "" once a commit succeeds
}

// Agent is the pipeline for one rank.
type Agent struct {
	cfg     Config
	flushCh chan flushReq
	stopCh  chan struct{} // Stopping: a stop is under way (stream.go)
	running chan struct{} // closed when Run starts
	stopped chan struct{} // closed when Run returns
	// writing is true during a flush that began while the trainer may
	// still be writing (FlushWhenWritten): its scans wait for checkpoints
	// to settle. Run's goroutine owns it.
	writing bool

	mu       sync.Mutex
	stats    Stats
	restored map[string]fileState // restored files as found on disk after the restore
	// restoredAt is when the last restore into the directory began: a
	// checkpoint there that has not changed since is not new work.
	restoredAt time.Time
	line       checkpoint.LineScope
	// deaths and openAtKill are what the supervisor reported (interrupt.go).
	deaths     []Death
	openAtKill map[string]time.Time
	// refused is the highest step refused as an interrupted save during
	// the flush in progress, -1 when none.
	refused int64
	// flushNote says what the last final upload did (FlushNote).
	flushNote string
	// counterNext: the last pick chose a named step over a counter
	// checkpoint with newer content, which the next pick returns (Run's
	// goroutine only).
	counterNext bool
	// lastNamed is the named step newest last chose, for a counter
	// checkpoint that completes in a later scan (Run's goroutine only).
	lastNamed *watch.Ready
	// superseded holds, by step, the named checkpoints a newer commit
	// superseded in this run: what CommitStep may still commit.
	superseded map[int64]watch.Ready
	// commits holds, by checkpoint id, this run's last commit of it
	// (torn.go): also which named steps this run committed.
	commits map[string]*commitRecord
	notify  func(Event) // events.go
}

type flushReq struct {
	ctx     context.Context
	keep    bool // Sync: go on running afterwards
	writing bool // the trainer may still be writing: the scan waits for checkpoints to settle
	reply   chan error
}

// New checks cfg and returns an Agent; start it with Run.
func New(cfg Config) (*Agent, error) {
	switch {
	case cfg.Watcher == nil || cfg.Uploader == nil:
		return nil, errors.New("agent: a watcher and an uploader are required")
	case cfg.WorldSize < 1 || cfg.Rank < 0 || cfg.Rank >= cfg.WorldSize:
		return nil, fmt.Errorf("agent: rank %d of world size %d: Rank must be 0..WorldSize-1", cfg.Rank, cfg.WorldSize)
	case cfg.Keep < 0:
		return nil, fmt.Errorf("agent: Keep is %d; it must be 0 (keep all) or more", cfg.Keep)
	}
	if cfg.Interval == 0 {
		cfg.Interval = 2 * time.Second
	}
	if cfg.AssumedThroughput == 0 {
		cfg.AssumedThroughput = 50e6
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.Clock == nil {
		cfg.Clock = time.Now
	}
	if cfg.Settle == 0 {
		cfg.Settle = watch.DefaultSettle
	}
	return &Agent{cfg: cfg, flushCh: make(chan flushReq), stopCh: make(chan struct{}, 1), running: make(chan struct{}), stopped: make(chan struct{}),
		stats: Stats{LastStep: -1, RestoredStep: -1, InFlightStep: -1}, line: cfg.Line,
		superseded: map[int64]watch.Ready{}, commits: map[string]*commitRecord{}}, nil
}

// SetLine makes sc the run's line of work from the next upload on.
func (a *Agent) SetLine(sc checkpoint.LineScope) {
	a.mu.Lock()
	a.line = sc
	a.mu.Unlock()
}

// Line is the run's line of work.
func (a *Agent) Line() checkpoint.LineScope {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.line
}

// Restored tells the agent which checkpoint was restored into the
// directory before the trainer started: its step, its files' paths
// (relative to the directory) and when the restore began. The restored
// files, as they are on disk now (size and modification time), are not
// uploaded again while unchanged; the trainer rewriting one makes it a new
// checkpoint. After a restore only new work is uploaded: a checkpoint in
// the directory whose files all last changed before the restore began (an
// earlier run's, one the prune deleted from the store long ago, another
// experiment's on a reused volume) is stale, logged once
// (checkpoint.stale) and never committed unless it changes.
func (a *Agent) Restored(step int64, paths []string, at time.Time) {
	seen := map[string]fileState{}
	for _, p := range paths {
		fi, err := os.Stat(filepath.Join(a.cfg.Dir, filepath.FromSlash(p)))
		if err != nil {
			continue
		}
		seen[p] = fileState{size: fi.Size(), mtime: fi.ModTime()}
	}
	a.mu.Lock()
	a.restored = seen
	a.restoredAt = at
	a.stats.RestoredStep = step
	a.stats.LastStep = step
	a.mu.Unlock()
	a.emit(Event{Kind: EventRestored, Step: step})
}

type fileState struct {
	size  int64
	mtime time.Time
}

// Stats returns a copy of the current figures.
func (a *Agent) Stats() Stats {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.stats
}

// job is one upload in flight.
type job struct {
	r      watch.Ready
	older  []watch.Ready // complete checkpoints r supersedes once committed
	cancel context.CancelFunc
	done   chan error
}

// Run scans and uploads until ctx ends or a Flush has been served. It owns
// the watcher. It never panics on store errors; they are logged and retried.
func (a *Agent) Run(ctx context.Context) {
	close(a.running)
	defer close(a.stopped)
	defer func() {
		// PID 1 must not die because of an upload: a bug here ends the
		// uploads, not lifeboat, and Flush then reports it.
		if r := recover(); r != nil {
			a.cfg.Log.Error("checkpoint.agent_panic", "panic", fmt.Sprint(r),
				"effect", "no more uploads in this run; the trainer goes on")
		}
	}()
	var inflight *job
	// stream: the chunks of the trainer's last save stored as they are
	// written, from Stopping until the final flush (stream.go).
	var stream *streamJob
	streamWanted := false
	fails := 0
	next := time.NewTimer(0)
	defer next.Stop()
	for {
		var doneC <-chan error
		if inflight != nil {
			doneC = inflight.done
		}
		if streamWanted && stream == nil && inflight == nil {
			stream = a.startStream(ctx)
		}
		select {
		case <-ctx.Done():
			if inflight != nil {
				inflight.cancel()
				<-inflight.done
			}
			if stream != nil {
				a.endStream(ctx, stream)
			}
			return
		case <-a.stopCh:
			streamWanted = true
		case req := <-a.flushCh:
			if stream != nil {
				a.endStream(req.ctx, stream)
				stream = nil
			}
			a.writing = req.writing
			req.reply <- a.flush(req.ctx, inflight)
			if !req.keep {
				return
			}
			inflight = nil
			next.Reset(a.cfg.Interval)
		case err := <-doneC:
			a.finished(inflight.r, inflight.older, err)
			inflight = nil
			if err != nil && !errors.Is(err, checkpoint.ErrInterrupted) {
				fails++
			} else {
				fails = 0
			}
			next.Reset(a.backoff(fails))
		case <-next.C:
			if inflight != nil {
				continue
			}
			r, older, ok := a.pick(background)
			if ok {
				if stream != nil {
					// A save became whole during the stop (a notice's
					// signal that the trainer saves on and keeps running):
					// it is uploaded now, as without a stream, from the
					// chunks the stream stored; the stream holds the
					// buffers, so it ends first and starts again once the
					// upload is done.
					a.endStream(ctx, stream)
					stream = nil
				}
				inflight = a.start(ctx, r, older)
			} else {
				next.Reset(a.cfg.Interval)
			}
		}
	}
}

// backoff is the wait before the next scan after fails failures in a row.
func (a *Agent) backoff(fails int) time.Duration {
	d := a.cfg.Interval
	for i := 0; i < fails && d < time.Minute; i++ {
		d *= 2
	}
	return min(d, time.Minute)
}

// pass says which upload a scan or an upload is for.
type pass int

const (
	// background: the loop's, while the trainer runs; a checkpoint must
	// have settled, and a commit is followed by a prune.
	background pass = iota
	// final: the flush's, after the trainer exited, on the grace period's
	// budget; nothing waits to settle and nothing is pruned.
	final
)

// pick scans and returns the newest complete checkpoint to upload and the
// older complete ones it supersedes once committed. A restored checkpoint
// and an interrupted save are marked done: neither is returned again
// until its content changes.
func (a *Agent) pick(p pass) (newest watch.Ready, older []watch.Ready, ok bool) {
	ready, err := a.cfg.Watcher.Scan(p == final && !a.writing)
	if err != nil {
		a.cfg.Log.Warn("checkpoint.scan_failed", "err", err)
		return watch.Ready{}, nil, false
	}
	a.mu.Lock()
	restored, restoredAt := a.restored, a.restoredAt
	a.mu.Unlock()
	var out []watch.Ready
	for _, r := range ready {
		if isRestored(r, restored) {
			a.cfg.Watcher.Done(r)
			continue
		}
		if !restoredAt.IsZero() && r.LastChange().Before(restoredAt) {
			a.cfg.Watcher.Done(r)
			a.cfg.Log.Info("checkpoint.stale", "id", r.ID, "step", r.Step, "changed", r.LastChange().UTC().Format(time.RFC3339Nano),
				"restored_at", restoredAt.UTC().Format(time.RFC3339Nano), "restored_step", a.Stats().RestoredStep,
				"reason", "it has not changed since before the restore: not new work",
				"effect", "never committed unless its files change")
			continue
		}
		if file, d, why := a.interruption(r); why != "" {
			a.interrupted(r, file, d.Pid, why)
			continue
		}
		out = append(out, r)
	}
	if len(out) == 0 {
		return watch.Ready{}, nil, false
	}
	newest, older = a.newest(out)
	if newest.ID == "" {
		return watch.Ready{}, nil, false
	}
	a.cfg.Watcher.Number(&newest)
	a.mu.Lock()
	a.stats.LastBytes = newest.Bytes()
	a.mu.Unlock()
	return newest, older, true
}

// newest chooses, among complete checkpoints (as Scan orders them: named
// ones by ascending step, counter ones last), the one to commit now and
// those it supersedes. A named step is never superseded by a counter
// checkpoint of the same moment: when both are complete, the named one is
// committed. A counter checkpoint that last changed no later than the
// newest named one was written before it (older work), and one whose
// every file has the content of one of the named step's files is that
// save's copy (a trainer that refreshes backup/latest at each numbered
// save, as PaddleClas's epoch_N and latest): both are superseded. Any
// other counter checkpoint is newer work (a SIGTERM save a few steps
// after the numbered one): it stays, and the next pick commits it as a
// revision of the named step (a.counterNext tells the final flush).
func (a *Agent) newest(out []watch.Ready) (watch.Ready, []watch.Ready) {
	last := out[len(out)-1]
	i := len(out) - 1
	for i >= 0 && out[i].Counter {
		i--
	}
	a.counterNext = false
	if !last.Counter {
		a.lastNamed = &last
		return last, out[:len(out)-1]
	}
	if i < 0 {
		// Counter checkpoints only: the named step they follow may have
		// been chosen in an earlier scan.
		if n := a.lastNamed; n != nil && len(out) == 1 && (!last.LastChange().After(n.LastChange()) || a.copyOf(last, *n)) {
			a.cfg.Log.Info("checkpoint.counter_copy", "id", last.ID, "step", n.Step,
				"reason", "written no later than the named step, or every file has the content of one of its files: the same save, not newer work")
			a.cfg.Watcher.Done(last)
			return watch.Ready{}, nil
		}
		return last, out[:len(out)-1]
	}
	named := out[i]
	a.lastNamed = &named
	var older []watch.Ready
	for j, r := range out {
		switch {
		case j == i:
		case !r.Counter, !r.LastChange().After(named.LastChange()):
			older = append(older, r)
		case a.copyOf(r, named):
			a.cfg.Log.Info("checkpoint.counter_copy", "id", r.ID, "step", named.Step,
				"reason", "every file has the content of one of the named step's files: the same save, not newer work")
			older = append(older, r)
		default:
			a.counterNext = true
		}
	}
	return named, older
}

// copyOf reports whether every file of c has the size and the SHA-256 of
// some file of named. Sizes are compared first, so a counter checkpoint
// with newer content is rarely read; a file that cannot be read makes it
// not a copy (it is then committed, as newer work would be).
func (a *Agent) copyOf(c, named watch.Ready) bool {
	bySize := map[int64][]string{}
	hashes := map[string][sha256.Size]byte{} // the named step's files, each read once
	for _, f := range named.Files {
		bySize[f.Size] = append(bySize[f.Size], path.Join(named.Dir, f.Path))
	}
	for _, f := range c.Files {
		same := bySize[f.Size]
		if len(same) == 0 {
			return false
		}
		h, err := a.fileHash(path.Join(c.Dir, f.Path))
		if err != nil {
			return false
		}
		found := false
		for _, p := range same {
			g, ok := hashes[p]
			if !ok {
				var err error
				if g, err = a.fileHash(p); err != nil {
					continue
				}
				hashes[p] = g
			}
			if g == h {
				found = true
				break
			}
		}
		if !found {
			return false
		}
	}
	return true
}

// fileHash is the SHA-256 of the file at rel under the watched directory,
// opened without following links.
func (a *Agent) fileHash(rel string) ([sha256.Size]byte, error) {
	var sum [sha256.Size]byte
	d, err := beneath.Open(a.cfg.Dir)
	if err != nil {
		return sum, err
	}
	defer d.Close()
	f, err := d.OpenFile(rel, os.O_RDONLY, 0)
	if err != nil {
		return sum, err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return sum, err
	}
	copy(sum[:], h.Sum(nil))
	return sum, nil
}

// supersede marks the checkpoints that r's commit made obsolete.
func (a *Agent) supersede(r watch.Ready, older []watch.Ready) {
	for _, o := range older {
		a.cfg.Log.Info("checkpoint.superseded", "id", o.ID, "step", o.Step, "by", r.Step)
		a.cfg.Watcher.Done(o)
		a.mu.Lock()
		a.stats.Superseded++
		if !o.Counter {
			a.superseded[o.Step] = o
		}
		a.mu.Unlock()
	}
}

// interrupted records that r is an interrupted save: it is never uploaded
// or committed until its content changes and it is complete again.
func (a *Agent) interrupted(r watch.Ready, file string, pid int, why string) {
	a.cfg.Watcher.Done(r)
	a.mu.Lock()
	a.stats.Interrupted++
	a.refused = max(a.refused, r.Step)
	a.mu.Unlock()
	args := []any{"id", r.ID, "path", file, "reason", why,
		"effect", "not stored; the previous committed checkpoint stays the latest"}
	if pid > 0 {
		args = append(args, "pid", pid)
	}
	a.cfg.Log.Warn("checkpoint.interrupted", args...)
	a.emit(Event{Kind: EventInterrupted, Step: r.Step, ID: r.ID, Path: file, Why: why})
}

// isRestored reports whether every file of r is a restored file, unchanged
// since the restore.
func isRestored(r watch.Ready, restored map[string]fileState) bool {
	if len(restored) == 0 {
		return false
	}
	for _, f := range r.Files {
		st, ok := restored[path.Join(r.Dir, f.Path)]
		if !ok || st.size != f.Size || !st.mtime.Equal(f.ModTime) {
			return false
		}
	}
	return true
}

// relPaths are r's files relative to the watched directory, plus its marker.
func relPaths(r watch.Ready) []string {
	var out []string
	for _, f := range r.Files {
		out = append(out, path.Join(r.Dir, f.Path))
	}
	if r.Marker {
		out = append(out, path.Join(r.Dir, watch.DefaultMarker))
	}
	return out
}

// start uploads r in the background under ctx.
func (a *Agent) start(ctx context.Context, r watch.Ready, older []watch.Ready) *job {
	ctx, cancel := context.WithCancel(ctx)
	j := &job{r: r, older: older, cancel: cancel, done: make(chan error, 1)}
	a.mu.Lock()
	a.stats.PendingBytes, a.stats.InFlightStep = r.Bytes(), r.Step
	a.mu.Unlock()
	go func() {
		defer func() {
			if p := recover(); p != nil {
				j.done <- fmt.Errorf("upload of step %d panicked: %v", r.Step, p)
			}
		}()
		j.done <- a.upload(ctx, r, background)
	}()
	return j
}

// upload stores r and records what it moved; in the background pass it
// then prunes the store.
func (a *Agent) upload(ctx context.Context, r watch.Ready, p pass) error {
	a.cfg.Log.Info("checkpoint.upload_started", "id", r.ID, "step", r.Step, "files", len(r.Files), "bytes", r.Bytes())
	t0 := a.cfg.Clock()
	line := a.Line()
	a.checkTorn(ctx, r)
	target := checkpoint.Target{Step: r.Step, Rank: a.cfg.Rank, WorldSize: a.cfg.WorldSize, Counter: r.Counter, Line: line.Line}
	res, err := a.cfg.Uploader.UploadFiles(ctx, a.cfg.Dir, relPaths(r), target)
	if err != nil {
		return err
	}
	if res.Late {
		return nil // another pod of this rank committed newer work; the uploader said so
	}
	a.recordCommit(r, target, res)
	el := a.cfg.Clock().Sub(t0)
	a.mu.Lock()
	a.stats.UploadedBytes += res.UploadedBytes
	a.stats.DedupedBytes += res.DedupedBytes
	if res.UploadedBytes >= 1<<20 && el > 0 {
		rate := float64(res.UploadedBytes) / el.Seconds()
		if a.stats.Throughput == 0 {
			a.stats.Throughput = rate
		} else {
			a.stats.Throughput = (a.stats.Throughput + rate) / 2
		}
	}
	a.mu.Unlock()
	a.cfg.Log.Info("checkpoint.committed", "id", r.ID, "step", r.Step, "rank", a.cfg.Rank, "files", res.Files, "bytes", res.Bytes,
		"reused_files", res.ReusedFiles, "uploaded_bytes", res.UploadedBytes, "deduped_bytes", res.DedupedBytes, "streamed_bytes", res.StreamedBytes, "seconds", el.Seconds(),
		"already_committed", res.AlreadyCommitted, "manifest_id", res.Manifest.ID, "manifest", res.Key)
	a.emit(Event{Kind: EventCommitted, Step: r.Step, Bytes: res.Bytes, Seconds: el.Seconds(), Saved: r.LastChange(), Final: p == final})
	if p == background && a.cfg.Keep > 0 && a.cfg.Rank == 0 {
		_, err := checkpoint.Prune(ctx, a.cfg.Uploader.Store, checkpoint.PruneOptions{
			Keep: a.cfg.Keep, SafetyWindow: a.cfg.Uploader.SafetyWindow, Log: a.cfg.Log, Line: &line})
		if err != nil {
			a.cfg.Log.Warn("checkpoint.prune_failed", "err", err)
		}
	}
	return nil
}

// finished records the end of an upload attempt. A committed r
// supersedes older; an interrupted one (a format check found a file torn)
// is marked so and supersedes nothing.
func (a *Agent) finished(r watch.Ready, older []watch.Ready, err error) {
	if err == nil {
		a.supersede(r, older)
	}
	a.mu.Lock()
	a.stats.PendingBytes, a.stats.InFlightStep = 0, -1
	a.mu.Unlock()
	if errors.Is(err, checkpoint.ErrInterrupted) {
		a.interrupted(r, checkpoint.InterruptedPath(err), 0, err.Error())
		return
	}
	a.mu.Lock()
	if err != nil {
		a.stats.Failures++
		a.stats.LastUploadError = err.Error()
		a.mu.Unlock()
		if storage.IsPermanent(err) {
			a.cfg.Log.Error("checkpoint.upload_refused", "id", r.ID, "step", r.Step, "err", err,
				"effect", "tried again at the next scan, refused until its cause is fixed; the previous committed checkpoint stays the latest")
		} else {
			a.cfg.Log.Warn("checkpoint.upload_failed", "id", r.ID, "step", r.Step, "err", err,
				"effect", "retried at the next scan; the previous committed checkpoint stays the latest")
		}
		a.emit(Event{Kind: EventUploadFailed, Step: r.Step, Err: err.Error()})
		return
	}
	a.cfg.Watcher.Done(r)
	a.stats.Commits++
	a.stats.LastStep = r.Step
	a.stats.LastCommit = a.cfg.Clock()
	a.stats.LastUploadError = ""
	a.mu.Unlock()
}

// Flush stops the background loop and commits the newest complete
// checkpoint under ctx: the final upload after the trainer has exited. It
// returns nil when there was nothing new to commit, and an error when the
// newest checkpoint could not be committed in time (the previous committed
// one then stays the latest). Flush waits for Run to start; Run returns
// after serving one Flush.
func (a *Agent) Flush(ctx context.Context) error { return a.request(ctx, false, false) }

// Sync is Flush without ending the loop: after a trainer crash, it commits
// what the trainer completed before it is restarted.
func (a *Agent) Sync(ctx context.Context) error { return a.request(ctx, true, false) }

// ErrStillWriting says that the trainer was still writing when a
// sidecar's final upload had to begin: its last save may be missing from
// what was committed.
var ErrStillWriting = errors.New("the trainer was still writing when the final upload had to begin")

// FlushWhenWritten is a sidecar's final upload. The trainer runs in
// another container, and may still be writing its last checkpoint when
// the sidecar is stopped (a classic sidecar gets SIGTERM with it). It
// waits, until at the latest, while the Watcher says the trainer is
// writing (watch.Watcher.Writing: its processes run, or without a view of
// them, files changed within --settle), then runs Flush. When the trainer
// is still writing at until, the flush applies the usual completeness
// rules instead of a final scan's (a checkpoint that has not settled, or
// is open for writing, is not taken for whole, and the previous committed
// one stays the latest), and it returns ErrStillWriting.
func (a *Agent) FlushWhenWritten(ctx context.Context, until time.Time) error {
	a.Stopping()
	t0 := a.cfg.Clock()
	writing, why := a.cfg.Watcher.Writing()
	if writing {
		a.cfg.Log.Info("checkpoint.waiting_for_trainer", "reason", why, "until", until.UTC().Format(time.RFC3339Nano),
			"effect", "the final upload begins once the trainer has finished writing")
	}
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for writing && a.cfg.Clock().Before(until) {
		select {
		case <-ctx.Done():
			return a.request(ctx, false, true)
		case <-tick.C:
		}
		writing, why = a.cfg.Watcher.Writing()
	}
	if !writing {
		if d := a.cfg.Clock().Sub(t0); d >= 100*time.Millisecond {
			a.cfg.Log.Info("checkpoint.trainer_done", "waited_seconds", d.Seconds())
		}
		return a.request(ctx, false, false)
	}
	a.cfg.Log.Warn("checkpoint.trainer_still_writing", "reason", why, "waited_seconds", a.cfg.Clock().Sub(t0).Seconds(),
		"effect", "the final upload begins now, taking only checkpoints that have settled: the trainer's last save may be missing, and the previous committed checkpoint then stays the latest",
		"hint", setting.Textf("raise the pod's terminationGracePeriodSeconds and %s, lower %s, or have the trainer save faster (docs: the classic sidecar)", setting.Grace, setting.FlushWait))
	if err := a.request(ctx, false, true); err != nil {
		return err
	}
	return ErrStillWriting
}

func (a *Agent) request(ctx context.Context, keep, writing bool) error {
	select {
	case <-a.running:
	case <-ctx.Done():
		return fmt.Errorf("agent: flush: the agent never started: %w", context.Cause(ctx))
	}
	reply := make(chan error, 1)
	select {
	case a.flushCh <- flushReq{ctx: ctx, keep: keep, writing: writing, reply: reply}:
	case <-a.stopped:
		return errors.New("agent: flush after the agent stopped")
	case <-ctx.Done():
		return fmt.Errorf("agent: flush: %w", context.Cause(ctx))
	}
	select {
	case err := <-reply:
		return err
	case <-a.stopped:
		select {
		case err := <-reply:
			return err
		default:
			return errors.New("agent: the final upload ended without a result (see the agent_panic event)")
		}
	}
}

// flush runs in Run's goroutine. When the newest checkpoint turns out to
// be an interrupted save (a format check fails while it is read), the
// newest whole one is committed instead; one that changed while it was
// read is read again.
func (a *Agent) flush(ctx context.Context, inflight *job) error {
	t0 := a.cfg.Clock()
	a.mu.Lock()
	a.refused, a.flushNote = -1, ""
	a.mu.Unlock()
	r, older, ok := a.pick(final)
	if inflight != nil {
		if ok && (r.ID != inflight.r.ID || r.Fingerprint != inflight.r.Fingerprint) {
			a.cfg.Log.Info("checkpoint.flush_cancels_stale", "in_flight", inflight.r.Step, "newest", r.Step)
			inflight.cancel()
			a.finished(inflight.r, inflight.older, <-inflight.done)
		} else {
			var err error
			select {
			case err = <-inflight.done:
			case <-ctx.Done():
				inflight.cancel()
				err = <-inflight.done
			}
			a.finished(inflight.r, inflight.older, err)
			if err == nil {
				a.logFlush(t0, inflight.r)
				return nil
			}
			if !errors.Is(err, checkpoint.ErrInterrupted) {
				return fmt.Errorf("final upload of step %d: %w", inflight.r.Step, err)
			}
			r, older, ok = a.pick(final)
		}
	}
	for changed := 0; ok; {
		err := a.upload(ctx, r, final)
		next := a.counterNext
		a.finished(r, older, err)
		if err == nil && next && ctx.Err() == nil {
			// The named step is committed; the counter checkpoint with
			// newer content follows as its revision.
			a.logFlush(t0, r)
			if r, older, ok = a.pick(final); !ok {
				return nil
			}
			continue
		}
		if err == nil {
			a.logFlush(t0, r)
			return nil
		}
		if errors.Is(err, checkpoint.ErrChanged) {
			changed++
		}
		again := errors.Is(err, checkpoint.ErrInterrupted) || errors.Is(err, checkpoint.ErrChanged) && changed < 3
		if !again || ctx.Err() != nil {
			return fmt.Errorf("final upload of step %d: %w", r.Step, err)
		}
		r, older, ok = a.pick(final)
	}
	args := []any{"last_step", a.Stats().LastStep}
	if refused := a.refusedStep(); refused >= 0 {
		args = append(args, "refused_step", refused)
	}
	a.cfg.Log.Info("checkpoint.flush_nothing_new", args...)
	latest := "no checkpoint is committed yet"
	if last := a.Stats().LastStep; last >= 0 {
		latest = fmt.Sprintf("step %d stays the latest", last)
	}
	if refused := a.refusedStep(); refused >= 0 {
		a.setFlushNote(fmt.Sprintf("the final upload refused step %d, an interrupted save; %s", refused, latest))
	} else {
		a.setFlushNote("nothing new to commit at the end; " + latest)
	}
	return nil
}

// Newest is the newest named step this rank holds in the store as far as
// this run knows: the highest it committed, or else the one it restored;
// -1 when neither.
func (a *Agent) Newest() int64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	newest := a.stats.RestoredStep
	for _, rec := range a.commits {
		if !rec.target.Counter {
			newest = max(newest, rec.target.Step)
		}
	}
	return newest
}

// CommitStep is the end of a job-wide stop's final upload (docs/FORMAT.md,
// "A stop leaves a complete step"): the other ranks' newest committed step
// is step, older than this rank's newest, and step is complete only once
// this rank holds it too. It commits this rank's checkpoint of the named
// step when a newer one superseded it in this run and it was never
// committed, and reports whether it did. Call it after the final Flush
// (Run has returned), under the grace budget's ctx.
func (a *Agent) CommitStep(ctx context.Context, step int64) (bool, error) {
	select {
	case <-a.stopped: // Run returns once it has served the final Flush
	case <-ctx.Done():
		return false, fmt.Errorf("agent: CommitStep: the agent did not stop (call it after the final Flush): %w", context.Cause(ctx))
	}
	a.mu.Lock()
	r, ok := a.superseded[step]
	done := a.stats.RestoredStep == step
	for _, rec := range a.commits {
		done = done || !rec.target.Counter && rec.target.Step == step
	}
	a.mu.Unlock()
	switch {
	case done:
		return false, nil
	case !ok:
		a.cfg.Log.Warn("checkpoint.common_step_missing", "step", step,
			"effect", "the ranks hold no common step from this stop: this rank has no checkpoint of it (never complete here, or its save failed); the newest step every rank holds stays the latest")
		return false, nil
	}
	t0 := a.cfg.Clock()
	last := a.Stats().LastStep
	err := a.upload(ctx, r, final)
	a.finished(r, nil, err)
	a.mu.Lock()
	a.stats.LastStep = last // the newest commit stays the one the flush made
	a.mu.Unlock()
	if err != nil {
		return false, fmt.Errorf("commit step %d, the other ranks' newest: %w", step, err)
	}
	a.cfg.Log.Info("checkpoint.common_step_committed", "step", step, "newest", a.Newest(), "seconds", a.cfg.Clock().Sub(t0).Seconds(),
		"reason", "the other ranks' newest committed step: with this rank's, every rank holds it")
	return true, nil
}

// FlushNote says, for the termination message, what the last final
// upload committed and, when it refused a newer step as an interrupted
// save, instead of which; with nothing new, which step stays the latest;
// "" before a final upload, or when it failed.
func (a *Agent) FlushNote() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.flushNote
}

func (a *Agent) setFlushNote(s string) {
	a.mu.Lock()
	a.flushNote = s
	a.mu.Unlock()
}

// logFlush logs the final upload's commit of r, and the newer step it was
// committed instead of, when that one was refused as an interrupted save.
func (a *Agent) logFlush(t0 time.Time, r watch.Ready) {
	args := []any{"step", r.Step, "bytes", r.Bytes(), "seconds", a.cfg.Clock().Sub(t0).Seconds()}
	note := fmt.Sprintf("the final upload committed step %d", r.Step)
	if refused := a.refusedStep(); refused > r.Step {
		args = append(args, "instead_of", refused)
		note += fmt.Sprintf(" instead of step %d, an interrupted save", refused)
	}
	a.cfg.Log.Info("checkpoint.flushed", args...)
	a.setFlushNote(note)
}

// refusedStep is the highest step refused during this flush, -1 if none.
func (a *Agent) refusedStep() int64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.refused
}

// Reserve estimates how much of the grace budget the final upload needs:
// the size of the newest checkpoint seen (the one the trainer is about to
// write is assumed to be as large) at the measured throughput, with a
// quarter on top and one second for the commit. It says how it got there.
//
// Streaming the last save while it is written (Stopping) does not shrink
// it: the stream overlaps the upload with the trainer's write only as far
// as the trainer writes before its kill time, and a trainer that spends
// its budget gathering state and then writes its save in one burst at the
// end leaves the whole upload to the reserve. What the stream adds to the
// final upload, the confirming read and keyed hash of what it stored
// (docs/FORMAT.md), costs a fraction of the SHA-256 the throughput was
// measured with, within the quarter on top.
func (a *Agent) Reserve() (time.Duration, string) {
	s := a.Stats()
	rate, how := s.Throughput, "measured"
	if rate == 0 {
		rate, how = a.cfg.AssumedThroughput, "assumed until measured"
	}
	d := time.Duration(float64(s.LastBytes)/rate*1.25*float64(time.Second)) + time.Second
	return d, fmt.Sprintf("last checkpoint %d bytes at %.0f MB/s %s", s.LastBytes, rate/1e6, how)
}
