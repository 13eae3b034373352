package main

import (
	"context"
	"errors"
	"io"
	"strings"
	"sync/atomic"

	"github.com/lifeboat-project/lifeboat/storage"
)

// pageKeys is how many keys one LIST response holds: S3's ListObjectsV2
// returns at most 1,000 (MinIO the same).
const pageKeys = 1000

// counts is a tally of store requests by kind. LIST pages are computed
// from the keys each List call returned (one page per pageKeys keys, at
// least one): the Store interface hides the pages of a listing.
type counts struct {
	Put, Get, Stat, List, Pages, Keys, Delete int64
	SnapGet                                   int64 // GETs under snapshots/: manifests and completion records
	Failed                                    int64 // requests that failed for another reason than a missing or existing key (storage.Retry tries them again)
}

// Requests is every request the counts stand for, a LIST page being one.
func (c counts) Requests() int64 { return c.Put + c.Get + c.Stat + c.Pages + c.Delete }

func (c counts) sub(o counts) counts {
	return counts{c.Put - o.Put, c.Get - o.Get, c.Stat - o.Stat, c.List - o.List, c.Pages - o.Pages, c.Keys - o.Keys, c.Delete - o.Delete, c.SnapGet - o.SnapGet, c.Failed - o.Failed}
}

func (c counts) add(o counts) counts {
	return counts{c.Put + o.Put, c.Get + o.Get, c.Stat + o.Stat, c.List + o.List, c.Pages + o.Pages, c.Keys + o.Keys, c.Delete + o.Delete, c.SnapGet + o.SnapGet, c.Failed + o.Failed}
}

// countingStore counts the requests made through it. The ranks use it
// through storage.Retry (retried), as lifeboat uses every store: each
// attempt is counted.
type countingStore struct {
	storage.Store
	retry                                           storage.Store
	put, get, stat, list, pages, keys, del, snapGet atomic.Int64
	failed                                          atomic.Int64
}

// fail counts err when the request failed (a missing or existing key is
// an answer, not a failure) and returns it.
func (s *countingStore) fail(err error) error {
	if err != nil && !errors.Is(err, storage.ErrNotExist) && !errors.Is(err, storage.ErrExists) {
		s.failed.Add(1)
	}
	return err
}

var (
	_ storage.Store     = (*countingStore)(nil)
	_ storage.DirLister = (*countingStore)(nil)
)

func (s *countingStore) snapshot() counts {
	return counts{s.put.Load(), s.get.Load(), s.stat.Load(), s.list.Load(), s.pages.Load(), s.keys.Load(), s.del.Load(), s.snapGet.Load(), s.failed.Load()}
}

func (s *countingStore) Put(ctx context.Context, key string, r io.Reader, size int64, opts storage.PutOptions) (storage.ObjectInfo, error) {
	s.put.Add(1)
	oi, err := s.Store.Put(ctx, key, r, size, opts)
	return oi, s.fail(err)
}

func (s *countingStore) Get(ctx context.Context, key string, offset, length int64) (io.ReadCloser, error) {
	s.get.Add(1)
	if strings.HasPrefix(key, "snapshots/") {
		s.snapGet.Add(1)
	}
	rc, err := s.Store.Get(ctx, key, offset, length)
	return rc, s.fail(err)
}

func (s *countingStore) Stat(ctx context.Context, key string) (storage.ObjectInfo, error) {
	s.stat.Add(1)
	oi, err := s.Store.Stat(ctx, key)
	return oi, s.fail(err)
}

func (s *countingStore) List(ctx context.Context, prefix string, fn func(storage.ObjectInfo) error) error {
	var n int64
	err := s.Store.List(ctx, prefix, func(oi storage.ObjectInfo) error {
		n++
		return fn(oi)
	})
	s.list.Add(1)
	s.keys.Add(n)
	s.pages.Add(max(1, (n+pageKeys-1)/pageKeys))
	return s.fail(err)
}

// ListDirs counts a listing one level deep (storage.DirLister: S3's
// delimiter listing) by its entries, objects and folders alike.
func (s *countingStore) ListDirs(ctx context.Context, prefix string, fn func(storage.ObjectInfo) error) error {
	var n int64
	err := storage.ListDirs(ctx, s.Store, prefix, func(oi storage.ObjectInfo) error {
		n++
		return fn(oi)
	})
	s.list.Add(1)
	s.keys.Add(n)
	s.pages.Add(max(1, (n+pageKeys-1)/pageKeys))
	return s.fail(err)
}

func (s *countingStore) Delete(ctx context.Context, key string) error {
	s.del.Add(1)
	return s.fail(s.Store.Delete(ctx, key))
}

// newCounting counts the requests made to st.
func newCounting(st storage.Store) *countingStore {
	c := &countingStore{Store: st}
	c.retry = storage.Retry(c, storage.RetryPolicy{})
	return c
}

// retried is s wrapped in storage.Retry with lifeboat's default policy.
func (s *countingStore) retried() storage.Store { return s.retry }
