package kube

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/go-cleanhttp"
	"github.com/hashicorp/go-retryablehttp"
)

// Client makes the few requests lifeboat needs of the API server about its
// own pod. Safe for concurrent use.
type Client struct {
	cfg Config
	hc  *retryablehttp.Client
}

// New returns a Client for cfg, reading its CA bundle now.
func New(cfg Config) (*Client, error) {
	pem, err := os.ReadFile(cfg.CAFile)
	if err != nil {
		return nil, fmt.Errorf("kube: the API server's CA: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("kube: the API server's CA: no PEM certificate in %s", cfg.CAFile)
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.Retries == 0 {
		cfg.Retries = 2
	}
	if cfg.Backoff == nil {
		cfg.Backoff = func(n int) time.Duration { return min(100*time.Millisecond<<n, time.Second) }
	}
	tr := cleanhttp.DefaultPooledTransport()
	tr.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	tr.ForceAttemptHTTP2 = true
	hc := retryablehttp.NewClient()
	hc.HTTPClient = &http.Client{Transport: tr, Timeout: cfg.Timeout}
	hc.Logger = nil // our own log lines say what failed, without URLs or headers
	hc.RetryMax = max(cfg.Retries, 0)
	backoff := cfg.Backoff
	hc.Backoff = func(_, _ time.Duration, attempt int, resp *http.Response) time.Duration {
		d := backoff(attempt + 1)
		if resp != nil && (resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode == http.StatusServiceUnavailable) {
			if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && s > 0 {
				d = max(d, min(time.Duration(s)*time.Second, time.Second))
			}
		}
		return d
	}
	hc.CheckRetry = func(ctx context.Context, resp *http.Response, err error) (bool, error) {
		if ctx.Err() != nil {
			return false, ctx.Err()
		}
		return retryablehttp.DefaultRetryPolicy(ctx, resp, err)
	}
	hc.ErrorHandler = retryablehttp.PassthroughErrorHandler
	return &Client{cfg: cfg, hc: hc}, nil
}

// Config returns the client's configuration (the token is in a file and
// never part of it).
func (c *Client) Config() Config { return c.cfg }

// Pod is what lifeboat reads of its own pod.
type Pod struct {
	UID  string
	Node string
	// Grace is spec.terminationGracePeriodSeconds; Kubernetes defaults it
	// to 30 s, and -1 means it is not set.
	Grace       time.Duration
	Annotations map[string]string
}

// Permission names an RBAC rule: the verb and the resource (with its API
// group, "" for core).
type Permission struct {
	Verb, Group, Resource string
}

func (p Permission) String() string {
	g := p.Group
	if g == "" {
		g = `""` // the core group, as a Role spells it
	}
	return fmt.Sprintf("%s %s (apiGroup %s)", p.Verb, p.Resource, g)
}

// The permissions lifeboat's requests need.
var (
	PermGetPods     = Permission{Verb: "get", Resource: "pods"}
	PermPatchPods   = Permission{Verb: "patch", Resource: "pods"}
	PermCreateEvent = Permission{Verb: "create", Resource: "events"}
)

// APIError is an error status from the API server.
type APIError struct {
	Permission Permission // what the request needs
	Object     string     // what it was about, namespace/name
	Code       int        // HTTP status
	Reason     string     // the Status's reason, e.g. Forbidden
	Message    string     // the Status's message, or the body's start
}

func (e *APIError) Error() string {
	msg := e.Message
	if msg == "" {
		msg = http.StatusText(e.Code)
	}
	return fmt.Sprintf("kube: %s %s: %d %s", e.Permission.Verb, e.Object, e.Code, msg)
}

// Denied reports whether the request is refused for who lifeboat is or
// what it asked about, so that asking again cannot help: 401 (no valid
// token), 403 (a missing RBAC permission) or 404 (no such pod).
func (e *APIError) Denied() bool {
	return e.Code == http.StatusUnauthorized || e.Code == http.StatusForbidden || e.Code == http.StatusNotFound
}

// IsDenied reports whether err is an *APIError that is Denied.
func IsDenied(err error) bool {
	var ae *APIError
	return errors.As(err, &ae) && ae.Denied()
}

// Pod reads lifeboat's own pod.
func (c *Client) Pod(ctx context.Context) (Pod, error) {
	var obj struct {
		Metadata struct {
			UID         string            `json:"uid"`
			Annotations map[string]string `json:"annotations"`
		} `json:"metadata"`
		Spec struct {
			NodeName                      string `json:"nodeName"`
			TerminationGracePeriodSeconds *int64 `json:"terminationGracePeriodSeconds"`
		} `json:"spec"`
	}
	if err := c.do(ctx, http.MethodGet, c.podPath(), "", nil, PermGetPods, &obj); err != nil {
		return Pod{}, err
	}
	p := Pod{UID: obj.Metadata.UID, Node: obj.Spec.NodeName, Grace: -1, Annotations: obj.Metadata.Annotations}
	if g := obj.Spec.TerminationGracePeriodSeconds; g != nil {
		p.Grace = time.Duration(*g) * time.Second
	}
	return p, nil
}

// Annotate sets the pod's annotations in a (JSON merge) patch: a nil value
// removes the annotation, others are untouched.
func (c *Client) Annotate(ctx context.Context, annotations map[string]*string) error {
	body, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": annotations}})
	if err != nil {
		return err
	}
	return c.do(ctx, http.MethodPatch, c.podPath(), "application/merge-patch+json", body, PermPatchPods, nil)
}

// Event is one event on lifeboat's pod.
type Event struct {
	Type    string // Normal or Warning
	Reason  string // CamelCase, e.g. CheckpointCommitted
	Message string
	At      time.Time // default now
}

// Event types.
const (
	Normal  = "Normal"
	Warning = "Warning"
)

// maxMessage bounds an event's message, as events.k8s.io/v1 does.
const maxMessage = 1024

// CreateEvent records e on the pod (a core/v1 Event). uid is the pod's
// uid (kubectl describe finds events by it) and node its node, both may be
// empty.
func (c *Client) CreateEvent(ctx context.Context, e Event, uid, node string) error {
	if e.At.IsZero() {
		e.At = time.Now()
	}
	msg := e.Message
	if len(msg) > maxMessage {
		msg = msg[:maxMessage-3] + "..."
	}
	ts := e.At.UTC().Format(time.RFC3339)
	prefix := c.cfg.Pod
	if len(prefix) > 200 {
		prefix = prefix[:200]
	}
	obj := map[string]any{
		"apiVersion": "v1",
		"kind":       "Event",
		"metadata": map[string]any{
			"name":      prefix + "." + strconv.FormatInt(e.At.UnixNano(), 16),
			"namespace": c.cfg.Namespace,
		},
		"involvedObject": map[string]any{
			"apiVersion": "v1", "kind": "Pod", "namespace": c.cfg.Namespace, "name": c.cfg.Pod, "uid": uid,
		},
		"reason":             e.Reason,
		"message":            msg,
		"type":               e.Type,
		"firstTimestamp":     ts,
		"lastTimestamp":      ts,
		"count":              1,
		"source":             map[string]any{"component": Component, "host": node},
		"reportingComponent": Component,
		"reportingInstance":  c.cfg.Pod,
	}
	body, err := json.Marshal(obj)
	if err != nil {
		return err
	}
	return c.do(ctx, http.MethodPost, "/api/v1/namespaces/"+url.PathEscape(c.cfg.Namespace)+"/events", "application/json", body, PermCreateEvent, nil)
}

// Component is the reporting component of lifeboat's events.
const Component = "lifeboat"

func (c *Client) podPath() string {
	return "/api/v1/namespaces/" + url.PathEscape(c.cfg.Namespace) + "/pods/" + url.PathEscape(c.cfg.Pod)
}

// do sends one request (retried on connection errors, 429 and 5xx) and
// decodes a 2xx answer into out. Errors never hold the token.
func (c *Client) do(ctx context.Context, method, path, contentType string, body []byte, perm Permission, out any) error {
	what := fmt.Sprintf("kube: %s %s", perm.Verb, c.object(perm))
	tok, err := os.ReadFile(c.cfg.TokenFile)
	if err != nil {
		return fmt.Errorf("%s: read the service-account token: %w", what, err)
	}
	token := strings.TrimSpace(string(tok))
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := retryablehttp.NewRequestWithContext(ctx, method, c.cfg.Server+path, rd)
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Accept", "application/json")
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	if c.cfg.UserAgent != "" {
		req.Header.Set("User-Agent", c.cfg.UserAgent)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return redact(fmt.Errorf("%s: %w", what, err), token)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode/100 != 2 {
		ae := &APIError{Permission: perm, Object: c.object(perm), Code: resp.StatusCode}
		var st struct {
			Reason  string `json:"reason"`
			Message string `json:"message"`
		}
		if json.Unmarshal(b, &st) == nil && st.Message != "" {
			ae.Reason, ae.Message = st.Reason, st.Message
		} else {
			ae.Message = strings.TrimSpace(string(b[:min(len(b), 200)]))
		}
		ae.Message = strings.ReplaceAll(ae.Message, token, redacted)
		return ae
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			return fmt.Errorf("%s: decode the answer: %w", what, err)
		}
	}
	return nil
}

// object is what a request with perm is about.
func (c *Client) object(perm Permission) string {
	if perm.Resource == "events" {
		return "events in namespace " + c.cfg.Namespace
	}
	return "pod " + c.cfg.PodRef()
}

const redacted = "[redacted]"

// redact removes token from err's message.
func redact(err error, token string) error {
	if token == "" || !strings.Contains(err.Error(), token) {
		return err
	}
	return redactedError{msg: strings.ReplaceAll(err.Error(), token, redacted), err: err}
}

type redactedError struct {
	msg string
	err error
}

func (e redactedError) Error() string { return e.msg }

// Unwrap keeps errors.Is working (context.DeadlineExceeded); the wrapped
// error's own message is never printed.
func (e redactedError) Unwrap() error { return e.err }

// CloseIdleConnections closes the connections kept for the next request.
func (c *Client) CloseIdleConnections() { c.hc.HTTPClient.CloseIdleConnections() }
