package fs

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path"
	"strings"

	"github.com/lifeboat-project/lifeboat/storage"
)

// Scheme is the URL scheme of directory stores: file:///abs/path.
const Scheme = "file"

func init() {
	storage.Register(storage.Backend{Scheme: Scheme, Form: "file:///abs/path", Parse: parseURL, Open: open})
}

// parseURL checks a file:// URL: an absolute path (on this host) without
// "." or ".." segments, made clean.
func parseURL(u *url.URL) (storage.Location, error) {
	if u.Opaque != "" {
		return storage.Location{}, fmt.Errorf("relative path %q; want file:///abs/path", u.Opaque)
	}
	if u.Host != "" && u.Host != "localhost" {
		return storage.Location{}, fmt.Errorf("host %q in a file URL (relative path?); want file:///abs/path", u.Host)
	}
	p := u.Path
	if p == "" || !strings.HasPrefix(p, "/") {
		return storage.Location{}, errors.New("missing absolute path; want file:///abs/path")
	}
	if strings.ContainsRune(p, 0) {
		return storage.Location{}, errors.New("path contains a NUL byte")
	}
	for _, seg := range strings.Split(p, "/") {
		if seg == "." || seg == ".." {
			return storage.Location{}, fmt.Errorf("path %q has a \".\" or \"..\" segment; give the resolved path", p)
		}
	}
	return storage.Location{Scheme: Scheme, Path: path.Clean(p)}, nil
}

// open is the backend's storage.Backend.Open: it creates loc's directory
// when missing and opens it with New. A directory store has no
// configuration, so configure is not called.
func open(_ context.Context, loc storage.Location, _ func(any) error) (storage.Store, error) {
	if err := os.MkdirAll(loc.Path, 0o755); err != nil {
		return nil, fmt.Errorf("fs: create the store's directory %s: %w", loc.Path, err)
	}
	return New(loc.Path)
}
