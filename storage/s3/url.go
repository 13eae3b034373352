package s3

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"

	"github.com/lifeboat-project/lifeboat/storage"
)

// Scheme is the URL scheme of S3 stores: s3://bucket/prefix.
const Scheme = "s3"

func init() {
	storage.Register(storage.Backend{Scheme: Scheme, Form: "s3://bucket/prefix", Parse: parseURL, Open: open})
}

// parseURL checks an s3:// URL: a bucket that follows the S3 naming rules
// (CheckBucket), no port, and a prefix of valid key segments.
func parseURL(u *url.URL) (storage.Location, error) {
	if u.Opaque != "" {
		return storage.Location{}, errors.New("want s3://bucket/prefix")
	}
	if u.Host == "" {
		return storage.Location{}, errors.New("missing bucket; want s3://bucket/prefix")
	}
	if u.Port() != "" || strings.HasSuffix(u.Host, ":") {
		return storage.Location{}, &FieldError{Field: FieldEndpoint, Fix: FixSet, Err: errors.New("the bucket cannot have a port")}
	}
	if err := CheckBucket(u.Host); err != nil {
		return storage.Location{}, err
	}
	prefix := strings.TrimPrefix(u.Path, "/")
	prefix = strings.TrimSuffix(prefix, "/")
	if prefix != "" {
		if err := storage.CheckKey(prefix); err != nil {
			return storage.Location{}, fmt.Errorf("prefix %q must be slash-separated names without empty, \".\" or \"..\" segments", prefix)
		}
	}
	return storage.Location{Scheme: Scheme, Bucket: u.Host, Prefix: prefix}, nil
}

// open is the backend's storage.Backend.Open: a Config with the bucket and
// prefix of loc, given to configure (as a *Config) for the endpoint,
// credentials and the rest, then validated and opened with New.
func open(ctx context.Context, loc storage.Location, configure func(any) error) (storage.Store, error) {
	cfg := Config{Bucket: loc.Bucket, Prefix: loc.Prefix}
	if configure != nil {
		if err := configure(&cfg); err != nil {
			return nil, err
		}
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return New(ctx, cfg)
}

// CheckBucket applies the S3 bucket naming rules: 3 to 63 characters of
// lower-case letters, digits, dots and hyphens, beginning and ending with a
// letter or digit, no "..", not an IP address.
func CheckBucket(b string) error {
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
		return &FieldError{Field: FieldEndpoint, Fix: FixSet, Err: fmt.Errorf("bucket %q looks like an IP address", b)}
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
