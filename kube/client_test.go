package kube

import (
	"context"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"
)

// TestPodReadsGraceAndUID: GET pod with the token from the file, read
// again at each request (the kubelet rotates it).
func TestPodReadsGraceAndUID(t *testing.T) {
	f := newFakeAPI(t)
	c := f.client(t)
	defer c.CloseIdleConnections()
	p, err := c.Pod(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if p.UID != testUID || p.Node != "node-7" || p.Grace != 95*time.Second {
		t.Errorf("pod %+v", p)
	}
	if err := os.WriteFile(c.cfg.TokenFile, []byte("rotated"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Pod(context.Background()); err != nil {
		t.Fatal(err)
	}
	gets := f.requests(http.MethodGet, "/pods/"+testPod)
	if len(gets) != 2 || gets[0].Auth != "Bearer "+testToken || gets[1].Auth != "Bearer rotated" {
		t.Errorf("Authorization headers %q, want the token, then the rotated one", []string{gets[0].Auth, gets[len(gets)-1].Auth})
	}
}

// TestCreateEventShape: a core/v1 Event on the pod, by uid, reported by
// lifeboat, its message cut to 1 KiB.
func TestCreateEventShape(t *testing.T) {
	f := newFakeAPI(t)
	c := f.client(t)
	defer c.CloseIdleConnections()
	at := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	if err := c.CreateEvent(context.Background(), Event{Type: Normal, Reason: ReasonCommitted, Message: strings.Repeat("x", 3000), At: at}, testUID, "node-7"); err != nil {
		t.Fatal(err)
	}
	posts := f.requests(http.MethodPost, "/events")
	if len(posts) != 1 {
		t.Fatalf("%d event posts", len(posts))
	}
	b := posts[0].Body
	io := b["involvedObject"].(map[string]any)
	if io["kind"] != "Pod" || io["name"] != testPod || io["namespace"] != testNS || io["uid"] != testUID {
		t.Errorf("involvedObject %v", io)
	}
	if b["reason"] != ReasonCommitted || b["type"] != Normal || b["reportingComponent"] != "lifeboat" ||
		b["source"].(map[string]any)["component"] != "lifeboat" || b["firstTimestamp"] != "2026-03-01T12:00:00Z" {
		t.Errorf("event %v", b)
	}
	if m := b["message"].(string); len(m) > 1024 || !strings.HasSuffix(m, "...") {
		t.Errorf("message of %d bytes, want at most 1024 ending in ...", len(m))
	}
	if name := b["metadata"].(map[string]any)["name"].(string); !strings.HasPrefix(name, testPod+".") {
		t.Errorf("event name %q", name)
	}
}

// TestAnnotateIsAMergePatch: only metadata.annotations, nil removes.
func TestAnnotateIsAMergePatch(t *testing.T) {
	f := newFakeAPI(t)
	c := f.client(t)
	defer c.CloseIdleConnections()
	v := "12"
	if err := c.Annotate(context.Background(), map[string]*string{AnnotationStep: &v, AnnotationTime: nil}); err != nil {
		t.Fatal(err)
	}
	p := f.requests(http.MethodPatch, "/pods/"+testPod)
	if len(p) != 1 || p[0].ContentType != "application/merge-patch+json" {
		t.Fatalf("patches %+v", p)
	}
	a := p[0].Body["metadata"].(map[string]any)["annotations"].(map[string]any)
	if len(p[0].Body) != 1 || a[AnnotationStep] != "12" || a[AnnotationTime] != nil || len(a) != 2 {
		t.Errorf("patch body %v", p[0].Body)
	}
}

// TestErrorsNeverHoldTheToken: an API server (or a proxy) that echoes
// the Authorization header in its error body does not put the token in
// the error; 403 names the permission and is Denied, 500 is retried and
// is not.
func TestErrorsNeverHoldTheToken(t *testing.T) {
	f := newFakeAPI(t)
	c := f.client(t)
	defer c.CloseIdleConnections()
	code := http.StatusForbidden
	f.setHandle(func(w http.ResponseWriter, r request) bool {
		if code == http.StatusForbidden {
			status(w, code, "Forbidden", `events is forbidden: User "system:serviceaccount:ml:lifeboat" cannot create resource "events"; header `+r.Auth)
		} else {
			w.WriteHeader(code)
			_, _ = w.Write([]byte("proxy error for " + r.Auth))
		}
		return true
	})
	err := c.CreateEvent(context.Background(), Event{Type: Normal, Reason: "X", Message: "m"}, "", "")
	if err == nil || !IsDenied(err) || strings.Contains(err.Error(), testToken) || !strings.Contains(err.Error(), "create events") {
		t.Errorf("403: err = %v; want Denied, naming create events, without the token", err)
	}
	code = http.StatusInternalServerError
	err = c.Annotate(context.Background(), map[string]*string{"a": nil})
	if err == nil || IsDenied(err) || strings.Contains(err.Error(), testToken) {
		t.Errorf("500: err = %v; want a failure that is not Denied, without the token", err)
	}
	if n := len(f.requests(http.MethodPatch, "")); n != 3 {
		t.Errorf("500 was tried %d times, want 3 (two retries)", n)
	}
}
