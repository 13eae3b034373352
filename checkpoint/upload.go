package checkpoint

import (
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

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

// ErrInterrupted marks an upload refused because the checkpoint is not
// whole: a file failed its format check (it also wraps format.ErrTorn).
// Nothing was committed. Uploading the same files again cannot succeed;
// the checkpoint is stored once its files change and pass.
var ErrInterrupted = errors.New("the checkpoint is not whole")

// ErrChanged marks an upload refused because a file kept changing while it
// was read, or stopped being the regular file that was scanned. Nothing was
// committed; uploading again later may succeed.
var ErrChanged = errors.New("a file changed while it was uploaded")

// tempPrefix starts the names Restore gives its temporary directories;
// Upload skips entries with this prefix.
const tempPrefix = ".lifeboat-restore-"

// Uploader uploads the files of a checkpoint directory as one snapshot. Zero
// fields take the defaults; an Uploader is safe for concurrent Uploads.
type Uploader struct {
	Store     storage.Store
	ChunkSize int // bytes per chunk, default DefaultChunkSize
	Workers   int // parallel hash-and-Put workers, default DefaultUploadWorkers
	// Buffers bounds the chunks in memory at once (read, hashed or being
	// Put), default Workers+2; memory use is about Buffers*ChunkSize.
	Buffers int
	// SafetyWindow must not exceed the window Prune runs with. Default
	// DefaultSafetyWindow.
	SafetyWindow time.Duration
	Backoff      Backoff      // retries of transient store errors, default DefaultBackoff
	Clock        Clock        // default time.Now
	Producer     string       // recorded in the manifest, default "lifeboat"
	Log          *slog.Logger // default: discard

	mu    sync.Mutex
	known map[fileID][]Chunk // files committed by this Uploader, by identity
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
	Files    int
	Bytes    int64 // all file bytes of the snapshot
	Chunks   int
	// Uploaded counts chunks Put to the store; Deduped those already
	// stored (by this or an earlier snapshot) that were not Put again.
	UploadedBytes, DedupedBytes   int64
	UploadedChunks, DedupedChunks int
	// Skipped lists entries that are not regular files (symlinks, devices,
	// sockets): the snapshot does not contain them.
	Skipped []string
	// AlreadyCommitted is true when the same files were already committed
	// under this step and rank (a retried upload); nothing was overwritten.
	AlreadyCommitted bool
	// ReusedFiles counts files this Uploader had committed before, unchanged
	// since (size, modification and change time, inode), whose chunks were
	// reused without reading them again.
	ReusedFiles int
}

type localFile struct {
	rel     string
	abs     string
	size    int64
	mode    fs.FileMode
	modTime time.Time
	ino     uint64
	ctime   int64 // status change time, ns: moves on every write, rename or chmod
}

// fileID is what the file system says about a file's content: when all of
// it is unchanged, so are the bytes (the same rule as restic's and rsync's
// quick check; the change time, which no user call can set back, guards it).
type fileID struct {
	abs          string
	size         int64
	mtime, ctime int64
	ino          uint64
}

func (f localFile) id() fileID {
	return fileID{abs: f.abs, size: f.size, mtime: f.modTime.UnixNano(), ctime: f.ctime, ino: f.ino}
}

// fileStat fills the identity fields of f from fi.
func fileStat(f *localFile, fi fs.FileInfo) {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		f.ino = st.Ino
		f.ctime = st.Ctim.Nano()
	}
}

type uploadJob struct {
	file, chunk int
	buf         []byte
}

// Upload stores the regular files under dir as the snapshot of (step, rank)
// of a job of worldSize ranks. It streams each file in chunks through a
// bounded number of buffers, hashes each chunk once, Puts the chunks the
// store does not already hold (fresh enough to survive Prune), and only when
// every chunk is stored writes the manifest, create-only. On any error no
// manifest is written. Files must not change while they are read: a file
// whose size or modification time changes fails the upload.
func (u *Uploader) Upload(ctx context.Context, dir string, step int64, rank, worldSize int) (*UploadResult, error) {
	return u.upload(ctx, dir, nil, step, rank, worldSize, true)
}

// UploadFiles is Upload of only the given files under dir: slash-separated
// paths relative to dir, which the manifest records as they are. It is how
// one checkpoint among others in the trainer's directory is stored with the
// paths it has there, so that a restore puts it back in the same place.
func (u *Uploader) UploadFiles(ctx context.Context, dir string, paths []string, step int64, rank, worldSize int) (*UploadResult, error) {
	if len(paths) == 0 {
		return nil, fmt.Errorf("checkpoint: upload step %d from %s: no files", step, dir)
	}
	return u.upload(ctx, dir, paths, step, rank, worldSize, true)
}

// FinalUploadFiles is UploadFiles for the last upload after a stop signal,
// when every second of the grace period counts: instead of listing every
// chunk in the store (seconds for a large store), it decides which chunks
// the store holds from what this Uploader learnt, the chunks its last
// listing found and those it has stored since, with their ages. A chunk
// it does not know of is Put even if another writer stored it meanwhile,
// and the age rule that keeps reused chunks safe from Prune applies as in
// any upload (docs/FORMAT.md). Before this Uploader has listed once, it
// lists.
func (u *Uploader) FinalUploadFiles(ctx context.Context, dir string, paths []string, step int64, rank, worldSize int) (*UploadResult, error) {
	if len(paths) == 0 {
		return nil, fmt.Errorf("checkpoint: upload step %d from %s: no files", step, dir)
	}
	return u.upload(ctx, dir, paths, step, rank, worldSize, false)
}

// storeIndex returns a copy of what is known of the store's chunks: a new
// listing when list is set or nothing is known yet, which then replaces
// what was known.
func (u *Uploader) storeIndex(ctx context.Context, list bool, backoff Backoff) (map[string]time.Time, error) {
	if !list {
		u.mu.Lock()
		index := maps.Clone(u.index)
		u.mu.Unlock()
		if index != nil {
			return index, nil
		}
	}
	index, err := loadIndex(ctx, u.Store, backoff)
	if err != nil {
		return nil, err
	}
	u.mu.Lock()
	u.index = maps.Clone(index)
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

func (u *Uploader) upload(ctx context.Context, dir string, paths []string, step int64, rank, worldSize int, list bool) (*UploadResult, error) {
	if err := u.Validate(); err != nil {
		return nil, err
	}
	if step < 0 || worldSize < 1 || worldSize > MaxWorldSize || rank < 0 || rank >= worldSize {
		return nil, fmt.Errorf("checkpoint: upload step %d rank %d of %d: invalid step, rank or world size", step, rank, worldSize)
	}
	chunkSize := cmp.Or(u.ChunkSize, DefaultChunkSize)
	workers := cmp.Or(u.Workers, DefaultUploadWorkers)
	buffers := max(cmp.Or(u.Buffers, workers+2), 1)
	window := u.SafetyWindow
	if window == 0 {
		window = DefaultSafetyWindow
	}
	backoff := orDefaultBackoff(u.Backoff)
	clock := orDefaultClock(u.Clock)
	log := u.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	start := clock()

	var files []localFile
	var skipped []string
	var err error
	if paths == nil {
		files, skipped, err = scanDir(dir)
	} else {
		files, skipped, err = statFiles(dir, paths)
	}
	if err != nil {
		return nil, err
	}
	for _, s := range skipped {
		log.Warn("checkpoint: not a regular file, left out of the snapshot", "path", s, "dir", dir)
	}
	// Chunks stored before start whose age exceeds reuseAge may be pruned
	// before this upload commits: they are Put again (docs/FORMAT.md).
	reuseAge := window - window/4
	index, err := u.storeIndex(ctx, list, backoff)
	if err != nil {
		return nil, err
	}

	res := &UploadResult{Files: len(files), Skipped: skipped}
	var (
		mu       sync.Mutex
		chunks   = make([][]Chunk, len(files))
		seen     = make(map[string]bool)
		upBytes  atomic.Int64
		dupBytes atomic.Int64
		upN      atomic.Int64
		dupN     atomic.Int64
	)
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	pool := make(chan []byte, buffers)
	for range buffers {
		pool <- nil // allocated on first use
	}
	jobs := make(chan uploadJob)
	var wg sync.WaitGroup

	reused := make([]bool, len(files))
	for i, f := range files {
		if cs, ok := u.knownChunks(f, index, start, reuseAge); ok {
			chunks[i], reused[i] = cs, true
			res.ReusedFiles++
			for _, c := range cs {
				dupBytes.Add(c.Size)
				dupN.Add(1)
			}
		}
	}
	wg.Go(func() {
		defer close(jobs)
		for i, f := range files {
			if reused[i] {
				continue
			}
			if err := readChunks(ctx, f, chunkSize, pool, func(buf []byte) {
				mu.Lock()
				chunks[i] = append(chunks[i], Chunk{Size: int64(len(buf))})
				j := len(chunks[i]) - 1
				mu.Unlock()
				select {
				case jobs <- uploadJob{file: i, chunk: j, buf: buf}:
				case <-ctx.Done():
					pool <- buf
				}
			}); err != nil {
				cancel(err)
				return
			}
		}
	})
	for range workers {
		wg.Go(func() {
			for job := range jobs {
				err := u.storeChunk(ctx, job, backoff, func(sum string) (skip bool) {
					mu.Lock()
					defer mu.Unlock()
					chunks[job.file][job.chunk].SHA256 = sum
					if seen[sum] {
						return true
					}
					seen[sum] = true
					mod, ok := index[sum]
					return ok && start.Sub(mod) <= reuseAge
				}, func(uploaded bool) {
					n := int64(len(job.buf))
					if uploaded {
						upBytes.Add(n)
						upN.Add(1)
					} else {
						dupBytes.Add(n)
						dupN.Add(1)
					}
				})
				pool <- job.buf
				if err != nil {
					cancel(err)
				}
			}
		})
	}
	wg.Wait()
	if err := context.Cause(ctx); err != nil {
		return nil, err
	}

	res.UploadedBytes, res.DedupedBytes = upBytes.Load(), dupBytes.Load()
	res.UploadedChunks, res.DedupedChunks = int(upN.Load()), int(dupN.Load())
	if elapsed := clock().Sub(start); elapsed > window/4 {
		return nil, fmt.Errorf("checkpoint: upload step %d rank %d: took %s, over a quarter of the %s safety window; not committing because prune may have removed reused chunks; upload again or raise the safety window of both upload and prune", step, rank, elapsed, window)
	}

	m := &Manifest{
		Format: FormatVersion, ID: newID(), Step: step, Rank: rank, WorldSize: worldSize,
		Created: start.UTC(), Producer: cmp.Or(u.Producer, "lifeboat"), ChunkSize: int64(chunkSize),
	}
	for i, f := range files {
		m.Files = append(m.Files, File{Path: f.rel, Size: f.size, Mode: uint32(f.mode.Perm()), Chunks: chunks[i]})
		if chunks[i] == nil {
			m.Files[i].Chunks = []Chunk{}
		}
		res.Chunks += len(chunks[i])
		res.Bytes += f.size
	}
	data, err := m.Encode()
	if err != nil {
		return nil, err
	}
	key := manifestKey(step, rank, worldSize)
	res.Manifest, res.Key = m, key
	err = retry(ctx, backoff, func() error {
		_, err := u.Store.Put(ctx, key, bytes.NewReader(data), int64(len(data)), storage.PutOptions{IfNotExists: true})
		return err
	})
	if errors.Is(err, storage.ErrExists) {
		old, gerr := readManifest(ctx, u.Store, key, backoff)
		if gerr == nil && slices.EqualFunc(old.Files, m.Files, equalFile) {
			res.Manifest, res.AlreadyCommitted = old, true
			u.remember(files, m)
			return res, nil
		}
		return nil, fmt.Errorf("checkpoint: commit %s: a different snapshot of step %d rank %d is already committed; steps are immutable: %w", key, step, rank, err)
	}
	if err != nil {
		return nil, fmt.Errorf("checkpoint: commit %s: %w", key, err)
	}
	u.remember(files, m)
	log.Info("checkpoint: committed", "key", key, "files", res.Files, "bytes", res.Bytes,
		"uploaded", res.UploadedBytes, "deduped", res.DedupedBytes, "reused_files", res.ReusedFiles)
	return res, nil
}

// storeChunk hashes job's bytes and Puts them unless skip(sum) says the
// store holds them already; done reports which happened.
func (u *Uploader) storeChunk(ctx context.Context, job uploadJob, backoff Backoff, skip func(sum string) bool, done func(uploaded bool)) error {
	sum, crc := storage.Checksums(job.buf)
	if skip(sum) {
		done(false)
		return nil
	}
	key := chunkKey(sum)
	begun := orDefaultClock(u.Clock)()
	err := retry(ctx, backoff, func() error {
		_, err := u.Store.Put(ctx, key, bytes.NewReader(job.buf), int64(len(job.buf)), storage.PutOptions{SHA256: sum, CRC32C: crc})
		return err
	})
	if err != nil {
		return fmt.Errorf("checkpoint: upload %s: %w", key, err)
	}
	u.stored(sum, begun)
	done(true)
	return nil
}

// readChunks reads f in chunks of chunkSize into buffers taken from pool and
// hands each to send, which owns it from then on. It fails if f changed
// since it was scanned, or changes while it is read.
func readChunks(ctx context.Context, f localFile, chunkSize int, pool chan []byte, send func([]byte)) error {
	fh, err := os.Open(f.abs)
	if err != nil {
		return fmt.Errorf("checkpoint: upload %s: %w", f.abs, err)
	}
	defer fh.Close()
	var total int64
	for {
		var buf []byte
		select {
		case buf = <-pool:
		case <-ctx.Done():
			return context.Cause(ctx)
		}
		if buf == nil {
			buf = make([]byte, chunkSize)
		}
		n, err := io.ReadFull(fh, buf[:chunkSize])
		if n > 0 {
			total += int64(n)
			send(buf[:n])
		} else {
			pool <- buf
		}
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			break
		}
		if err != nil {
			return fmt.Errorf("checkpoint: upload %s: read: %w", f.abs, err)
		}
	}
	fi, err := fh.Stat()
	if err != nil {
		return fmt.Errorf("checkpoint: upload %s: %w", f.abs, err)
	}
	if total != f.size || fi.Size() != f.size || !fi.ModTime().Equal(f.modTime) {
		return fmt.Errorf("checkpoint: upload %s: file changed while it was uploaded (size %d, read %d, now %d); upload only checkpoints the trainer has finished writing", f.abs, f.size, total, fi.Size())
	}
	return nil
}

// scanDir lists the regular files under dir, sorted by relative slash path,
// and the other entries it leaves out.
// statFiles is scanDir for a given list of paths relative to dir.
func statFiles(dir string, paths []string) (files []localFile, skipped []string, err error) {
	if len(paths) > MaxFiles {
		return nil, nil, fmt.Errorf("checkpoint: %d files under %s, over the %d limit", len(paths), dir, MaxFiles)
	}
	seen := make(map[string]bool, len(paths))
	for _, rel := range paths {
		if err := CheckPath(rel); err != nil {
			return nil, nil, fmt.Errorf("checkpoint: file %q under %s: %w", rel, dir, err)
		}
		if seen[rel] {
			continue
		}
		seen[rel] = true
		abs := filepath.Join(dir, filepath.FromSlash(rel))
		fi, err := os.Lstat(abs)
		if err != nil {
			return nil, nil, fmt.Errorf("checkpoint: stat %s: %w", abs, err)
		}
		if !fi.Mode().IsRegular() {
			skipped = append(skipped, rel)
			continue
		}
		lf := localFile{rel: rel, abs: abs, size: fi.Size(), mode: fi.Mode(), modTime: fi.ModTime()}
		fileStat(&lf, fi)
		files = append(files, lf)
	}
	slices.SortFunc(files, func(a, b localFile) int { return strings.Compare(a.rel, b.rel) })
	return files, skipped, nil
}

func scanDir(dir string) (files []localFile, skipped []string, err error) {
	err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p == dir {
			if !d.IsDir() {
				return fmt.Errorf("%s is not a directory", dir)
			}
			return nil
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		if strings.HasPrefix(d.Name(), tempPrefix) {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		switch {
		case d.IsDir():
			return nil
		case !d.Type().IsRegular():
			skipped = append(skipped, rel)
			return nil
		}
		if err := CheckPath(rel); err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		lf := localFile{rel: rel, abs: p, size: fi.Size(), mode: fi.Mode(), modTime: fi.ModTime()}
		fileStat(&lf, fi)
		files = append(files, lf)
		return nil
	})
	if err != nil {
		return nil, nil, fmt.Errorf("checkpoint: scan %s: %w", dir, err)
	}
	if len(files) > MaxFiles {
		return nil, nil, fmt.Errorf("checkpoint: scan %s: %d files, over the %d limit", dir, len(files), MaxFiles)
	}
	slices.SortFunc(files, func(a, b localFile) int { return strings.Compare(a.rel, b.rel) })
	return files, skipped, nil
}

// loadIndex lists the stored chunks with their modification times.
func loadIndex(ctx context.Context, s storage.Store, backoff Backoff) (map[string]time.Time, error) {
	var index map[string]time.Time
	err := retry(ctx, backoff, func() error {
		index = make(map[string]time.Time)
		return s.List(ctx, chunksPrefix, func(oi storage.ObjectInfo) error {
			if sum, ok := parseChunkKey(oi.Key); ok {
				index[sum] = oi.ModTime
			}
			return nil
		})
	})
	if err != nil {
		return nil, fmt.Errorf("checkpoint: list %s in %s: %w", chunksPrefix, s, err)
	}
	return index, nil
}

func equalFile(a, b File) bool {
	return a.Path == b.Path && a.Size == b.Size && a.Mode == b.Mode && slices.Equal(a.Chunks, b.Chunks)
}

func newID() string {
	var b [8]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
