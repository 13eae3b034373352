package storage

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"time"
)

// Backoff returns how long to wait before retry number attempt (1 for the
// first retry) of a store call that failed with a transient error, and
// false when no retry is left. Tests pass one that returns 0 so nothing
// sleeps.
type Backoff func(attempt int) (time.Duration, bool)

// ExponentialBackoff allows retries retries, waiting a random time up to
// base*2^(attempt-1), capped at max ("full jitter").
func ExponentialBackoff(base, max time.Duration, retries int) Backoff {
	return func(attempt int) (time.Duration, bool) {
		if attempt > retries {
			return 0, false
		}
		d := base << min(attempt-1, 30)
		if d <= 0 || d > max {
			d = max
		}
		return rand.N(d) + 1, true
	}
}

// DefaultBackoff retries 8 times, from 100ms up to 10s between tries.
func DefaultBackoff() Backoff { return ExponentialBackoff(100*time.Millisecond, 10*time.Second, 8) }

// CheckRetry reports whether a store call of ctx that failed with err may
// be tried again.
type CheckRetry func(ctx context.Context, err error) bool

// DefaultCheckRetry retries every failure except a permanent one
// (IsPermanent: access denied, a missing bucket or object, a checksum
// mismatch, an invalid key) and the end of the call: ctx done, or a
// cancellation (context.Canceled) reported from anywhere below.
func DefaultCheckRetry(ctx context.Context, err error) bool {
	if ctx.Err() != nil || err == nil {
		return false
	}
	return !IsPermanent(err) && !errors.Is(err, context.Canceled)
}

// RetryEvent describes one retry about to be made, for RetryPolicy.OnRetry.
type RetryEvent struct {
	// Op is the call: "put", "get", "read" (of a Get's body), "stat",
	// "list" or "delete"; for Do, what its caller names ("open").
	Op string
	// Key is the object's key, or the prefix of a List.
	Key string
	// Attempt is the retry's number since the call last made progress: 1
	// for the first.
	Attempt int
	// Wait is how long the retry waits before it is made.
	Wait time.Duration
	// Err is the failure that is retried.
	Err error
}

// RetryPolicy says how Retry retries. Its zero value retries with
// DefaultBackoff and DefaultCheckRetry and tells no one.
type RetryPolicy struct {
	// Backoff spaces the retries of one call and says when to give up;
	// nil means DefaultBackoff().
	Backoff Backoff
	// CheckRetry says which failures are retried; nil means
	// DefaultCheckRetry.
	CheckRetry CheckRetry
	// OnRetry, when set, is called before each retry's wait: where a
	// command counts retries in its metrics or logs them. It runs on the
	// caller's goroutine and must not block.
	OnRetry func(RetryEvent)
}

// Retry wraps s so that a call that fails with a transient error is made
// again, as p says, until it succeeds, fails for good, no retry is left, or
// its ctx ends; it then returns the call's last error. The wait between two
// tries ends early when ctx does. Each call counts its own retries, from 1
// again whenever it has made progress (a List that delivered more objects,
// a body that read more bytes). What each method retries:
//
//   - Put sends the body again from where it started when r can seek back
//     (an io.Seeker, as a bytes.Reader or a file is); a body that cannot
//     is retried only when the failed attempt read none of it. A
//     create-only Put whose first attempt was stored but whose answer was
//     lost fails its retry with ErrExists, as any second create would.
//   - Get retries opening the object, and the reads of its body: a read
//     that fails re-opens the object at the first byte not yet delivered,
//     for the bytes still owed, after checking with Stat that the object
//     still holds them (and, from the second re-open, that its size,
//     modification time and SHA-256 did not change), so a resumed body
//     never mixes two objects of different sizes. A body that ends before
//     the bytes it owes is a failure too (io.ErrUnexpectedEOF), retried the
//     same way.
//   - List lists again and delivers to fn only the keys after the last one
//     it delivered (keys come in lexical order), so no object is seen
//     twice; an error returned by fn ends the listing at once and is
//     never retried.
//   - Stat and Delete are made again as they are; Delete is idempotent.
//
// Retry belongs outside storage.Recover (so that a panic, made an error,
// is seen) and outside Limit (so that the bytes of a retried Put are paced
// again). A backend with retries of its own should have them turned off
// when wrapped (s3.Config.RequestAttempts = 1), or both multiply.
func Retry(s Store, p RetryPolicy) Store {
	return &retryStore{inner: s, p: p.withDefaults()}
}

func (p RetryPolicy) withDefaults() RetryPolicy {
	if p.Backoff == nil {
		p.Backoff = DefaultBackoff()
	}
	if p.CheckRetry == nil {
		p.CheckRetry = DefaultCheckRetry
	}
	return p
}

// Do calls fn until it succeeds, fails for good, no retry is left, or ctx
// ends, as Retry retries a store's calls, and returns its last error; op
// and key name the call for OnRetry. It serves what is not a call of a
// Store, such as opening one (Open's first request to the server).
func (p RetryPolicy) Do(ctx context.Context, op, key string, fn func() error) error {
	p = p.withDefaults()
	for attempt := 1; ; attempt++ {
		err := fn()
		if err == nil || !p.again(ctx, op, key, attempt, err) {
			return err
		}
	}
}

type retryStore struct {
	inner Store
	p     RetryPolicy // with defaults
}

var (
	_ Store     = (*retryStore)(nil)
	_ Sweeper   = (*retryStore)(nil)
	_ DirLister = (*retryStore)(nil)
)

// again decides after a failed try whether to retry, and waits before the
// retry: false when err is not retried, no retry is left, or ctx ended
// during the wait.
func (p RetryPolicy) again(ctx context.Context, op, key string, attempt int, err error) bool {
	if !p.CheckRetry(ctx, err) {
		return false
	}
	d, ok := p.Backoff(attempt)
	if !ok {
		return false
	}
	if p.OnRetry != nil {
		p.OnRetry(RetryEvent{Op: op, Key: key, Attempt: attempt, Wait: d, Err: err})
	}
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

func (s *retryStore) Put(ctx context.Context, key string, r io.Reader, size int64, opts PutOptions) (ObjectInfo, error) {
	body := newRewinder(r)
	for attempt := 1; ; attempt++ {
		info, err := s.inner.Put(ctx, key, body.reader(), size, opts)
		if err == nil || !body.canRewind() || !s.p.again(ctx, "put", key, attempt, err) {
			return info, err
		}
		if rerr := body.rewind(); rerr != nil {
			return info, err
		}
	}
}

// rewinder lets Put send a body again: a Seeker goes back to where it
// was, as it is (so that a backend still sees its own interfaces, such as
// io.ReaderAt); another reader is counted, and can be sent again only when
// nothing of it was read.
type rewinder struct {
	r      io.Reader
	seeker io.Seeker
	start  int64
	count  *countReader
}

func newRewinder(r io.Reader) *rewinder {
	if sk, ok := r.(io.Seeker); ok {
		if off, err := sk.Seek(0, io.SeekCurrent); err == nil {
			return &rewinder{r: r, seeker: sk, start: off}
		}
	}
	return &rewinder{r: r, count: &countReader{r: r}}
}

func (b *rewinder) reader() io.Reader {
	if b.count != nil {
		return b.count
	}
	return b.r
}

func (b *rewinder) canRewind() bool { return b.seeker != nil || b.count.n == 0 }

func (b *rewinder) rewind() error {
	if b.seeker == nil {
		return nil
	}
	_, err := b.seeker.Seek(b.start, io.SeekStart)
	return err
}

type countReader struct {
	r io.Reader
	n int64
}

func (c *countReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

func (s *retryStore) Get(ctx context.Context, key string, offset, length int64) (io.ReadCloser, error) {
	for attempt := 1; ; attempt++ {
		rc, err := s.inner.Get(ctx, key, offset, length)
		if err == nil {
			return &retryBody{s: s, ctx: ctx, key: key, offset: offset, want: length, rc: rc}, nil
		}
		if !s.p.again(ctx, "get", key, attempt, err) {
			return nil, err
		}
	}
}

// retryBody is a Get's body that re-opens the object where a failed read
// left off.
type retryBody struct {
	s      *retryStore
	ctx    context.Context
	key    string
	offset int64 // of the range asked for
	want   int64 // bytes of the range, -1 to the end while unknown
	done   int64 // bytes delivered
	rc     io.ReadCloser
	err    error       // a failure of rc not yet retried
	final  error       // the error every Read returns once retries are over
	seen   *ObjectInfo // the object as the first re-open found it
	tries  int         // retries since the last byte read
}

func (b *retryBody) Read(p []byte) (int, error) {
	if b.final != nil {
		return 0, b.final
	}
	for {
		if b.err == nil {
			n, err := b.rc.Read(p)
			b.done += int64(n)
			if n > 0 {
				b.tries = 0
			}
			if err == io.EOF && b.want >= 0 && b.done < b.want {
				err = fmt.Errorf("storage: read %s: the body ended after %d of %d bytes: %w", b.key, b.done, b.want, io.ErrUnexpectedEOF)
			}
			if err == nil || err == io.EOF {
				return n, err
			}
			b.err = err
			if n > 0 {
				return n, nil // the failure is retried at the next Read
			}
		}
		b.tries++
		if !b.s.p.again(b.ctx, "read", b.key, b.tries, b.err) {
			b.final = b.err
			return 0, b.final
		}
		b.err = b.reopen()
	}
}

// reopen opens the rest of the range; its error is the read's failure.
func (b *retryBody) reopen() error {
	b.rc.Close()
	b.rc = io.NopCloser(eofReader{})
	info, err := b.s.inner.Stat(b.ctx, b.key)
	if err != nil {
		return err
	}
	if b.seen == nil {
		b.seen = &info
	} else if info.Size != b.seen.Size || !info.ModTime.Equal(b.seen.ModTime) || info.SHA256 != b.seen.SHA256 {
		return Permanent(fmt.Errorf("storage: read %s: the object changed while it was read (size %d, modified %v; was %d, %v)",
			b.key, info.Size, info.ModTime, b.seen.Size, b.seen.ModTime))
	}
	if b.want < 0 {
		b.want = max(info.Size-b.offset, 0)
	}
	if end := b.offset + max(b.want, b.done); info.Size < end {
		return Permanent(fmt.Errorf("storage: read %s: the object has %d bytes now, fewer than the %d to %d being read",
			b.key, info.Size, b.offset, end))
	}
	rest := b.want - b.done
	if rest <= 0 {
		return nil // eofReader: the range is complete
	}
	rc, err := b.s.inner.Get(b.ctx, b.key, b.offset+b.done, rest)
	if err != nil {
		return err
	}
	b.rc = rc
	return nil
}

func (b *retryBody) Close() error { return b.rc.Close() }

type eofReader struct{}

func (eofReader) Read([]byte) (int, error) { return 0, io.EOF }

func (s *retryStore) Stat(ctx context.Context, key string) (ObjectInfo, error) {
	for attempt := 1; ; attempt++ {
		info, err := s.inner.Stat(ctx, key)
		if err == nil || !s.p.again(ctx, "stat", key, attempt, err) {
			return info, err
		}
	}
}

func (s *retryStore) List(ctx context.Context, prefix string, fn func(ObjectInfo) error) error {
	return s.listResumed(ctx, prefix, s.inner.List, fn)
}

// ListDirs is List's retry for ListDirs (DirLister) of the inner store.
func (s *retryStore) ListDirs(ctx context.Context, prefix string, fn func(ObjectInfo) error) error {
	return s.listResumed(ctx, prefix, func(ctx context.Context, prefix string, fn func(ObjectInfo) error) error {
		return ListDirs(ctx, s.inner, prefix, fn)
	}, fn)
}

// listResumed runs list, and again after a transient failure: a listing
// tried again delivers only the entries after the last one delivered, and
// one that delivered anything starts the count of attempts afresh. An
// error of fn ends it at once.
func (s *retryStore) listResumed(ctx context.Context, prefix string, list func(context.Context, string, func(ObjectInfo) error) error, fn func(ObjectInfo) error) error {
	var (
		last      string // the last key delivered
		delivered bool
		fnErr     bool // fn failed: its error ends the listing
	)
	for attempt := 1; ; attempt++ {
		progress := false
		err := list(ctx, prefix, func(oi ObjectInfo) error {
			if delivered && oi.Key <= last {
				return nil // delivered by an earlier try
			}
			if err := fn(oi); err != nil {
				fnErr = true
				return err
			}
			last, delivered, progress = oi.Key, true, true
			return nil
		})
		if progress {
			attempt = 1
		}
		if err == nil || fnErr || !s.p.again(ctx, "list", prefix, attempt, err) {
			return err
		}
	}
}

func (s *retryStore) Delete(ctx context.Context, key string) error {
	for attempt := 1; ; attempt++ {
		err := s.inner.Delete(ctx, key)
		if err == nil || !s.p.again(ctx, "delete", key, attempt, err) {
			return err
		}
	}
}

// Sweep is passed on to the inner store once, not retried: what a failed
// sweep leaves, the next one removes.
func (s *retryStore) Sweep(ctx context.Context, prefix string, fn func(Leftover) (bool, error)) error {
	return Sweep(ctx, s.inner, prefix, fn)
}

func (s *retryStore) String() string { return s.inner.String() }
