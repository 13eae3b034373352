package checkpoint

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"maps"
	"math"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"slices"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"
	"golang.org/x/sys/unix"

	"github.com/lifeboat-project/lifeboat/format"
	"github.com/lifeboat-project/lifeboat/internal/beneath"
	"github.com/lifeboat-project/lifeboat/internal/reserved"
	"github.com/lifeboat-project/lifeboat/storage"
)

// RestoreOptions tune Restore and RestoreLatest. Zero fields take defaults.
type RestoreOptions struct {
	// WorldSize selects the manifest rank-<r>-of-<WorldSize>; 0 accepts the
	// only one present at the step (and, for RestoreLatest, any world size).
	WorldSize int
	Workers   int // parallel chunk downloads, default DefaultDownloadWorkers
	Log       *slog.Logger
	// Progress, when set, is called after each chunk is written with the
	// bytes written so far and the snapshot's total. It is called from
	// several goroutines and must be safe for that; done only grows.
	Progress func(done, total int64)
	// SkipFormatCheck turns off the format checks (package format) of the
	// restored files. By default a restored file that is not a whole file
	// of its format makes the snapshot corrupt (ErrCorrupt), like a bad
	// chunk: nothing is moved into place, and RestoreLatest falls back.
	SkipFormatCheck bool
	// Check is how each chunk's bytes are checked: CheckCRC32C (the zero
	// value) or CheckSHA256 (see Check).
	Check Check
	// AllRanks restores every rank's snapshot of the step, not only
	// rank's, each under its own subdirectory: dir/RanksDir/RankDir(r)/,
	// for formats that reshard on load (Paddle's save_state_dict with its
	// metadata). RestoreLatest then takes the newest complete step of any
	// world size (WorldSize is ignored): that is how a job that lost ranks
	// loads the shards of every old rank. RanksDir then holds that step's
	// ranks and nothing else.
	AllRanks bool
}

// RanksDir is the directory, inside the directory restored into, that a
// restore with RestoreOptions.AllRanks fills: RanksDir/rank-00000/...,
// RanksDir/rank-00001/..., each rank's files at the paths it saved them
// under. Its name starts with ".lifeboat-": lifeboat's watcher never takes
// it for a checkpoint of the rank that restored it.
const RanksDir = reserved.RanksDir

// RankDir is rank's subdirectory of RanksDir: "rank-00003".
func RankDir(rank int) string { return fmt.Sprintf("rank-%05d", rank) }

// Fallback records a snapshot RestoreLatest could not restore.
type Fallback struct {
	Step      int64
	WorldSize int
	Line      string // the step's line of work
	Err       error
}

// RestoreResult reports a restore.
type RestoreResult struct {
	Step     int64
	Rank     int
	Line     string // the restored step's line of work (LegacyLine: none)
	Revision int    // the revision of the step and rank restored: its highest
	// Manifest is the restored snapshot's. With AllRanks it lists every
	// rank's files, each path under its RankDir, with rank 0's id; the
	// ranks' own manifests are in Ranks.
	Manifest *Manifest
	Ranks    []*Manifest // with AllRanks: each rank's manifest, by rank
	// Dir is the directory Manifest's paths are relative to: the one
	// restored into, or its RanksDir with AllRanks.
	Dir   string
	Files int
	Bytes int64
	// Fallbacks lists newer complete steps RestoreLatest skipped, and why.
	Fallbacks []Fallback
	// MovedAside lists what the restored checkpoint's directory held
	// beyond the snapshot and was moved into Aside (paths relative to the
	// directory restored into, also under Aside), so that the directory
	// holds the snapshot and nothing else. Aside is under AsideDir.
	MovedAside []string
	Aside      string
	// Checked counts the chunks downloaded by the check that ran on
	// each: with CheckCRC32C, those whose manifest records no CRC32C
	// were checked by SHA-256.
	Checked Checked
}

// Checked counts chunks by the check that ran on them.
type Checked struct {
	SHA256 int // chunks whose SHA-256 was recomputed
	CRC32C int // chunks checked against their manifest's CRC32C only
}

// Restore writes the snapshot of (step, rank) into dir: the highest
// revision of rank's manifest at step.
//
// Every chunk is downloaded in parallel, its length and SHA-256 checked,
// and written into a temporary directory inside dir (so that renames stay on
// one filesystem even when dir is a mount point). When every file is
// complete and synced, and (unless opts.SkipFormatCheck) passes the format
// checks of package format, the files are renamed into place, one by one;
// each rename atomically replaces a file of the same path. Before that,
// what the restored checkpoint's directory holds beyond the snapshot is
// moved into AsideDir (strays; files at the top of dir stay), so that it
// holds the snapshot and nothing else (RestoreResult.MovedAside). The
// moves are recorded in RecordFile first and the record removed after the
// last, so a kill in between is finished by FinishInterrupted at the next
// start; a move that fails takes the checkpoint apart into AsideDir rather
// than leave a mix. Every path created, renamed or removed in dir is
// resolved beneath it without following a link (package beneath). Before
// anything is renamed, Restore checks that no target path is a directory
// or lies under a symlink or non-directory, so the move cannot fail half
// way for those reasons. On any earlier error dir is left exactly as it
// was and the temporary directory is removed.
//
// Resources are bounded whatever the snapshot's file count: before any
// download the free space and inodes of dir's file system are checked
// against the manifest, each file is created (and, from 1 MiB, given its
// size with fallocate) through a descriptor closed at once, and a file is
// open for writing only while chunks of it are in flight, so about
// 2*Workers files are open at a time; memory is Workers buffers of 1 MiB
// besides the manifest.
//
// Data errors (invalid manifest, missing, truncated or corrupt chunk, a
// file that is not whole) wrap ErrCorrupt; a missing manifest wraps
// storage.ErrNotExist; a snapshot that does not fit dir's volume wraps
// ErrTooBig and ENOSPC (or EDQUOT).
//
// With opts.AllRanks it restores every rank's snapshot of step into
// dir/RanksDir (see RestoreOptions.AllRanks); every rank must have a
// manifest. Whether the ranks are one iteration is not checked: the step
// is the caller's choice. Each rank's snapshot is its highest revision,
// except where the ranks' highest revisions cannot be paired and their
// highest named ones can (docs/FORMAT.md): then it is those.
func Restore(ctx context.Context, s storage.Store, step int64, rank int, dir string, opts RestoreOptions) (*RestoreResult, error) {
	opts = opts.withDefaults()
	if opts.AllRanks {
		g, err := findStep(ctx, s, step, opts.WorldSize)
		if err != nil {
			return nil, err
		}
		if err := readGroups(ctx, s, []*stepGroup{g}); err != nil {
			return nil, fmt.Errorf("checkpoint: read manifests of step %d in %s: %w", step, s, err)
		}
		if v, why := g.judge(); v == verdictMissing || v == verdictBad {
			return nil, fmt.Errorf("checkpoint: restore every rank of step %d from %s: %s: %w", step, s, why, g.firstErr())
		}
		return restoreAll(ctx, s, g, rank, dir, opts)
	}
	key, err := findManifest(ctx, s, Target{Step: step, Rank: rank, WorldSize: opts.WorldSize})
	if err != nil {
		return nil, err
	}
	m, err := readManifest(ctx, s, key)
	if err != nil {
		return nil, err
	}
	if m.Counter && m.WorldSize > 1 {
		// A counter revision of one rank among several: when the ranks'
		// highest revisions cannot be paired but their named ones can,
		// the step is those (stepGroup.pairNamed), as ls and
		// RestoreLatest say.
		g, err := findStep(ctx, s, step, m.WorldSize)
		if err != nil {
			return nil, err
		}
		if err := readGroups(ctx, s, []*stepGroup{g}); err != nil {
			return nil, fmt.Errorf("checkpoint: read manifests of step %d in %s: %w", step, s, err)
		}
		if g.passedOver != "" {
			if m, err = g.full(ctx, s, rank); err != nil {
				return nil, err
			}
		}
	}
	return restoreOne(ctx, s, m, dir, opts)
}

// restoreOne restores the snapshot of manifest m into dir.
func restoreOne(ctx context.Context, s storage.Store, m *Manifest, dir string, opts RestoreOptions) (*RestoreResult, error) {
	root, err := openRestoreDir(dir)
	var rec *restoreRecord
	var checked Checked
	if err == nil {
		defer root.Close()
		var b []byte
		if b, err = m.Encode(); err == nil {
			rec = &restoreRecord{Manifest: b, Rank: m.Rank}
			err = restoreFiles(ctx, s, m.Files, setPaths(m), root, "", opts, rec, &checked)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("checkpoint: restore step %d rank %d revision %d into %s: %w", m.Step, m.Rank, m.Revision, dir, err)
	}
	return &RestoreResult{Step: m.Step, Rank: m.Rank, Line: m.Line, Revision: m.Revision, Manifest: m, Dir: dir, Files: len(m.Files), Bytes: m.Bytes(),
		MovedAside: rec.Strays, Aside: rec.Aside, Checked: checked}, nil
}

// joinRanks is the manifest of every rank of one step as one snapshot
// (RestoreResult.Manifest with AllRanks) and the paths of it that
// format.CheckSet checks as a set (rank 0's).
func joinRanks(ms []*Manifest) (all *Manifest, set []string) {
	all = &Manifest{Format: FormatVersion, ID: ms[0].ID, Step: ms[0].Step, WorldSize: len(ms), Line: ms[0].Line}
	for r, m := range ms {
		all.Revision = max(all.Revision, m.Revision)
		all.Counter = all.Counter || m.Counter
		if m.Created.After(all.Created) {
			all.Created = m.Created
		}
		for _, f := range m.Files {
			f.Path = RankDir(r) + "/" + f.Path
			all.Files = append(all.Files, f)
		}
		if r == 0 {
			set = setPaths(m)
			for i, p := range set {
				set[i] = RankDir(0) + "/" + p
			}
		}
	}
	return all, set
}

// restoreAll restores every rank of g, whose manifests readGroups read,
// into dir/RanksDir, as one snapshot: each rank's files under its
// RankDir, all downloaded and checked in a staging directory inside dir
// (a name RemoveStaleRestores removes) before RanksDir is replaced by it.
// On any failure dir is as it was.
func restoreAll(ctx context.Context, s storage.Store, g *stepGroup, rank int, dir string, opts RestoreOptions) (*RestoreResult, error) {
	res := &RestoreResult{Step: g.step, Rank: rank, Line: g.line(), Dir: filepath.Join(dir, RanksDir)}
	fail := func(err error) (*RestoreResult, error) {
		return nil, fmt.Errorf("checkpoint: restore every rank of step %d (world size %d) into %s: %w", g.step, g.worldSize, res.Dir, err)
	}
	for r := range g.worldSize {
		m, err := g.full(ctx, s, r)
		if err != nil {
			return fail(err)
		}
		res.Ranks = append(res.Ranks, m)
	}
	all, set := joinRanks(res.Ranks)
	res.Revision = all.Revision
	res.Manifest, res.Files, res.Bytes = all, len(all.Files), all.Bytes()
	rec := &restoreRecord{Sub: RanksDir, Whole: true, Rank: rank}
	for _, m := range res.Ranks {
		b, err := m.Encode()
		if err != nil {
			return fail(err)
		}
		rec.Ranks = append(rec.Ranks, b)
	}
	root, err := openRestoreDir(dir)
	if err != nil {
		return fail(err)
	}
	defer root.Close()
	stage, err := root.MkdirTemp("", tempPrefix)
	if err != nil {
		return fail(err)
	}
	defer root.RemoveAll(stage)
	if err := restoreFiles(ctx, s, all.Files, set, root, stage, opts, nil, &res.Checked); err != nil {
		return fail(err)
	}
	// Swap the staged copy in, as recorded (FinishInterrupted finishes
	// it after a kill): the old RanksDir is moved aside under a temporary
	// name first, which RemoveStaleRestores removes. Both renames are of
	// names in dir, through its descriptor: a RanksDir that is a symlink
	// is moved aside as the link, never followed.
	rec.Tmp = stage
	if err := writeRecord(root, rec); err != nil {
		return fail(err)
	}
	if err := moveRecorded(root, rec, nil); err != nil {
		return fail(err)
	}
	return res, nil
}

// openRestoreDir creates dir (the directory restored into, named by the
// caller: links in its own path are followed) and opens it; everything a
// restore creates, renames or removes in it goes through the descriptor,
// beneath it, without following a link (package beneath).
func openRestoreDir(dir string) (*beneath.Dir, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	return beneath.Open(dir)
}

// findStep returns the group of step for worldSize, or the only one when
// worldSize is 0.
func findStep(ctx context.Context, s storage.Store, step int64, worldSize int) (*stepGroup, error) {
	groups, err := listSteps(ctx, s, stepPrefix(step))
	if err != nil {
		return nil, err
	}
	return oneGroup(groups, worldSize, fmt.Sprintf("step %d", step), s)
}

// oneGroup picks, among the groups of one step, the one of worldSize, or
// the only one when worldSize is 0; what names the step (and rank) for the
// error: storage.ErrNotExist when there is none, a request to name the
// world size when there are several.
func oneGroup(groups []*stepGroup, worldSize int, what string, s storage.Store) (*stepGroup, error) {
	var found *stepGroup
	n := 0
	for _, g := range groups {
		if worldSize == 0 || g.worldSize == worldSize {
			found = g
			n++
		}
	}
	switch n {
	case 0:
		return nil, fmt.Errorf("checkpoint: no manifest for %s in %s: %w", what, s, storage.ErrNotExist)
	case 1:
		return found, nil
	}
	return nil, fmt.Errorf("checkpoint: %s has manifests for several world sizes in %s; name the world size", what, s)
}

// firstErr is the read error of the lowest rank whose manifest could not
// be read, or storage.ErrNotExist when a rank has none.
func (g *stepGroup) firstErr() error {
	for r := range g.worldSize {
		if _, ok := g.keys[r]; !ok {
			return fmt.Errorf("rank %d has no manifest: %w", r, storage.ErrNotExist)
		}
		if err := g.errs[r]; err != nil {
			return err
		}
	}
	return nil
}

// RestoreLatest restores rank's snapshot of the newest complete step into
// dir. Newest is the step committed last (docs/FORMAT.md). A step of
// several ranks is complete only when its ranks provably describe one
// iteration: one whose ranks are all present but cannot be paired
// (ErrNotPaired), or whose manifest of any rank cannot be read, is skipped
// as a failed snapshot is, so that every rank falls back alike. When a
// restore fails for a reason of the snapshot itself, it falls back to the
// next older complete step, and so on; the result lists each skipped step
// and why. A snapshot's own reasons: its data (ErrCorrupt, or a
// manifest that vanished), its size (ErrTooBig: more than dir's volume has
// free, or the volume filled up), or its files here (one that cannot be
// created, written, synced or checked in dir, a directory in its way).
// Anything else stops it at once, since every snapshot would meet it alike
// and falling back would throw good training progress away: ctx ended (a
// stop), the store failed (access denied, no such bucket, unreachable after
// retries), dir or its temporary directory cannot be created, or the move
// into place failed half way.
//
// With opts.AllRanks it restores every rank's snapshot of the newest
// complete step of any world size into dir/RanksDir (RestoreOptions.AllRanks).
//
// It lists the steps as Latest does (stepChooser). A complete step it
// reads in full because no completion record holds for its listing gets
// one, written create-only (docs/FORMAT.md, "Completion records"): the
// next restore reads only its own rank's manifest of it. A record that
// cannot be written is logged and changes nothing else.
//
// With no complete step it returns an error wrapping ErrNoCheckpoint. When
// no complete step could be restored, the error wraps ErrNothingRestorable
// and every step's reason (and ErrNoCheckpoint when all of them are data
// errors), and the result lists the fallbacks.
func RestoreLatest(ctx context.Context, s storage.Store, rank int, dir string, opts RestoreOptions) (*RestoreResult, error) {
	opts = opts.withDefaults()
	log := opts.Log
	worldSize := opts.WorldSize
	if opts.AllRanks {
		worldSize = 0
	}
	now := time.Now()
	c, err := newStepChooser(ctx, s, now, func(n int) bool {
		return (worldSize == 0 || n == worldSize) && (opts.AllRanks || rank < n)
	}, log)
	if err != nil {
		return nil, err
	}
	var fallbacks []Fallback
	for {
		g, err := c.next(ctx)
		if err != nil {
			return nil, err
		}
		if g == nil {
			break
		}
		res, err := restoreStep(ctx, s, g, rank, dir, opts)
		if err == nil {
			res.Fallbacks, res.Line = fallbacks, g.line()
			return res, nil
		}
		if ctx.Err() != nil || !skippable(err) {
			return nil, err
		}
		log.Debug("checkpoint.restore_fallback", "step", g.step, "rank", rank, "err", err)
		fallbacks = append(fallbacks, Fallback{Step: g.step, WorldSize: g.worldSize, Line: g.line(), Err: err})
	}
	if len(fallbacks) == 0 {
		return &RestoreResult{Rank: rank}, fmt.Errorf("checkpoint: restore rank %d from %s: %w", rank, s, ErrNoCheckpoint)
	}
	err = fmt.Errorf("checkpoint: restore rank %d from %s: %w: all %d steps with every rank stored failed", rank, s, ErrNothingRestorable, len(fallbacks))
	if !slices.ContainsFunc(fallbacks, func(f Fallback) bool { return !dataError(f.Err) }) {
		err = fmt.Errorf("%w (%w)", err, ErrNoCheckpoint)
	}
	errs := []error{err}
	for _, f := range fallbacks {
		errs = append(errs, fmt.Errorf("step %d: %w", f.Step, f.Err))
	}
	return &RestoreResult{Rank: rank, Fallbacks: fallbacks}, errors.Join(errs...)
}

// restoreStep restores rank's snapshot of g (every rank's, with
// opts.AllRanks), a step a stepChooser handed out, if the step is complete.
func restoreStep(ctx context.Context, s storage.Store, g *stepGroup, rank int, dir string, opts RestoreOptions) (*RestoreResult, error) {
	if g.rec != nil {
		// Judged complete by its record: only this rank's manifest is
		// read. Every rank's (AllRanks), or one that no longer holds
		// what the record judged, is read in full, as without a record.
		if !opts.AllRanks {
			m, err := g.ownManifest(ctx, s, rank)
			if err == nil {
				return restoreOne(ctx, s, m, dir, opts)
			}
			if !errors.Is(err, ErrCorrupt) && !errors.Is(err, storage.ErrNotExist) {
				return nil, fmt.Errorf("checkpoint: step %d of %d ranks: %w", g.step, g.worldSize, err)
			}
			opts.Log.Info("checkpoint.record_not_used", "step", g.step, "world_size", g.worldSize, "rank", rank, "record", g.rec.info.Key, "err", err,
				"effect", "every rank's manifest of the step is read, as without a record")
		}
		g.rec = nil
		if err := readGroups(ctx, s, []*stepGroup{g}); err != nil {
			return nil, fmt.Errorf("checkpoint: read manifests of step %d in %s: %w", g.step, s, err)
		}
	}
	switch v, why := g.judge(); v {
	case verdictNotPaired:
		return nil, fmt.Errorf("checkpoint: step %d of %d ranks: %s: %w", g.step, g.worldSize, why, ErrNotPaired)
	case verdictMissing, verdictBad:
		return nil, fmt.Errorf("checkpoint: step %d of %d ranks: %s: %w", g.step, g.worldSize, why, g.firstErr())
	}
	if opts.AllRanks {
		return restoreAll(ctx, s, g, rank, dir, opts)
	}
	m, err := g.full(ctx, s, rank)
	if err != nil {
		return nil, fmt.Errorf("checkpoint: step %d of %d ranks: %w", g.step, g.worldSize, err)
	}
	return restoreOne(ctx, s, m, dir, opts)
}

// dataError reports whether err is about the store's data alone: a
// corrupt snapshot or a manifest that vanished, not its fit here.
func dataError(err error) bool {
	var we *writeError
	return (errors.Is(err, ErrCorrupt) || errors.Is(err, storage.ErrNotExist) || errors.Is(err, ErrNotPaired)) && !errors.Is(err, ErrTooBig) && !errors.As(err, &we)
}

// findManifest returns the key of the highest revision of the manifest of
// t's step and rank, of t's world size, or of the only one at the step
// when t.WorldSize is 0.
func findManifest(ctx context.Context, s storage.Store, t Target) (string, error) {
	step, rank := t.Step, t.Rank
	prefix := fmt.Sprintf("%srank-%05d-of-", stepPrefix(step), rank)
	if t.WorldSize > 0 {
		prefix = rankPrefix(t)
	}
	groups, err := listSteps(ctx, s, prefix)
	if err != nil {
		return "", err
	}
	g, err := oneGroup(groups, t.WorldSize, fmt.Sprintf("step %d rank %d", step, rank), s)
	if err != nil {
		return "", err
	}
	key := g.keys[rank].Key
	if _, torn := g.torn[key]; torn {
		return "", fmt.Errorf("checkpoint: revision %d of step %d rank %d in %s: %w", g.revisions[rank], step, rank, s, ErrTorn)
	}
	return key, nil
}

// ErrTooBig marks a snapshot that does not fit where it is restored: the
// file system of the directory has less free space or fewer free inodes
// than the snapshot needs, or ran out while the files were reserved. The
// error also wraps syscall.ENOSPC (or EDQUOT). RestoreLatest falls back to
// an older snapshot on it.
var ErrTooBig = errors.New("the checkpoint does not fit on the volume")

// ErrNothingRestorable marks a RestoreLatest that found complete steps and
// could restore none of them; the error also wraps each one's reason. When
// every reason is in the store's data (ErrCorrupt, a manifest that
// vanished) it wraps ErrNoCheckpoint too: nothing in the store can ever be
// restored. Otherwise (ErrTooBig, a file that cannot be written here) a
// checkpoint exists that another volume could take, and the caller
// decides whether to start fresh.
var ErrNothingRestorable = errors.New("no complete checkpoint can be restored")

// writeError marks a failure to write a snapshot's files into the
// directory: a file that cannot be created, reserved, written, synced or
// checked there, or a path in the way. It is about this snapshot here, not
// the store, so RestoreLatest falls back on it.
type writeError struct{ err error }

func (e *writeError) Error() string { return e.err.Error() }
func (e *writeError) Unwrap() error { return e.err }

// writeFailed marks err (nil stays nil) as a writeError; a full volume or
// quota is ErrTooBig as well.
func writeFailed(err error) error {
	if err == nil {
		return nil
	}
	if (errors.Is(err, unix.ENOSPC) || errors.Is(err, unix.EDQUOT)) && !errors.Is(err, ErrTooBig) {
		err = fmt.Errorf("%w: %w", err, ErrTooBig)
	}
	return &writeError{err}
}

// skippable reports whether RestoreLatest may fall back past a snapshot
// that failed with err: the failure is the snapshot's own (its data, its
// size, its files here), not the store's or a stop.
func skippable(err error) bool {
	var we *writeError
	return errors.Is(err, ErrCorrupt) || errors.Is(err, storage.ErrNotExist) || errors.Is(err, ErrTooBig) || errors.Is(err, ErrNotPaired) || errors.As(err, &we)
}

// restoreFile is one file of a restore while its chunks are written: it is
// open only while the sender hands out its chunks and until the last of
// them is written, so a restore holds about Workers+1 files open, whatever
// the snapshot's file count.
type restoreFile struct {
	f    *os.File
	path string // slash path in the snapshot
	mode fs.FileMode
	refs atomic.Int32 // the sender's reference and one per chunk handed out
	feed *formatFeed  // its format check fed by the download; nil: none
}

// WriteAt writes p at off in the file and offers it to the format check.
func (rf *restoreFile) WriteAt(p []byte, off int64) (int, error) {
	n, err := rf.f.WriteAt(p, off)
	if err == nil && rf.feed != nil {
		rf.feed.write(p, off)
	}
	return n, err
}

// release drops a reference. failed is the error that ended the chunk
// write the reference was for (nil: none), and release returns it. The
// last reference closes the file, after setting its mode and syncing it
// unless the restore failed already (failed, or ctx ended); an error of
// those is a write error.
func (rf *restoreFile) release(ctx context.Context, failed error) error {
	if rf.refs.Add(-1) != 0 {
		return failed
	}
	if failed != nil || ctx.Err() != nil {
		rf.f.Close()
		return failed
	}
	err := rf.f.Chmod(rf.mode)
	if err == nil {
		err = rf.f.Sync()
	}
	if cerr := rf.f.Close(); err == nil {
		err = cerr
	}
	if err != nil && ctx.Err() == nil {
		return writeFailed(fmt.Errorf("file %s: %w", rf.path, err))
	}
	if rf.feed != nil {
		rf.feed.finish()
	}
	return nil
}

type restoreJob struct {
	file   *restoreFile
	offset int64
	chunk  Chunk
}

// restoreFiles restores files into sub, a directory beneath root ("" for
// root itself; see Restore); set is the paths format.CheckSet checks as
// one set (setPaths). With rec (the snapshot's manifest filled in), the
// move into place is recorded and all or nothing (moveInPlace); without,
// the files are moved into the new directory sub.
func restoreFiles(ctx context.Context, s storage.Store, files []File, set []string, root *beneath.Dir, sub string, opts RestoreOptions, rec *restoreRecord, checked *Checked) error {
	tmp, err := prepareRestore(ctx, files, root, sub)
	if tmp != "" {
		defer root.RemoveAll(tmp)
	}
	if err != nil {
		return err
	}
	var feeds map[string]*formatFeed
	if !opts.SkipFormatCheck {
		feeds = map[string]*formatFeed{}
	}
	if err := downloadFiles(ctx, s, files, root, tmp, opts, checked, feeds); err != nil {
		return err
	}
	if !opts.SkipFormatCheck {
		if err := checkRestored(ctx, root, tmp, files, set, opts.Workers, feeds); err != nil {
			if !errors.Is(err, ErrCorrupt) && ctx.Err() == nil {
				err = writeFailed(err)
			}
			return err
		}
	}
	if rec == nil {
		return moveIntoPlace(files, root, tmp, sub)
	}
	rec.Tmp, rec.Sub = tmp, sub
	return moveInPlace(root, rec, files)
}

// prepareRestore checks that files can be restored into sub beneath root
// (their paths, the targets there, the free space) and creates them,
// reserved, in a new temporary directory in root, whose path relative to
// root it returns (also with an error, once it exists: the caller removes
// it).
func prepareRestore(ctx context.Context, files []File, root *beneath.Dir, sub string) (tmp string, err error) {
	for _, f := range files {
		if err := CheckPath(f.Path); err != nil { // Validate did; belt and braces
			return "", fmt.Errorf("%v: %w", err, ErrCorrupt)
		}
	}
	if err := checkTargets(root, sub, files); err != nil {
		return "", writeFailed(err)
	}
	if err := checkSpace(root.Name(), files); err != nil {
		return "", err
	}
	tmp, err = root.MkdirTemp("", tempPrefix)
	if err != nil {
		return "", err
	}
	if err := reserveFiles(ctx, root, tmp, files); err != nil {
		if ctx.Err() != nil {
			return tmp, err
		}
		return tmp, writeFailed(err)
	}
	return tmp, nil
}

// downloadFiles writes the chunks of files into their reserved files under
// tmp, up to opts.Workers at once, checks each by opts.Check (counting in
// checked the chunks each check ran on), and reports opts.Progress (when
// set) after each. With feeds (not nil), each file's format check is fed
// by the download (formatFeed), and its feed is put there by path.
// A sender opens one file at a time and hands out its chunks; the file is
// closed, with its mode set and synced, when its last chunk is written.
// The first error stops it and is returned.
func downloadFiles(ctx context.Context, s storage.Store, files []File, root *beneath.Dir, tmp string, opts RestoreOptions, checked *Checked, feeds map[string]*formatFeed) error {
	workers, progress := opts.Workers, opts.Progress
	var bySHA256, byCRC32C atomic.Int64
	defer func() {
		checked.SHA256, checked.CRC32C = int(bySHA256.Load()), int(byCRC32C.Load())
	}()
	var total int64
	for _, mf := range files {
		total += mf.Size
	}
	var written atomic.Int64
	if progress != nil {
		progress(0, total)
	}
	scratch := newScratchPool(workers)
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(workers + 1) // the sender, and up to workers downloads
	fetch := func(job restoreJob) error {
		if gctx.Err() != nil {
			return job.file.release(gctx, nil)
		}
		buf := scratch.get()
		defer scratch.put(buf)
		// The chunk goes into the temporary file before its hash is
		// known; a bad chunk fails the whole restore, and the temporary
		// directory is removed.
		used, err := fetchChunk(gctx, s, job.chunk, job.file, job.offset, buf, opts.Check)
		if err != nil {
			return job.file.release(gctx, fmt.Errorf("file %s at offset %d: %w", job.file.path, job.offset, err))
		}
		if job.file.feed != nil {
			job.file.feed.chunkDone(job.offset, job.offset+job.chunk.Size, buf)
		}
		if used == CheckCRC32C {
			byCRC32C.Add(1)
		} else {
			bySHA256.Add(1)
		}
		// Start writing back now, so the fsync before the rename has
		// little left to do. Advisory: errors are ignored.
		_ = unix.SyncFileRange(int(job.file.f.Fd()), job.offset, job.chunk.Size, unix.SYNC_FILE_RANGE_WRITE)
		err = job.file.release(gctx, nil)
		if progress != nil {
			progress(written.Add(job.chunk.Size), total)
		}
		return err
	}
	g.Go(func() error {
		for _, mf := range files {
			if len(mf.Chunks) == 0 {
				continue // done by reserveFiles
			}
			if err := sendChunks(gctx, mf, root, tmp, feeds, func(job restoreJob) {
				g.Go(func() error { return fetch(job) })
			}); err != nil || gctx.Err() != nil {
				return err
			}
		}
		return nil
	})
	return waitCause(ctx, gctx, g)
}

// sendChunks opens mf's reserved file under tmp, beneath root, and hands
// each of its chunks to fetch, until ctx ends; then it drops its own
// reference to the file (restoreFile.release).
func sendChunks(ctx context.Context, mf File, root *beneath.Dir, tmp string, feeds map[string]*formatFeed, fetch func(restoreJob)) error {
	f, err := root.OpenFile(tmp+"/"+mf.Path, unix.O_RDWR, 0) // read back by formatFeed
	if err != nil {
		return writeFailed(err)
	}
	rf := &restoreFile{f: f, path: mf.Path, mode: fs.FileMode(mf.Mode)}
	if feeds != nil {
		rf.feed = newFormatFeed(f, mf.Size)
		feeds[mf.Path] = rf.feed
	}
	rf.refs.Store(1)
	var off int64
	for _, c := range mf.Chunks {
		if ctx.Err() != nil {
			break
		}
		rf.refs.Add(1)
		fetch(restoreJob{file: rf, offset: off, chunk: c})
		off += c.Size
	}
	return rf.release(ctx, nil)
}

// moveIntoPlace renames the restored files from tmp to their paths in
// sub, both beneath root, one by one, and syncs the directories it
// moved into. Every rename resolves both paths beneath root without
// following a link: a directory swapped for a symlink on the way fails
// the move (ELOOP) instead of writing where the link points.
func moveIntoPlace(files []File, root *beneath.Dir, tmp, sub string) error {
	dirs := map[string]bool{}
	for _, mf := range files {
		target := joinSlash(sub, mf.Path)
		if err := root.Rename(tmp+"/"+mf.Path, target); err != nil {
			return fmt.Errorf("move restored files into place (some are moved, the rest are not): %w", err)
		}
		dirs[path.Dir(target)] = true
	}
	syncDirs(root, dirs)
	root.Sync()
	return nil
}

// afterMove, when set (a build with the lifeboat_faults tag), is called
// once the record of a restore is written, before anything is moved
// (n = 0), and after each recorded move (moveRecorded: each file moved
// aside, then each file moved into place) with the number done: tests
// stop or kill lifeboat there.
var afterMove func(n int)

// joinSlash joins the slash path p to the directory sub ("" for none).
func joinSlash(sub, p string) string {
	if sub == "" {
		return p
	}
	return sub + "/" + p
}

// reserveMin is the smallest file reserveFiles reserves. Smaller files
// gain nothing from fallocate that is worth its cost (an allocation and,
// at the first write, its conversion: more than creating the file, for a
// file of a few bytes), and checkSpace has counted their blocks.
const reserveMin = fetchBuffer

// reserveFiles creates every file of the snapshot under tmp, one at a time,
// with its final size reserved (reserve) from reserveMin bytes up. Empty
// files are complete then: they get their mode and are synced. It stops
// when ctx ends (creating many files on a slow disk takes a while).
func reserveFiles(ctx context.Context, root *beneath.Dir, tmp string, files []File) error {
	made := map[string]bool{}
	for _, mf := range files {
		if err := ctx.Err(); err != nil {
			return err
		}
		p := tmp + "/" + mf.Path
		if d := path.Dir(p); !made[d] {
			if err := root.MkdirAll(d); err != nil {
				return err
			}
			made[d] = true
		}
		f, err := root.OpenFile(p, unix.O_RDWR|unix.O_CREAT|unix.O_EXCL, 0o600)
		if err != nil {
			return err
		}
		if mf.Size >= reserveMin {
			err = reserve(f, mf.Size)
		}
		if err != nil {
			err = fmt.Errorf("reserve %d bytes for %s: %w", mf.Size, mf.Path, err)
		} else if len(mf.Chunks) == 0 {
			if err = f.Chmod(fs.FileMode(mf.Mode)); err == nil {
				err = f.Sync()
			}
		}
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// spaceMargin is free space a restore leaves on top of what its files take,
// for the file system's own metadata (directories, extent trees).
const spaceMargin = 1 << 20

// checkSpace fails with an error wrapping ErrTooBig and ENOSPC when dir's
// file system has less free space (to an unprivileged user) than files take
// in whole blocks, or fewer free inodes than files and their directories.
// Where the file system does not report them (a size of zero), it passes:
// reserving the files finds out.
func checkSpace(dir string, files []File) error {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil || st.Blocks == 0 {
		return nil
	}
	block := st.Frsize
	if block <= 0 {
		block = st.Bsize
	}
	if block <= 0 {
		return nil
	}
	var fileBytes, need int64
	dirs := map[string]bool{}
	for _, f := range files {
		fileBytes += f.Size
		need += (f.Size + block - 1) / block * block
		for d := path.Dir(f.Path); d != "." && !dirs[d]; d = path.Dir(d) {
			dirs[d] = true
		}
	}
	need += int64(len(dirs)+1)*block + spaceMargin
	free := int64(min(st.Bavail, uint64(math.MaxInt64)/uint64(block))) * block
	if need > free {
		return fmt.Errorf("the snapshot needs %d bytes (%d bytes of files, %d files, with blocks of %d bytes) and the file system of %s has %d bytes free: "+
			"make the volume larger or free space on it: %w: %w", need, fileBytes, len(files), block, dir, free, ErrTooBig, unix.ENOSPC)
	}
	if inodes := uint64(len(files) + len(dirs) + 1); st.Files > 0 && inodes > st.Ffree {
		return fmt.Errorf("the snapshot needs %d inodes (%d files and %d directories) and the file system of %s has %d free: "+
			"make the volume larger or give it more inodes: %w: %w", inodes, len(files), len(dirs)+1, dir, st.Ffree, ErrTooBig, unix.ENOSPC)
	}
	return nil
}

// checkSet runs format.CheckSet for the coordinator's snapshot (rank 0):
// Paddle's save_state_dict writes the *.metadata there only, so another
// rank's *.distcp shards stand alone.
func checkSet(paths []string, rank int) error {
	if rank != 0 {
		return nil
	}
	return format.CheckSet(paths)
}

// setPaths returns the paths of m that format.CheckSet checks as a set,
// by checkSet's rule: all of the coordinator's (rank 0's), none of
// another rank's.
func setPaths(m *Manifest) []string {
	if m.Rank != 0 {
		return nil
	}
	paths := make([]string, len(m.Files))
	for i, f := range m.Files {
		paths[i] = f.Path
	}
	return paths
}

// checkRestored runs the format checks on the restored files under tmp, up
// to workers at once, and format.CheckSet on the paths set. A file that is
// not whole is an error wrapping ErrCorrupt and format.ErrTorn.
//
// A file whose check the download fed (feeds) has its verdict already;
// the others are read (checkRestoredFile): for most formats, their
// headers and tails only.
func checkRestored(ctx context.Context, root *beneath.Dir, tmp string, files []File, set []string, workers int, feeds map[string]*formatFeed) error {
	if err := format.CheckSet(set); err != nil {
		return formatCorrupt("the snapshot's files", err)
	}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(min(workers, runtime.GOMAXPROCS(0), len(files)))
	for _, f := range files {
		if gctx.Err() != nil {
			break
		}
		g.Go(func() error {
			if ff := feeds[f.Path]; ff != nil {
				if ok, err := ff.verdict(); ok {
					if err != nil {
						return formatCorrupt(f.Path, err)
					}
					return nil
				}
			}
			if err := checkRestoredFile(root, tmp+"/"+f.Path); err != nil {
				return formatCorrupt(f.Path, err)
			}
			return nil
		})
	}
	return waitCause(ctx, gctx, g)
}

// beforeCheckRead, when set (tests), is called with the path of each
// restored file checkRestoredFile reads.
var beforeCheckRead func(rel string)

// checkRestoredFile is format.CheckFile of the file rel, opened beneath
// root without following a link (so a temporary directory swapped for a
// link is never read through): the checks its content announces, those
// that read headers and tails and, where its format has one, its
// streamed check. Content no check recognises, or one only partly
// recognised (format.ErrUnchecked), passes.
func checkRestoredFile(root *beneath.Dir, rel string) error {
	if beforeCheckRead != nil {
		beforeCheckRead(rel)
	}
	f, err := root.OpenFile(rel, unix.O_RDONLY|unix.O_NONBLOCK, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("not a regular file (%s)", fi.Mode().Type())
	}
	_, s, err := format.Begin(f, fi.Size())
	if err == nil && s != nil {
		if _, err = io.CopyBuffer(s, io.NewSectionReader(f, 0, fi.Size()), make([]byte, fetchBuffer)); err == nil {
			err = s.Close()
		}
	}
	if errors.Is(err, format.ErrUnchecked) {
		return nil
	}
	return err
}

// formatCorrupt is the error of restored files that failed a format check:
// data the snapshot should not hold (ErrCorrupt) when they are not whole,
// the failure to check them otherwise.
func formatCorrupt(what string, err error) error {
	if errors.Is(err, format.ErrTorn) {
		return fmt.Errorf("%s: not whole after restore: %w: %w", what, err, ErrCorrupt)
	}
	return fmt.Errorf("%s: format check: %w", what, err)
}

// reserve gives the new, empty file f its final size, with its blocks
// allocated where the filesystem can (fallocate). A volume too small for the
// checkpoint then fails here, before anything is downloaded, and the
// downloads write into allocated blocks instead of holes, which costs ext4
// less CPU per page (docs/BENCHMARKS.md). Where fallocate fails for any
// other reason than a full volume or quota (a filesystem without it), the
// file is made sparse instead, as if fallocate did not exist.
func reserve(f *os.File, size int64) error {
	if size == 0 {
		return nil
	}
	err := unix.Fallocate(int(f.Fd()), 0, 0, size)
	if err == nil || errors.Is(err, unix.ENOSPC) || errors.Is(err, unix.EDQUOT) {
		return err
	}
	return f.Truncate(size)
}

// checkTargets fails if a file cannot be moved to its place in sub,
// beneath root, without deleting user data or leaving root: the target is
// a directory, or one of its parents is a symlink or not a directory. (The
// move itself never follows a link either: this check only makes it
// unlikely to fail half way.)
func checkTargets(root *beneath.Dir, sub string, files []File) error {
	checked := make(map[string]bool)
	for _, f := range files {
		target := joinSlash(sub, f.Path)
		if st, err := root.Lstat(target); err == nil && st.Mode&unix.S_IFMT == unix.S_IFDIR {
			return fmt.Errorf("%s is a directory in the way of the restored file %s; move it away", filepath.Join(root.Name(), target), f.Path)
		}
		var parents []string // top down: a link is named where it is
		for p := path.Dir(target); p != "." && !checked[p]; p = path.Dir(p) {
			parents = append(parents, p)
		}
		slices.Reverse(parents)
		for _, p := range parents {
			checked[p] = true
			st, err := root.Lstat(p)
			if errors.Is(err, fs.ErrNotExist) || errors.Is(err, unix.ENOENT) {
				continue
			}
			if err != nil && !errors.Is(err, unix.ELOOP) && !errors.Is(err, unix.ENOTDIR) {
				return err
			}
			if err != nil || st.Mode&unix.S_IFMT != unix.S_IFDIR {
				return fmt.Errorf("%s is a symlink or file where the restored file %s needs a directory; move it away", filepath.Join(root.Name(), p), f.Path)
			}
		}
	}
	return nil
}

// fetchBuffer is the piece of a chunk a download reads, hashes and writes
// at a time: memory per download worker, whatever the chunk size.
const fetchBuffer = 1 << 20

// fetchChunk downloads chunk c through scratch, checks its length and its
// bytes (check: the CRC32C its manifest records, its SHA-256, or both; see
// Check), and writes it at off in w (nil: only check it). It returns the
// check that ran. Bytes beyond c.Size are counted, never written: w's
// next range belongs to another chunk. A missing object, or one of the
// wrong length or checksum, wraps ErrCorrupt. A transfer that fails is
// the store's to retry (storage.Retry resumes a cut body); a body that
// ends early without an error is read on from where it ended when the
// stored size says the object is whole, so that it is not taken for a
// short chunk. Errors writing to w are permanent.
func fetchChunk(ctx context.Context, s storage.Store, c Chunk, w io.WriterAt, off int64, scratch []byte, check Check) (Check, error) {
	key := chunkKey(c.SHA256)
	f := &chunkFetch{c: c, w: w, off: off, scratch: scratch, check: check}
	err := f.get(ctx, s, key, 0, -1)
	if err == nil && f.n < c.Size {
		// A transfer cut short and an object that is too short end
		// alike; the stored size tells them apart.
		var oi storage.ObjectInfo
		if oi, err = s.Stat(ctx, key); err == nil && oi.Size == c.Size {
			if err = f.get(ctx, s, key, f.n, c.Size-f.n); err == nil && f.n < c.Size {
				err = fmt.Errorf("the transfer ended after %d of %d bytes", f.n, c.Size)
			}
		}
	}
	if errors.Is(err, storage.ErrNotExist) {
		return check, fmt.Errorf("chunk %s is missing: %w: %w", key, err, ErrCorrupt)
	}
	if err != nil {
		return check, fmt.Errorf("download %s: %w", key, err)
	}
	if f.n != c.Size {
		return f.sum.used(), fmt.Errorf("chunk %s has the wrong length (want %d bytes, got %d): %w", key, c.Size, f.n, ErrCorrupt)
	}
	return f.sum.used(), f.sum.verify(c)
}

// chunkFetch is one chunk's download: the bytes read so far (n) and their
// check, chosen at the first Get by what the store said of the object.
type chunkFetch struct {
	c       Chunk
	w       io.WriterAt
	off     int64
	scratch []byte
	check   Check
	sum     *chunkSum
	n       int64
}

// get reads length bytes (-1: to the end) of key from offset, which is
// f.n, up to one byte more than the chunk's size: that byte tells a long
// object.
func (f *chunkFetch) get(ctx context.Context, s storage.Store, key string, offset, length int64) error {
	rc, err := s.Get(ctx, key, offset, length)
	if err != nil {
		return err
	}
	defer rc.Close()
	if f.sum == nil {
		f.sum = newChunkSum(f.check, f.c)
	}
	r := io.LimitReader(rc, f.c.Size+1-f.n)
	for {
		// Fill scratch, so that writes are large.
		m := 0
		var rerr error
		for m < len(f.scratch) && rerr == nil {
			var k int
			k, rerr = r.Read(f.scratch[m:])
			m += k
		}
		f.sum.write(f.scratch[:m])
		if f.w != nil && f.n < f.c.Size && m > 0 {
			if _, werr := f.w.WriteAt(f.scratch[:min(int64(m), f.c.Size-f.n)], f.off+f.n); werr != nil {
				return storage.Permanent(writeFailed(werr))
			}
		}
		f.n += int64(m)
		if rerr == io.EOF {
			return nil
		}
		if rerr != nil {
			return rerr
		}
	}
}

// withDefaults fills in what the caller left zero: the download workers
// and a logger that discards.
func (o RestoreOptions) withDefaults() RestoreOptions {
	if o.Workers <= 0 {
		o.Workers = DefaultDownloadWorkers
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	return o
}

// syncDirs syncs the directories (slash-separated, "." for root itself)
// that moves into place changed, beneath root, so the moves survive a
// crash; a directory that cannot be opened is skipped.
func syncDirs(root *beneath.Dir, dirs map[string]bool) {
	for _, d := range slices.Sorted(maps.Keys(dirs)) {
		if d == "." {
			d = ""
		}
		if sd, err := root.OpenDir(d, false); err == nil {
			sd.Sync()
			sd.Close()
		}
	}
}
