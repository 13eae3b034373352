package checkpoint

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"sync"

	"github.com/lifeboat-project/lifeboat/format"
)

// formatFeed runs the streamed format check of one restored file (a
// pickle's, a JSON file's: package format's Stream, which must see every
// byte in order) in the download pass, so that the check reads nothing
// again. A piece a download writes is fed at once when every byte before
// it has been fed; a chunk that arrived ahead of that is read back from
// the file (the page cache: it was just written) once the chunks before it
// are done, except for the bytes the check would not look at (a pickle's
// payloads, format.Skipper), which are skipped unread. A file whose head announces no streamed check is left to
// checkRestoredFile, which reads only its headers and tails.
type formatFeed struct {
	mu      sync.Mutex
	f       *os.File // the file being restored, open for reading too
	size    int64
	decided bool            // the head was seen
	stream  format.Stream   // the check, once decided; nil: none streams
	fed     int64           // bytes fed, in order
	ahead   map[int64]int64 // chunks written ahead of fed: start -> end
	err     error           // a failure to read back
	// finished, once the file's last chunk is written: the verdict,
	// and whether there is one (finish); the check itself is dropped,
	// so that a restore of many files holds only the open ones' checks.
	finished   bool
	hasVerdict bool
	verdictErr error
	// live, back and skipped count the bytes fed as they were written,
	// read back, and skipped unread (a pickle's payloads: format.Skipper).
	live, back, skipped int64
}

// afterFeed, when set (tests, benchmarks), is called with the bytes a
// feed took as they were written and read back, when its verdict is
// asked for.
var afterFeed func(live, back, skipped int64)

func newFormatFeed(f *os.File, size int64) *formatFeed {
	return &formatFeed{f: f, size: size}
}

// decide starts the check from the file's first bytes (at least
// min(size, format.HeadLen) of them).
func (ff *formatFeed) decide(head []byte) {
	ff.decided = true
	head = head[:min(int64(len(head)), ff.size, format.HeadLen)]
	switch format.Detect(head, ff.size) {
	case format.Pickle, format.JSON:
		// Begin reads only the head for these.
		_, s, err := format.Begin(bytes.NewReader(head), ff.size)
		if err == nil {
			ff.stream = s
		}
	}
}

// done reports whether the check needs nothing more from the download:
// decided on a format that does not stream.
func (ff *formatFeed) done() bool { return ff.decided && ff.stream == nil }

// write feeds p, written at off, if every byte before off has been fed.
// It never waits: a feed busy reading back leaves p to be read back.
func (ff *formatFeed) write(p []byte, off int64) {
	if !ff.mu.TryLock() {
		return
	}
	defer ff.mu.Unlock()
	if off != ff.fed || ff.err != nil || ff.done() {
		return
	}
	if !ff.decided {
		if int64(len(p)) < min(ff.size, format.HeadLen) {
			return
		}
		if ff.decide(p); ff.done() {
			return
		}
	}
	ff.stream.Write(p)
	ff.fed += int64(len(p))
	ff.live += int64(len(p))
}

// chunkDone records that the range [start, end) is written and feeds
// what the check can take now, reading back through buf what was written
// ahead of it.
func (ff *formatFeed) chunkDone(start, end int64, buf []byte) {
	ff.mu.Lock()
	defer ff.mu.Unlock()
	if ff.err != nil || ff.done() {
		return
	}
	if end > ff.fed {
		if ff.ahead == nil {
			ff.ahead = map[int64]int64{}
		}
		ff.ahead[start] = end
	}
	// Fed live to its end or not, this chunk may join what came ahead.
	for !ff.done() && ff.err == nil {
		to := int64(-1)
		for s, e := range ff.ahead {
			if e <= ff.fed {
				delete(ff.ahead, s)
			} else if s <= ff.fed {
				to = e
			}
		}
		if to < 0 {
			return
		}
		if !ff.decided && to < min(ff.size, format.HeadLen) {
			ff.decided = true // too little to decide: checkRestoredFile's
			return
		}
		for ff.fed < to && !ff.done() {
			if sk, ok := ff.stream.(format.Skipper); ok && ff.decided {
				if n := min(sk.Skippable(), to-ff.fed); n > 0 {
					sk.Skip(n)
					ff.fed += n
					ff.skipped += n
					continue
				}
			}
			n := min(int64(len(buf)), to-ff.fed)
			if _, err := ff.f.ReadAt(buf[:n], ff.fed); err != nil {
				ff.err = fmt.Errorf("read back %d bytes at %d: %w", n, ff.fed, err)
				return
			}
			if !ff.decided {
				ff.decide(buf[:n]) // n >= HeadLen, or the whole file
				if ff.done() {
					return
				}
			}
			ff.stream.Write(buf[:n])
			ff.fed += n
			ff.back += n
		}
	}
}

// finish ends the check once every chunk of the file is written: it
// keeps the verdict and drops the rest.
func (ff *formatFeed) finish() {
	ff.mu.Lock()
	defer ff.mu.Unlock()
	if ff.finished {
		return
	}
	ff.finished = true
	switch {
	case ff.err != nil:
		ff.hasVerdict, ff.verdictErr = true, ff.err
	case ff.decided && ff.stream != nil && ff.fed == ff.size:
		if afterFeed != nil {
			afterFeed(ff.live, ff.back, ff.skipped)
		}
		err := ff.stream.Close()
		if errors.Is(err, format.ErrUnchecked) {
			err = nil
		}
		ff.hasVerdict, ff.verdictErr = true, err
	}
	ff.stream, ff.ahead, ff.f = nil, nil, nil
	ff.decided = true // nothing more is taken
}

// verdict is the streamed check's verdict, once finish ran: ok reports
// whether it has one; false leaves the file to checkRestoredFile.
func (ff *formatFeed) verdict() (ok bool, err error) {
	ff.mu.Lock()
	defer ff.mu.Unlock()
	return ff.finished && ff.hasVerdict, ff.verdictErr
}
