package storage

import (
	"context"
	"strings"
)

// DirLister is a Store that lists one level of its keys in one request
// per page, as S3's ListObjectsV2 does with a delimiter of "/": the
// objects directly under a prefix and the folders beneath it, without
// the keys inside the folders. A Store that is not one is listed in full
// by ListDirs, with the same result.
type DirLister interface {
	// ListDirs calls fn, in lexical order, for each entry directly under
	// prefix: each object whose key has no "/" after prefix (its
	// ObjectInfo as List gives it), and, once, each folder: the part of
	// the keys under it up to and including the first "/" after prefix
	// (an ObjectInfo with that Key and nothing else). An error returned
	// by fn stops the listing and is returned. Listing an empty or
	// missing prefix is not an error.
	ListDirs(ctx context.Context, prefix string, fn func(ObjectInfo) error) error
}

// ListDirs lists the entries directly under prefix of s (DirLister):
// through s's own ListDirs where it has one, otherwise from a listing of
// every key under prefix.
func ListDirs(ctx context.Context, s Store, prefix string, fn func(ObjectInfo) error) error {
	if d, ok := s.(DirLister); ok {
		return d.ListDirs(ctx, prefix, fn)
	}
	var folder string // the last folder delivered
	return s.List(ctx, prefix, func(oi ObjectInfo) error {
		rest := strings.TrimPrefix(oi.Key, prefix)
		i := strings.IndexByte(rest, '/')
		if i < 0 {
			return fn(oi)
		}
		f := prefix + rest[:i+1]
		if f == folder {
			return nil // the keys of one folder are listed together
		}
		folder = f
		return fn(ObjectInfo{Key: f})
	})
}

// IsFolder reports whether an entry ListDirs gave is a folder.
func IsFolder(oi ObjectInfo) bool { return strings.HasSuffix(oi.Key, "/") }
