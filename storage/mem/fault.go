package mem

import (
	"context"
	"io"

	"github.com/lifeboat-project/lifeboat/storage"
)

var (
	_ storage.Store   = (*FaultStore)(nil)
	_ storage.Sweeper = (*FaultStore)(nil)
)

// FaultStore wraps a Store and lets tests replace any method with a function
// field. A nil field passes the call through to Inner; a set field decides
// alone (it may call Inner itself to fail only some keys or attempts).
type FaultStore struct {
	Inner storage.Store

	OnPut    func(ctx context.Context, key string, r io.Reader, size int64, opts storage.PutOptions) (storage.ObjectInfo, error)
	OnGet    func(ctx context.Context, key string, offset, length int64) (io.ReadCloser, error)
	OnStat   func(ctx context.Context, key string) (storage.ObjectInfo, error)
	OnList   func(ctx context.Context, prefix string, fn func(storage.ObjectInfo) error) error
	OnDelete func(ctx context.Context, key string) error
	OnSweep  func(ctx context.Context, prefix string, fn func(storage.Leftover) (bool, error)) error
}

// Put implements storage.Store.
func (f *FaultStore) Put(ctx context.Context, key string, r io.Reader, size int64, opts storage.PutOptions) (storage.ObjectInfo, error) {
	if f.OnPut != nil {
		return f.OnPut(ctx, key, r, size, opts)
	}
	return f.Inner.Put(ctx, key, r, size, opts)
}

// Get implements storage.Store.
func (f *FaultStore) Get(ctx context.Context, key string, offset, length int64) (io.ReadCloser, error) {
	if f.OnGet != nil {
		return f.OnGet(ctx, key, offset, length)
	}
	return f.Inner.Get(ctx, key, offset, length)
}

// Stat implements storage.Store.
func (f *FaultStore) Stat(ctx context.Context, key string) (storage.ObjectInfo, error) {
	if f.OnStat != nil {
		return f.OnStat(ctx, key)
	}
	return f.Inner.Stat(ctx, key)
}

// List implements storage.Store.
func (f *FaultStore) List(ctx context.Context, prefix string, fn func(storage.ObjectInfo) error) error {
	if f.OnList != nil {
		return f.OnList(ctx, prefix, fn)
	}
	return f.Inner.List(ctx, prefix, fn)
}

// Delete implements storage.Store.
func (f *FaultStore) Delete(ctx context.Context, key string) error {
	if f.OnDelete != nil {
		return f.OnDelete(ctx, key)
	}
	return f.Inner.Delete(ctx, key)
}

// Sweep implements storage.Sweeper, passing through to Inner's when it
// has one.
func (f *FaultStore) Sweep(ctx context.Context, prefix string, fn func(storage.Leftover) (bool, error)) error {
	if f.OnSweep != nil {
		return f.OnSweep(ctx, prefix, fn)
	}
	return storage.Sweep(ctx, f.Inner, prefix, fn)
}

// String implements storage.Store.
func (f *FaultStore) String() string { return "fault(" + f.Inner.String() + ")" }
