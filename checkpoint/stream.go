package checkpoint

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"io"
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/lifeboat-project/lifeboat/storage"
)

// Streaming the chunks of a save while it is written (docs/FORMAT.md,
// "Chunks sent while a save is written").
//
// From the moment a stop is under way, a Stream reads each whole chunk of
// each file the trainer holds open for writing as soon as the file has
// grown past the chunk's end, hashes it and Puts it unless the store holds
// it already, exactly as an upload would. It records, for every chunk it
// stored, the chunk's SHA-256 under a 64-bit keyed hash of its bytes and
// their length (hash/maphash, with a seed drawn at random by this process),
// and the offset and file (device and inode) it read them from.
//
// The stream commits nothing and decides nothing: the final upload is an
// ordinary upload of the files once the usual rules say they are whole (no
// writer left, the format check, no change while read). It reads every
// chunk again, from the page cache; a chunk at an offset of a file the
// stream read from it hashes with the keyed hash: when the stream recorded
// that hash, the chunk has the bytes the stream stored, so it takes that
// SHA-256 and is not hashed with SHA-256 or Put again. Any other chunk (a
// region the trainer rewrote after the stream read it, one written after
// the stream's last look, the last partial chunk) takes the ordinary way.
// Confirming costs one read of the file from memory and a keyed hash of
// what the stream read, about a sixth of what SHA-256 costs and nothing on
// the network; without it no byte the trainer wrote behind the reader
// could be trusted, because neither the file's size and times nor inotify
// or fanotify tell where a file was written. The keyed hash is not a
// cryptographic hash: a different chunk of the same length passes for a
// streamed one with a probability of about 2^-64 for each streamed chunk
// it is compared with, and the trainer cannot aim for a collision without
// the seed, which never leaves the process.
//
// Chunks a stream stored for a save that turns out torn are referenced by
// no manifest: they are left to Prune like those of any failed upload.

// maxStreamed bounds the chunks one Uploader remembers as streamed (about
// 64 bytes each): 512 GiB of 8 MiB chunks. Past it a stream stores no more.
const maxStreamed = 1 << 16

// keyedSum is the keyed hash of a chunk's bytes, with their length.
type keyedSum struct {
	sum  uint64
	size int
}

// streamedChunks is what streams of an Uploader stored: each chunk's
// SHA-256 and CRC32C by the keyed hash of its bytes, and at which offsets of which
// files (by device and inode) they were read, so that an upload spends a
// keyed hash only on the chunks a stream may have stored.
type streamedChunks struct {
	once sync.Once
	seed maphash.Seed
	mu   sync.Mutex
	sums map[keyedSum]streamedSums
	at   map[[2]uint64]map[int64]bool
}

// streamedSums are a streamed chunk's checksums, computed when it was read.
type streamedSums struct {
	sha256 string
	crc32c uint32
}

func (s *streamedChunks) init() {
	s.once.Do(func() { s.seed = maphash.MakeSeed() })
}

// keyed is the keyed hash of b.
func (s *streamedChunks) keyed(b []byte) keyedSum {
	s.init()
	return keyedSum{maphash.Bytes(s.seed, b), len(b)}
}

// add records that the chunk with keyed hash k and checksums sums, read
// at off of the file id, is stored; false when the table is full.
func (s *streamedChunks) add(id [2]uint64, off int64, k keyedSum, sums streamedSums) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.sums == nil {
		s.sums, s.at = map[keyedSum]streamedSums{}, map[[2]uint64]map[int64]bool{}
	}
	if len(s.sums) >= maxStreamed {
		return false
	}
	s.sums[k] = sums
	if s.at[id] == nil {
		s.at[id] = map[int64]bool{}
	}
	s.at[id][off] = true
	return true
}

// readAt reports whether a stream stored a chunk read at off of the file
// id (with whatever bytes it had then).
func (s *streamedChunks) readAt(id [2]uint64, off int64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.at[id][off]
}

// lookup returns the SHA-256 and CRC32C of the streamed chunk with the
// bytes of b.
func (s *streamedChunks) lookup(b []byte) (sum string, crc uint32, ok bool) {
	k := s.keyed(b)
	s.mu.Lock()
	defer s.mu.Unlock()
	sums, ok := s.sums[k]
	return sums.sha256, sums.crc32c, ok
}

// StreamResult reports what a Stream did.
type StreamResult struct {
	Files int // files it read from
	// Chunks and Bytes count the whole chunks it read; of them, Uploaded
	// were Put and the others found stored already.
	Chunks, UploadedChunks int
	Bytes, UploadedBytes   int64
	// Restarted counts files that shrank under the stream (truncated to be
	// written again): it read them again from their start.
	Restarted int
	// Err is the first failure to read or store a chunk; the stream went
	// on without that chunk, which the final upload then stores itself.
	Err error
}

// StreamOptions configure Uploader.Stream.
type StreamOptions struct {
	// Find returns the files to stream: slash-separated paths relative to
	// the directory, as watch.Watcher.OpenForWrite gives those some process
	// holds open for writing. It is called every Rescan.
	Find func() []string
	// Poll is how often the files' sizes are looked at, default 10ms;
	// Rescan how often Find is called, default 100ms.
	Poll, Rescan time.Duration
	// Stored, when set (tests), is called after each chunk is stored or
	// found stored, with the file and the chunk's offset.
	Stored func(rel string, off int64)
}

// streamFile is one file a stream reads from.
type streamFile struct {
	rel  string
	fh   *os.File
	next int64 // offset of the next chunk to read
}

// Stream reads, hashes and stores the whole chunks of the files opts.Find
// names under dir as they are written, until stop is closed or ctx ends,
// and returns once every chunk it read is stored or given up. It holds
// its chunks in the Uploader's Buffers, which its uploads share: the
// final upload after a stream reuses the stream's buffers. Files are opened without following
// symlinks beneath dir. A later upload by this Uploader takes the chunks
// it stored without hashing them with SHA-256 or Putting them, when their
// bytes are unchanged (see the package's notes on streaming).
func (u *Uploader) Stream(ctx context.Context, dir string, stop <-chan struct{}, opts StreamOptions) StreamResult {
	var res StreamResult
	if err := u.Validate(); err != nil {
		res.Err = err
		return res
	}
	chunkSize := int64(cmp.Or(u.ChunkSize, DefaultChunkSize))
	workers := cmp.Or(u.Workers, DefaultUploadWorkers)
	poll, rescan := cmp.Or(opts.Poll, 10*time.Millisecond), cmp.Or(opts.Rescan, 100*time.Millisecond)
	clock := orDefaultClock(u.Clock)
	window := safetyWindow(u.SafetyWindow)
	reuseAge := window - window/4

	index, err := u.storeIndex(ctx)
	if err != nil {
		res.Err = err
		return res
	}
	u.streamed.init()

	var mu sync.Mutex // res, index
	fail := func(err error) {
		mu.Lock()
		if res.Err == nil {
			res.Err = err
		}
		mu.Unlock()
	}
	pool := u.buffers()
	slots := make(chan struct{}, workers)
	var wg sync.WaitGroup
	defer wg.Wait()
	store := func(f *streamFile, id [2]uint64, off int64, buf []byte) {
		defer pool.give(buf)
		sum, crc := storage.Checksums(buf)
		k := u.streamed.keyed(buf)
		mu.Lock()
		mod, ok := index[sum]
		mu.Unlock()
		uploaded := false
		if !ok || clock().Sub(mod) > reuseAge {
			begun := clock()
			if _, err := u.Store.Put(ctx, chunkKey(sum), bytes.NewReader(buf), int64(len(buf)), storage.PutOptions{SHA256: sum, CRC32C: crc}); err != nil {
				fail(fmt.Errorf("checkpoint: stream %s at byte %d: %w", f.rel, off, err))
				return
			}
			u.stored(sum, begun)
			mu.Lock()
			index[sum] = begun
			mu.Unlock()
			uploaded = true
		}
		if !u.streamed.add(id, off, k, streamedSums{sum, crc}) {
			return
		}
		mu.Lock()
		res.Chunks++
		res.Bytes += int64(len(buf))
		if uploaded {
			res.UploadedChunks++
			res.UploadedBytes += int64(len(buf))
		}
		mu.Unlock()
		if opts.Stored != nil {
			opts.Stored(f.rel, off)
		}
	}

	files := map[[2]uint64]*streamFile{} // by device and inode
	defer func() {
		for _, f := range files {
			f.fh.Close()
		}
	}()
	stopped := func() bool {
		select {
		case <-stop:
			return true
		case <-ctx.Done():
			return true
		default:
			return false
		}
	}
	discover := func() {
		if opts.Find == nil {
			return
		}
		for _, rel := range opts.Find() {
			if CheckPath(rel) != nil {
				continue
			}
			fh, err := openBeneath(dir, rel)
			if err != nil {
				continue // gone, or not beneath dir without a symlink
			}
			var st unix.Stat_t
			if unix.Fstat(int(fh.Fd()), &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
				fh.Close()
				continue
			}
			id := [2]uint64{st.Dev, st.Ino}
			if _, ok := files[id]; ok {
				fh.Close()
				continue
			}
			if err := unix.SetNonblock(int(fh.Fd()), false); err != nil {
				fh.Close()
				continue
			}
			files[id] = &streamFile{rel: rel, fh: fh}
			mu.Lock()
			res.Files++
			mu.Unlock()
		}
	}
	// readWhole reads the whole chunks f has grown past; false when the
	// stream is to end.
	readWhole := func(id [2]uint64, f *streamFile) bool {
		for {
			var st unix.Stat_t
			if err := unix.Fstat(int(f.fh.Fd()), &st); err != nil {
				return true
			}
			if st.Size < f.next {
				// Truncated to be written again: what was read stays
				// stored under its own hash; read the new bytes.
				f.next = 0
				mu.Lock()
				res.Restarted++
				mu.Unlock()
			}
			if f.next+chunkSize > st.Size {
				return true
			}
			buf, ok := pool.take(ctx, stop, int(chunkSize))
			if !ok {
				return false
			}
			n, err := preadFull(f.fh, buf, f.next)
			if err != nil || int64(n) < chunkSize {
				pool.give(buf)
				if err != nil && !errors.Is(err, io.EOF) {
					fail(fmt.Errorf("checkpoint: stream %s: read at byte %d: %w", f.rel, f.next, err))
				}
				return true // shrank meanwhile: the next look sees it
			}
			select {
			case slots <- struct{}{}:
			case <-stop:
				pool.give(buf)
				return false
			case <-ctx.Done():
				pool.give(buf)
				return false
			}
			off := f.next
			wg.Go(func() {
				defer func() { <-slots }()
				store(f, id, off, buf[:n])
			})
			f.next += chunkSize
			if stopped() {
				return false
			}
		}
	}

	tick := time.NewTicker(poll)
	defer tick.Stop()
	lastFind := time.Time{}
	for {
		if now := time.Now(); now.Sub(lastFind) >= rescan {
			discover()
			lastFind = now
		}
		for id, f := range files {
			if !readWhole(id, f) {
				wg.Wait()
				return res
			}
		}
		select {
		case <-stop:
			wg.Wait()
			return res
		case <-ctx.Done():
			wg.Wait()
			return res
		case <-tick.C:
		}
	}
}

// preadFull reads len(b) bytes at off, or fewer at the end of the file.
func preadFull(fh *os.File, b []byte, off int64) (int, error) {
	n := 0
	for n < len(b) {
		m, err := fh.ReadAt(b[n:], off+int64(n))
		n += m
		if err != nil {
			return n, err
		}
	}
	return n, nil
}
