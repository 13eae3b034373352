package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/lifeboat-project/lifeboat/agent"
	"github.com/lifeboat-project/lifeboat/metrics"
	"github.com/lifeboat-project/lifeboat/notice"
	"github.com/lifeboat-project/lifeboat/signals"
	"github.com/lifeboat-project/lifeboat/supervisor"
)

// observeOptions are the flags for metrics and cloud preemption notices.
type observeOptions struct {
	metricsAddr  string
	notices      string
	noticeSignal string
}

func (o *observeOptions) register(fs *flag.FlagSet, withNotices bool) {
	fs.StringVar(&o.metricsAddr, "metrics-addr", "", "serve Prometheus /metrics and /healthz on this address, e.g. :9090 (empty: off)")
	if withNotices {
		fs.StringVar(&o.notices, "notices", "", "watch cloud preemption notices: aws, gcp and/or url:http://... (comma-separated; empty: off)")
		fs.StringVar(&o.noticeSignal, "notice-signal", "TERM", "signal sent to the trainer on a preemption notice, e.g. USR1 for \"save now\"")
	}
}

// startMetrics serves metrics when asked to; a nil *Metrics records
// nothing, so callers use the result unconditionally.
func (o *observeOptions) startMetrics(ctx context.Context, log *slog.Logger) (*metrics.Metrics, error) {
	if o.metricsAddr == "" {
		return nil, nil
	}
	m := metrics.New(version)
	addr, err := metrics.Serve(ctx, o.metricsAddr, m, log)
	if err != nil {
		return nil, err
	}
	log.Info("metrics.serving", "addr", addr.String())
	return m, nil
}

// watchNotices starts the notice sources and relays their notices to the
// supervisor, counting them. It returns nil when notices are off.
func (o *observeOptions) watchNotices(ctx context.Context, m *metrics.Metrics, log *slog.Logger) (<-chan supervisor.Notice, error) {
	sources, err := notice.ParseSources(o.notices)
	if err != nil || len(sources) == 0 {
		return nil, err
	}
	in, err := notice.Watch(ctx, notice.Config{Sources: sources, Log: log})
	if err != nil {
		return nil, err
	}
	out := make(chan supervisor.Notice, len(sources))
	go func() {
		defer close(out)
		for n := range in {
			m.IncNotice(n.Source)
			out <- supervisor.Notice{Source: n.Source, Deadline: n.Deadline, Detail: n.Detail}
		}
	}()
	return out, nil
}

// noticeSig parses --notice-signal.
func (o *observeOptions) noticeSig() (unix.Signal, error) {
	sig, err := signals.Parse(o.noticeSignal)
	if err != nil {
		return 0, fmt.Errorf("--notice-signal (LIFEBOAT_NOTICE_SIGNAL): %v", err)
	}
	if !signals.Forwardable(sig) {
		return 0, fmt.Errorf("--notice-signal (LIFEBOAT_NOTICE_SIGNAL) is %s, which lifeboat cannot deliver as a notice", signals.Name(sig))
	}
	return sig, nil
}

// feedMetrics copies the agent's figures into m every interval until ctx
// ends. Counters get the increase since the last copy.
func feedMetrics(ctx context.Context, m *metrics.Metrics, p *pipeline, interval time.Duration) {
	if m == nil || p == nil {
		return
	}
	a := p.agent
	var last agent.Stats
	var lastRetries int64
	copyStats := func() {
		s := a.Stats()
		if s.Commits > 0 && (s.LastStep != last.LastStep || !s.LastCommit.Equal(last.LastCommit)) {
			m.SetCheckpoint(s.LastStep, s.LastCommit)
		}
		m.AddUploaded(s.UploadedBytes - last.UploadedBytes)
		m.AddDeduped(s.DedupedBytes - last.DedupedBytes)
		for i := last.Failures; i < s.Failures; i++ {
			m.IncUploadFailure()
		}
		for i := last.Interrupted; i < s.Interrupted; i++ {
			m.IncInterrupted()
		}
		m.SetPending(s.PendingBytes)
		m.SetThroughput(s.Throughput)
		r := p.retries.Load()
		for ; lastRetries < r; lastRetries++ {
			m.IncRetry()
		}
		last = s
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			copyStats()
			return
		case <-t.C:
			copyStats()
		}
	}
}

// graceClock tracks the end of the grace budget for the metric.
type graceClock struct {
	grace time.Duration
	end   atomic.Int64 // Unix ns; 0 before a stop
}

func (g *graceClock) set(end time.Time) { g.end.Store(end.UnixNano()) }

func (g *graceClock) left() time.Duration {
	end := g.end.Load()
	if end == 0 {
		return g.grace
	}
	return max(time.Until(time.Unix(0, end)), 0)
}
