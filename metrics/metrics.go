package metrics

import (
	"math"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"golang.org/x/sys/unix"
)

// Other is the label value recorded for a notice source, restart reason or
// resume source outside its fixed set.
const Other = "other"

// Label values accepted by IncNotice, IncRebalance, IncRestart and SetResume; anything
// else becomes Other.
var (
	// NoticeSources are notice.Notice's sources, plus "signal" for each
	// stop signal received (the kubelet's TERM is the pod's notice).
	NoticeSources = []string{"aws", "gcp", "url", "signal"}
	// RebalanceSources are the notice sources that give rebalance
	// recommendations.
	RebalanceSources = []string{"aws"}
	// RestartReasons say why a trainer was restarted: it exited with a
	// non-zero code, was killed by a signal, or by the OOM killer (which
	// counts as oom, not signal).
	RestartReasons = []string{"exit_code", "signal", "oom"}
	// ResumeSources say where a resumed checkpoint came from: restored from
	// the store by lifeboat, by an init container (lifeboat restore), found
	// already in the directory, or none (a fresh start).
	ResumeSources = []string{"store", "init", "local", "none"}
)

// Clock returns the current time.
type Clock func() time.Time

// Option configures New.
type Option func(*Metrics)

// WithClock sets the clock used for the checkpoint age (tests). Default
// time.Now.
func WithClock(c Clock) Option { return func(m *Metrics) { m.clock = c } }

// Metrics is lifeboat's metrics in their own registry. It is safe for
// concurrent use; a nil *Metrics records nothing.
type Metrics struct {
	reg   *prometheus.Registry
	clock Clock
	start time.Time

	ready atomic.Bool

	mu         sync.Mutex
	lastCommit time.Time // zero before any

	uploaded, deduped atomic.Int64

	readyGauge     prometheus.Gauge
	lastStep       prometheus.Gauge
	lastCommitTS   prometheus.Gauge
	uploadedBytes  prometheus.Counter
	dedupedBytes   prometheus.Counter
	pendingBytes   prometheus.Gauge
	throughput     prometheus.Gauge
	retries        prometheus.Counter
	failures       prometheus.Counter
	interrupted    prometheus.Counter
	torn           prometheus.Counter
	notices        *prometheus.CounterVec
	rebalances     *prometheus.CounterVec
	restarts       *prometheus.CounterVec
	oomKills       prometheus.Counter
	resumeStep     *prometheus.GaugeVec
	freshOver      prometheus.Gauge
	resumeDuration *prometheus.GaugeVec
	grace          *graceBudget
}

// New returns Metrics for a lifeboat of the given version, with every
// series present from the start (counters at 0, labelled ones for each
// value of their fixed set).
func New(version string, opts ...Option) *Metrics {
	m := &Metrics{reg: prometheus.NewRegistry(), clock: time.Now}
	for _, o := range opts {
		o(m)
	}
	m.start = m.clock()

	gauge := func(name, help string) prometheus.Gauge {
		return prometheus.NewGauge(prometheus.GaugeOpts{Name: name, Help: help})
	}
	counter := func(name, help string) prometheus.Counter {
		return prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help})
	}
	buildInfo := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "lifeboat_build_info",
		Help: "Always 1; the labels say which lifeboat and Go built it.",
	}, []string{"version", "goversion"})
	buildInfo.WithLabelValues(version, runtime.Version()).Set(1)

	m.readyGauge = gauge("lifeboat_ready", "1 when lifeboat reports ready on /healthz, else 0.")
	m.lastStep = gauge("lifeboat_checkpoint_last_step", "Step of the last committed checkpoint; -1 before any.")
	m.lastStep.Set(-1)
	m.lastCommitTS = gauge("lifeboat_checkpoint_last_commit_timestamp_seconds", "When the last checkpoint was committed, in seconds since the Unix epoch; 0 before any.")
	age := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "lifeboat_checkpoint_age_seconds",
		Help: "Seconds since the last checkpoint was committed (since lifeboat started, before any), at scrape time.",
	}, m.checkpointAge)
	m.uploadedBytes = counter("lifeboat_upload_bytes_total", "Checkpoint chunk bytes uploaded to the store.")
	m.dedupedBytes = counter("lifeboat_upload_deduped_bytes_total", "Checkpoint chunk bytes not uploaded because the store already had them.")
	ratio := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "lifeboat_upload_dedupe_ratio",
		Help: "Share of checkpoint bytes the store already had: deduped / (uploaded + deduped); 0 before any.",
	}, m.dedupeRatio)
	m.pendingBytes = gauge("lifeboat_upload_pending_bytes", "Size of the checkpoint being uploaded; 0 when none is.")
	m.throughput = gauge("lifeboat_upload_throughput_bytes_per_second", "Measured upload throughput of new data.")
	m.retries = counter("lifeboat_upload_retries_total", "Storage operations retried.")
	m.failures = counter("lifeboat_upload_failures_total", "Checkpoint uploads that failed.")
	m.interrupted = counter("lifeboat_checkpoints_interrupted_total", "Checkpoints never stored because their save was cut short (a writer died mid-save, a format check found a file torn, or a file lifeboat may not read).")
	m.torn = counter("lifeboat_commits_torn_total", "Commits found torn afterwards: a file of the commit grew with the committed bytes at its start, so it was committed while still being written; the revision is marked never to restore.")
	m.notices = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "lifeboat_preemption_notices_total",
		Help: "Preemption notices received, by source: one per cloud notice (aws, gcp, url, other) and one per stop signal received (signal).",
	}, []string{"source"})
	m.rebalances = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "lifeboat_rebalance_recommendations_total",
		Help: "Rebalance recommendations received (the machine is at elevated risk of interruption, not yet going away), by source (aws, other).",
	}, []string{"source"})
	m.restarts = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "lifeboat_trainer_restarts_total",
		Help: "Trainer restarts in place, by how the trainer ended (exit_code, signal, oom, other).",
	}, []string{"reason"})
	m.oomKills = counter("lifeboat_trainer_oom_kills_total", "Trainer processes killed by the kernel's OOM killer.")
	m.resumeStep = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "lifeboat_resume_step",
		Help: "Step the trainer resumed from when lifeboat started (-1 for a fresh start), by where the checkpoint came from (store, init, local, none, other).",
	}, []string{"source"})
	m.freshOver = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "lifeboat_fresh_start_over_progress",
		Help: "1 when the trainer started from scratch although the store holds a complete checkpoint it did not restore (too big, another world size, restoring turned off), else 0.",
	})
	m.resumeDuration = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "lifeboat_resume_duration_seconds",
		Help: "How long the resume (restore before the trainer started) took, by where the checkpoint came from.",
	}, []string{"source"})
	m.grace = &graceBudget{clock: m.clock, desc: prometheus.NewDesc("lifeboat_grace_budget_left_seconds",
		"Seconds left of the grace budget, at scrape time: the whole grace period until a stop begins, then counting down to 0 at its end.", nil, nil)}

	for _, s := range append(NoticeSources, Other) {
		m.notices.WithLabelValues(s)
	}
	for _, s := range append(RebalanceSources, Other) {
		m.rebalances.WithLabelValues(s)
	}
	for _, r := range append(RestartReasons, Other) {
		m.restarts.WithLabelValues(r)
	}

	m.reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		buildInfo, m.readyGauge, m.lastStep, m.lastCommitTS, age,
		m.uploadedBytes, m.dedupedBytes, ratio, m.pendingBytes, m.throughput,
		m.retries, m.failures, m.interrupted, m.torn, m.notices, m.rebalances, m.restarts, m.oomKills,
		m.resumeStep, m.resumeDuration, m.freshOver, m.grace,
	)
	return m
}

// Registry returns the registry holding the metrics, for a caller that
// wants to add its own collectors.
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// SetCheckpoint records the last committed checkpoint: its step and when it
// was committed (a zero at means now).
func (m *Metrics) SetCheckpoint(step int64, at time.Time) {
	if m == nil {
		return
	}
	if at.IsZero() {
		at = m.clock()
	}
	m.mu.Lock()
	m.lastCommit = at
	m.mu.Unlock()
	m.lastStep.Set(float64(step))
	m.lastCommitTS.Set(float64(at.UnixNano()) / 1e9)
}

// AddUploaded counts chunk bytes uploaded. Negative values are ignored.
func (m *Metrics) AddUploaded(bytes int64) {
	if m == nil || bytes <= 0 {
		return
	}
	m.uploaded.Add(bytes)
	m.uploadedBytes.Add(float64(bytes))
}

// AddDeduped counts chunk bytes the store already had. Negative values are
// ignored.
func (m *Metrics) AddDeduped(bytes int64) {
	if m == nil || bytes <= 0 {
		return
	}
	m.deduped.Add(bytes)
	m.dedupedBytes.Add(float64(bytes))
}

// SetPending records the size of the checkpoint being uploaded (0: none).
func (m *Metrics) SetPending(bytes int64) {
	if m == nil {
		return
	}
	m.pendingBytes.Set(float64(max(bytes, 0)))
}

// SetThroughput records the measured upload throughput.
func (m *Metrics) SetThroughput(bytesPerSecond float64) {
	if m == nil || math.IsNaN(bytesPerSecond) || bytesPerSecond < 0 {
		return
	}
	m.throughput.Set(bytesPerSecond)
}

// IncRetry counts one retried storage operation.
func (m *Metrics) IncRetry() {
	if m == nil {
		return
	}
	m.retries.Inc()
}

// IncUploadFailure counts one failed checkpoint upload.
func (m *Metrics) IncUploadFailure() {
	if m == nil {
		return
	}
	m.failures.Inc()
}

// IncTorn counts one commit found torn afterwards.
func (m *Metrics) IncTorn() {
	if m == nil {
		return
	}
	m.torn.Inc()
}

// IncInterrupted counts one checkpoint recognised as an interrupted save.
func (m *Metrics) IncInterrupted() {
	if m == nil {
		return
	}
	m.interrupted.Inc()
}

// IncNotice counts one preemption notice from source, one of
// NoticeSources; any other value is counted as Other.
func (m *Metrics) IncNotice(source string) {
	if m == nil {
		return
	}
	m.notices.WithLabelValues(normalize(source, NoticeSources)).Inc()
}

// IncStopSignal counts a stop signal received (the kubelet's TERM is the
// pod's preemption notice) as a notice from source "signal"; it is the
// supervisor's Observer.StopSignal.
func (m *Metrics) IncStopSignal(unix.Signal) { m.IncNotice("signal") }

// IncRebalance counts one rebalance recommendation from source, one of
// RebalanceSources; any other value is counted as Other.
func (m *Metrics) IncRebalance(source string) {
	if m == nil {
		return
	}
	m.rebalances.WithLabelValues(normalize(source, RebalanceSources)).Inc()
}

// SetGrace sets the grace period (the pod's terminationGracePeriodSeconds
// as lifeboat budgets it): lifeboat_grace_budget_left_seconds, absent
// until then, reports it until a stop begins.
func (m *Metrics) SetGrace(d time.Duration) {
	if m == nil {
		return
	}
	m.grace.period.Store(int64(d))
	m.grace.set.Store(true)
}

// SetGraceEnd says a stop began, or its deadline moved: the grace budget
// ends at end, and lifeboat_grace_budget_left_seconds counts down to 0
// there. lifeboat run calls it from the supervisor's Observer.Stopping.
func (m *Metrics) SetGraceEnd(end time.Time) {
	if m == nil {
		return
	}
	m.grace.end.Store(end.UnixNano())
}

// IncRestart counts one trainer restart for reason, one of RestartReasons;
// any other value is counted as Other.
func (m *Metrics) IncRestart(reason string) {
	if m == nil {
		return
	}
	m.restarts.WithLabelValues(normalize(reason, RestartReasons)).Inc()
}

// SetResume records the resume: where the checkpoint came from (one of
// ResumeSources, else Other), its step (-1 for none) and how long it took.
// A later call replaces the earlier one.
func (m *Metrics) SetResume(source string, step int64, seconds float64) {
	if m == nil {
		return
	}
	s := normalize(source, ResumeSources)
	m.resumeStep.Reset()
	m.resumeDuration.Reset()
	m.resumeStep.WithLabelValues(s).Set(float64(step))
	if !math.IsNaN(seconds) && seconds >= 0 {
		m.resumeDuration.WithLabelValues(s).Set(seconds)
	}
}

// SetFreshStartOverProgress says whether the trainer started from scratch
// beside restorable progress in the store.
func (m *Metrics) SetFreshStartOverProgress(yes bool) {
	if m == nil {
		return
	}
	v := 0.0
	if yes {
		v = 1
	}
	m.freshOver.Set(v)
}

// IncOOMKill counts one trainer process killed by the OOM killer.
func (m *Metrics) IncOOMKill() {
	if m == nil {
		return
	}
	m.oomKills.Inc()
}

// SetReady sets what /healthz reports: 200 when ready, 503 otherwise.
func (m *Metrics) SetReady(ready bool) {
	if m == nil {
		return
	}
	m.ready.Store(ready)
	if ready {
		m.readyGauge.Set(1)
	} else {
		m.readyGauge.Set(0)
	}
}

// Handler serves /metrics (the registry, in any format Prometheus asks
// for) and /healthz ("ok" with 200 when ready, 503 otherwise).
func (m *Metrics) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{
		Registry:            m.reg, // promhttp_metric_handler_errors_total
		ErrorHandling:       promhttp.ContinueOnError,
		MaxRequestsInFlight: 4,
	}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		if !m.ready.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write([]byte("not ready\n"))
			return
		}
		_, _ = w.Write([]byte("ok\n"))
	})
	return mux
}

func (m *Metrics) checkpointAge() float64 {
	m.mu.Lock()
	since := m.lastCommit
	m.mu.Unlock()
	if since.IsZero() {
		since = m.start
	}
	return max(m.clock().Sub(since).Seconds(), 0)
}

func (m *Metrics) dedupeRatio() float64 {
	u, d := m.uploaded.Load(), m.deduped.Load()
	if u+d <= 0 {
		return 0
	}
	return float64(d) / float64(u+d)
}

// normalize returns v when it is in allowed (ignoring case and surrounding
// space), else Other.
func normalize(v string, allowed []string) string {
	v = strings.ToLower(strings.TrimSpace(v))
	for _, a := range allowed {
		if v == a {
			return a
		}
	}
	return Other
}

// graceBudget is lifeboat_grace_budget_left_seconds: absent until the
// grace period is set, then the whole period until a stop begins, then the
// time left to the stop's end (0 after it), computed at each scrape.
type graceBudget struct {
	desc   *prometheus.Desc
	clock  Clock
	set    atomic.Bool
	period atomic.Int64 // the grace period, ns
	end    atomic.Int64 // the stop's end, Unix ns; 0 before a stop
}

var _ prometheus.Collector = (*graceBudget)(nil)

func (g *graceBudget) Describe(ch chan<- *prometheus.Desc) { ch <- g.desc }

func (g *graceBudget) Collect(ch chan<- prometheus.Metric) {
	if !g.set.Load() {
		return
	}
	left := time.Duration(g.period.Load())
	if end := g.end.Load(); end != 0 {
		left = max(time.Unix(0, end).Sub(g.clock()), 0)
	}
	ch <- prometheus.MustNewConstMetric(g.desc, prometheus.GaugeValue, left.Seconds())
}
