package testenv

import (
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
)

// SlowDown is an S3 endpoint in front of the test MinIO server that
// throttles as S3 does a busy prefix: it answers a request with 503
// SlowDown the first Refusals times it sees that request (its method,
// path and query), and passes it on after, or refuses every request while
// Refusals is negative. Counting per request, not per time, makes each
// call of a client see the same refusals however busy the machine is.
type SlowDown struct {
	URL     string       // the endpoint to give clients
	Refused atomic.Int64 // requests answered with SlowDown

	mu       sync.Mutex
	refusals int
	seen     map[string]int
}

// NewSlowDown starts a SlowDown for m on 127.0.0.1 that refuses each
// request refusals times (every request, when negative). It stops when
// the test ends.
func NewSlowDown(t testing.TB, m MinIO, refusals int) *SlowDown {
	t.Helper()
	target, err := url.Parse(m.Endpoint)
	if err != nil {
		t.Fatal(err)
	}
	s := &SlowDown{refusals: refusals, seen: map[string]int{}}
	proxy := &httputil.ReverseProxy{Rewrite: func(r *httputil.ProxyRequest) {
		r.SetURL(target)
		r.Out.Host = r.In.Host // the client signed the proxy's host
	}}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.refuse(r.Method + " " + r.URL.RequestURI()) {
			s.Refused.Add(1)
			w.Header().Set("Content-Type", "application/xml")
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusServiceUnavailable)
			if r.Method != http.MethodHead {
				_, _ = w.Write([]byte(`<?xml version="1.0" encoding="UTF-8"?>` +
					`<Error><Code>SlowDown</Code><Message>Please reduce your request rate.</Message></Error>`))
			}
			return
		}
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	s.URL = srv.URL
	return s
}

// SetRefusals changes how many times each request is refused from now on
// (negative: every time), counting the times already seen.
func (s *SlowDown) SetRefusals(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.refusals = n
}

func (s *SlowDown) refuse(req string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := s.seen[req]
	s.seen[req] = n + 1
	return s.refusals < 0 || n < s.refusals
}
