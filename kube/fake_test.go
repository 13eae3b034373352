package kube

import (
	"bytes"
	"encoding/json"
	"encoding/pem"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// request is one request the fake API server got.
type request struct {
	Method, Path, Auth, ContentType string
	Body                            map[string]any
}

// fakeAPI is an HTTPS server answering lifeboat's requests about pod
// ns/trainer-0 the way the API server does; handle, when set, answers
// first (returning false lets the default answer).
type fakeAPI struct {
	srv    *httptest.Server
	mu     sync.Mutex
	reqs   []request
	handle func(w http.ResponseWriter, r request) bool
}

const (
	testToken = "s3cr3t-token-value-0123456789"
	testPod   = "trainer-0"
	testNS    = "ml"
	testUID   = "0b7c8d2e-1111-2222-3333-444455556666"
)

func newFakeAPI(t *testing.T) *fakeAPI {
	t.Helper()
	f := &fakeAPI{}
	f.srv = httptest.NewTLSServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fakeAPI) serve(w http.ResponseWriter, hr *http.Request) {
	b, _ := io.ReadAll(hr.Body)
	r := request{Method: hr.Method, Path: hr.URL.Path, Auth: hr.Header.Get("Authorization"), ContentType: hr.Header.Get("Content-Type")}
	_ = json.Unmarshal(b, &r.Body)
	f.mu.Lock()
	f.reqs = append(f.reqs, r)
	h := f.handle
	f.mu.Unlock()
	if h != nil && h(w, r) {
		return
	}
	podPath := "/api/v1/namespaces/" + testNS + "/pods/" + testPod
	switch {
	case r.Method == http.MethodGet && r.Path == podPath:
		_, _ = io.WriteString(w, `{"kind":"Pod","metadata":{"name":"`+testPod+`","uid":"`+testUID+`"},"spec":{"nodeName":"node-7","terminationGracePeriodSeconds":95}}`)
	case r.Method == http.MethodPatch && r.Path == podPath:
		_, _ = io.WriteString(w, `{"kind":"Pod"}`)
	case r.Method == http.MethodPost && r.Path == "/api/v1/namespaces/"+testNS+"/events":
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write(b)
	default:
		status(w, http.StatusNotFound, "NotFound", "not found")
	}
}

// status writes a Kubernetes Status answer.
func status(w http.ResponseWriter, code int, reason, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(map[string]any{"kind": "Status", "status": "Failure", "code": code, "reason": reason, "message": msg})
}

// requests returns the requests with method and a path ending in suffix.
func (f *fakeAPI) requests(method, suffix string) []request {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []request
	for _, r := range f.reqs {
		if r.Method == method && strings.HasSuffix(r.Path, suffix) {
			out = append(out, r)
		}
	}
	return out
}

func (f *fakeAPI) setHandle(h func(w http.ResponseWriter, r request) bool) {
	f.mu.Lock()
	f.handle = h
	f.mu.Unlock()
}

// saDir writes a service-account directory (token, ca.crt, namespace)
// for f's server.
func (f *fakeAPI) saDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: f.srv.Certificate().Raw})
	for name, content := range map[string][]byte{"token": []byte(testToken + "\n"), "ca.crt": ca, "namespace": []byte(testNS)} {
		if err := os.WriteFile(filepath.Join(dir, name), content, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// client returns a Client of f's server that never waits between retries.
func (f *fakeAPI) client(t *testing.T) *Client {
	t.Helper()
	dir := f.saDir(t)
	c, err := New(Config{Server: f.srv.URL, TokenFile: filepath.Join(dir, "token"), CAFile: filepath.Join(dir, "ca.crt"),
		Namespace: testNS, Pod: testPod, Timeout: 30 * time.Second, Backoff: func(int) time.Duration { return 0 }})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// logBuffer is a JSON log safe for concurrent writes.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func (l *logBuffer) logger() *slog.Logger {
	return slog.New(slog.NewJSONHandler(l, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// lines returns the log lines with msg at level.
func (l *logBuffer) lines(level, msg string) []map[string]any {
	var out []map[string]any
	for _, line := range strings.Split(l.String(), "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(line), &m) == nil && m["level"] == level && m["msg"] == msg {
			out = append(out, m)
		}
	}
	return out
}
