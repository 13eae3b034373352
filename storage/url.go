package storage

import (
	"errors"
	"fmt"
	"net/url"
	"strings"
)

// Location is a parsed store URL: where a backend keeps its objects. The
// backend registered for Scheme decides which fields its URLs set.
type Location struct {
	// Scheme names the backend: "s3", "file".
	Scheme string
	// Bucket and Prefix place a store in an object store: the URL's host
	// names the bucket, its path the key prefix inside it, without leading
	// or trailing slashes (empty for the whole bucket).
	Bucket string
	Prefix string
	// Path is the absolute, clean directory of a store on a file system.
	Path string
}

// ErrInvalidURL is wrapped by every ParseURL error.
var ErrInvalidURL = errors.New("invalid store URL")

// ErrCredentialsInURL is ParseURL's error for a URL with user
// information: a backend takes its credentials from its own
// configuration, which the caller names as its users know it.
var ErrCredentialsInURL = errors.New("credentials do not belong in the URL; give them to the store's configuration")

// ParseURL parses a store URL with the backend registered for its scheme
// ("s3://bucket/prefix" with storage/s3, "file:///abs/path" with
// storage/fs). It rejects unknown schemes, user information, query strings
// and fragments, and whatever the backend's own rules refuse, with an error
// wrapping ErrInvalidURL that says what form is expected; an unknown scheme's
// error names the forms of the schemes known.
func ParseURL(raw string) (Location, error) {
	if raw == "" {
		return Location{}, fmt.Errorf("store URL is empty; want %s: %w", forms(), ErrInvalidURL)
	}
	u, err := url.Parse(raw)
	if err != nil {
		return Location{}, fmt.Errorf("store URL %q: %v: %w", RedactUser(raw), UnwrapURLError(err), ErrInvalidURL)
	}
	bad := func(format string, args ...any) (Location, error) {
		return Location{}, fmt.Errorf("store URL %q: %w: %w", RedactUser(raw), fmt.Errorf(format, args...), ErrInvalidURL)
	}
	if u.RawQuery != "" || u.ForceQuery {
		return bad("query strings are not supported; set options with flags")
	}
	if u.Fragment != "" || strings.Contains(raw, "#") {
		return bad("fragments are not supported")
	}
	if u.User != nil {
		return bad("%w", ErrCredentialsInURL)
	}
	if u.Scheme == "" {
		return bad("no scheme; want %s", forms())
	}
	b, ok := backend(u.Scheme)
	if !ok {
		return bad("unknown scheme %q; want %s", u.Scheme, forms())
	}
	loc, err := b.Parse(u)
	if err != nil {
		return bad("%w", err)
	}
	loc.Scheme = b.Scheme
	return loc, nil
}

// RedactUser replaces the user information of a URL (scheme://USER:PASS@)
// with xxxxx, so that no error shows a credential; it needs no valid URL.
func RedactUser(raw string) string {
	i := strings.Index(raw, "://")
	if i < 0 {
		return raw
	}
	rest := raw[i+3:]
	end := strings.IndexAny(rest, "/?#")
	if end < 0 {
		end = len(rest)
	}
	at := strings.LastIndex(rest[:end], "@")
	if at < 0 {
		return raw
	}
	return raw[:i+3] + "xxxxx" + rest[at:]
}

// UnwrapURLError returns the error inside a *url.Error (what net/url's
// parser and net/http's client return), whose own text repeats the
// operation and the URL; any other error is returned as it is. Messages
// that already name the URL show the cause alone.
func UnwrapURLError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

// String returns the location as a URL that ParseURL accepts:
// scheme:///path for a Path, scheme://bucket/prefix otherwise.
func (l Location) String() string {
	switch {
	case l.Scheme == "":
		return ""
	case l.Path != "":
		return (&url.URL{Scheme: l.Scheme, Path: l.Path}).String()
	case l.Prefix == "":
		return l.Scheme + "://" + l.Bucket
	default:
		return l.Scheme + "://" + l.Bucket + "/" + (&url.URL{Path: l.Prefix}).EscapedPath()
	}
}
