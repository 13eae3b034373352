package storage

import (
	"context"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"sync"
)

// Backend is one kind of store, registered under the scheme of its URLs.
// Each backend package registers itself when it is imported (storage/s3
// for s3://, storage/fs for file://), so whoever imports a backend can
// parse and open its URLs; the rules of a backend's URLs and how it opens
// live in its own package, never here.
type Backend struct {
	// Scheme is the URL scheme, lower case: "s3", "file".
	Scheme string
	// Form is the shape of the backend's URLs, for messages:
	// "s3://bucket/prefix".
	Form string
	// Parse checks a URL of Scheme and returns the Location it names.
	// ParseURL has already refused user information, query strings and
	// fragments. An error says what is wrong and what form is wanted
	// ("missing bucket; want s3://bucket/prefix"); ParseURL adds the URL
	// and wraps ErrInvalidURL.
	Parse func(u *url.URL) (Location, error)
	// Open opens the store at loc, a Location that Parse returned. A
	// backend with settings beyond the URL builds its configuration from
	// loc and, when configure is not nil, hands a pointer to it (a
	// *s3.Config) to configure, which sets what the caller's flags and
	// environment say before the configuration is validated and the store
	// opened. configure ignores configurations it has nothing for.
	Open func(ctx context.Context, loc Location, configure func(config any) error) (Store, error)
}

var (
	backendsMu sync.RWMutex
	backends   = map[string]Backend{}
)

// Register makes a backend known to ParseURL and Open. It panics when the
// scheme is empty, not lower case, already registered, or when Parse or
// Open is missing: all are programming errors, found at start-up.
func Register(b Backend) {
	if b.Scheme == "" || b.Scheme != strings.ToLower(b.Scheme) || b.Parse == nil || b.Open == nil {
		panic(fmt.Sprintf("storage: Register of an incomplete backend %+v", b))
	}
	backendsMu.Lock()
	defer backendsMu.Unlock()
	if _, dup := backends[b.Scheme]; dup {
		panic("storage: Register called twice for scheme " + b.Scheme)
	}
	backends[b.Scheme] = b
}

// Backends returns the registered backends, sorted by scheme.
func Backends() []Backend {
	backendsMu.RLock()
	defer backendsMu.RUnlock()
	out := make([]Backend, 0, len(backends))
	for _, b := range backends {
		out = append(out, b)
	}
	slices.SortFunc(out, func(a, b Backend) int { return strings.Compare(a.Scheme, b.Scheme) })
	return out
}

func backend(scheme string) (Backend, bool) {
	backendsMu.RLock()
	defer backendsMu.RUnlock()
	b, ok := backends[scheme]
	return b, ok
}

// forms lists the URL forms of the registered backends for messages:
// "s3://bucket/prefix or file:///abs/path".
func forms() string {
	bs := Backends()
	if len(bs) == 0 {
		return "a URL of a registered backend (none is registered)"
	}
	fs := make([]string, len(bs))
	for i, b := range bs {
		fs[i] = b.Form
	}
	if len(fs) == 1 {
		return fs[0]
	}
	return strings.Join(fs[:len(fs)-1], ", ") + " or " + fs[len(fs)-1]
}

// Open opens the store at loc with the backend registered for its scheme;
// see Backend.Open for configure. An unknown scheme is an error wrapping
// ErrInvalidURL that names the schemes known.
func Open(ctx context.Context, loc Location, configure func(config any) error) (Store, error) {
	b, ok := backend(loc.Scheme)
	if !ok {
		return nil, fmt.Errorf("store %q: unknown scheme %q; want %s: %w", loc.String(), loc.Scheme, forms(), ErrInvalidURL)
	}
	return b.Open(ctx, loc, configure)
}
