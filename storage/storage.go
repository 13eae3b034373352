// Package storage defines the Store interface that checkpoints are written
// through, its sentinel errors and the types shared by every backend.
//
// Backends live in subpackages (storage/s3 on minio-go, storage/fs for a
// directory or PVC, storage/mem for tests); storage/storagetest is the
// conformance suite every backend passes. A backend registers the scheme of
// its URLs (Register) when it is imported: ParseURL and Open then parse and
// open its URLs, with its own rules. Callers classify errors with errors.Is
// against the sentinels here and never import a backend's client library
// to do so.
//
// Behaviour that every backend shares is a wrapper of the interface, not a
// parameter of its callers: Recover turns a panic of a store client into an
// error, Limit paces uploads, and Retry retries transient failures (with a
// List that never delivers an object twice and a Get whose body resumes
// where a failed read left off). A command stacks them as
// Retry(Recover(Limit(backend))).
//
// A backend whose Puts can leave something behind when the process making
// them is killed (a directory store's temporary files, S3's open multipart
// uploads) is also a Sweeper, which lists and removes such leftovers; the
// wrappers pass Sweep on. A backend that lists one level of a prefix in a
// request per page (S3's listing with a delimiter) is also a DirLister;
// ListDirs lists any Store so, in full where it is not one, and the
// wrappers pass it on.
package storage

import (
	"context"
	"errors"
	"io"
	"time"
)

// Sentinel errors. Backends wrap them (fmt.Errorf("...: %w", ErrNotExist)) so
// the message names the operation and the key.
var (
	// ErrNotExist: the key is not in the store.
	ErrNotExist = errors.New("object does not exist")
	// ErrExists: a create-only Put found the key already there.
	ErrExists = errors.New("object already exists")
	// ErrChecksum: the bytes stored or read do not match their checksum.
	ErrChecksum = errors.New("checksum mismatch")
	// ErrInvalidKey: the key is empty, absolute, or has "." or ".." segments.
	ErrInvalidKey = errors.New("invalid key")
)

// ObjectInfo describes one stored object.
type ObjectInfo struct {
	Key     string    // full key, relative to the store's prefix
	Size    int64     // bytes
	ModTime time.Time // when the object was last written, as the backend reports it
	// SHA256 is the lower-case hex SHA-256 of the object's bytes when the
	// backend knows it (always after a Put; on Stat and List only where the
	// backend keeps it). Empty when unknown.
	SHA256 string
}

// PutOptions change how Put writes.
type PutOptions struct {
	// IfNotExists makes Put create-only: if the key already exists, Put
	// fails with ErrExists and leaves the existing object untouched. It is
	// how commit records are written (S3 If-None-Match: *).
	IfNotExists bool
	// SHA256 is the lower-case hex SHA-256 of the bytes, when the caller has
	// already computed it (content-addressed chunks). The backend then does
	// not hash again; it sends it to be verified by the server where the
	// protocol allows, and fails with ErrChecksum on a mismatch.
	SHA256 string
	// CRC32C, with SHA256, is the CRC32C of the same bytes, computed in the
	// same pass (Checksums). A backend may check the bytes against it
	// instead of against SHA256: the S3 backend has the server do so, which
	// costs a server far less than a SHA-256 and catches the same faults
	// (bytes changed after they were hashed, or on the way). Put fails with
	// ErrChecksum when the bytes do not match the sum the backend checks.
	// Zero means not given (a true CRC32C of zero only costs the SHA-256
	// check). Ignored without SHA256.
	CRC32C uint32
}

// Store is a flat key/value object store. Keys are slash-separated relative
// paths ("chunks/ab/abcdef", "manifests/000100-0.json"); implementations
// reject other keys with ErrInvalidKey. Every method is safe for concurrent
// use, honours ctx, and returns errors that name the operation and the key.
type Store interface {
	// Put stores the bytes read from r under key. size is the exact length,
	// or -1 when unknown. The object appears whole or not at all: a reader
	// never sees a partial object under key, and a failed Put leaves no
	// partial object (nor an unfinished multipart upload) behind. Put
	// replaces an existing object unless opts.IfNotExists is set. The
	// returned ObjectInfo carries Size and SHA256 of what was stored.
	Put(ctx context.Context, key string, r io.Reader, size int64, opts PutOptions) (ObjectInfo, error)

	// Get returns a reader for length bytes of key starting at offset.
	// length -1 reads to the end; (0, -1) reads the whole object. A missing
	// key returns an error wrapping ErrNotExist, before any bytes are read.
	// The caller closes the reader.
	Get(ctx context.Context, key string, offset, length int64) (io.ReadCloser, error)

	// Stat returns the object's info, or an error wrapping ErrNotExist.
	Stat(ctx context.Context, key string) (ObjectInfo, error)

	// List calls fn for every object whose key starts with prefix, in
	// lexical key order. An error returned by fn stops the listing and is
	// returned. Listing an empty or missing prefix is not an error.
	List(ctx context.Context, prefix string, fn func(ObjectInfo) error) error

	// Delete removes key. Deleting a missing key is not an error
	// (idempotent).
	Delete(ctx context.Context, key string) error

	// String describes the store for logs and errors ("s3://bucket/prefix at
	// http://127.0.0.1:9000"). It never contains credentials.
	String() string
}

// permanentError marks an error that retrying cannot fix.
type permanentError struct{ err error }

func (e *permanentError) Error() string { return e.err.Error() }
func (e *permanentError) Unwrap() error { return e.err }

// Permanent marks err as permanent: access denied, no such bucket, invalid
// key, checksum mismatch. Retry loops stop at once on such errors. A nil err
// stays nil.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &permanentError{err: err}
}

// IsPermanent reports whether err, or anything it wraps, was marked with
// Permanent, or is one of the sentinels that no retry can change
// (ErrNotExist, ErrExists, ErrChecksum, ErrInvalidKey).
func IsPermanent(err error) bool {
	var p *permanentError
	if errors.As(err, &p) {
		return true
	}
	return errors.Is(err, ErrNotExist) || errors.Is(err, ErrExists) ||
		errors.Is(err, ErrChecksum) || errors.Is(err, ErrInvalidKey)
}
