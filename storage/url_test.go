package storage

import (
	"errors"
	"fmt"
	"net/url"
	"strings"
	"testing"
)

func TestParseURL(t *testing.T) {
	tests := []struct {
		in      string
		want    Location
		wantErr string // substring of the error; empty means success
	}{
		{in: "s3://ckpt", want: Location{Scheme: "s3", Bucket: "ckpt"}},
		{in: "s3://ckpt/", want: Location{Scheme: "s3", Bucket: "ckpt"}},
		{in: "s3://ckpt/run-1", want: Location{Scheme: "s3", Bucket: "ckpt", Prefix: "run-1"}},
		{in: "s3://ckpt/team/run-1/", want: Location{Scheme: "s3", Bucket: "ckpt", Prefix: "team/run-1"}},
		{in: "s3://my.bucket-2/a%20b", want: Location{Scheme: "s3", Bucket: "my.bucket-2", Prefix: "a b"}},
		{in: "file:///data/ckpt", want: Location{Scheme: "file", Path: "/data/ckpt"}},
		{in: "file:///data/ckpt/", want: Location{Scheme: "file", Path: "/data/ckpt"}},
		{in: "file:///data//ckpt", want: Location{Scheme: "file", Path: "/data/ckpt"}},
		{in: "file://localhost/data", want: Location{Scheme: "file", Path: "/data"}},
		{in: "file:///", want: Location{Scheme: "file", Path: "/"}},

		{in: "", wantErr: "empty"},
		{in: "ckpt/run", wantErr: "no scheme"},
		{in: "/data/ckpt", wantErr: "no scheme"},
		{in: "gs://ckpt", wantErr: `unknown scheme "gs"`},
		{in: "S3://ckpt", want: Location{Scheme: "s3", Bucket: "ckpt"}},
		{in: "s3://", wantErr: "missing bucket"},
		{in: "s3:///prefix", wantErr: "missing bucket"},
		{in: "s3:ckpt", wantErr: "want s3://bucket/prefix"},
		{in: "s3://ckpt?region=x", wantErr: "query strings"},
		{in: "s3://ckpt/p?", wantErr: "query strings"},
		{in: "s3://ckpt/p#frag", wantErr: "fragments"},
		{in: "s3://key:secret@ckpt/p", wantErr: "credentials do not belong"},
		{in: "s3://ckpt:9000/p", wantErr: "port"},
		{in: "s3://ab", wantErr: "3 to 63"},
		{in: "s3://" + strings.Repeat("a", 64), wantErr: "3 to 63"},
		{in: "s3://Ckpt", wantErr: "lower-case"},
		{in: "s3://ck_pt", wantErr: "lower-case"},
		{in: "s3://-ckpt", wantErr: "begin and end"},
		{in: "s3://ck..pt", wantErr: "adjacent dots"},
		{in: "s3://192.168.1.1", wantErr: "IP address"},
		{in: "s3://ckpt/a/../b", wantErr: "prefix"},
		{in: "s3://ckpt/a//b", wantErr: "prefix"},
		{in: "s3://ckpt/./b", wantErr: "prefix"},
		{in: "s3://ckpt/a%00b", wantErr: "prefix"},
		{in: "file:data/ckpt", wantErr: "relative path"},
		{in: "file://data/ckpt", wantErr: `host "data"`},
		{in: "file://", wantErr: "missing absolute path"},
		{in: "file:///data/../etc", wantErr: `".."`},
		{in: "file:///data/./x", wantErr: `"."`},
		{in: "file:///data?x=1", wantErr: "query strings"},
		{in: "file://user@/data", wantErr: "credentials"},
		{in: "s3://ckpt/%zz", wantErr: "invalid URL escape"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParseURL(tt.in)
			if tt.wantErr != "" {
				if err == nil {
					t.Fatalf("ParseURL(%q) = %+v, want error containing %q", tt.in, got, tt.wantErr)
				}
				if !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("ParseURL(%q) error = %q, want it to contain %q", tt.in, err, tt.wantErr)
				}
				if !errors.Is(err, ErrInvalidURL) {
					t.Fatalf("ParseURL(%q) error %v does not wrap ErrInvalidURL", tt.in, err)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseURL(%q): %v", tt.in, err)
			}
			if got != tt.want {
				t.Fatalf("ParseURL(%q) = %+v, want %+v", tt.in, got, tt.want)
			}
			again, err := ParseURL(got.String())
			if err != nil || again != got {
				t.Fatalf("round trip via %q = %+v, %v; want %+v", got.String(), again, err, got)
			}
		})
	}
}

func FuzzParseURL(f *testing.F) {
	for _, s := range []string{
		"s3://ckpt", "s3://ckpt/a/b", "s3://my.bucket/a%20b/", "file:///data/x",
		"file://localhost/x", "file:x", "s3://ckpt/../x", "gs://x", "s3://ckpt?x", "",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		loc, err := ParseURL(raw)
		if err != nil {
			if !errors.Is(err, ErrInvalidURL) {
				t.Fatalf("ParseURL(%q) error %v does not wrap ErrInvalidURL", raw, err)
			}
			return
		}
		switch loc.Scheme {
		case "s3":
			if checkBucket(loc.Bucket) != nil || loc.Path != "" {
				t.Fatalf("ParseURL(%q) = %+v: bad bucket or stray path", raw, loc)
			}
			if loc.Prefix != "" && CheckKey(loc.Prefix) != nil {
				t.Fatalf("ParseURL(%q) = %+v: prefix is not a valid key", raw, loc)
			}
		case "file":
			if !strings.HasPrefix(loc.Path, "/") || strings.Contains(loc.Path, "/../") ||
				strings.HasSuffix(loc.Path, "/..") || loc.Bucket != "" || loc.Prefix != "" {
				t.Fatalf("ParseURL(%q) = %+v: path not absolute and clean", raw, loc)
			}
		default:
			t.Fatalf("ParseURL(%q) = %+v: unknown scheme accepted", raw, loc)
		}
		again, err := ParseURL(loc.String())
		if err != nil || again != loc {
			t.Fatalf("ParseURL(%q) = %+v; round trip via %q = %+v, %v", raw, loc, loc.String(), again, err)
		}
	})
}

// TestParseURLRedactsCredentials: a store URL with credentials is refused
// without showing them.
func TestParseURLRedactsCredentials(t *testing.T) {
	for _, raw := range []string{"s3://AKIAUSER:hunter2pw@bucket/x", "file://AKIAUSER:hunter2pw@/abs", "s3://AKIAUSER:hunter2pw@bucket/x?y=1", "s3://AKIAUSER:hunter2pw@bu cket:x/"} {
		_, err := ParseURL(raw)
		if err == nil || strings.Contains(err.Error(), "hunter2pw") || strings.Contains(err.Error(), "AKIAUSER") {
			t.Errorf("ParseURL(%q) = %v; want an error that hides the credentials", raw, err)
		}
	}
}

func TestUnwrapURLError(t *testing.T) {
	inner := errors.New("connection refused")
	_, perr := url.Parse("s3://ckpt/%zz")
	tests := []struct {
		in   error
		want string
	}{
		{&url.Error{Op: "Get", URL: "http://127.0.0.1:9000/ckpt", Err: inner}, "connection refused"},
		{fmt.Errorf("s3: stat k: %w", &url.Error{Op: "Head", URL: "http://x/y", Err: inner}), "connection refused"},
		{perr, `invalid URL escape "%zz"`},
		{inner, "connection refused"},
	}
	for _, tt := range tests {
		if got := UnwrapURLError(tt.in); got.Error() != tt.want {
			t.Errorf("UnwrapURLError(%v) = %q, want %q", tt.in, got, tt.want)
		}
	}
}
