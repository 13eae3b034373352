package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"time"

	"golang.org/x/sys/unix"

	"github.com/lifeboat-project/lifeboat/metrics"
	"github.com/lifeboat-project/lifeboat/notice"
	"github.com/lifeboat-project/lifeboat/signals"
	"github.com/lifeboat-project/lifeboat/supervisor"
)

// observeOptions are the flags for metrics and cloud preemption notices.
type observeOptions struct {
	metricsAddr    string
	notices        string
	noticeSignal   string
	noticeInterval time.Duration
	onRebalance    bool

	stopSignals func() string // the command's --stop-signals, once parsed
	rebalance   unix.Signal   // what a rebalance recommendation sends; 0: nothing
}

func (o *observeOptions) register(fs *flag.FlagSet, withNotices bool) {
	fs.StringVar(&o.metricsAddr, "metrics-addr", "", "serve Prometheus /metrics and /healthz on this address, e.g. :9090 (empty: off)")
	if withNotices {
		fs.StringVar(&o.notices, "notices", "", "watch cloud preemption notices: aws, gcp and/or url:http://... (comma-separated; empty: off)")
		fs.StringVar(&o.noticeSignal, "notice-signal", "TERM", "signal sent to the trainer on a preemption notice, e.g. USR1 for \"save now\"")
		fs.DurationVar(&o.noticeInterval, "notice-interval", notice.DefaultInterval, "how often the aws and url notice sources are asked")
		fs.BoolVar(&o.onRebalance, "notice-on-rebalance", false,
			"on an AWS rebalance recommendation also send --notice-signal (not a stop signal: e.g. USR1) so the trainer saves early; no stop begins (without it: logged and counted)")
		o.stopSignals = func() string {
			if f := fs.Lookup("stop-signals"); f != nil {
				return f.Value.String()
			}
			return ""
		}
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
		return nil, fmt.Errorf("--metrics-addr (LIFEBOAT_METRICS_ADDR): %w; set it to a free host:port", err)
	}
	log.Info("metrics.serving", "addr", addr.String())
	return m, nil
}

// watchNotices starts the notice sources (their endpoints as the cloud
// SDKs' variables say) and relays their preemption notices to the
// supervisor, counting them; rebalance recommendations are handled here
// (see rebalanced). It returns nil when notices are off.
func (o *observeOptions) watchNotices(ctx context.Context, m *metrics.Metrics, log *slog.Logger) (<-chan supervisor.Notice, error) {
	sources, err := notice.ParseSources(o.notices)
	if err != nil || len(sources) == 0 {
		return nil, noticeError(err)
	}
	cfg := notice.Config{Sources: sources, Interval: o.noticeInterval, Log: log}
	if err := cfg.ReadEnv(os.Getenv); err != nil {
		return nil, err
	}
	in, err := notice.Watch(ctx, cfg)
	if err != nil {
		return nil, noticeError(err)
	}
	started := time.Now()
	out := make(chan supervisor.Notice, len(sources))
	go func() {
		defer close(out)
		for n := range in {
			if n.Kind == notice.KindRebalance {
				o.rebalanced(n, started, m, log)
				continue
			}
			m.IncNotice(n.Source)
			out <- supervisor.Notice{Source: n.Source, Deadline: n.Deadline, Detail: n.Detail}
		}
	}()
	return out, nil
}

// noticeError names --notices (LIFEBOAT_NOTICES) in notice's
// *notice.FieldError; other errors are returned as they are.
func noticeError(err error) error {
	var fe *notice.FieldError
	if !errors.As(err, &fe) {
		return err
	}
	return fmt.Errorf("--notices (LIFEBOAT_NOTICES) names %q: %w", fe.Value, fe.Err)
}

// rebalanced handles a rebalance recommendation: the machine is at elevated
// risk of interruption but not going away, so no stop begins. It is logged
// and counted; with --notice-on-rebalance lifeboat sends --notice-signal
// to itself, and forwards it to the trainer as it forwards every signal it
// receives (through --rewrite), so the trainer saves and keeps running.
// noticeSig made sure it is not a stop signal. A recommendation issued
// before lifeboat started watching is not signalled: the trainer has just
// resumed from its newest checkpoint, and may not handle the signal yet.
func (o *observeOptions) rebalanced(n notice.Notice, started time.Time, m *metrics.Metrics, log *slog.Logger) {
	m.IncRebalance(n.Source)
	issued := ""
	if !n.Issued.IsZero() {
		issued = n.Issued.Format(time.RFC3339)
	}
	switch {
	case o.rebalance == 0:
		log.Warn("notice.rebalance_recommendation", "source", n.Source, "notice_time", issued, "signal", "none",
			"effect", "the machine is at elevated risk of interruption; lifeboat stops on the interruption notice",
			"hint", "set --notice-on-rebalance to have the trainer save now with --notice-signal")
	case !n.Issued.IsZero() && n.Issued.Before(started.Truncate(time.Second)):
		log.Warn("notice.rebalance_recommendation", "source", n.Source, "notice_time", issued, "signal", "none",
			"effect", "issued before lifeboat started; the trainer has just resumed, so it is not asked to save")
	default:
		log.Warn("notice.rebalance_recommendation", "source", n.Source, "notice_time", issued, "signal", signals.Name(o.rebalance),
			"effect", "the trainer is asked to save now and keeps running; lifeboat stops on the interruption notice")
		if err := unix.Kill(os.Getpid(), o.rebalance); err != nil {
			log.Warn("notice.rebalance_signal_failed", "signal", signals.Name(o.rebalance), "err", err)
		}
	}
}

// noticeSig parses --notice-signal and checks the other notice flags.
func (o *observeOptions) noticeSig() (unix.Signal, error) {
	sig, err := signals.Parse(o.noticeSignal)
	if err != nil {
		return 0, fmt.Errorf("--notice-signal (LIFEBOAT_NOTICE_SIGNAL): %v", err)
	}
	if !signals.Forwardable(sig) {
		return 0, fmt.Errorf("--notice-signal (LIFEBOAT_NOTICE_SIGNAL) is %s, which lifeboat cannot deliver as a notice", signals.Name(sig))
	}
	if o.noticeInterval <= 0 {
		return 0, fmt.Errorf("--notice-interval (LIFEBOAT_NOTICE_INTERVAL) is %s; it must be positive, for example 5s", o.noticeInterval)
	}
	o.rebalance = 0
	if o.onRebalance {
		stops := []unix.Signal{unix.SIGTERM, unix.SIGINT} // the supervisor's default
		if o.stopSignals != nil {
			if l, err := signals.ParseList(o.stopSignals()); err == nil && len(l) > 0 {
				stops = l
			}
		}
		if slices.Contains(stops, sig) || sig == unix.SIGINT {
			return 0, fmt.Errorf("--notice-on-rebalance (LIFEBOAT_NOTICE_ON_REBALANCE) sends --notice-signal (LIFEBOAT_NOTICE_SIGNAL) to a trainer that keeps running, "+
				"but %s stops it (--stop-signals (LIFEBOAT_STOP_SIGNALS), or a second INT); set --notice-signal to the signal your trainer saves on, e.g. USR1", signals.Name(sig))
		}
		o.rebalance = sig
	}
	return sig, nil
}
