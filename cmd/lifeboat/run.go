package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"time"

	"github.com/lifeboat-project/lifeboat/signals"
	"github.com/lifeboat-project/lifeboat/supervisor"
)

// runOptions are the flags of `lifeboat run`.
type runOptions struct {
	grace           time.Duration
	graceAuto       bool // --grace auto: the pod's terminationGracePeriodSeconds
	stopSignals     string
	rewrite         listFlag
	childOnly       bool
	stopDelivery    string
	preemptExitCode string
	terminationLog  string
	common          commonOptions
	argv            []string

	maxRuntime     time.Duration
	restart        string
	maxRestarts    int
	restartBackoff time.Duration

	store      storeOptions
	checkpoint checkpointOptions
	ranks      rankOptions
	observe    observeOptions
	memory     memoryOptions
	gpu        gpuOptions
	coord      coordOptions
	kube       kubeOptions

	cfg supervisor.Config // built from the flags by check
}

func newRunFlags(o *runOptions, w io.Writer) *flag.FlagSet {
	fs := newFlagSet("run", w)
	graceVar(fs, &o.grace, &o.graceAuto,
		"budget from the first stop signal until everything left is SIGKILLed; match terminationGracePeriodSeconds, or auto to read it from the pod")
	fs.StringVar(&o.stopSignals, "stop-signals", "TERM,INT", "signals that start the grace deadline (comma-separated)")
	fs.Var(&o.rewrite, "rewrite", "deliver another signal than the one received, FROM:TO (repeatable), e.g. TERM:USR1")
	fs.BoolVar(&o.childOnly, "signal-child-only", false, "send signals to the direct child only, not its process group")
	fs.StringVar(&o.stopDelivery, "stop-delivery", "",
		"how a stop signal reaches the trainer: main-first (the default) sends it to the main process, and to the rest of its tree when the main process has exited or half its budget has passed; main-only (the default with --signal-child-only) never to the rest before that exit; group to the whole process group at once (as before; kills PyTorch DataLoader workers before the main process saves)")
	fs.StringVar(&o.preemptExitCode, "preempt-exit-code", strconv.Itoa(supervisor.DefaultPreemptExitCode),
		"exit code when stopped by a signal and the trainer exited 0; \"child\" keeps the trainer's")
	fs.StringVar(&o.terminationLog, "termination-log", kubeTerminationLog,
		"file that gets one line saying why lifeboat stopped (the default is written only if it exists)")
	o.common.register(fs)
	fs.DurationVar(&o.maxRuntime, "max-runtime", 0, "stop the trainer as on preemption after this long, e.g. 72h (0: no limit)")
	fs.StringVar(&o.restart, "restart", "never", "never, or on-failure: restart a crashed trainer in place from the newest committed checkpoint")
	fs.IntVar(&o.maxRestarts, "max-restarts", 3, "restarts allowed with --restart on-failure")
	fs.DurationVar(&o.restartBackoff, "restart-backoff", 10*time.Second, "wait before the first restart; doubled for each next one (max 5m)")
	o.store.register(fs)
	o.store.registerWriter(fs)
	o.checkpoint.register(fs)
	o.ranks.register(fs)
	o.observe.register(fs, true)
	o.memory.register(fs)
	o.gpu.register(fs)
	o.gpu.registerWatchdog(fs)
	o.coord.register(fs)
	o.kube.register(fs, true)
	fs.Usage = flagUsage(fs, w, "lifeboat run [flags] -- CMD [ARG...]")
	return fs
}

// config turns the options into the supervisor's configuration.
func (o *runOptions) config() (supervisor.Config, error) {
	cfg := supervisor.Config{Argv: o.argv, Grace: o.grace, ChildOnly: o.childOnly, Rewrite: signals.Rewrite{}}
	if o.grace <= 0 {
		return cfg, fmt.Errorf("--grace (LIFEBOAT_GRACE) is %s; it must be positive, for example 30s", o.grace)
	}
	stops, err := signals.ParseList(o.stopSignals)
	if err != nil {
		return cfg, fmt.Errorf("--stop-signals (LIFEBOAT_STOP_SIGNALS): %v", err)
	}
	cfg.StopSignals = stops
	switch {
	case o.stopDelivery == "" && o.childOnly:
		cfg.StopDelivery = signals.MainOnly
	case o.stopDelivery == "":
		cfg.StopDelivery = signals.MainFirst
	default:
		if cfg.StopDelivery, err = signals.ParseDelivery(o.stopDelivery); err != nil {
			return cfg, fmt.Errorf("--stop-delivery (LIFEBOAT_STOP_DELIVERY) is %q; use main-first, group or main-only", o.stopDelivery)
		}
	}
	for _, spec := range o.rewrite {
		if err := cfg.Rewrite.ParseRewrite(spec); err != nil {
			return cfg, fmt.Errorf("--rewrite (LIFEBOAT_REWRITE): %v", err)
		}
	}
	switch o.preemptExitCode {
	case "child", "0": // the code only replaces a 0, so 0 means keep it
		cfg.PreemptExitCode = supervisor.PreemptChild
	default:
		n, err := strconv.Atoi(o.preemptExitCode)
		if err != nil || n < 0 || n > 255 {
			return cfg, fmt.Errorf("--preempt-exit-code (LIFEBOAT_PREEMPT_EXIT_CODE) is %q; use a number 0..255 or \"child\"", o.preemptExitCode)
		}
		cfg.PreemptExitCode = n
	}
	cfg.MaxRuntime = o.maxRuntime
	if cfg.NoticeSignal, err = o.observe.noticeSig(); err != nil {
		return cfg, err
	}
	switch o.restart {
	case "never":
	case "on-failure":
		cfg.Restart = supervisor.RestartPolicy{OnFailure: true, Max: o.maxRestarts, Backoff: o.restartBackoff}
	default:
		return cfg, fmt.Errorf("--restart (LIFEBOAT_RESTART) is %q; use never or on-failure", o.restart)
	}
	cfg.TerminationLog = o.terminationLog
	cfg.TerminationLogCreate = o.terminationLog != kubeTerminationLog
	return cfg, configError(cfg.Validate())
}

// supervisorFlags names the flag of each field of supervisor.Config that
// Validate may find wrong.
var supervisorFlags = map[string]string{
	supervisor.FieldGrace: "grace", supervisor.FieldPreemptExitCode: "preempt-exit-code", supervisor.FieldStopSignals: "stop-signals",
	supervisor.FieldStopDelivery: "stop-delivery", supervisor.FieldMaxRuntime: "max-runtime", supervisor.FieldMaxRestarts: "max-restarts",
	supervisor.FieldRestartBackoff: "restart-backoff",
}

// configError names the flags and variables of supervisor.Config.Validate's
// *FieldError (a usageError); other errors are returned as they are.
func configError(err error) error {
	var fe *supervisor.FieldError
	switch {
	case !errors.As(err, &fe):
		return err
	case errors.Is(err, supervisor.ErrGroupChildOnly):
		return usageError{errors.New("--stop-delivery group (LIFEBOAT_STOP_DELIVERY) sends stop signals to the trainer's process group, which --signal-child-only (LIFEBOAT_SIGNAL_CHILD_ONLY) forbids; use --stop-delivery main-only or main-first")}
	case errors.Is(err, supervisor.ErrNoRestarts):
		return usageError{errors.New("--restart on-failure needs --max-restarts (LIFEBOAT_MAX_RESTARTS) of at least 1")}
	case fe.Field == supervisor.FieldStopSignals:
		return usageError{fmt.Errorf("--stop-signals (LIFEBOAT_STOP_SIGNALS) names %s, which lifeboat cannot receive or forward", fe.Value)}
	case fe.Field == supervisor.FieldPreemptExitCode:
		return bad("preempt-exit-code", fe.Value, `use a number 0..255 or "child"`)
	}
	name := supervisorFlags[fe.Field]
	return usageError{fmt.Errorf("--%s (%s) is %s; %v", name, envName(name), fe.Value, fe.Err)}
}

// runCmd parses `lifeboat run` and supervises the command.
func runCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	o := &runOptions{}
	fs := newRunFlags(o, stderr)
	if code := setup(fs, args, &o.common, stdout, stderr, func() error { return o.check(fs) }); code >= 0 {
		return code
	}
	return exitCode("run", runRun(ctx, o), supervisor.CodeInternal, stderr)
}

// check validates the parsed flags, takes the command from fs's arguments
// and builds the supervisor's configuration into o.cfg.
func (o *runOptions) check(fs *flag.FlagSet) error {
	if err := o.validate(); err != nil {
		return err
	}
	o.argv = fs.Args()
	if len(o.argv) == 0 {
		return argsError{errors.New("no command given: put it after --, as in `lifeboat run -- python train.py`")}
	}
	cfg, err := o.config()
	if err != nil {
		return err
	}
	o.cfg = cfg
	if o.store.url == "" {
		dirFlag := false
		fs.Visit(func(f *flag.Flag) { dirFlag = dirFlag || f.Name == "dir" })
		if o.checkpoint.dir != "" && dirFlag {
			return errors.New("--dir is set but --store is not: set --store (LIFEBOAT_STORE) to s3://bucket/prefix or file:///abs/path, or drop --dir")
		}
	}
	return o.withDefaults(os.Getenv)
}

// withDefaults applies the defaults that depend on other values: with a
// store, the rank from the launchers' variables.
func (o *runOptions) withDefaults(getenv func(string) string) error {
	if o.store.url == "" {
		return nil
	}
	return o.ranks.withDefaults(getenv)
}

// runRun starts what the flags ask for: the checkpoint pipeline (store
// open and restore) when --store is set, then the supervision. A stop
// signal before the trainer starts ends it with the preemption code.
func runRun(ctx context.Context, o *runOptions) error {
	cfg, log := o.cfg, o.common.log
	signals.ExplainURG(log)
	cfg.Log = log
	preemptCode := cfg.PreemptExitCode
	if preemptCode <= 0 {
		preemptCode = supervisor.DefaultPreemptExitCode
	}
	// A stop signal ends the start-up's context, not the supervision's:
	// the supervisor receives the signal itself (handOff) and reports it
	// by name.
	supervision := ctx
	ctx, started := startup.during(ctx, cfg.StopSignals)
	defer started()
	if code, stopped := stoppedDuringStartup(startup, "start", nil, log, cfg.TerminationLog, cfg.TerminationLogCreate, preemptCode); stopped {
		return &codeError{code: code}
	}
	if err := supervisor.ClearInheritedSignalMask(); err != nil {
		log.Warn("supervisor.signal_mask", "err", err, "effect", "the trainer inherits lifeboat's blocked signals")
	}
	if o.store.url == "" {
		if o.checkpoint.dir != "" {
			// An image's default LIFEBOAT_DIR, run without a store (docker
			// run on a laptop): the trainer still gets its directory.
			log.Warn("checkpoint.no_store", "dir", o.checkpoint.dir,
				"effect", "checkpoints stay local; set LIFEBOAT_STORE (--store) to upload and resume them")
		}
		return supervise(supervision, cfg, nil, o)
	}
	p, err := openPipeline(ctx, &o.store, &o.checkpoint, o.ranks, log, o.common.stderr)
	if code, stopped := stoppedDuringStartup(startup, "store open and restore", err, log, cfg.TerminationLog, cfg.TerminationLogCreate, preemptCode); stopped {
		o.coord.stoppedDuringStartup(o.store.opened, o.ranks, startup.stop(), cfg.Grace, log)
		return &codeError{code: code}
	}
	if err != nil {
		return err
	}
	return supervise(supervision, cfg, p, o)
}
