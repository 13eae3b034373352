package testenv

import (
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/minio/minio-go/v7/pkg/signer"
)

// ConditionStripper is an S3 endpoint in front of the test MinIO server
// that behaves like a server (or proxy, or gateway) that ignores
// conditional writes: it removes If-None-Match from every request and
// signs the request again with the server's keys, so the server accepts
// it as a plain write.
type ConditionStripper struct {
	URL      string       // the endpoint to give clients
	Stripped atomic.Int64 // requests whose condition was removed
}

// NewConditionStripper starts a ConditionStripper for m on 127.0.0.1. It
// stops when the test ends.
func NewConditionStripper(t testing.TB, m MinIO) *ConditionStripper {
	t.Helper()
	target, err := url.Parse(m.Endpoint)
	if err != nil {
		t.Fatal(err)
	}
	c := &ConditionStripper{}
	srv := httptest.NewServer(&httputil.ReverseProxy{Rewrite: func(r *httputil.ProxyRequest) {
		r.SetURL(target)
		r.Out.Host = r.In.Host // the client signed the proxy's host
		if r.Out.Header.Get("If-None-Match") == "" {
			return
		}
		c.Stripped.Add(1)
		r.Out.Header.Del("If-None-Match")
		r.Out.Header.Del("Authorization")
		signed := signer.SignV4(*r.Out, m.AccessKey, m.SecretKey, "", signedRegion(r.In.Header.Get("Authorization")))
		r.Out.Header = signed.Header
	}})
	t.Cleanup(srv.Close)
	c.URL = srv.URL
	return c
}

// signedRegion is the region of a SigV4 Authorization header's credential
// scope (Credential=KEY/DATE/REGION/s3/aws4_request), else us-east-1.
func signedRegion(auth string) string {
	_, cred, ok := strings.Cut(auth, "Credential=")
	if !ok {
		return "us-east-1"
	}
	if parts := strings.Split(strings.SplitN(cred, ",", 2)[0], "/"); len(parts) >= 3 {
		return parts[2]
	}
	return "us-east-1"
}
