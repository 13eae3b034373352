package storage

import (
	"context"
	"time"
)

// Leftover is what a Put that never finished left in a store: no object
// (no Get, Stat or List ever shows it) but space, which S3 also bills. A
// Put that fails removes its own; a process killed in the middle of a Put
// cannot.
type Leftover struct {
	// Name says where it is, for logs: the temporary file's path below the
	// store's root, or the key and upload ID of a multipart upload.
	Name string
	// Size is the bytes it holds, or -1 when the backend cannot tell
	// without more requests (the parts of an S3 upload).
	Size int64
	// ModTime is the last time the Put that left it is known to have
	// worked on it: a temporary file's last write, an upload's initiation.
	ModTime time.Time
}

// Sweeper is implemented by a store whose Puts can leave something behind
// when the process making them is killed: storage/fs's temporary files and
// storage/s3's multipart uploads. A store that is not a Sweeper leaves
// nothing (storage/mem's Puts are atomic in memory and die with the
// process).
type Sweeper interface {
	// Sweep calls fn for each leftover of an unfinished Put of a key under
	// prefix (as List's prefix) and removes it when fn returns true. It
	// never offers or removes an object. A Put still in progress may be
	// offered too: removing what it is writing makes that Put fail (it
	// never stores a partial object, and a retry starts afresh), so fn
	// decides by ModTime whether it can still be live. A leftover already
	// gone when it is removed is not an error. An error returned by fn
	// stops the sweep and is returned.
	Sweep(ctx context.Context, prefix string, fn func(Leftover) (remove bool, err error)) error
}

// Sweep calls s's Sweep when s is a Sweeper, and otherwise returns nil:
// such a store leaves nothing behind.
func Sweep(ctx context.Context, s Store, prefix string, fn func(Leftover) (bool, error)) error {
	if sw, ok := s.(Sweeper); ok {
		return sw.Sweep(ctx, prefix, fn)
	}
	return nil
}
