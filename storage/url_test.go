package storage_test

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"testing"

	"github.com/lifeboat-project/lifeboat/storage"
	_ "github.com/lifeboat-project/lifeboat/storage/fs"
	"github.com/lifeboat-project/lifeboat/storage/mem"
	"github.com/lifeboat-project/lifeboat/storage/s3"
)

func TestParseURL(t *testing.T) {
	tests := []struct {
		in      string
		want    storage.Location
		wantErr string // substring of the error; empty means success
	}{
		{in: "s3://ckpt", want: storage.Location{Scheme: "s3", Bucket: "ckpt"}},
		{in: "s3://ckpt/", want: storage.Location{Scheme: "s3", Bucket: "ckpt"}},
		{in: "s3://ckpt/run-1", want: storage.Location{Scheme: "s3", Bucket: "ckpt", Prefix: "run-1"}},
		{in: "s3://ckpt/team/run-1/", want: storage.Location{Scheme: "s3", Bucket: "ckpt", Prefix: "team/run-1"}},
		{in: "s3://my.bucket-2/a%20b", want: storage.Location{Scheme: "s3", Bucket: "my.bucket-2", Prefix: "a b"}},
		{in: "file:///data/ckpt", want: storage.Location{Scheme: "file", Path: "/data/ckpt"}},
		{in: "file:///data/ckpt/", want: storage.Location{Scheme: "file", Path: "/data/ckpt"}},
		{in: "file:///data//ckpt", want: storage.Location{Scheme: "file", Path: "/data/ckpt"}},
		{in: "file://localhost/data", want: storage.Location{Scheme: "file", Path: "/data"}},
		{in: "file:///", want: storage.Location{Scheme: "file", Path: "/"}},

		{in: "", wantErr: "empty"},
		{in: "ckpt/run", wantErr: "no scheme"},
		{in: "/data/ckpt", wantErr: "no scheme"},
		{in: "gs://ckpt", wantErr: `unknown scheme "gs"`},
		{in: "S3://ckpt", want: storage.Location{Scheme: "s3", Bucket: "ckpt"}},
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
			got, err := storage.ParseURL(tt.in)
			if tt.wantErr != "" {
				if err == nil {
					t.Fatalf("ParseURL(%q) = %+v, want error containing %q", tt.in, got, tt.wantErr)
				}
				if !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("ParseURL(%q) error = %q, want it to contain %q", tt.in, err, tt.wantErr)
				}
				if !errors.Is(err, storage.ErrInvalidURL) {
					t.Fatalf("ParseURL(%q) error %v does not wrap storage.ErrInvalidURL", tt.in, err)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseURL(%q): %v", tt.in, err)
			}
			if got != tt.want {
				t.Fatalf("ParseURL(%q) = %+v, want %+v", tt.in, got, tt.want)
			}
			again, err := storage.ParseURL(got.String())
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
		loc, err := storage.ParseURL(raw)
		if err != nil {
			if !errors.Is(err, storage.ErrInvalidURL) {
				t.Fatalf("ParseURL(%q) error %v does not wrap storage.ErrInvalidURL", raw, err)
			}
			return
		}
		switch loc.Scheme {
		case "s3":
			if s3.CheckBucket(loc.Bucket) != nil || loc.Path != "" {
				t.Fatalf("ParseURL(%q) = %+v: bad bucket or stray path", raw, loc)
			}
			if loc.Prefix != "" && storage.CheckKey(loc.Prefix) != nil {
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
		again, err := storage.ParseURL(loc.String())
		if err != nil || again != loc {
			t.Fatalf("ParseURL(%q) = %+v; round trip via %q = %+v, %v", raw, loc, loc.String(), again, err)
		}
	})
}

// TestParseURLRedactsCredentials: a store URL with credentials is refused
// without showing them.
func TestParseURLRedactsCredentials(t *testing.T) {
	for _, raw := range []string{"s3://AKIAUSER:hunter2pw@bucket/x", "file://AKIAUSER:hunter2pw@/abs", "s3://AKIAUSER:hunter2pw@bucket/x?y=1", "s3://AKIAUSER:hunter2pw@bu cket:x/"} {
		_, err := storage.ParseURL(raw)
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
		if got := storage.UnwrapURLError(tt.in); got.Error() != tt.want {
			t.Errorf("UnwrapURLError(%v) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

// TestParseURLUnknownScheme: a scheme no backend registered is refused
// with the forms of the schemes known.
func TestParseURLUnknownScheme(t *testing.T) {
	for _, raw := range []string{"gs://ckpt/x", "ckpt/x"} {
		_, err := storage.ParseURL(raw)
		if err == nil || !errors.Is(err, storage.ErrInvalidURL) ||
			!strings.Contains(err.Error(), "file:///abs/path") || !strings.Contains(err.Error(), "s3://bucket/prefix") {
			t.Errorf("ParseURL(%q) = %v; want an invalid-URL error naming file:///abs/path and s3://bucket/prefix", raw, err)
		}
	}
	_, err := storage.Open(context.Background(), storage.Location{Scheme: "gs", Bucket: "ckpt"}, nil)
	if err == nil || !errors.Is(err, storage.ErrInvalidURL) || !strings.Contains(err.Error(), `unknown scheme "gs"`) {
		t.Errorf("Open of gs:// = %v; want an invalid-URL error naming the scheme", err)
	}
}

// TestRegister: a backend registered under a new scheme parses and opens
// its URLs; registering a scheme twice, or an incomplete backend, panics.
func TestRegister(t *testing.T) {
	opened := mem.New()
	b := storage.Backend{
		Scheme: "memtest",
		Form:   "memtest://name",
		Parse: func(u *url.URL) (storage.Location, error) {
			if u.Host == "" {
				return storage.Location{}, errors.New("missing name; want memtest://name")
			}
			return storage.Location{Bucket: u.Host}, nil
		},
		Open: func(_ context.Context, loc storage.Location, configure func(any) error) (storage.Store, error) {
			name := loc.Bucket
			if err := configure(&name); err != nil {
				return nil, err
			}
			if name != "configured" {
				return nil, fmt.Errorf("configure was not applied: %q", name)
			}
			return opened, nil
		},
	}
	storage.Register(b)
	loc, err := storage.ParseURL("memtest://x")
	if err != nil || loc != (storage.Location{Scheme: "memtest", Bucket: "x"}) {
		t.Fatalf("ParseURL(memtest://x) = %+v, %v", loc, err)
	}
	if _, err := storage.ParseURL("memtest:///"); err == nil || !strings.Contains(err.Error(), "missing name; want memtest://name") || !errors.Is(err, storage.ErrInvalidURL) {
		t.Errorf("ParseURL(memtest:///) = %v; want the backend's reason as an invalid-URL error", err)
	}
	s, err := storage.Open(context.Background(), loc, func(c any) error {
		*c.(*string) = "configured"
		return nil
	})
	if err != nil || s != opened {
		t.Fatalf("Open(%v) = %v, %v", loc, s, err)
	}
	if _, err := storage.ParseURL("gs://x"); err == nil || !strings.Contains(err.Error(), "memtest://name") {
		t.Errorf("unknown scheme error %v does not list the registered memtest://name", err)
	}
	for name, bad := range map[string]storage.Backend{
		"twice":     b,
		"no scheme": {Parse: b.Parse, Open: b.Open},
		"upper":     {Scheme: "Mem", Parse: b.Parse, Open: b.Open},
		"no parse":  {Scheme: "memtest2", Open: b.Open},
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("Register %s did not panic", name)
				}
			}()
			storage.Register(bad)
		}()
	}
}
