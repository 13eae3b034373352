package metrics

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"go.uber.org/goleak"
	"golang.org/x/sys/unix"
)

// fakeClock is a clock the test moves.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *fakeClock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// client never keeps connections, so that nothing outlives a test.
var client = &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}

// serve starts Serve on a free loopback port; the returned stop ends it.
func serve(t *testing.T, m *Metrics) (string, func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	addr, err := Serve(ctx, "127.0.0.1:0", m, nil)
	if err != nil {
		cancel()
		t.Fatalf("Serve: %v", err)
	}
	return "http://" + addr.String(), cancel
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := client.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: read: %v", url, err)
	}
	return resp.StatusCode, string(b)
}

// scrape fetches /metrics in the text format and parses it.
func scrape(t *testing.T, base string) (map[string]*dto.MetricFamily, string) {
	t.Helper()
	status, body := get(t, base+"/metrics")
	if status != http.StatusOK {
		t.Fatalf("GET /metrics: status %d: %s", status, body)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		t.Fatalf("parse /metrics: %v\n%s", err, body)
	}
	return fams, body
}

// value returns the value of the series of name whose labels include
// labels (name=value pairs), and whether there is one.
func value(fams map[string]*dto.MetricFamily, name string, labels ...string) (float64, bool) {
	f, ok := fams[name]
	if !ok {
		return 0, false
	}
next:
	for _, m := range f.GetMetric() {
		for i := 0; i+1 < len(labels); i += 2 {
			found := false
			for _, lp := range m.GetLabel() {
				found = found || (lp.GetName() == labels[i] && lp.GetValue() == labels[i+1])
			}
			if !found {
				continue next
			}
		}
		switch {
		case m.Gauge != nil:
			return m.GetGauge().GetValue(), true
		case m.Counter != nil:
			return m.GetCounter().GetValue(), true
		case m.Untyped != nil:
			return m.GetUntyped().GetValue(), true
		}
	}
	return 0, false
}

func want(t *testing.T, fams map[string]*dto.MetricFamily, name string, w float64, labels ...string) {
	t.Helper()
	got, ok := value(fams, name, labels...)
	if !ok {
		t.Errorf("%s%v: absent, want %v", name, labels, w)
		return
	}
	if got != w {
		t.Errorf("%s%v = %v, want %v", name, labels, got, w)
	}
}

var names = []string{
	"lifeboat_build_info", "lifeboat_ready",
	"lifeboat_checkpoint_last_step", "lifeboat_checkpoint_last_commit_timestamp_seconds", "lifeboat_checkpoint_age_seconds",
	"lifeboat_upload_bytes_total", "lifeboat_upload_deduped_bytes_total", "lifeboat_upload_dedupe_ratio",
	"lifeboat_upload_pending_bytes", "lifeboat_upload_throughput_bytes_per_second",
	"lifeboat_upload_retries_total", "lifeboat_upload_failures_total", "lifeboat_checkpoints_interrupted_total",
	"lifeboat_commits_torn_total", "lifeboat_preemption_notices_total", "lifeboat_trainer_restarts_total", "lifeboat_trainer_oom_kills_total",
}

func TestScrapeValuesMove(t *testing.T) {
	defer goleak.VerifyNone(t)
	clk := &fakeClock{now: time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)}
	m := New("1.2.3", WithClock(clk.Now))
	base, stop := serve(t, m)
	defer stop()

	fams, body := scrape(t, base)
	for _, n := range names {
		f, ok := fams[n]
		if !ok {
			t.Errorf("%s missing from a fresh scrape", n)
			continue
		}
		if len(strings.TrimSpace(f.GetHelp())) < 10 {
			t.Errorf("%s has no real HELP text: %q", n, f.GetHelp())
		}
	}
	want(t, fams, "lifeboat_build_info", 1, "version", "1.2.3")
	want(t, fams, "lifeboat_checkpoint_last_step", -1)
	want(t, fams, "lifeboat_checkpoint_age_seconds", 0)
	want(t, fams, "lifeboat_upload_dedupe_ratio", 0)
	want(t, fams, "lifeboat_preemption_notices_total", 0, "source", "gcp")
	want(t, fams, "lifeboat_trainer_restarts_total", 0, "reason", "oom")
	if _, ok := fams["lifeboat_grace_budget_left_seconds"]; ok {
		t.Error("lifeboat_grace_budget_left_seconds present before SetGrace")
	}
	if _, ok := fams["go_goroutines"]; !ok {
		t.Error("the Go collector is missing")
	}
	problems, err := promlint.New(strings.NewReader(body)).Lint()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		if strings.HasPrefix(p.Metric, "lifeboat_") {
			t.Errorf("promlint: %s: %s", p.Metric, p.Text)
		}
	}

	// Before any checkpoint the age counts from the start.
	clk.Add(30 * time.Second)
	fams, _ = scrape(t, base)
	want(t, fams, "lifeboat_checkpoint_age_seconds", 30)

	committed := clk.Now()
	m.SetCheckpoint(100, committed)
	clk.Add(90 * time.Second)
	m.AddUploaded(300)
	m.AddDeduped(100)
	m.SetPending(4096)
	m.SetThroughput(1.5e6)
	m.IncRetry()
	m.IncRetry()
	m.IncUploadFailure()
	m.IncInterrupted()
	m.IncNotice("aws")
	m.IncNotice("GCP ")
	m.IncStopSignal(unix.SIGTERM)
	m.IncStopSignal(unix.SIGINT)
	m.IncRestart("oom")
	m.IncOOMKill()
	m.SetResume("store", 90, 2.5)
	m.SetGrace(time.Minute)
	fams, _ = scrape(t, base)
	want(t, fams, "lifeboat_grace_budget_left_seconds", 60) // the whole grace until a stop begins
	m.SetGraceEnd(clk.Now().Add(12 * time.Second))

	fams, _ = scrape(t, base)
	want(t, fams, "lifeboat_checkpoint_last_step", 100)
	want(t, fams, "lifeboat_checkpoint_last_commit_timestamp_seconds", float64(committed.Unix()))
	want(t, fams, "lifeboat_checkpoint_age_seconds", 90)
	want(t, fams, "lifeboat_upload_bytes_total", 300)
	want(t, fams, "lifeboat_upload_deduped_bytes_total", 100)
	want(t, fams, "lifeboat_upload_dedupe_ratio", 0.25)
	want(t, fams, "lifeboat_upload_pending_bytes", 4096)
	want(t, fams, "lifeboat_upload_throughput_bytes_per_second", 1.5e6)
	want(t, fams, "lifeboat_upload_retries_total", 2)
	want(t, fams, "lifeboat_upload_failures_total", 1)
	want(t, fams, "lifeboat_checkpoints_interrupted_total", 1)
	want(t, fams, "lifeboat_preemption_notices_total", 1, "source", "aws")
	want(t, fams, "lifeboat_preemption_notices_total", 1, "source", "gcp")
	want(t, fams, "lifeboat_preemption_notices_total", 2, "source", "signal")
	want(t, fams, "lifeboat_trainer_restarts_total", 1, "reason", "oom")
	want(t, fams, "lifeboat_trainer_oom_kills_total", 1)
	want(t, fams, "lifeboat_resume_step", 90, "source", "store")
	want(t, fams, "lifeboat_resume_duration_seconds", 2.5, "source", "store")
	want(t, fams, "lifeboat_grace_budget_left_seconds", 12)

	// The age keeps growing at scrape time, the next commit resets it, and
	// the ratio follows new bytes.
	clk.Add(time.Hour)
	fams, _ = scrape(t, base)
	want(t, fams, "lifeboat_checkpoint_age_seconds", 3690)
	m.SetCheckpoint(200, clk.Now())
	m.AddUploaded(600)
	m.SetPending(0)
	m.SetResume("local", 200, 0.5)
	clk.Add(5 * time.Second)
	fams, _ = scrape(t, base)
	want(t, fams, "lifeboat_checkpoint_last_step", 200)
	want(t, fams, "lifeboat_checkpoint_age_seconds", 5)
	want(t, fams, "lifeboat_upload_dedupe_ratio", 0.1)
	want(t, fams, "lifeboat_upload_pending_bytes", 0)
	want(t, fams, "lifeboat_resume_step", 200, "source", "local")
	if _, ok := value(fams, "lifeboat_resume_step", "source", "store"); ok {
		t.Error("SetResume left the earlier source's series behind")
	}
}

func TestHealthz(t *testing.T) {
	defer goleak.VerifyNone(t)
	m := New("dev")
	base, stop := serve(t, m)
	defer stop()
	if status, body := get(t, base+"/healthz"); status != http.StatusServiceUnavailable {
		t.Errorf("/healthz before ready: %d %q, want 503", status, body)
	}
	m.SetReady(true)
	if status, body := get(t, base+"/healthz"); status != http.StatusOK || strings.TrimSpace(body) != "ok" {
		t.Errorf("/healthz when ready: %d %q, want 200 ok", status, body)
	}
	fams, _ := scrape(t, base)
	want(t, fams, "lifeboat_ready", 1)
	m.SetReady(false)
	if status, _ := get(t, base+"/healthz"); status != http.StatusServiceUnavailable {
		t.Errorf("/healthz after SetReady(false): %d, want 503", status)
	}
	if status, _ := get(t, base+"/nope"); status != http.StatusNotFound {
		t.Errorf("/nope: %d, want 404", status)
	}
}

func TestLabelsOnlyFromFixedSets(t *testing.T) {
	defer goleak.VerifyNone(t)
	m := New("v1")
	base, stop := serve(t, m)
	defer stop()
	secretish := []string{
		"AKIAIOSFODNN7EXAMPLE", "url:http://user:hunter2@host/n?token=abc", "/ckpt/step-100",
		"wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", "", "aws\n", "aws,gcp", strings.Repeat("x", 10000),
	}
	for _, s := range secretish {
		m.IncNotice(s)
		m.IncRestart(s)
		m.SetResume(s, 1, 1)
	}
	fams, body := scrape(t, base)
	allowed := map[string][]string{
		"source": append(append(append([]string{}, NoticeSources...), ResumeSources...), Other),
		"reason": append(append([]string{}, RestartReasons...), Other),
	}
	for name, f := range fams {
		if !strings.HasPrefix(name, "lifeboat_") || name == "lifeboat_build_info" {
			continue
		}
		for _, s := range f.GetMetric() {
			for _, lp := range s.GetLabel() {
				ok := false
				for _, a := range allowed[lp.GetName()] {
					ok = ok || a == lp.GetValue()
				}
				if !ok {
					t.Errorf("%s has label %s=%q outside its fixed set", name, lp.GetName(), lp.GetValue())
				}
			}
		}
	}
	for _, s := range []string{"hunter2", "AKIA", "EXAMPLEKEY", "/ckpt"} {
		if strings.Contains(body, s) {
			t.Errorf("/metrics contains %q", s)
		}
	}
	want(t, fams, "lifeboat_preemption_notices_total", float64(len(secretish)-1), "source", "other") // "aws\n" is aws
	want(t, fams, "lifeboat_preemption_notices_total", 1, "source", "aws")
	want(t, fams, "lifeboat_trainer_restarts_total", float64(len(secretish)), "reason", "other")
}

func TestOddInputsNeverPanic(t *testing.T) {
	defer goleak.VerifyNone(t)
	var nilM *Metrics
	nilM.SetCheckpoint(1, time.Now())
	nilM.AddUploaded(1)
	nilM.AddDeduped(1)
	nilM.SetPending(1)
	nilM.SetThroughput(1)
	nilM.IncRetry()
	nilM.IncUploadFailure()
	nilM.IncNotice("aws")
	nilM.IncStopSignal(unix.SIGTERM)
	nilM.SetGrace(time.Minute)
	nilM.SetGraceEnd(time.Now())
	nilM.IncRestart("oom")
	nilM.SetResume("store", 1, 1)
	nilM.IncOOMKill()
	nilM.SetReady(true)

	m := New("v1")
	m.AddUploaded(-5) // a counter would panic on a negative Add
	m.AddDeduped(-5)
	m.SetPending(-1)
	m.SetThroughput(-1)
	m.SetGrace(time.Minute)
	m.SetGraceEnd(time.Now().Add(-time.Second)) // past: 0, not negative
	base, stop := serve(t, m)
	defer stop()
	fams, _ := scrape(t, base)
	want(t, fams, "lifeboat_upload_bytes_total", 0)
	want(t, fams, "lifeboat_upload_pending_bytes", 0)
	want(t, fams, "lifeboat_grace_budget_left_seconds", 0)
	want(t, fams, "lifeboat_checkpoint_last_step", -1)
}

func TestServeBadAddress(t *testing.T) {
	defer goleak.VerifyNone(t)
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	for _, addr := range []string{"nonsense", "127.0.0.1:99999", taken.Addr().String()} {
		_, err := Serve(context.Background(), addr, New("v1"), nil)
		if err == nil || !strings.Contains(err.Error(), addr) {
			t.Errorf("Serve(%q) error = %v, want one naming the address", addr, err)
		}
	}
	if _, err := Serve(context.Background(), "127.0.0.1:0", nil, nil); err == nil {
		t.Error("Serve accepted a nil *Metrics")
	}
}

func TestServeStopsWhenContextEnds(t *testing.T) {
	defer goleak.VerifyNone(t)
	ctx, cancel := context.WithCancel(context.Background())
	addr, err := Serve(ctx, "127.0.0.1:0", New("v1"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if status, _ := get(t, "http://"+addr.String()+"/metrics"); status != http.StatusOK {
		t.Fatalf("/metrics: %d", status)
	}
	cancel()
	// The listener closes once the shutdown has run; goleak then checks
	// that the serving goroutines are gone.
	var guard <-chan time.Time
	if d, ok := t.Deadline(); ok {
		guard = time.After(time.Until(d) * 9 / 10)
	}
	for {
		c, err := net.Dial("tcp", addr.String())
		if errors.Is(err, syscall.ECONNREFUSED) {
			break
		}
		if err == nil {
			c.Close()
		}
		select {
		case <-guard:
			t.Fatal("still listening after ctx ended")
		case <-time.After(10 * time.Millisecond):
		}
	}
}
