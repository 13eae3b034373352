package s3

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/minio/minio-go/v7"

	"github.com/lifeboat-project/lifeboat/storage"
)

// TestExplainAnswers: each answer other S3 servers give for a fault says
// what is wrong and what to change, and is permanent exactly where no
// retry can help.
func TestExplainAnswers(t *testing.T) {
	s := &Store{cfg: Config{Endpoint: "http://s3.example:8333", Bucket: "ckpt", BucketLookup: LookupAuto}}
	for _, tc := range []struct {
		name      string
		resp      minio.ErrorResponse
		want      []string
		permanent bool
	}{
		{"AWS wrong key", minio.ErrorResponse{Code: "InvalidAccessKeyId", StatusCode: 403}, []string{"refused the credentials", "check AccessKey and SecretKey"}, true},
		{"versitygw wrong key (404)", minio.ErrorResponse{Code: "XAdminUserNotFound", StatusCode: 404, Message: "No user exists with the provided access key ID."}, []string{"refused the credentials", "check AccessKey and SecretKey", "HTTP 404"}, true},
		{"bad key as 400", minio.ErrorResponse{Code: "InvalidAccessKeyId", StatusCode: 400}, []string{"refused the credentials"}, true},
		{"denied", minio.ErrorResponse{Code: "AccessDenied", StatusCode: 403}, []string{"access denied", "s3:PutObject"}, true},
		{"virtual-host style refused", minio.ErrorResponse{Code: "MethodNotAllowed", StatusCode: 405}, []string{"set BucketLookup to path"}, true},
		{"405 without a code", minio.ErrorResponse{StatusCode: 405}, []string{"set BucketLookup to path"}, true},
		{"quota", minio.ErrorResponse{Code: "QuotaExceeded", StatusCode: 403}, []string{"out of space or over its quota", "server's side"}, true},
		{"507", minio.ErrorResponse{Code: "InsufficientStorage", StatusCode: 507}, []string{"out of space", "server's side"}, true},
		{"MinIO full", minio.ErrorResponse{Code: "XMinioStorageFull", StatusCode: 507}, []string{"out of space"}, true},
		{"SeaweedFS out of volumes", minio.ErrorResponse{Code: "InternalError", StatusCode: 500, Message: "We encountered an internal error, please try again."}, []string{"server's side", "server's logs and free space", "HTTP 500"}, false},
		{"slow down", minio.ErrorResponse{Code: "SlowDown", StatusCode: 503}, []string{"server's side"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := s.explain(tc.resp)
			if err == nil {
				t.Fatal("no explanation")
			}
			for _, w := range append(tc.want, "http://s3.example:8333", `"ckpt"`) {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("%q does not say %q", err, w)
				}
			}
			if storage.IsPermanent(err) != tc.permanent {
				t.Errorf("permanent %v, want %v", storage.IsPermanent(err), tc.permanent)
			}
			if tr := s.translate(context.Background(), "put", "snapshots/x", tc.resp); storage.IsPermanent(tr) != tc.permanent || !strings.Contains(tr.Error(), "put snapshots/x") {
				t.Errorf("translate: %v; want the same verdict, naming the call", tr)
			}
		})
	}
	// Path-style requests that get a 405 are not an addressing problem.
	s.cfg.BucketLookup = LookupPath
	if err := s.explain(minio.ErrorResponse{Code: "MethodNotAllowed", StatusCode: 405}); err != nil && strings.Contains(err.Error(), "BucketLookup") {
		t.Errorf("path-style 405 blamed on the addressing: %v", err)
	}
}

// TestKeysRefusedWith404: a server that refuses unknown keys with 404
// (versitygw) makes a HEAD of the bucket look like a missing bucket,
// since a HEAD's answer has no body. The start says the credentials are
// wrong, not that the bucket is missing, with and without --create-bucket.
func TestKeysRefusedWith404(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/xml")
		w.WriteHeader(http.StatusNotFound)
		if r.Method != http.MethodHead {
			fmt.Fprint(w, `<?xml version="1.0" encoding="UTF-8"?><Error><Code>XAdminUserNotFound</Code><Message>No user exists with the provided access key ID.</Message></Error>`)
		}
	}))
	defer srv.Close()
	for _, create := range []bool{false, true} {
		_, err := New(context.Background(), Config{Endpoint: srv.URL, Bucket: "ckpt", AccessKey: "AKIAWRONG", SecretKey: "wrong-secret",
			Region: "us-east-1", BucketLookup: LookupPath, CreateBucket: create, RequestAttempts: 1})
		if err == nil || !strings.Contains(err.Error(), "refused the credentials") || strings.Contains(err.Error(), "does not exist") || !storage.IsPermanent(err) {
			t.Errorf("create-bucket %v: %v; want a permanent credentials error", create, err)
		}
		if err != nil && strings.Contains(err.Error(), "wrong-secret") {
			t.Errorf("the error shows the secret: %v", err)
		}
	}
	// A server whose listing says NoSuchBucket still gets the hint to create it.
	srv.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/xml")
		w.WriteHeader(http.StatusNotFound)
		if r.Method != http.MethodHead {
			fmt.Fprint(w, `<?xml version="1.0" encoding="UTF-8"?><Error><Code>NoSuchBucket</Code><Message>The specified bucket does not exist</Message></Error>`)
		}
	})
	_, err := New(context.Background(), Config{Endpoint: srv.URL, Bucket: "ckpt", AccessKey: "AKIA", SecretKey: "secret", Region: "us-east-1", BucketLookup: LookupPath, RequestAttempts: 1})
	if err == nil || !strings.Contains(err.Error(), "does not exist") || !strings.Contains(err.Error(), "create it or set CreateBucket") {
		t.Errorf("missing bucket: %v; want the hint to create it", err)
	}
}
