package main

import (
	"context"
	"os"
	"time"

	"golang.org/x/sys/unix"

	"github.com/lifeboat-project/lifeboat/agent"
	"github.com/lifeboat-project/lifeboat/coord"
	"github.com/lifeboat-project/lifeboat/metrics"
	"github.com/lifeboat-project/lifeboat/pipeline"
	"github.com/lifeboat-project/lifeboat/supervisor"
)

// supervise supervises base.Argv until it and its tree have exited. With a
// checkpoint pipeline, its agent uploads in the background, the grace
// budget keeps a reserve for the final upload, and the final upload runs
// when the trainer's tree is gone (runCheckpoints). With several ranks,
// the others follow this one's stop and failure (jobStop). Metrics, the
// pod's annotations and the claim of the rank are told of what happens
// (runEvents).
func supervise(ctx context.Context, base supervisor.Config, p *pipeline.Pipeline, o *runOptions) error {
	log := base.Log
	bg, cancel := context.WithCancel(context.Background())
	defer cancel()
	grace := o.kube.start(ctx, log, o.graceAuto, base.Grace)
	defer o.kube.close()
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
	// reaches it through runEvents.Stopping.
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
	notices = claimNotices(bg, js.merge(bg, notices), cl, &o.kube)
	env = supervisor.MergeEnv(env, js.env())
	events := &runEvents{m: m, cl: cl, kube: &o.kube}
	var job supervisor.Job
	if js != nil {
		job = js
	}
	var checkpoints supervisor.Checkpoints
	if p != nil {
		events.agent = p.Agent
		checkpoints = &runCheckpoints{p: p, js: js, cl: cl, kube: &o.kube}
		if p.Resume != nil {
			m.SetResume(p.ResumeSource, p.Resume.Step, p.ResumeSeconds)
		} else {
			m.SetResume("none", -1, p.ResumeSeconds)
		}
		m.SetFreshStartOverProgress(p.FreshOver != nil)
		go p.Agent.Run(bg)
		go feedMetrics(bg, m, p, time.Second)
	}
	m.SetReady(true)
	cfg := base
	cfg.Grace, cfg.Env, cfg.Memory, cfg.Notices = grace, env, memory, notices
	cfg.Checkpoints, cfg.Job, cfg.Observer = checkpoints, job, events
	cfg.Signals = startup.handOff()
	err = supervisor.Run(ctx, cfg)
	return claimedCode(cl, err, func(msg string) {
		supervisor.WriteTerminationLog(cfg.TerminationLog, cfg.TerminationLogCreate, msg, log)
	})
}

// runCheckpoints is the checkpoint pipeline as the supervisor asks it: the
// agent's reserve and final upload, the commit and restore before a
// restart; at the end of the final upload, the job-wide stop's common step
// and record (js, nil with one rank) and the release of this rank's claim
// (cl, nil when off).
type runCheckpoints struct {
	p    *pipeline.Pipeline
	js   *jobStop
	cl   *coord.Claim
	kube *kubeOptions
}

var _ supervisor.Checkpoints = (*runCheckpoints)(nil)

func (c *runCheckpoints) Reserve() (time.Duration, string) { return c.p.Agent.Reserve() }

func (c *runCheckpoints) BeforeRestart(ctx context.Context, attempt int) ([]string, error) {
	return c.p.BeforeRestart(ctx, attempt)
}

// Flush is the final upload, then the wait for this rank's stop record,
// both within the grace budget.
func (c *runCheckpoints) Flush(ctx context.Context, stop *supervisor.Stop) error {
	err := c.p.Agent.Flush(ctx)
	if err == nil {
		c.js.common(ctx, c.p.Agent)
	}
	c.kube.flushed(stop != nil, err)
	settleClaim(ctx, c.cl)
	c.js.settle(ctx)
	return err
}

func (c *runCheckpoints) FlushNote() string { return c.p.Agent.FlushNote() }

// runEvents tells what the supervisor reports to those who follow it: the
// agent (nil without a store), which stores the chunks of the trainer's
// last save as they are written and tells an interrupted save by the
// reaps and the SIGKILL; the metrics (restarts by reason, OOM kills, each
// stop signal received, which is the pod's preemption notice, counted with
// source "signal", and the grace budget's end); the claim of the rank
// (released at a stop: a replacement pod may start while the final upload
// runs); and the pod's annotations.
type runEvents struct {
	agent *agent.Agent
	m     *metrics.Metrics
	cl    *coord.Claim
	kube  *kubeOptions
}

var _ supervisor.Observer = (*runEvents)(nil)

func (e *runEvents) Stopping(s supervisor.Stop) {
	if e.agent != nil {
		e.agent.Stopping()
	}
	e.m.SetGraceEnd(s.Deadline)
	releaseClaim(e.cl)
	e.kube.stopping(s)
}

func (e *runEvents) StopSignal(sig unix.Signal) { e.m.IncStopSignal(sig) }
func (e *runEvents) Restarted(reason string)    { e.m.IncRestart(reason) }
func (e *runEvents) OOMKilled()                 { e.m.IncOOMKill() }

func (e *runEvents) Reaped(pid int, status unix.WaitStatus, at time.Time) {
	if e.agent != nil {
		e.agent.Reaped(pid, status, at)
	}
}

func (e *runEvents) Killing(at time.Time) {
	if e.agent != nil {
		e.agent.Killing(at)
	}
}
