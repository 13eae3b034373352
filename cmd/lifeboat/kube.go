package main

import (
	"context"
	"errors"
	"flag"
	"log/slog"
	"os"
	"time"

	"github.com/lifeboat-project/lifeboat/kube"
	"github.com/lifeboat-project/lifeboat/pipeline"
	"github.com/lifeboat-project/lifeboat/supervisor"
)

// serviceAccountDirEnv points at another service-account directory than
// Kubernetes' (tests, or a token projected elsewhere).
const serviceAccountDirEnv = "LIFEBOAT_KUBE_SERVICE_ACCOUNT_DIR"

// kubeTimeout bounds the one synchronous request (--grace auto) and the
// best-effort flush of events at exit.
const kubeTimeout = 5 * time.Second

// kubeOptions are the flags of lifeboat's Kubernetes API features, and
// what start set up from them.
type kubeOptions struct {
	events       bool
	annotations  bool
	deletionCost bool
	refresh      time.Duration

	rep    *kube.Reporter
	rec    *kube.Recorder
	cancel context.CancelFunc // ends the refresh
	done   chan struct{}      // closed when the refresh has ended
}

// register adds the flags; withAnnotations for the commands that run next
// to the trainer (run, sidecar), not the one-shot restore.
func (o *kubeOptions) register(fs *flag.FlagSet, withAnnotations bool) {
	fs.BoolVar(&o.events, "kube-events", true,
		"in a Kubernetes pod, record events on it (commits, preemptions, restores, interrupted saves, failing uploads); needs create on events")
	if !withAnnotations {
		return
	}
	fs.BoolVar(&o.annotations, "kube-annotations", true,
		"in a Kubernetes pod, keep checkpoint-freshness annotations on it (lifeboat.dev/checkpoint-step, -time, work-at-risk-seconds, -since); needs patch on pods")
	fs.BoolVar(&o.deletionCost, "kube-deletion-cost", false,
		"also set controller.kubernetes.io/pod-deletion-cost to the seconds of work at risk, so a ReplicaSet scaling down deletes the pod that loses least")
	o.refresh = kube.DefaultRefresh
	fs.Var((*kubeRefresh)(&o.refresh), "kube-refresh", "how often the work-at-risk annotations are refreshed between commits (0: at commits only)")
}

// kubeRefresh is --kube-refresh: a duration, 0 or more.
type kubeRefresh time.Duration

func (d *kubeRefresh) String() string { return time.Duration(*d).String() }
func (d *kubeRefresh) Get() any       { return time.Duration(*d) }

func (d *kubeRefresh) Set(s string) error {
	v, err := time.ParseDuration(s)
	if err != nil || v < 0 {
		return errors.New("--kube-refresh (LIFEBOAT_KUBE_REFRESH) must be a duration of 0 or more, such as 1m")
	}
	*d = kubeRefresh(v)
	return nil
}

// graceValue is run's --grace: a positive duration, or auto (the pod's
// terminationGracePeriodSeconds, read when lifeboat starts).
type graceValue struct {
	d    *time.Duration
	auto *bool
}

// graceVar defines --grace with its default.
func graceVar(fs *flag.FlagSet, d *time.Duration, auto *bool, usage string) {
	*d = supervisor.DefaultGrace
	fs.Var(&graceValue{d: d, auto: auto}, "grace", usage)
}

func (g *graceValue) String() string {
	if g == nil || g.d == nil {
		return ""
	}
	if *g.auto {
		return "auto"
	}
	return g.d.String()
}

func (g *graceValue) Get() any { return *g.d }

func (g *graceValue) Set(s string) error {
	if s == "auto" {
		*g.auto, *g.d = true, supervisor.DefaultGrace
		return nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		return errors.New("--grace (LIFEBOAT_GRACE) must be a positive duration such as 30s, or auto (the pod's terminationGracePeriodSeconds)")
	}
	*g.d, *g.auto = d, false
	return nil
}

// kubeClient finds the API server; nil outside a pod (said at debug) or
// when it cannot be used (said once as a warning).
func kubeClient(log *slog.Logger) *kube.Client {
	dir := os.Getenv(serviceAccountDirEnv)
	if dir == "" {
		dir = kube.DefaultServiceAccountDir
	}
	cfg, err := kube.Discover(os.Getenv, dir)
	if errors.Is(err, kube.ErrNotInCluster) {
		log.Debug("kube.off", "reason", err.Error())
		return nil
	}
	if err == nil {
		cfg.UserAgent = "lifeboat/" + version
		var c *kube.Client
		if c, err = kube.New(cfg); err == nil {
			return c
		}
	}
	log.Warn("kube.off", "err", err.Error(), "effect", "no events, annotations or --grace auto; training is not affected")
	return nil
}

// grace is --grace auto: the pod's terminationGracePeriodSeconds, or the
// default with one warning saying why not. It waits at most kubeTimeout.
func (o *kubeOptions) grace(ctx context.Context, c *kube.Client, log *slog.Logger) (time.Duration, *kube.Pod) {
	def := supervisor.DefaultGrace
	warn := func(why string, args ...any) (time.Duration, *kube.Pod) {
		log.Warn("kube.grace_default", append([]any{"grace", def.String(), "reason", why}, args...)...)
		return def, nil
	}
	if c == nil {
		return warn("--grace auto reads the pod's terminationGracePeriodSeconds, and lifeboat is not in a Kubernetes pod with a service-account token")
	}
	ctx, cancel := context.WithTimeout(ctx, kubeTimeout)
	defer cancel()
	p, err := c.Pod(ctx)
	if err != nil {
		args := []any{"err", err.Error()}
		if kube.IsDenied(err) {
			args = append(args, "permission", kube.PermGetPods.String(), "hint", "grant the pod's service account "+kube.PermGetPods.String()+", or set --grace to terminationGracePeriodSeconds")
		}
		return warn("the pod could not be read", args...)
	}
	if p.Grace < 0 {
		return warn("the pod has no terminationGracePeriodSeconds")
	}
	g := max(p.Grace, time.Second) // 0 is an immediate SIGKILL: keep the least budget there is
	log.Info("kube.grace", "grace", g.String(), "from", "terminationGracePeriodSeconds of pod "+c.Config().PodRef())
	return g, &p
}

// start discovers the API server and starts sending events and
// annotations, and returns the grace budget: grace, or with graceAuto the
// pod's, which it reads first. Outside a pod, and with every feature off,
// it does nothing more.
func (o *kubeOptions) start(ctx context.Context, log *slog.Logger, graceAuto bool, grace time.Duration) time.Duration {
	if !o.events && !o.annotations && !graceAuto {
		return grace
	}
	c := kubeClient(log)
	if graceAuto {
		var p *kube.Pod
		grace, p = o.grace(ctx, c, log)
		if p != nil && c != nil {
			cfg := c.Config()
			if cfg.PodUID == "" {
				cfg.PodUID = p.UID
				c, _ = kube.New(cfg)
			}
		}
	}
	if c == nil || !o.events && !o.annotations {
		return grace
	}
	o.rep = kube.NewReporter(c, kube.ReporterOptions{Events: o.events, Annotations: o.annotations, Log: log})
	o.rec = kube.NewRecorder(o.rep, kube.RecorderOptions{DeletionCost: o.deletionCost})
	bg, cancel := context.WithCancel(context.Background())
	o.cancel, o.done = cancel, make(chan struct{})
	go o.rep.Run(context.Background()) // until close
	go func() {
		defer close(o.done)
		if o.annotations {
			o.rec.Refresh(bg, o.refresh)
		}
	}()
	log.Debug("kube.on", "pod", c.Config().PodRef(), "events", o.events, "annotations", o.annotations, "deletion_cost", o.deletionCost)
	return grace
}

// watch has the pipeline report to the pod (pipeline.Pipeline.ReportTo).
func (o *kubeOptions) watch(p *pipeline.Pipeline) {
	if o.rec == nil || p == nil {
		return
	}
	p.ReportTo(o.rec)
}

// pod is what the pipeline tells of the stop, the final upload and
// another live pod of the rank (pipeline.Stopper, pipeline.ClaimNotices),
// nil outside a pod or with events and annotations off.
func (o *kubeOptions) pod() pipeline.Pod {
	if o.rec == nil {
		return nil
	}
	return o.rec
}

// close sends what is queued, best-effort, for at most kubeTimeout and
// never past the grace budget that ends at end (zero: no stop began; less
// a margin for lifeboat's own exit), and stops the background work.
func (o *kubeOptions) close(end time.Time) {
	if o.rep == nil {
		return
	}
	d := time.Now().Add(kubeTimeout)
	if !end.IsZero() {
		if e := end.Add(-supervisor.ExitMargin / 2); e.Before(d) {
			d = e
		}
	}
	ctx, cancel := context.WithDeadline(context.Background(), d)
	defer cancel()
	o.cancel()
	<-o.done
	o.rep.Close(ctx)
}

// restored is restore's: one CheckpointRestored event, sent before it
// exits.
func (o *kubeOptions) restored(ctx context.Context, log *slog.Logger, step int64, seconds float64) {
	o.start(ctx, log, false, 0)
	o.rec.Restored(step, "store", seconds)
	o.close(time.Time{})
}
