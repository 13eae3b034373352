package notice

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// fast is a Config with a short interval so that no test sleeps long. Its
// request timeout is far above any answer's time on a busy machine: a
// request that timed out would be logged and asked again, and the tests
// count requests and log lines. Those about timeouts set their own.
func fast(sources ...string) Config {
	return Config{Sources: sources, Interval: 10 * time.Millisecond, RequestTimeout: 30 * time.Second}
}

// start runs Watch and returns its channel and a stop function that cancels
// it and returns every notice left on the channel once it is closed.
func start(t *testing.T, cfg Config) (<-chan Notice, func() []Notice) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	ch, err := Watch(ctx, cfg)
	if err != nil {
		cancel()
		t.Fatalf("Watch: %v", err)
	}
	return ch, func() []Notice {
		cancel()
		var rest []Notice
		for n := range ch {
			rest = append(rest, n)
		}
		return rest
	}
}

// guard fires a little before the test binary's -timeout, so that a hang
// fails with a message instead of a goroutine dump. It is not a timing claim.
func guard(t *testing.T) <-chan time.Time {
	t.Helper()
	d, ok := t.Deadline()
	if !ok {
		return nil
	}
	return time.After(time.Until(d) * 9 / 10)
}

func recv(t *testing.T, ch <-chan Notice) Notice {
	t.Helper()
	select {
	case n, ok := <-ch:
		if !ok {
			t.Fatal("channel closed before a notice arrived")
		}
		return n
	case <-guard(t):
		t.Fatal("no notice arrived")
	}
	return Notice{}
}

// recorder is a slog.Handler that keeps records, for checking what is
// logged at which level.
type recorder struct {
	mu      sync.Mutex
	records []string // "LEVEL msg source=... err=..."
	changed chan struct{}
}

func newRecorder() *recorder { return &recorder{changed: make(chan struct{}, 1)} }

type recHandler struct {
	r     *recorder
	attrs []slog.Attr
}

func (h recHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h recHandler) WithGroup(string) slog.Handler            { return h }
func (h recHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return recHandler{r: h.r, attrs: append(append([]slog.Attr(nil), h.attrs...), as...)}
}
func (h recHandler) Handle(_ context.Context, rec slog.Record) error {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s", rec.Level, rec.Message)
	for _, a := range h.attrs {
		fmt.Fprintf(&b, " %s=%v", a.Key, a.Value)
	}
	rec.Attrs(func(a slog.Attr) bool { fmt.Fprintf(&b, " %s=%v", a.Key, a.Value); return true })
	h.r.mu.Lock()
	h.r.records = append(h.r.records, b.String())
	h.r.mu.Unlock()
	select {
	case h.r.changed <- struct{}{}:
	default:
	}
	return nil
}

func (r *recorder) logger() *slog.Logger { return slog.New(recHandler{r: r}) }

// count returns how many records start with prefix and contain sub.
func (r *recorder) count(prefix, sub string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, s := range r.records {
		if strings.HasPrefix(s, prefix) && strings.Contains(s, sub) {
			n++
		}
	}
	return n
}

// waitFor blocks until cond holds.
func (r *recorder) waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	g := guard(t)
	for !cond() {
		select {
		case <-r.changed:
		case <-g:
			t.Fatalf("gave up waiting for %s; log:\n%s", what, strings.Join(r.records, "\n"))
		}
	}
}

// imds is a fake EC2 instance metadata service speaking IMDSv2.
type imds struct {
	mu      sync.Mutex
	puts    int
	gets    int
	tokens  []string                                  // handed out in order
	ttl     string                                    // echoed TTL header, "" for none
	answer  func(get int, token string) (int, string) // status and body of the get-th GET
	badTTLs []string
	// rebalance answers GET events/recommendations/rebalance; nil: 404.
	rebalance  func() (int, string)
	rebalances int // GETs of it
}

func (m *imds) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	m.mu.Lock()
	defer m.mu.Unlock()
	switch {
	case r.Method == http.MethodPut && r.URL.Path == "/latest/api/token":
		if ttl := r.Header.Get("X-aws-ec2-metadata-token-ttl-seconds"); ttl != "21600" {
			m.badTTLs = append(m.badTTLs, ttl)
			http.Error(w, "bad ttl", http.StatusBadRequest)
			return
		}
		tok := m.tokens[min(m.puts, len(m.tokens)-1)]
		m.puts++
		if m.ttl != "" {
			w.Header().Set("X-aws-ec2-metadata-token-ttl-seconds", m.ttl)
		}
		fmt.Fprint(w, tok)
	case r.Method == http.MethodGet && (r.URL.Path == "/latest/meta-data/spot/instance-action" || r.URL.Path == rebalancePath):
		tok := r.Header.Get("X-aws-ec2-metadata-token")
		known := false
		for _, k := range m.tokens[:min(m.puts, len(m.tokens))] {
			known = known || k == tok
		}
		if !known {
			http.Error(w, "", http.StatusUnauthorized)
			return
		}
		if r.URL.Path == rebalancePath {
			m.rebalances++
			if m.rebalance == nil {
				http.NotFound(w, r)
				return
			}
			status, body := m.rebalance()
			w.WriteHeader(status)
			fmt.Fprint(w, body)
			return
		}
		m.gets++
		status, body := m.answer(m.gets, tok)
		w.WriteHeader(status)
		fmt.Fprint(w, body)
	default:
		http.NotFound(w, r)
	}
}

const spotJSON = `{"action": "terminate", "time": "2017-09-18T08:22:00Z"}`

const rebalancePath = "/latest/meta-data/events/recommendations/rebalance"

var spotTime = time.Date(2017, 9, 18, 8, 22, 0, 0, time.UTC)

func TestAWSNoticeAfterSeveral404(t *testing.T) {
	defer goleak.VerifyNone(t)
	m := &imds{tokens: []string{"tok1"}, answer: func(get int, _ string) (int, string) {
		if get <= 3 {
			return http.StatusNotFound, "Not Found"
		}
		return http.StatusOK, spotJSON
	}}
	srv := httptest.NewServer(m)
	defer srv.Close()

	cfg := fast(SourceAWS)
	cfg.AWSEndpoint = srv.URL
	ch, stop := start(t, cfg)
	n := recv(t, ch)
	if rest := stop(); len(rest) != 0 {
		t.Errorf("more notices after the first: %+v", rest)
	}
	want := Notice{Kind: KindPreemption, Source: SourceAWS, Deadline: spotTime, Detail: "terminate"}
	if n != want {
		t.Errorf("notice = %+v, want %+v", n, want)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.puts != 1 || m.gets != 4 || len(m.badTTLs) != 0 {
		t.Errorf("IMDS saw %d token PUTs (want 1), %d GETs (want 4), bad TTL headers %q", m.puts, m.gets, m.badTTLs)
	}
}

func TestAWSTokenRefreshedOn401(t *testing.T) {
	defer goleak.VerifyNone(t)
	m := &imds{tokens: []string{"tok1", "tok2"}}
	m.answer = func(get int, tok string) (int, string) {
		if tok == "tok2" {
			return http.StatusOK, spotJSON
		}
		return http.StatusNotFound, ""
	}
	// tok1 stops being accepted after two GETs, as if IMDS had restarted.
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		m.mu.Lock()
		revoked := m.gets >= 2 && r.Header.Get("X-aws-ec2-metadata-token") == "tok1"
		m.mu.Unlock()
		if revoked && r.Method == http.MethodGet {
			http.Error(w, "", http.StatusUnauthorized)
			return
		}
		m.ServeHTTP(w, r)
	}))
	defer srv.Close()

	cfg := fast(SourceAWS)
	cfg.AWSEndpoint = srv.URL
	ch, stop := start(t, cfg)
	n := recv(t, ch)
	stop()
	if n.Source != SourceAWS || !n.Deadline.Equal(spotTime) {
		t.Errorf("notice = %+v", n)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.puts != 2 {
		t.Errorf("IMDS saw %d token PUTs, want 2 (one refresh after the 401)", m.puts)
	}
}

func TestAWSTokenRefreshedBeforeExpiry(t *testing.T) {
	defer goleak.VerifyNone(t)
	// IMDS accepts both tokens forever; only the second one sees the
	// notice, so it arrives only if the token is renewed on time.
	m := &imds{tokens: []string{"tok1", "tok2"}, ttl: "21600", answer: func(_ int, tok string) (int, string) {
		if tok == "tok2" {
			return http.StatusOK, spotJSON
		}
		return http.StatusNotFound, ""
	}}
	srv := httptest.NewServer(m)
	defer srv.Close()

	// Every reading of the clock moves it an hour on.
	var hours atomic.Int64
	base := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	cfg := fast(SourceAWS)
	cfg.AWSEndpoint = srv.URL
	cfg.Clock = func() time.Time { return base.Add(time.Duration(hours.Add(1)) * time.Hour) }
	ch, stop := start(t, cfg)
	recv(t, ch)
	stop()
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.puts != 2 {
		t.Errorf("IMDS saw %d token PUTs, want 2", m.puts)
	}
	// A 6h token is renewed once the clock passes 6h-1m: on the 7th check.
	if m.gets != 7 {
		t.Errorf("IMDS saw %d GETs, want 6 with tok1 and 1 with tok2", m.gets)
	}
}

// TestAWSRebalanceThenSpotInOneCheck: a rebalance recommendation and an
// interruption notice both present at one check arrive as two notices, the
// recommendation first, and the recommendation is asked for only until it
// has been seen.
func TestAWSRebalanceThenSpotInOneCheck(t *testing.T) {
	defer goleak.VerifyNone(t)
	m := &imds{tokens: []string{"tok1"}, answer: func(get int, _ string) (int, string) {
		if get <= 2 {
			return http.StatusNotFound, ""
		}
		return http.StatusOK, spotJSON
	}}
	m.rebalance = func() (int, string) { return http.StatusOK, `{"noticeTime": "2017-09-18T08:20:00Z"}` }
	srv := httptest.NewServer(m)
	defer srv.Close()

	cfg := fast(SourceAWS)
	cfg.AWSEndpoint = srv.URL
	ch, stop := start(t, cfg)
	first, second := recv(t, ch), recv(t, ch)
	if rest := stop(); len(rest) != 0 {
		t.Errorf("more notices: %+v", rest)
	}
	want := Notice{Kind: KindRebalance, Source: SourceAWS, Issued: time.Date(2017, 9, 18, 8, 20, 0, 0, time.UTC)}
	if first != want {
		t.Errorf("first notice = %+v, want %+v", first, want)
	}
	if second.Kind != KindPreemption || !second.Deadline.Equal(spotTime) {
		t.Errorf("second notice = %+v, want the interruption", second)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.rebalances != 1 || m.gets != 3 {
		t.Errorf("IMDS saw %d rebalance GETs (want 1: not asked again once seen) and %d instance-action GETs (want 3)", m.rebalances, m.gets)
	}
}

// TestAWSBadRebalanceDoesNotHideSpot: a rebalance answer that is not the
// documented JSON is an error, logged, and the interruption notice is
// still watched and delivered.
func TestAWSBadRebalanceDoesNotHideSpot(t *testing.T) {
	defer goleak.VerifyNone(t)
	m := &imds{tokens: []string{"tok1"}, answer: func(get int, _ string) (int, string) {
		if get <= 2 {
			return http.StatusNotFound, ""
		}
		return http.StatusOK, spotJSON
	}}
	m.rebalance = func() (int, string) { return http.StatusOK, "<html>proxy</html>" }
	srv := httptest.NewServer(m)
	defer srv.Close()

	rec := newRecorder()
	cfg := fast(SourceAWS)
	cfg.AWSEndpoint = srv.URL
	cfg.Log = rec.logger()
	ch, stop := start(t, cfg)
	n := recv(t, ch)
	stop()
	if n.Kind != KindPreemption || n.Detail != "terminate" {
		t.Errorf("notice = %+v, want the interruption", n)
	}
	if rec.count("WARN notice.unavailable", "rebalance") != 1 {
		t.Errorf("want the bad rebalance answer logged once at warn; log:\n%s", strings.Join(rec.records, "\n"))
	}
}

func TestGCPFalseThenTrueWithETag(t *testing.T) {
	defer goleak.VerifyNone(t)
	var mu sync.Mutex
	var seen []string // last_etag of each request
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/computeMetadata/v1/instance/preempted" || r.Header.Get("Metadata-Flavor") != "Google" ||
			r.URL.Query().Get("wait_for_change") != "true" {
			http.Error(w, "missing Metadata-Flavor or wait_for_change", http.StatusForbidden)
			return
		}
		mu.Lock()
		etag := r.URL.Query().Get("last_etag")
		seen = append(seen, etag)
		mu.Unlock()
		w.Header().Set("Metadata-Flavor", "Google")
		switch etag {
		case "NONE": // first poll: the current value at once
			w.Header().Set("ETag", "e1")
			fmt.Fprint(w, "FALSE")
		case "e1": // long poll: hold it past RequestTimeout, then the change
			select {
			case <-time.After(50 * time.Millisecond):
			case <-r.Context().Done():
				return
			}
			w.Header().Set("ETag", "e2")
			fmt.Fprint(w, "TRUE")
		default:
			http.Error(w, "unexpected last_etag", http.StatusBadRequest)
		}
	}))
	defer srv.Close()

	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	cfg := fast(SourceGCP)
	cfg.GCPEndpoint = srv.URL
	cfg.RequestTimeout = time.Millisecond // the long poll must not use it
	cfg.Clock = func() time.Time { return now }
	ch, stop := start(t, cfg)
	n := recv(t, ch)
	stop()
	want := Notice{Kind: KindPreemption, Source: SourceGCP, Deadline: now.Add(30 * time.Second), Detail: "preempted"}
	if n != want {
		t.Errorf("notice = %+v, want %+v", n, want)
	}
	mu.Lock()
	defer mu.Unlock()
	if strings.Join(seen, ",") != "NONE,e1" {
		t.Errorf("last_etag sent = %q, want NONE then e1", seen)
	}
}

func TestURLSourceBodies(t *testing.T) {
	deadline := time.Date(2030, 5, 6, 7, 8, 9, 0, time.UTC)
	for _, tc := range []struct {
		name string
		body string
		want Notice
	}{
		{"json", `{"deadline": "2030-05-06T07:08:09Z", "detail": "evicted by job 7"}`,
			Notice{Source: SourceURL, Deadline: deadline, Detail: "evicted by job 7"}},
		{"json without detail", `{"deadline": "2030-05-06T09:08:09+02:00"}`,
			Notice{Source: SourceURL, Deadline: deadline}},
		{"plain", "2030-05-06T07:08:09Z\n", Notice{Source: SourceURL, Deadline: deadline}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			defer goleak.VerifyNone(t)
			var calls atomic.Int64
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				switch calls.Add(1) {
				case 1:
					w.WriteHeader(http.StatusNoContent)
				case 2:
					http.NotFound(w, r)
				default:
					fmt.Fprint(w, tc.body)
				}
			}))
			defer srv.Close()
			ch, stop := start(t, fast("url:"+srv.URL+"/notice"))
			n := recv(t, ch)
			stop()
			if !n.Deadline.Equal(tc.want.Deadline) || n.Kind != KindPreemption || n.Source != tc.want.Source || n.Detail != tc.want.Detail {
				t.Errorf("notice = %+v, want %+v", n, tc.want)
			}
			if c := calls.Load(); c != 3 {
				t.Errorf("%d requests, want 3 (204, 404, notice)", c)
			}
		})
	}
}

func TestDeadServerNoNoticeNoHang(t *testing.T) {
	defer goleak.VerifyNone(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := "http://" + l.Addr().String()
	l.Close()

	rec := newRecorder()
	cfg := fast(SourceAWS, SourceGCP, "url:"+dead+"/notice")
	cfg.AWSEndpoint, cfg.GCPEndpoint = dead, dead
	cfg.Log = rec.logger()
	_, stop := start(t, cfg)
	// Several failed checks per source: the first at warn, later ones at debug.
	for _, src := range []string{"source=aws", "source=gcp", "source=url:"} {
		rec.waitFor(t, "repeated failures of "+src, func() bool { return rec.count("DEBUG notice.unavailable", src) >= 3 })
	}
	if rest := stop(); len(rest) != 0 {
		t.Errorf("notices from a dead server: %+v", rest)
	}
	for _, src := range []string{"source=aws", "source=gcp", "source=url:"} {
		if n := rec.count("WARN notice.unavailable", src); n != 1 {
			t.Errorf("%s: %d warnings, want exactly 1", src, n)
		}
	}
}

func TestSlowServerTimesOut(t *testing.T) {
	defer goleak.VerifyNone(t)
	// The first GETs hang until the client gives up; then the notice.
	var gets atomic.Int64
	release := make(chan struct{})
	defer close(release)
	m := &imds{tokens: []string{"tok"}, answer: func(int, string) (int, string) { return http.StatusOK, spotJSON }}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet && gets.Add(1) <= 4 {
			select {
			case <-r.Context().Done(): // the client's RequestTimeout
			case <-release:
			}
			return
		}
		m.ServeHTTP(w, r)
	}))
	defer srv.Close()

	rec := newRecorder()
	cfg := fast(SourceAWS)
	cfg.AWSEndpoint = srv.URL
	cfg.RequestTimeout = 20 * time.Millisecond
	cfg.Log = rec.logger()
	ch, stop := start(t, cfg)
	n := recv(t, ch)
	stop()
	if n.Source != SourceAWS || n.Detail != "terminate" {
		t.Errorf("notice = %+v", n)
	}
	if rec.count("WARN notice.unavailable", "Timeout") != 1 {
		t.Errorf("want one warning naming the timeout; log:\n%s", strings.Join(rec.records, "\n"))
	}
}

func TestBadBodiesAreErrorsNotNotices(t *testing.T) {
	for _, tc := range []struct {
		name, source string
		bad, good    string
		errText      string
	}{
		{"aws", SourceAWS, `{"action": "terminate", "time": `, spotJSON, "not the documented JSON"},
		{"aws bad time", SourceAWS, `{"action": "stop", "time": "soon"}`, spotJSON, "not RFC 3339"},
		{"gcp", SourceGCP, "MAYBE", "TRUE", "neither TRUE nor FALSE"},
		{"url json", "url", `{"deadline": 12}`, "2030-01-01T00:00:00Z", "not the documented JSON"},
		{"url html", "url", "<html>proxy error</html>", `{"deadline": "2030-01-01T00:00:00Z"}`, "neither"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			defer goleak.VerifyNone(t)
			var calls atomic.Int64
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.Method == http.MethodPut {
					fmt.Fprint(w, "tok")
					return
				}
				if r.URL.Path == rebalancePath {
					http.NotFound(w, r)
					return
				}
				w.Header().Set("ETag", fmt.Sprint(calls.Load()))
				if calls.Add(1) <= 2 {
					fmt.Fprint(w, tc.bad)
					return
				}
				fmt.Fprint(w, tc.good)
			}))
			defer srv.Close()
			src := tc.source
			if src == "url" {
				src = "url:" + srv.URL + "/n"
			}
			rec := newRecorder()
			cfg := fast(src)
			cfg.AWSEndpoint, cfg.GCPEndpoint, cfg.Log = srv.URL, srv.URL, rec.logger()
			ch, stop := start(t, cfg)
			recv(t, ch)
			stop()
			if c := calls.Load(); c != 3 {
				t.Errorf("%d requests, want 3: two bad answers, then the notice", c)
			}
			if rec.count("WARN notice.unavailable", tc.errText) != 1 || rec.count("DEBUG notice.unavailable", tc.errText) != 1 {
				t.Errorf("want the bad body logged once at warn, then at debug, naming %q; log:\n%s", tc.errText, strings.Join(rec.records, "\n"))
			}
		})
	}
}

func TestServerErrorsAreRetried(t *testing.T) {
	defer goleak.VerifyNone(t)
	// go-retryablehttp retries a 503 within one check.
	var calls atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) == 1 {
			http.Error(w, "busy", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprint(w, "2030-01-01T00:00:00Z")
	}))
	defer srv.Close()
	rec := newRecorder()
	cfg := fast("url:" + srv.URL)
	cfg.Log = rec.logger()
	ch, stop := start(t, cfg)
	recv(t, ch)
	stop()
	if rec.count("", "notice.unavailable") != 0 {
		t.Errorf("a 503 answered by a retry should not fail the check; log:\n%s", strings.Join(rec.records, "\n"))
	}
}

func TestSeveralSourcesOneNoticeEach(t *testing.T) {
	defer goleak.VerifyNone(t)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.Method == http.MethodPut:
			fmt.Fprint(w, "tok")
		case r.URL.Path == rebalancePath:
			http.NotFound(w, r)
		case strings.HasPrefix(r.URL.Path, "/latest/"):
			fmt.Fprint(w, spotJSON)
		case strings.HasPrefix(r.URL.Path, "/computeMetadata/"):
			w.Header().Set("ETag", "x")
			fmt.Fprint(w, "TRUE")
		default:
			fmt.Fprint(w, "2030-01-01T00:00:00Z")
		}
	}))
	defer srv.Close()
	cfg := fast(SourceAWS, SourceGCP, "url:"+srv.URL+"/n")
	cfg.AWSEndpoint, cfg.GCPEndpoint = srv.URL, srv.URL
	ch, stop := start(t, cfg)
	got := map[string]int{}
	for range 3 {
		got[recv(t, ch).Source]++
	}
	for _, n := range stop() {
		got[n.Source]++
	}
	if got[SourceAWS] != 1 || got[SourceGCP] != 1 || got[SourceURL] != 1 || len(got) != 3 {
		t.Errorf("notices by source = %v, want one each from aws, gcp, url", got)
	}
}

func TestNoSourcesClosesOnCancel(t *testing.T) {
	defer goleak.VerifyNone(t)
	ch, stop := start(t, Config{})
	if rest := stop(); len(rest) != 0 {
		t.Errorf("notices without sources: %+v", rest)
	}
	if _, ok := <-ch; ok {
		t.Error("channel not closed")
	}
}

func TestParseSources(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    []string
		errText string
	}{
		{"", nil, ""},
		{" aws , gcp ,", []string{"aws", "gcp"}, ""},
		{"url:http://127.0.0.1:9/n,aws", []string{"url:http://127.0.0.1:9/n", "aws"}, ""},
		{"azure", nil, `names "azure": it is not a source`},
		{"url:ftp://x", nil, "scheme must be http"},
		{"url:http://", nil, "no host"},
		{"url:http://user:hunter2@host/n,bogus", nil, ""}, // checked below: the error hides the password
	} {
		got, err := ParseSources(tc.in)
		if tc.in == "url:http://user:hunter2@host/n,bogus" {
			if err == nil || strings.Contains(err.Error(), "hunter2") {
				t.Errorf("ParseSources(%q) error = %v", tc.in, err)
			}
			continue
		}
		if tc.errText != "" {
			var fe *FieldError
			if !errors.As(err, &fe) || fe.Field != FieldSources || !strings.Contains(err.Error(), tc.errText) {
				t.Errorf("ParseSources(%q) error = %v, want a FieldError of %s saying %q", tc.in, err, FieldSources, tc.errText)
			}
			continue
		}
		if err != nil || strings.Join(got, "|") != strings.Join(tc.want, "|") {
			t.Errorf("ParseSources(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
}

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		name    string
		cfg     Config
		errText string
	}{
		{"zero", Config{}, ""},
		{"all", Config{Sources: []string{"aws", "gcp", "url:https://h/p"}}, ""},
		{"unknown", Config{Sources: []string{"aws", "oci"}}, `sources names "oci": it is not a source`},
		{"twice", Config{Sources: []string{"gcp", "gcp"}}, "twice"},
		{"endpoint", Config{AWSEndpoint: "169.254.169.254"}, "AWS metadata endpoint"},
		{"negative", Config{Interval: -time.Second}, "must not be negative"},
	} {
		err := tc.cfg.Validate()
		if (err == nil) != (tc.errText == "") || (err != nil && !strings.Contains(err.Error(), tc.errText)) {
			t.Errorf("%s: Validate() = %v, want error containing %q", tc.name, err, tc.errText)
		}
	}
	if _, err := Watch(context.Background(), Config{Sources: []string{"nope"}}); err == nil {
		t.Error("Watch accepted an invalid config")
	}
}

// TestServerErrorsLoggedWithStatus: a source that answers 500 to every
// try of a check (go-retryablehttp's retries spent) is logged with the
// status and the body it sent, for every kind of source, not only as
// "giving up after 3 attempts".
func TestServerErrorsLoggedWithStatus(t *testing.T) {
	for _, source := range []string{SourceAWS, SourceGCP, "url"} {
		t.Run(source, func(t *testing.T) {
			defer goleak.VerifyNone(t)
			var calls atomic.Int64
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.Method == http.MethodPut {
					fmt.Fprint(w, "tok")
					return
				}
				if r.URL.Path == rebalancePath {
					http.NotFound(w, r)
					return
				}
				if calls.Add(1) <= retryMax+1 {
					http.Error(w, "metadata backend down", http.StatusInternalServerError)
					return
				}
				if source == SourceGCP {
					fmt.Fprint(w, "TRUE")
					return
				}
				if source == SourceAWS {
					fmt.Fprint(w, spotJSON)
					return
				}
				fmt.Fprint(w, "2030-01-01T00:00:00Z")
			}))
			defer srv.Close()
			src := source
			if src == "url" {
				src = "url:" + srv.URL + "/n"
			}
			rec := newRecorder()
			cfg := fast(src)
			cfg.AWSEndpoint, cfg.GCPEndpoint, cfg.Log = srv.URL, srv.URL, rec.logger()
			ch, stop := start(t, cfg)
			recv(t, ch)
			stop()
			if rec.count("WARN notice.unavailable", "500 Internal Server Error") != 1 || rec.count("", "metadata backend down") != 1 {
				t.Errorf("want the 500 logged once with its status and body; log:\n%s", strings.Join(rec.records, "\n"))
			}
		})
	}
}
