package checkpoint

import (
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/lifeboat-project/lifeboat/format"
	"github.com/lifeboat-project/lifeboat/internal/reserved"
	"github.com/lifeboat-project/lifeboat/storage"
)

// Defaults for Uploader, Restore and Prune.
const (
	DefaultChunkSize = 8 << 20
	// DefaultUploadWorkers and DefaultDownloadWorkers are the chunks in
	// flight at once. A local MinIO is as fast with 4 as with 32; a store
	// 10 to 50 ms away needs more requests in flight to keep the link busy
	// (bench/latency.sh, docs/BENCHMARKS.md). Uploads hold one chunk
	// buffer per worker and two more, downloads one per worker.
	DefaultUploadWorkers   = 8
	DefaultDownloadWorkers = 16
	// DefaultSafetyWindow is how old an unreferenced chunk must be before
	// Prune deletes it. An upload may take at most a quarter of it, and
	// reuses stored chunks only while they are younger than three quarters
	// of it (docs/FORMAT.md, "Prune and concurrent uploads").
	DefaultSafetyWindow = 6 * time.Hour
)

// safetyWindow is the window of an Uploader or a Prune that set w: w, or
// DefaultSafetyWindow when w is 0. Both read it here, so that their
// defaults cannot drift apart.
func safetyWindow(w time.Duration) time.Duration { return cmp.Or(w, DefaultSafetyWindow) }

// ErrInterrupted marks an upload refused because the checkpoint is not
// whole: a file failed its format check (the error also wraps
// format.ErrTorn and names the file). Nothing was committed. The error is
// permanent (storage.IsPermanent): uploading the same files again cannot
// succeed; the checkpoint is stored once its files change and pass.
var ErrInterrupted = errors.New("the checkpoint is not whole")

// ErrChanged marks an upload refused because a file kept changing while it
// was read, or stopped being the regular file that was scanned. Nothing was
// committed; uploading again later may succeed.
var ErrChanged = errors.New("a file changed while it was uploaded")

// tempPrefix starts the names Restore gives its temporary directories;
// Upload skips entries with this prefix.
const tempPrefix = reserved.RestoreTempPrefix

// Uploader uploads the files of a checkpoint directory as one snapshot. Zero
// fields take the defaults; an Uploader is safe for concurrent Uploads.
type Uploader struct {
	Store     storage.Store
	ChunkSize int // bytes per chunk, default DefaultChunkSize
	Workers   int // parallel hash-and-Put workers, default DefaultUploadWorkers
	// Buffers bounds the chunks in memory at once (read, hashed or being
	// Put), default Workers+2, across all uploads and streams of this
	// Uploader (they share the buffers); memory use is about
	// Buffers*ChunkSize.
	Buffers int
	// SafetyWindow must not exceed the window Prune runs with. Default
	// DefaultSafetyWindow.
	SafetyWindow time.Duration
	Clock        Clock        // default time.Now
	Producer     string       // recorded in the manifest, default "lifeboat"
	Log          *slog.Logger // default: discard
	// SkipFormatCheck turns off the format checks of package format. By
	// default every file read is checked (its header, and every byte of a
	// pickle in the reading pass) with the snapshot's set of paths, and an
	// upload with a file that is not whole fails with ErrInterrupted.
	SkipFormatCheck bool
	// Fence, when set, is called just before each manifest is written
	// (after every chunk is stored): an error means no manifest is
	// written, and the upload fails with it. It is how a lifeboat that
	// finds another live pod of its rank (coord.Claim) commits nothing
	// more. Set it before the first upload.
	Fence func(ctx context.Context) error

	// beforeOpen, when set (tests), runs before each open of a file to
	// read it, between its stat and its open.
	beforeOpen func(rel string)

	mu    sync.Mutex
	known map[fileID][]Chunk // files committed by this Uploader, by identity
	// streamed is what streams of this Uploader stored (stream.go).
	streamed streamedChunks
	// bufs are the chunk buffers of every upload and stream (buffers).
	bufs chunkBuffers
	// index is what this Uploader knows of the store's chunks: the hashes
	// its last listing found, with their modification times, plus the
	// chunks it has stored since, each with the time its Put began (no
	// later than the server's). nil before the first listing.
	index map[string]time.Time
}

// knownChunks returns the chunks of f when this Uploader committed f with
// the same identity before and every chunk is still in the store and young
// enough to be reused (see docs/FORMAT.md on prune).
func (u *Uploader) knownChunks(f localFile, index map[string]time.Time, start time.Time, reuseAge time.Duration) ([]Chunk, bool) {
	u.mu.Lock()
	cs, ok := u.known[f.id()]
	u.mu.Unlock()
	if !ok {
		return nil, false
	}
	for _, c := range cs {
		mod, stored := index[c.SHA256]
		if !stored || start.Sub(mod) > reuseAge {
			return nil, false
		}
	}
	return cs, true
}

// remember records the chunks of committed files for later uploads.
func (u *Uploader) remember(files []localFile, m *Manifest) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.known == nil || len(u.known) > 4*MaxFiles {
		u.known = make(map[fileID][]Chunk)
	}
	for i, f := range files {
		u.known[f.id()] = m.Files[i].Chunks
	}
}

// Validate reports a configuration Upload cannot run with.
func (u *Uploader) Validate() error {
	switch {
	case u.Store == nil:
		return errors.New("checkpoint: uploader has no store")
	case u.ChunkSize < 0 || u.ChunkSize > MaxChunkSize:
		return fmt.Errorf("checkpoint: chunk size %d outside 1..%d bytes", u.ChunkSize, MaxChunkSize)
	case u.Workers < 0 || u.Buffers < 0:
		return errors.New("checkpoint: workers and buffers must not be negative")
	case u.SafetyWindow < 0:
		return errors.New("checkpoint: safety window must not be negative")
	}
	return nil
}

// UploadResult reports what an Upload did. Byte counts are file bytes.
type UploadResult struct {
	Manifest *Manifest
	Key      string // the manifest's key
	Revision int    // the manifest's revision of its step and rank
	Files    int
	Bytes    int64 // all file bytes of the snapshot
	Chunks   int
	// Uploaded counts chunks Put to the store; Deduped those already
	// stored (by this or an earlier snapshot) that were not Put again.
	UploadedBytes, DedupedBytes   int64
	UploadedChunks, DedupedChunks int
	// Skipped lists entries that are not regular files (symlinks, FIFOs,
	// sockets, devices): the snapshot does not contain them.
	Skipped []string
	// AlreadyCommitted is true when the highest revision of this step and
	// rank holds the same files (a retried upload); nothing was written.
	AlreadyCommitted bool
	// Late is true when another writer (a pod that replaced this one, with
	// the same rank) committed a revision of this step and rank of the
	// same line while this upload ran: this upload's files are older work
	// and were not committed, so that they never become the newest
	// (checkpoint.late_commit); Key and Manifest are that revision's.
	Late bool
	// ReusedFiles counts files this Uploader had committed before, unchanged
	// since (device, inode, size, modification and change time), whose
	// chunks were reused without reading them again.
	ReusedFiles int
	// StreamedBytes and StreamedChunks count, among the deduplicated
	// chunks, those a Stream of this Uploader stored while the files were
	// written, confirmed by the keyed hash of the bytes read now: they were
	// not hashed with SHA-256 or Put again.
	StreamedBytes  int64
	StreamedChunks int
	// Reread counts the times a file that changed while it was read was
	// read again from its start.
	Reread int
}

// maxRereads is how many times one upload reads a file again that changed
// while it was read, before it fails with ErrChanged.
const maxRereads = 2

type uploadJob struct {
	file, chunk int
	attempt     int // the file's read attempt the chunk belongs to
	buf         []byte
	// streamed: a Stream of the Uploader stored a chunk it read at this
	// chunk's offset of this file (streamedChunks.readAt)
	streamed bool
}

// Upload stores the regular files under dir as the snapshot of target. It
// streams each file in chunks through a bounded number of buffers, hashes
// each chunk once, Puts the chunks the store does not already hold (fresh
// enough to survive Prune) as far as this Uploader knows (storeIndex: the
// first upload lists the store's chunks once; later ones do not), and
// only when every chunk is stored writes the
// manifest, create-only, as the next revision of the step and rank when
// one with other files is committed already. On any error no manifest is
// written.
//
// Files are opened without following symlinks and must be the regular
// files scanned, unchanged until read to the end; a file that changed is
// read again from its start, at most twice, and then the upload fails with
// ErrChanged. Unless SkipFormatCheck is set, a file that is not a whole
// file of its format (package format) fails the upload with
// ErrInterrupted.
func (u *Uploader) Upload(ctx context.Context, dir string, target Target) (*UploadResult, error) {
	return u.upload(ctx, dir, nil, target)
}

// UploadFiles is Upload of only the given files under dir: slash-separated
// paths relative to dir, which the manifest records as they are. It is how
// one checkpoint among others in the trainer's directory is stored with the
// paths it has there, so that a restore puts it back in the same place.
func (u *Uploader) UploadFiles(ctx context.Context, dir string, paths []string, target Target) (*UploadResult, error) {
	if len(paths) == 0 {
		return nil, fmt.Errorf("checkpoint: upload %s from %s: no files", target, dir)
	}
	return u.upload(ctx, dir, paths, target)
}

// storeIndex returns a copy of what this Uploader knows of the store's
// chunks: what its one listing of chunks/ found, made by its first upload,
// and the chunks it has Put since, each with the time its Put began. A
// chunk another writer stored since is not known and is Put again; the age
// rule decides what may be reused from the index (docs/FORMAT.md), so a
// commit costs requests for its own chunks only, not for the store's.
func (u *Uploader) storeIndex(ctx context.Context) (map[string]time.Time, error) {
	u.mu.Lock()
	index := maps.Clone(u.index)
	u.mu.Unlock()
	if index != nil {
		return index, nil
	}
	index, err := loadIndex(ctx, u.Store)
	if err != nil {
		return nil, err
	}
	u.mu.Lock()
	if u.index == nil {
		u.index = maps.Clone(index)
	}
	u.mu.Unlock()
	return index, nil
}

// stored records that this Uploader Put the chunk sum, its Put having
// begun at t.
func (u *Uploader) stored(sum string, t time.Time) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.index != nil {
		u.index[sum] = t
	}
}

// upload is Upload (paths nil: every regular file under dir) and
// UploadFiles: it plans the upload, stores every chunk the store lacks,
// and commits the manifest.
func (u *Uploader) upload(ctx context.Context, dir string, paths []string, target Target) (*UploadResult, error) {
	run, err := u.plan(ctx, dir, paths, target)
	if err != nil {
		return nil, err
	}
	if err := run.storeChunks(ctx); err != nil {
		return nil, err
	}
	return run.commit(ctx)
}

// uploadRun is one upload in progress: its settings, its files, what the
// store holds, and each file's chunks as they are read and stored.
type uploadRun struct {
	u         *Uploader
	dir       string
	target    Target
	chunkSize int
	workers   int
	window    time.Duration
	clock     Clock
	log       *slog.Logger
	start     time.Time
	// reuseAge: chunks stored before start whose age exceeds it may be
	// pruned before this upload commits; they are Put again
	// (docs/FORMAT.md).
	reuseAge time.Duration
	index    map[string]time.Time // the store's chunks (storeIndex)
	files    []localFile
	reused   []bool // files whose chunks this Uploader knew (knownChunks)
	res      *UploadResult

	mu       sync.Mutex
	chunks   [][]Chunk
	attempts []int           // the read attempt chunks[i] is of
	seen     map[string]bool // chunks stored or skipped by this upload
	upBytes  atomic.Int64
	dupBytes atomic.Int64
	upN      atomic.Int64
	dupN     atomic.Int64
	strBytes atomic.Int64
	strN     atomic.Int64
}

// plan checks the configuration and target, finds the files, checks that
// they are whole, learns which chunks the store holds, and takes the
// chunks of the files this Uploader committed before, unchanged.
func (u *Uploader) plan(ctx context.Context, dir string, paths []string, target Target) (*uploadRun, error) {
	if err := u.Validate(); err != nil {
		return nil, err
	}
	if err := target.Validate(); err != nil {
		return nil, fmt.Errorf("checkpoint: upload from %s: %w", dir, err)
	}
	workers := cmp.Or(u.Workers, DefaultUploadWorkers)
	run := &uploadRun{
		u: u, dir: dir, target: target,
		chunkSize: cmp.Or(u.ChunkSize, DefaultChunkSize),
		workers:   workers,
		window:    safetyWindow(u.SafetyWindow),
		clock:     orDefaultClock(u.Clock),
		log:       u.Log,
	}
	if run.log == nil {
		run.log = slog.New(slog.DiscardHandler)
	}
	run.start = run.clock()

	files, skipped, err := findFiles(dir, paths)
	if err != nil {
		return nil, err
	}
	for _, rel := range skipped {
		typ := "entry that is gone"
		if fi, err := os.Lstat(filepath.Join(dir, filepath.FromSlash(rel))); err == nil {
			typ = format.FileType(fi.Mode())
		}
		run.log.Warn("checkpoint.skipped_special", "path", rel, "type", typ)
	}
	if !u.SkipFormatCheck {
		if err := checkWholeSet(dir, files, target.Rank); err != nil {
			return nil, err
		}
	}
	run.reuseAge = run.window - run.window/4
	if run.index, err = u.storeIndex(ctx); err != nil {
		return nil, err
	}
	run.files = files
	run.res = &UploadResult{Skipped: skipped}
	run.chunks = make([][]Chunk, len(files))
	run.attempts = make([]int, len(files))
	run.seen = make(map[string]bool)
	run.reuseKnown()
	return run, nil
}

// findFiles returns the regular files under dir (paths nil) or the given
// ones, and the special files it skipped.
func findFiles(dir string, paths []string) (files []localFile, skipped []string, err error) {
	if paths == nil {
		return scanDir(dir)
	}
	return statFiles(dir, paths)
}

// checkWholeSet runs the format check of the files' set of paths for rank
// (checkSet); a set that is not whole fails with ErrInterrupted.
func checkWholeSet(dir string, files []localFile, rank int) error {
	rels := make([]string, len(files))
	for i, f := range files {
		rels[i] = f.rel
	}
	// Paddle's save_state_dict writes the metadata on the coordinator
	// (rank 0) only: other ranks' shards are checked one by one.
	err := checkSet(rels, rank)
	switch {
	case err == nil:
		return checkDistcp(dir, files)
	case !errors.Is(err, format.ErrTorn):
		return fmt.Errorf("checkpoint: upload %s: format check: %w", dir, err)
	}
	return storage.Permanent(&interruptedError{rel: lonelyShard(rels), err: fmt.Errorf("checkpoint: upload %s: %w: %w", dir, ErrInterrupted, err)})
}

// checkDistcp checks the *.distcp shards of each PyTorch distributed
// checkpoint among files against the *.metadata beside them, which records
// where each item lies (format.CheckDistcpMetadata): a shard cut exactly
// between two items is a run of whole zip archives, which only the
// metadata shows to be short. A shard that is not whole fails with
// ErrInterrupted.
func checkDistcp(dir string, files []localFile) error {
	for _, m := range files {
		if !strings.EqualFold(path.Ext(m.rel), ".metadata") {
			continue
		}
		mdir := path.Dir(m.rel)
		sizes := map[string]int64{}
		for _, f := range files {
			if path.Dir(f.rel) == mdir && strings.EqualFold(path.Ext(f.rel), ".distcp") {
				sizes[path.Base(f.rel)] = f.size
			}
		}
		if len(sizes) == 0 {
			continue
		}
		fh, err := openBeneath(dir, m.rel)
		if err != nil {
			continue // the reading pass reports it
		}
		shard, err := format.CheckDistcpMetadata(fh, m.size, sizes)
		fh.Close()
		if errors.Is(err, format.ErrTorn) {
			rel := path.Join(mdir, shard)
			return storage.Permanent(&interruptedError{rel: rel,
				err: fmt.Errorf("checkpoint: upload %s: %w: %w", filepath.Join(dir, filepath.FromSlash(rel)), ErrInterrupted, err)})
		}
	}
	return nil
}

// lonelyShard is the first *.distcp of rels without a *.metadata file in
// its directory (what format.CheckSet refuses), or "".
func lonelyShard(rels []string) string {
	meta := map[string]bool{}
	for _, r := range rels {
		if strings.EqualFold(path.Ext(r), ".metadata") {
			meta[path.Dir(r)] = true
		}
	}
	for _, r := range rels {
		if strings.EqualFold(path.Ext(r), ".distcp") && !meta[path.Dir(r)] {
			return r
		}
	}
	return ""
}

// reuseKnown takes the chunks of each file this Uploader committed before
// and that has not changed since (knownChunks): they are not read again.
func (run *uploadRun) reuseKnown() {
	run.reused = make([]bool, len(run.files))
	for i, f := range run.files {
		if cs, ok := run.u.knownChunks(f, run.index, run.start, run.reuseAge); ok {
			run.chunks[i], run.reused[i] = cs, true
			run.res.ReusedFiles++
			for _, c := range cs {
				run.dupBytes.Add(c.Size)
				run.dupN.Add(1)
			}
		}
	}
}

// storeChunks reads the files not reused in chunks, one file after
// another, and hashes and stores up to workers chunks at once, through
// the Uploader's buffers. The first error stops it and is returned.
func (run *uploadRun) storeChunks(ctx context.Context) error {
	pool := run.u.buffers()
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(run.workers + 1) // the reader, and up to workers chunks hashed and Put
	g.Go(func() error {
		for i := range run.files {
			if run.reused[i] {
				continue
			}
			if err := run.readFile(gctx, i, pool, func(job uploadJob) {
				g.Go(func() error { return run.storeJob(gctx, job, pool) })
			}); err != nil {
				return err
			}
		}
		return nil
	})
	return waitCause(ctx, gctx, g)
}

// readFile reads file i in chunks into buffers from pool and hands each to
// store. A file that changed while it was read is read again from its
// start, at most maxRereads times; the chunks of an earlier read are void.
func (run *uploadRun) readFile(ctx context.Context, i int, pool *chunkBuffers, store func(uploadJob)) error {
	check := readCheck{format: !run.u.SkipFormatCheck}
	for attempt := 0; ; attempt++ {
		run.mu.Lock()
		run.chunks[i], run.attempts[i] = nil, attempt
		run.mu.Unlock()
		if run.u.beforeOpen != nil {
			run.u.beforeOpen(run.files[i].rel)
		}
		rerr := readChunks(ctx, run.dir, run.files[i], run.chunkSize, pool, check, func(buf []byte) {
			run.mu.Lock()
			run.chunks[i] = append(run.chunks[i], Chunk{Size: int64(len(buf))})
			j := len(run.chunks[i]) - 1
			run.mu.Unlock()
			if ctx.Err() != nil {
				pool.give(buf)
				return
			}
			f := run.files[i] // the reader's own: a re-read replaces it here
			streamed := run.u.streamed.readAt([2]uint64{f.dev, f.ino}, int64(j)*int64(run.chunkSize))
			store(uploadJob{file: i, chunk: j, attempt: attempt, buf: buf, streamed: streamed})
		})
		if rerr == nil {
			return nil
		}
		if !errors.Is(rerr, ErrChanged) || ctx.Err() != nil {
			return rerr
		}
		if attempt == maxRereads {
			return fmt.Errorf("%w; read %d times, it changed each time; it is uploaded once the trainer has finished writing it", rerr, attempt+1)
		}
		f, err := restat(run.dir, run.files[i])
		if err != nil {
			return err
		}
		run.log.Info("checkpoint.reread", "path", run.files[i].rel, "reason", rerr.Error())
		run.files[i] = f
		run.mu.Lock()
		run.res.Reread++
		run.mu.Unlock()
	}
}

// storeJob hashes job's chunk and Puts it unless the store holds it
// already, fresh enough, or this upload stored it, then gives its buffer
// back to pool. A chunk of a void read of its file is dropped.
func (run *uploadRun) storeJob(ctx context.Context, job uploadJob, pool *chunkBuffers) error {
	run.mu.Lock()
	void := run.attempts[job.file] != job.attempt
	run.mu.Unlock()
	if void { // the file changed: this read of it is void
		pool.give(job.buf)
		return nil
	}
	err := run.u.storeChunk(ctx, job, job.streamed, func(sum string, crc uint32) (skip bool) {
		run.mu.Lock()
		defer run.mu.Unlock()
		if run.attempts[job.file] != job.attempt {
			return true // void since the check above
		}
		c := &run.chunks[job.file][job.chunk]
		c.SHA256, c.CRC32C = sum, crc32cHex(crc)
		if run.seen[sum] {
			return true
		}
		run.seen[sum] = true
		mod, ok := run.index[sum]
		return ok && run.start.Sub(mod) <= run.reuseAge
	}, func(uploaded, streamed bool) {
		n := int64(len(job.buf))
		if streamed {
			run.strBytes.Add(n)
			run.strN.Add(1)
		}
		if uploaded {
			run.upBytes.Add(n)
			run.upN.Add(1)
		} else {
			run.dupBytes.Add(n)
			run.dupN.Add(1)
		}
	})
	pool.give(job.buf)
	return err
}

// commit writes the manifest of the stored chunks, unless the upload took
// so long that Prune may have removed chunks it reused, and records the
// files' chunks for later uploads.
func (run *uploadRun) commit(ctx context.Context) (*UploadResult, error) {
	res := run.res
	res.UploadedBytes, res.DedupedBytes = run.upBytes.Load(), run.dupBytes.Load()
	res.UploadedChunks, res.DedupedChunks = int(run.upN.Load()), int(run.dupN.Load())
	res.StreamedBytes, res.StreamedChunks = run.strBytes.Load(), int(run.strN.Load())
	if elapsed := run.clock().Sub(run.start); elapsed > run.window/4 {
		return nil, fmt.Errorf("checkpoint: upload %s: took %s, over a quarter of the %s safety window; not committing because prune may have removed reused chunks; upload again or raise the safety window of both upload and prune", run.target, elapsed, run.window)
	}
	m := run.manifest()
	if err := m.Validate(); err != nil {
		return nil, err
	}
	c, err := run.u.commit(ctx, m)
	if err != nil {
		return nil, err
	}
	res.Manifest, res.Key, res.Revision, res.AlreadyCommitted, res.Late = c.manifest, c.key, c.manifest.Revision, c.already, c.late
	if c.late {
		run.log.Warn("checkpoint.late_commit", "step", run.target.Step, "rank", run.target.Rank, "started", m.Created.Format(time.RFC3339Nano),
			"newer", c.key, "newer_committed", c.at.UTC().Format(time.RFC3339Nano),
			"reason", "another writer of this rank (the pod that replaced this one) committed this step after this upload began",
			"effect", "not committed: its files are older work and must not become the newest")
		return res, nil
	}
	run.u.remember(run.files, m)
	run.u.recordStep(ctx, run.target, c.key, run.log)
	if c.already {
		return res, nil
	}
	if res.Revision > 0 {
		run.log.Info("checkpoint.revised", "step", run.target.Step, "rank", run.target.Rank, "revision", res.Revision,
			"reason", "the step's files changed after it was committed")
	}
	return res, nil
}

// manifest is the manifest of the upload's files and chunks; it counts
// them into the result.
func (run *uploadRun) manifest() *Manifest {
	t := run.target
	m := &Manifest{
		Format: FormatVersion, ID: newID(), Step: t.Step, Rank: t.Rank, WorldSize: t.WorldSize,
		Counter: t.Counter, Generation: t.Generation, Line: t.Line, Created: run.start.UTC(), Producer: cmp.Or(run.u.Producer, "lifeboat"), ChunkSize: int64(run.chunkSize),
	}
	run.res.Files = len(run.files)
	for i, f := range run.files {
		m.Files = append(m.Files, File{Path: f.rel, Size: f.size, Mode: uint32(f.mode.Perm()), Chunks: run.chunks[i]})
		if run.chunks[i] == nil {
			m.Files[i].Chunks = []Chunk{}
		}
		run.res.Chunks += len(run.chunks[i])
		run.res.Bytes += f.size
	}
	return m
}

// storeChunk hashes job's bytes and Puts them unless skip(sum, crc) says
// the store holds them already; done reports which happened, and whether
// a Stream had stored these bytes (their SHA-256 and CRC32C are then the
// ones it recorded under their keyed hash, and are not computed again).
// Only a chunk a Stream read at the same offset of the same file
// (tryStreamed) is looked up.
func (u *Uploader) storeChunk(ctx context.Context, job uploadJob, tryStreamed bool, skip func(sum string, crc uint32) bool, done func(uploaded, streamed bool)) error {
	var sum string
	var crc uint32
	var streamed bool
	if tryStreamed {
		sum, crc, streamed = u.streamed.lookup(job.buf)
	}
	if !streamed {
		sum, crc = storage.Checksums(job.buf)
	}
	if skip(sum, crc) {
		done(false, streamed)
		return nil
	}
	key := chunkKey(sum)
	begun := orDefaultClock(u.Clock)()
	if _, err := u.Store.Put(ctx, key, bytes.NewReader(job.buf), int64(len(job.buf)), storage.PutOptions{SHA256: sum, CRC32C: crc}); err != nil {
		return fmt.Errorf("checkpoint: upload %s: %w", key, err)
	}
	u.stored(sum, begun)
	done(true, false)
	return nil
}

// loadIndex lists the stored chunks with their modification times.
func loadIndex(ctx context.Context, s storage.Store) (map[string]time.Time, error) {
	index := make(map[string]time.Time)
	err := s.List(ctx, chunksPrefix, func(oi storage.ObjectInfo) error {
		if sum, ok := parseChunkKey(oi.Key); ok {
			index[sum] = oi.ModTime
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("checkpoint: list %s in %s: %w", chunksPrefix, s, err)
	}
	return index, nil
}

// equalFile reports whether a and b are the same file: path, size, mode
// and bytes (Chunk.sameBytes).
func equalFile(a, b File) bool {
	return a.Path == b.Path && a.Size == b.Size && a.Mode == b.Mode && slices.EqualFunc(a.Chunks, b.Chunks, Chunk.sameBytes)
}

func newID() string {
	var b [8]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
