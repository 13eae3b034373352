package storage

import (
	"context"
	"io"

	"golang.org/x/time/rate"
)

// Limit wraps s so that its Puts, all together, read what they store at
// no more than bytesPerSecond: lifeboat's --upload-limit, the same for
// every backend. The other calls pass through. bytesPerSecond of zero or
// less returns s as it is.
//
// A Put's body is read in pieces of at most min(bytesPerSecond, 1 MiB)
// bytes, each paid for once it is read, before the next: after a first
// piece the rate holds over any second. A wait ends when the Put's ctx
// does, with its error.
func Limit(s Store, bytesPerSecond int64) Store {
	if bytesPerSecond <= 0 {
		return s
	}
	burst := int(min(bytesPerSecond, 1<<20))
	return &limitStore{Store: s, lim: rate.NewLimiter(rate.Limit(bytesPerSecond), burst), burst: burst}
}

// limitStore is Limit's wrapper; embedding passes through every method
// but Put (and Sweep, which is not one of Store's).
type limitStore struct {
	Store
	lim   *rate.Limiter
	burst int
}

var (
	_ Store     = (*limitStore)(nil)
	_ Sweeper   = (*limitStore)(nil)
	_ DirLister = (*limitStore)(nil)
)

// Sweep passes Sweep on to the inner store, which embedding would not.
func (s *limitStore) Sweep(ctx context.Context, prefix string, fn func(Leftover) (bool, error)) error {
	return Sweep(ctx, s.Store, prefix, fn)
}

// ListDirs passes ListDirs on to the inner store: only uploads are paced.
func (s *limitStore) ListDirs(ctx context.Context, prefix string, fn func(ObjectInfo) error) error {
	return ListDirs(ctx, s.Store, prefix, fn)
}

func (s *limitStore) Put(ctx context.Context, key string, r io.Reader, size int64, opts PutOptions) (ObjectInfo, error) {
	return s.Store.Put(ctx, key, &limitReader{ctx: ctx, r: r, lim: s.lim, max: s.burst}, size, opts)
}

// limitReader reads r at the limiter's pace.
type limitReader struct {
	ctx context.Context
	r   io.Reader
	lim *rate.Limiter
	max int // bytes per Read, at most the limiter's burst
}

func (l *limitReader) Read(p []byte) (int, error) {
	if len(p) > l.max {
		p = p[:l.max]
	}
	n, err := l.r.Read(p)
	if n > 0 {
		if werr := l.lim.WaitN(l.ctx, n); werr != nil {
			return n, werr
		}
	}
	return n, err
}
