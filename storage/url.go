package storage

import (
	"errors"
	"fmt"
	"net/url"
	"path"
	"strings"
)

// Location is a parsed store URL: where a backend keeps its objects.
type Location struct {
	// Scheme is "s3" or "file".
	Scheme string
	// Bucket is the S3 bucket name (s3 only).
	Bucket string
	// Prefix is the key prefix inside the bucket, without leading or
	// trailing slashes; empty for the whole bucket (s3 only).
	Prefix string
	// Path is the absolute, clean directory path (file only).
	Path string
}

// ErrInvalidURL is wrapped by every ParseURL error.
var ErrInvalidURL = errors.New("invalid store URL")

// ParseURL parses a store URL: "s3://bucket/prefix" or "file:///abs/path".
// It rejects relative file paths, missing buckets, unknown schemes, user
// information, ports, query strings, fragments and "." or ".." segments, with
// an error wrapping ErrInvalidURL that says what form is expected.
func ParseURL(raw string) (Location, error) {
	if raw == "" {
		return Location{}, fmt.Errorf("store URL is empty; want s3://bucket/prefix or file:///abs/path: %w", ErrInvalidURL)
	}
	u, err := url.Parse(raw)
	if err != nil {
		return Location{}, fmt.Errorf("store URL %q: %v: %w", RedactUser(raw), UnwrapURLError(err), ErrInvalidURL)
	}
	bad := func(format string, args ...any) (Location, error) {
		return Location{}, fmt.Errorf("store URL %q: %s: %w", RedactUser(raw), fmt.Sprintf(format, args...), ErrInvalidURL)
	}
	if u.RawQuery != "" || u.ForceQuery {
		return bad("query strings are not supported; set options with flags")
	}
	if u.Fragment != "" || strings.Contains(raw, "#") {
		return bad("fragments are not supported")
	}
	if u.User != nil {
		return bad("credentials do not belong in the URL; use AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY")
	}
	switch u.Scheme {
	case "s3":
		return parseS3(u, bad)
	case "file":
		return parseFile(u, bad)
	case "":
		return bad("no scheme; want s3://bucket/prefix or file:///abs/path")
	default:
		return bad("unknown scheme %q; want s3 or file", u.Scheme)
	}
}

func parseS3(u *url.URL, bad func(string, ...any) (Location, error)) (Location, error) {
	if u.Opaque != "" {
		return bad("want s3://bucket/prefix")
	}
	if u.Host == "" {
		return bad("missing bucket; want s3://bucket/prefix")
	}
	if u.Port() != "" || strings.HasSuffix(u.Host, ":") {
		return bad("the bucket cannot have a port; set the endpoint with --s3-endpoint or AWS_ENDPOINT_URL")
	}
	if err := checkBucket(u.Host); err != nil {
		return bad("%v", err)
	}
	prefix := strings.TrimPrefix(u.Path, "/")
	prefix = strings.TrimSuffix(prefix, "/")
	if prefix != "" {
		if err := CheckKey(prefix); err != nil {
			return bad("prefix %q must be slash-separated names without empty, \".\" or \"..\" segments", prefix)
		}
	}
	return Location{Scheme: "s3", Bucket: u.Host, Prefix: prefix}, nil
}

func parseFile(u *url.URL, bad func(string, ...any) (Location, error)) (Location, error) {
	if u.Opaque != "" {
		return bad("relative path %q; want file:///abs/path", u.Opaque)
	}
	if u.Host != "" && u.Host != "localhost" {
		return bad("host %q in a file URL (relative path?); want file:///abs/path", u.Host)
	}
	p := u.Path
	if p == "" || !strings.HasPrefix(p, "/") {
		return bad("missing absolute path; want file:///abs/path")
	}
	if strings.ContainsRune(p, 0) {
		return bad("path contains a NUL byte")
	}
	for _, seg := range strings.Split(p, "/") {
		if seg == "." || seg == ".." {
			return bad("path %q has a \".\" or \"..\" segment; give the resolved path", p)
		}
	}
	return Location{Scheme: "file", Path: path.Clean(p)}, nil
}

// checkBucket applies the S3 bucket naming rules: 3 to 63 characters of
// lower-case letters, digits, dots and hyphens, beginning and ending with a
// letter or digit, no "..", not an IP address.
func checkBucket(b string) error {
	if len(b) < 3 || len(b) > 63 {
		return fmt.Errorf("bucket %q must be 3 to 63 characters long", b)
	}
	for i := 0; i < len(b); i++ {
		c := b[i]
		switch {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9':
		case c == '.' || c == '-':
			if i == 0 || i == len(b)-1 {
				return fmt.Errorf("bucket %q must begin and end with a letter or digit", b)
			}
		default:
			return fmt.Errorf("bucket %q may only hold lower-case letters, digits, dots and hyphens", b)
		}
	}
	if strings.Contains(b, "..") || strings.Contains(b, ".-") || strings.Contains(b, "-.") {
		return fmt.Errorf("bucket %q has adjacent dots or a dot next to a hyphen", b)
	}
	if isIPv4(b) {
		return fmt.Errorf("bucket %q looks like an IP address; set the endpoint with --s3-endpoint or AWS_ENDPOINT_URL", b)
	}
	return nil
}

func isIPv4(s string) bool {
	parts := strings.Split(s, ".")
	if len(parts) != 4 {
		return false
	}
	for _, p := range parts {
		if p == "" || len(p) > 3 || strings.Trim(p, "0123456789") != "" {
			return false
		}
	}
	return true
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

// String returns the location as a URL that ParseURL accepts.
func (l Location) String() string {
	switch l.Scheme {
	case "s3":
		if l.Prefix == "" {
			return "s3://" + l.Bucket
		}
		return "s3://" + l.Bucket + "/" + (&url.URL{Path: l.Prefix}).EscapedPath()
	case "file":
		return (&url.URL{Scheme: "file", Path: l.Path}).String()
	default:
		return ""
	}
}
