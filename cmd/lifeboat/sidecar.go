package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"time"

	"golang.org/x/sys/unix"

	"github.com/lifeboat-project/lifeboat/coord"
	"github.com/lifeboat-project/lifeboat/pipeline"
	"github.com/lifeboat-project/lifeboat/signals"
	"github.com/lifeboat-project/lifeboat/supervisor"
)

// sidecarOptions are the flags of `lifeboat sidecar`: upload the
// checkpoints a trainer in another container writes to a shared volume.
type sidecarOptions struct {
	common     commonOptions
	store      storeOptions
	checkpoint checkpointOptions
	ranks      rankOptions
	observe    observeOptions
	grace      time.Duration
	flushWait  time.Duration
	kube       kubeOptions
	coord      coordOptions
}

func sidecarCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	o := &sidecarOptions{}
	fs := newFlagSet("sidecar", stderr)
	o.common.register(fs)
	o.store.register(fs)
	o.store.registerWriter(fs)
	o.checkpoint.register(fs)
	o.ranks.register(fs)
	o.observe.register(fs, false)
	o.kube.register(fs, true)
	o.coord.register(fs)
	fs.DurationVar(&o.grace, "grace", supervisor.DefaultGrace, "the pod's terminationGracePeriodSeconds: the final upload must end within it")
	fs.DurationVar(&o.flushWait, "flush-wait", 0,
		"after SIGTERM, keep watching this long for the trainer's last checkpoint before the final upload (0 for a native sidecar, which Kubernetes stops after the trainer)")
	fs.Usage = flagUsage(fs, stderr, "lifeboat sidecar --store URL --dir DIR [flags]")
	check := func() error { return firstErr(o.validate(), o.withDefaults(os.Getenv)) }
	if code := setup(fs, args, &o.common, stdout, stderr, check); code >= 0 {
		return code
	}
	return exitCode("sidecar", runSidecar(ctx, o), supervisor.CodeInternal, stderr)
}

// withDefaults applies the defaults that depend on other values: the rank
// from the launchers' variables, and --restore auto is never: the
// trainer's own container (or an init container) restores, the sidecar
// only uploads.
func (o *sidecarOptions) withDefaults(getenv func(string) string) error {
	if o.checkpoint.restore == "auto" {
		o.checkpoint.restore = "never"
	}
	return o.ranks.withDefaults(getenv)
}

// runSidecar opens the store and uploads what the trainer writes until a
// stop signal, then runs the stop-and-flush sequence run's supervisor runs
// (pipeline.Stopper.StopSidecar), the final upload within the grace
// period: 0 when it succeeded, CodeFlushFailed when it did not.
func runSidecar(ctx context.Context, o *sidecarOptions) error {
	log := o.common.log
	ctx, started := startup.during(ctx, nil)
	defer started()
	o.checkpoint.sidecar = true
	p, err := openPipeline(ctx, &o.store, &o.checkpoint, o.ranks, log, o.common.stderr)
	if code, stopped := stoppedDuringStartup(startup, "store open", err, log, kubeTerminationLog, false, supervisor.DefaultPreemptExitCode); stopped {
		return &codeError{code: code}
	}
	if err != nil {
		return err
	}
	sigs := stopSignals(startup.handOff())
	agentCtx, cancel := context.WithCancel(context.Background())
	defer cancel()
	m, err := o.observe.startMetrics(agentCtx, log)
	if err != nil {
		return err
	}
	o.kube.start(ctx, log, false, o.grace)
	var stopper *pipeline.Stopper
	defer func() { o.kube.close(stopper.End()) }()
	o.kube.watch(p)
	cl, err := o.coord.claim(agentCtx, p, log)
	if err != nil {
		return err
	}
	js, err := o.coord.startSidecar(agentCtx, p, cl, log)
	if err != nil {
		return err
	}
	pod := o.kube.pod()
	stopper = &pipeline.Stopper{Agent: p.Agent, Job: js, Claim: cl, Pod: pod, Metrics: m, Sidecar: true}
	var twin <-chan coord.Twin
	if cl != nil {
		twin = cl.Conflict()
	}
	done := make(chan struct{})
	go func() { p.Agent.Run(agentCtx); close(done) }()
	go p.FeedMetrics(agentCtx, m, time.Second)
	m.SetReady(true)
	log.Info("sidecar.started", "store", p.Store.String(), "dir", o.checkpoint.dir)
	var sig os.Signal
	select {
	case sig = <-sigs:
	case <-ctx.Done():
	case t := <-twin:
		// Another live pod uploads as this rank: nothing more is
		// committed here (the claim's fence refuses it), and the
		// sidecar exits at once, loudly.
		if pod != nil {
			pod.RankClaimed(cl.Run(), t.Run, t.Host)
		}
		cancel()
		<-done
		return claimedCode(cl, nil, func(msg string) { supervisor.WriteTerminationLog(kubeTerminationLog, false, msg, log) })
	}
	stopAt := time.Now()
	stop := supervisor.Stop{At: stopAt, Deadline: stopAt.Add(o.grace)}
	if s, ok := sig.(unix.Signal); ok {
		stop.Reason, stop.Signal = "SIG"+signals.Name(s), s
	}
	log.Info("sidecar.stopping", "signal", fmt.Sprint(sig), "flush_wait", o.flushWait.String(), "grace", o.grace.String())
	err = stopper.StopSidecar(stop, o.flushWait)
	// The final upload is over, done or out of time: nothing more is for
	// the agent to do. A request that never reached its loop (busy past
	// the deadline) would otherwise leave it running, and the sidecar
	// waiting here until the kubelet's SIGKILL.
	cancel()
	<-done
	if err != nil {
		log.Error("sidecar.final_upload_failed", "err", err)
		return &codeError{code: supervisor.CodeFlushFailed}
	}
	return nil
}
