package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lifeboat-project/lifeboat/storage"
	"github.com/lifeboat-project/lifeboat/storage/s3"
)

// TestFieldSentences: each library error that names a setting of its
// configuration reaches users as the sentence it was before libraries
// stopped naming flags: naming the flag and the variable, with the rest
// of the message, and of any error wrapping it, as it is. The errors come
// from the libraries where that needs no server.
func TestFieldSentences(t *testing.T) {
	_, portErr := storage.ParseURL("s3://bucket:9000/x")
	_, ipErr := storage.ParseURL("s3://10.0.0.1/x")
	_, userErr := storage.ParseURL("s3://KEY:hunter2pw@bucket/x")
	validate := func(c s3.Config) error {
		c.Bucket = "ckpt"
		return c.Validate()
	}
	pem := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(pem, []byte("no certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, noPEM := s3.New(context.Background(), s3.Config{Endpoint: "https://minio:9000", Bucket: "ckpt", CAFile: pem})
	missing := filepath.Join(t.TempDir(), "missing.pem")
	_, unreadable := s3.New(context.Background(), s3.Config{Endpoint: "https://minio:9000", Bucket: "ckpt", CAFile: missing})
	where := `bucket "ckpt" at http://minio:9000`
	timeout := func(p s3.Phase, limit time.Duration) error {
		return fmt.Errorf("s3: put k: %w", &s3.TimeoutError{Endpoint: "http://minio:9000", Phase: p, Limit: limit})
	}
	for _, tc := range []struct {
		name string
		err  error
		want string
	}{
		{"port in the bucket", portErr, `store URL "s3://bucket:9000/x": the bucket cannot have a port; set the endpoint with --s3-endpoint or AWS_ENDPOINT_URL: invalid store URL`},
		{"IP as the bucket", ipErr, `store URL "s3://10.0.0.1/x": bucket "10.0.0.1" looks like an IP address; set the endpoint with --s3-endpoint or AWS_ENDPOINT_URL: invalid store URL`},
		{"credentials in the URL", userErr, `store URL "s3://xxxxx@bucket/x": credentials do not belong in the URL; use AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY: invalid store URL`},
		{"endpoint not a URL", validate(s3.Config{Endpoint: "http://mi nio:x"}), `the endpoint "http://mi nio:x" (--s3-endpoint, AWS_ENDPOINT_URL) is not a URL`},
		{"endpoint scheme", validate(s3.Config{Endpoint: "ftp://minio"}), `the endpoint "ftp://minio" (--s3-endpoint, AWS_ENDPOINT_URL) must start with http:// or https://`},
		{"endpoint path", validate(s3.Config{Endpoint: "http://minio:9000/x"}), `the endpoint "http://minio:9000/x" (--s3-endpoint, AWS_ENDPOINT_URL) must be scheme://host[:port] only`},
		{"bucket lookup", validate(s3.Config{BucketLookup: "sideways"}), `the bucket lookup "sideways" (--s3-bucket-lookup) must be auto, path or dns`},
		{"half the keys", validate(s3.Config{AccessKey: "k"}), "give both the access key and the secret key (AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY), or neither to use AWS_ACCESS_KEY_ID, the credentials file or IAM"},
		{"negative timeout", validate(s3.Config{StallTimeout: -time.Second}), "the timeout -1s (--s3-stall-timeout) must be positive"},
		{"two at once", validate(s3.Config{Endpoint: "ftp://minio", ConnectTimeout: -time.Second}),
			"the endpoint \"ftp://minio\" (--s3-endpoint, AWS_ENDPOINT_URL) must start with http:// or https://\nthe timeout -1s (--s3-connect-timeout) must be positive"},
		{"CA file without PEM", noPEM, "s3: CA file " + pem + " (--s3-ca-file, AWS_CA_BUNDLE) holds no PEM certificates"},
		{"CA file unreadable", unreadable, "s3: read CA file (--s3-ca-file, AWS_CA_BUNDLE): open " + missing + ": no such file or directory"},
		{"unreachable", fmt.Errorf("open store: %w", &s3.FieldError{Field: s3.FieldEndpoint, Fix: s3.FixCheck, Err: errors.New(`s3: cannot reach http://minio:9000 for bucket "ckpt": dial tcp: lookup minio: no such host`)}),
			`open store: s3: cannot reach http://minio:9000 for bucket "ckpt": dial tcp: lookup minio: no such host; check --s3-endpoint (AWS_ENDPOINT_URL) and that the server is running`},
		{"no bucket", storage.Permanent(&s3.FieldError{Field: s3.FieldCreateBucket, Fix: s3.FixSet, Err: errors.New(`s3: bucket "ckpt" does not exist at http://minio:9000`)}),
			`s3: bucket "ckpt" does not exist at http://minio:9000; create it or set --create-bucket`},
		{"credentials refused", fmt.Errorf("s3: put k: %w", storage.Permanent(&s3.FieldError{Field: s3.FieldCredentials, Fix: s3.FixCheck, Err: errors.New("s3: the server refused the credentials for " + where + " (InvalidAccessKeyId, HTTP 403: )")})),
			"s3: put k: s3: the server refused the credentials for " + where + " (InvalidAccessKeyId, HTTP 403: ); check AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or the credentials file, or the IAM role)"},
		{"addressing", &s3.FieldError{Field: s3.FieldBucketLookup, Fix: s3.FixSet, Value: "path", Err: errors.New("s3: " + where + " answered MethodNotAllowed, HTTP 405: : the request did not reach the bucket, as when a server without virtual-host (DNS) bucket names is addressed that way")},
			"s3: " + where + " answered MethodNotAllowed, HTTP 405: : the request did not reach the bucket, as when a server without virtual-host (DNS) bucket names is addressed that way; set --s3-bucket-lookup path (LIFEBOAT_S3_BUCKET_LOOKUP=path)"},
		{"certificate not trusted", &s3.FieldError{Field: s3.FieldCAFile, Fix: s3.FixSet, Value: "the CA that signed it", Err: errors.New("s3: TLS certificate of https://minio:9000 not trusted (x509: certificate signed by unknown authority)")},
			"s3: TLS certificate of https://minio:9000 not trusted (x509: certificate signed by unknown authority); set AWS_CA_BUNDLE (--s3-ca-file) to the CA that signed it"},
		{"TLS handshake", &s3.FieldError{Field: s3.FieldCAFile, Fix: s3.FixCheck, Err: errors.New("s3: TLS handshake with https://minio:9000 failed: tls: bad record")},
			"s3: TLS handshake with https://minio:9000 failed: tls: bad record; check the endpoint's scheme and AWS_CA_BUNDLE (--s3-ca-file)"},
		{"connect timeout", timeout(s3.PhaseConnect, 10*time.Second),
			"s3: put k: the store at http://minio:9000 did not accept a connection within 10s; check --s3-endpoint (AWS_ENDPOINT_URL) and that the server is running and reachable, or raise --s3-connect-timeout (LIFEBOAT_S3_CONNECT_TIMEOUT)"},
		{"TLS timeout", timeout(s3.PhaseTLS, 10*time.Second),
			"s3: put k: the store at http://minio:9000 did not finish the TLS handshake within 10s; check --s3-endpoint (AWS_ENDPOINT_URL), its scheme and port, or raise --s3-connect-timeout (LIFEBOAT_S3_CONNECT_TIMEOUT)"},
		{"response timeout", timeout(s3.PhaseHeaders, 30*time.Second),
			"s3: put k: the store at http://minio:9000 accepted the connection but did not answer within 30s; check --s3-endpoint (AWS_ENDPOINT_URL) and the server's health, or raise --s3-response-timeout (LIFEBOAT_S3_RESPONSE_TIMEOUT)"},
		{"stall", timeout(s3.PhaseStall, time.Minute),
			"s3: put k: a transfer with the store at http://minio:9000 moved no byte for 1m0s; check --s3-endpoint (AWS_ENDPOINT_URL) and the network path to it, or raise --s3-stall-timeout (LIFEBOAT_S3_STALL_TIMEOUT)"},
		{"opening check", timeout(s3.PhaseOpen, 40*time.Second),
			"s3: put k: the store at http://minio:9000 did not answer within 40s (--s3-connect-timeout plus --s3-response-timeout); check --s3-endpoint (AWS_ENDPOINT_URL) and the server's health, or raise --s3-response-timeout (LIFEBOAT_S3_RESPONSE_TIMEOUT)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.err == nil {
				t.Fatal("the library returned no error")
			}
			for _, m := range flagRef.FindAllString(tc.err.Error(), -1) {
				t.Errorf("the library's own text names %s: %q", m, tc.err)
			}
			if m := varRef.FindString(tc.err.Error()); m != "" {
				t.Errorf("the library's own text names %s: %q", m, tc.err)
			}
			got := named(tc.err)
			if got.Error() != tc.want {
				t.Errorf("named:\n got %q\nwant %q", got, tc.want)
			}
			if !errors.Is(got, tc.err) || storage.IsPermanent(got) != storage.IsPermanent(tc.err) {
				t.Errorf("named(%v) does not wrap it as it was", tc.err)
			}
			var b strings.Builder
			printError(&b, "run", tc.err)
			if want := "lifeboat run: " + tc.want + "\n"; b.String() != want {
				t.Errorf("printError:\n got %q\nwant %q", b.String(), want)
			}
			for _, format := range []string{"json", "text"} {
				var logged strings.Builder
				log, err := newLogger(&logged, "info", format)
				if err != nil {
					t.Fatal(err)
				}
				log.Warn("checkpoint.upload_failed", "err", tc.err)
				var line struct{ Err string }
				switch {
				case format == "json" && (json.Unmarshal([]byte(logged.String()), &line) != nil || line.Err != tc.want):
					t.Errorf("logged %q; want the err %q", logged.String(), tc.want)
				case format == "text" && !strings.Contains(logged.String(), " err="+strconv.Quote(tc.want)+"\n"):
					t.Errorf("logged %q; want the err %q", logged.String(), tc.want)
				}
			}
		})
	}
	other := errors.New("list checkpoints: access denied")
	if named(other) != other {
		t.Errorf("named changed an error that names no setting")
	}
}
