package main

import (
	"context"
	"os"
	"time"

	"github.com/lifeboat-project/lifeboat/pipeline"
	"github.com/lifeboat-project/lifeboat/supervisor"
)

// supervise supervises base.Argv until it and its tree have exited. With a
// checkpoint pipeline, its agent uploads in the background, the grace
// budget keeps a reserve for the final upload, and the final upload runs
// when the trainer's tree is gone; with several ranks, the others follow
// this one's stop and failure; metrics, the pod's annotations and the
// claim of the rank are told of what happens: the pipeline's
// stop-and-flush sequence (pipeline.Stopper, and pipeline.JobStop), which
// the sidecar shares.
func supervise(ctx context.Context, base supervisor.Config, p *pipeline.Pipeline, o *runOptions) error {
	log := base.Log
	bg, cancel := context.WithCancel(context.Background())
	defer cancel()
	grace := o.kube.start(ctx, log, o.graceAuto, base.Grace)
	var stopper *pipeline.Stopper
	defer func() { o.kube.close(stopper.End()) }()
	o.kube.watch(p)
	env := base.Env
	if env == nil {
		env = os.Environ()
	}
	if p != nil {
		env = supervisor.MergeEnv(env, p.Env)
	}
	gp, err := o.gpu.plan(env, log)
	if err != nil {
		return err
	}
	defer gp.Close()
	if gp != nil {
		env = supervisor.MergeEnv(env, gp.Env)
	}
	wd, err := o.gpu.newWatchdog(gp, log)
	if err != nil {
		return usageError{err}
	}
	if wd != nil {
		go wd.Run(bg, o.gpu.watchInterval)
	}
	mem, err := o.memory.setup(log)
	if err != nil {
		return usageError{err}
	}
	var memory supervisor.Memory
	if mem != nil {
		memory = mem
		defer func() {
			if err := mem.Close(); err != nil {
				log.Warn("memory.close_failed", "err", err)
			}
		}()
	}
	// --metrics-addr's syntax was checked before anything started; an
	// address that cannot be served (already in use, not this host's) is
	// lifeboat's runtime failure, as for the sidecar.
	m, err := o.observe.startMetrics(bg, log)
	if err != nil {
		return err
	}
	// notice.Watch fails only on its settings (the SDKs' variables, such as
	// AWS_EC2_METADATA_DISABLED with --notices aws): bad configuration. A
	// source that fails while it runs is logged and asked again.
	notices, err := o.observe.watchNotices(bg, m, log)
	if err != nil {
		return usageError{err}
	}
	// The grace budget's metric starts at the whole grace; a stop's end
	// reaches it through the Stopper.
	m.SetGrace(grace)
	// The claim of this rank, before the agent commits anything: another
	// live pod of the rank stops this one (exit codeRankClaimed). The
	// job-wide stop's watching passes its looks at the flag on to it.
	cl, err := o.coord.claim(bg, p, log)
	if err != nil {
		return err
	}
	js, err := o.coord.start(bg, p, cl, grace, log)
	if err != nil {
		return err
	}
	pod := o.kube.pod()
	notices = pipeline.ClaimNotices(bg, js.Merge(bg, notices), cl, pod)
	env = supervisor.MergeEnv(env, js.Env())
	stopper = &pipeline.Stopper{Job: js, Claim: cl, Pod: pod, Metrics: m}
	var job supervisor.Job
	if js != nil {
		job = js
	}
	var checkpoints supervisor.Checkpoints
	if p != nil {
		stopper.Agent, stopper.Restart = p.Agent, p
		checkpoints = stopper
		p.ReportResume(m)
		go p.Agent.Run(bg)
		go p.FeedMetrics(bg, m, time.Second)
	}
	m.SetReady(true)
	cfg := base
	cfg.Grace, cfg.Env, cfg.Memory, cfg.Notices = grace, env, memory, notices
	cfg.Checkpoints, cfg.Job, cfg.Observer = checkpoints, job, stopper
	cfg.Signals = startup.handOff()
	err = supervisor.Run(ctx, cfg)
	return claimedCode(cl, err, func(msg string) {
		supervisor.WriteTerminationLog(cfg.TerminationLog, cfg.TerminationLogCreate, msg, log)
	})
}
