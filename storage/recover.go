package storage

import (
	"context"
	"fmt"
	"io"
)

// Recover wraps s so that a panic inside any of its methods (a bug in a
// client library, say) comes back as an error instead of killing the
// process: lifeboat is PID 1, and an upload must never take the trainer
// down with it. The error names the operation and the key.
func Recover(s Store) Store { return &recoverStore{s} }

type recoverStore struct{ inner Store }

var (
	_ Store     = (*recoverStore)(nil)
	_ Sweeper   = (*recoverStore)(nil)
	_ DirLister = (*recoverStore)(nil)
)

func recovered(op, key string, err *error) {
	if r := recover(); r != nil {
		*err = fmt.Errorf("storage: %s %s: panic in the store client: %v", op, key, r)
	}
}

func (s *recoverStore) Put(ctx context.Context, key string, r io.Reader, size int64, opts PutOptions) (info ObjectInfo, err error) {
	defer recovered("put", key, &err)
	return s.inner.Put(ctx, key, r, size, opts)
}

func (s *recoverStore) Get(ctx context.Context, key string, offset, length int64) (rc io.ReadCloser, err error) {
	defer recovered("get", key, &err)
	rc, err = s.inner.Get(ctx, key, offset, length)
	if err != nil {
		return nil, err
	}
	return &recoverReader{rc: rc, key: key}, nil
}

func (s *recoverStore) Stat(ctx context.Context, key string) (info ObjectInfo, err error) {
	defer recovered("stat", key, &err)
	return s.inner.Stat(ctx, key)
}

func (s *recoverStore) List(ctx context.Context, prefix string, fn func(ObjectInfo) error) (err error) {
	defer recovered("list", prefix, &err)
	return s.inner.List(ctx, prefix, fn)
}

func (s *recoverStore) ListDirs(ctx context.Context, prefix string, fn func(ObjectInfo) error) (err error) {
	defer recovered("list", prefix, &err)
	return ListDirs(ctx, s.inner, prefix, fn)
}

func (s *recoverStore) Delete(ctx context.Context, key string) (err error) {
	defer recovered("delete", key, &err)
	return s.inner.Delete(ctx, key)
}

// Sweep passes Sweep on to the inner store when it has one.
func (s *recoverStore) Sweep(ctx context.Context, prefix string, fn func(Leftover) (bool, error)) (err error) {
	defer recovered("sweep", prefix, &err)
	return Sweep(ctx, s.inner, prefix, fn)
}

func (s *recoverStore) String() string { return s.inner.String() }

// recoverReader guards reads of a Get's body the same way.
type recoverReader struct {
	rc  io.ReadCloser
	key string
}

func (r *recoverReader) Read(p []byte) (n int, err error) {
	defer recovered("read", r.key, &err)
	return r.rc.Read(p)
}

func (r *recoverReader) Close() (err error) {
	defer recovered("close", r.key, &err)
	return r.rc.Close()
}
