package supervisor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"time"

	"golang.org/x/sys/unix"

	"github.com/lifeboat-project/lifeboat/signals"
)

// Config says what to run and how to stop it. The zero value of every field
// but Argv is usable; Validate reports what is wrong.
type Config struct {
	// Argv is the command and its arguments, passed to the child untouched.
	Argv []string
	// Env is the child's environment; nil means lifeboat's own.
	Env []string
	// Grace is the budget from the first stop signal (or the main child's
	// exit, for what is left of the tree) until everything still alive is
	// SIGKILLed. Default 30s, the Kubernetes default.
	Grace time.Duration
	// StopSignals start the grace deadline. Default TERM and INT. The first
	// one is also what lifeboat sends to descendants still running after
	// the main child exits.
	StopSignals []unix.Signal
	// Rewrite maps a received signal to the one delivered.
	Rewrite signals.Rewrite
	// ChildOnly sends signals to the direct child instead of its group.
	ChildOnly bool
	// PreemptExitCode is lifeboat's exit code when it received a stop signal
	// and the child then exited 0. Zero means the default, 143;
	// PreemptChild keeps the child's 0.
	PreemptExitCode int
	// TerminationLog is where one line saying why lifeboat stopped is
	// written. TerminationLogCreate creates it when missing; otherwise it is
	// written only when it already exists (as /dev/termination-log does in a
	// Kubernetes container).
	TerminationLog       string
	TerminationLogCreate bool

	// Log receives lifeboat's events. Default: discard.
	Log *slog.Logger
	// Signals, when set, replaces signal.Notify (tests). Run otherwise
	// subscribes to every signal before it spawns the child, so none that
	// arrives during start-up is lost.
	Signals <-chan os.Signal
	// Kill sends signals (tests record them). Default unix.Kill.
	Kill signals.KillFunc
	// ProcRoot is where processes are listed. Default "/proc".
	ProcRoot string
	// Clock returns the current time. Default time.Now.
	Clock func() time.Time

	// Reserve, when set, is asked at the first stop signal how much of the
	// grace budget to keep for after the trainer's tree has exited (the
	// final checkpoint upload), and why. The tree is SIGKILLed at
	// stop + Grace - reserve instead of stop + Grace. The reserve is capped
	// at half the grace, so the trainer always gets the other half to save.
	Reserve func() (time.Duration, string)
	// AfterExit, when set, runs once the main child and every descendant
	// are gone, before Run returns: the final checkpoint upload. Its context
	// ends at the grace deadline (less ExitMargin) after a stop signal, or
	// after AfterExitTimeout when the trainer exited on its own. A second
	// SIGINT cancels it. An error is logged, written to the termination
	// log, and turns a clean exit 0 into CodeFlushFailed.
	AfterExit        func(ctx context.Context, stopped bool) error
	AfterExitTimeout time.Duration // default Grace
}

// ExitMargin is kept free at the end of the grace budget so that lifeboat
// exits by itself before the kubelet's SIGKILL.
const ExitMargin = 500 * time.Millisecond

// CodeFlushFailed is lifeboat's exit code when the trainer exited 0 on its
// own but its last checkpoint could not be made durable (EX_TEMPFAIL): the
// pod fails and is retried rather than reporting success with the result
// lost.
const CodeFlushFailed = 75

// DefaultGrace is Kubernetes' default terminationGracePeriodSeconds.
const DefaultGrace = 30 * time.Second

// DefaultPreemptExitCode is 128+SIGTERM: what a pod killed by SIGTERM would
// report, which Jobs and training operators treat as a retryable failure.
const DefaultPreemptExitCode = 143

// killWait bounds how long lifeboat waits for SIGKILLed processes to be
// reaped (a process in uninterruptible sleep may take a while) before it
// exits anyway: PID 1 must never hang.
const killWait = 10 * time.Second

// reapInterval is a safety net: the loop also reaps on this period in case
// a SIGCHLD was coalesced away while the channel was full.
const reapInterval = time.Second

func (c *Config) setDefaults() {
	if c.Grace == 0 {
		c.Grace = DefaultGrace
	}
	if len(c.StopSignals) == 0 {
		c.StopSignals = []unix.Signal{unix.SIGTERM, unix.SIGINT}
	}
	if c.PreemptExitCode == 0 {
		c.PreemptExitCode = DefaultPreemptExitCode
	}
	if c.Rewrite == nil {
		c.Rewrite = signals.Rewrite{}
	}
	if c.Log == nil {
		c.Log = slog.New(slog.DiscardHandler)
	}
	if c.Kill == nil {
		c.Kill = unix.Kill
	}
	if c.ProcRoot == "" {
		c.ProcRoot = "/proc"
	}
	if c.Clock == nil {
		c.Clock = time.Now
	}
	if c.AfterExitTimeout == 0 {
		c.AfterExitTimeout = c.Grace
	}
}

// Validate reports the first thing wrong with c, as a sentence naming the
// flag and its environment variable.
func (c *Config) Validate() error {
	if len(c.Argv) == 0 {
		return errors.New("no command given: put it after --, as in `lifeboat run -- python train.py`")
	}
	if c.Grace < 0 {
		return fmt.Errorf("--grace (LIFEBOAT_GRACE) is %s; it must be positive, for example 30s", c.Grace)
	}
	if c.PreemptExitCode != PreemptChild && (c.PreemptExitCode < 0 || c.PreemptExitCode > 255) {
		return fmt.Errorf("--preempt-exit-code (LIFEBOAT_PREEMPT_EXIT_CODE) is %d; it must be 0..255 or \"child\"", c.PreemptExitCode)
	}
	for _, s := range c.StopSignals {
		if !signals.Forwardable(s) {
			return fmt.Errorf("--stop-signals (LIFEBOAT_STOP_SIGNALS) names %s, which lifeboat cannot receive or forward", signals.Name(s))
		}
	}
	return nil
}

// loop is the state of one supervision; one goroutine owns it.
type loop struct {
	cfg    Config
	target signals.Target

	childDone   bool
	childStatus unix.WaitStatus
	noChildren  bool // Wait4 said ECHILD: nothing left to reap

	stopSig    unix.Signal // first stop signal received, 0 if none
	stopCtx    bool        // the context ended
	stopAt     time.Time   // when the first stop arrived
	flushErr   error       // what AfterExit returned
	cancelExit context.CancelFunc
	ints       int // SIGINTs received
	deadline   *time.Timer
	killedAt   time.Time // when the tree was SIGKILLed, zero if not
	treeSignal bool      // leftovers were sent the stop signal after the child exited
}

// Run starts cfg.Argv and supervises it until the main child and every
// other descendant have exited, then returns nil for exit code 0 or an
// *ExitError carrying the code lifeboat should exit with.
//
// Signals are forwarded (not turned into a cancelled context). When ctx
// ends, Run behaves as if it had received the first stop signal. Run never
// panics on a failed signal send; it logs and keeps reaping.
func Run(ctx context.Context, cfg Config) error {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return err
	}
	sigs := cfg.Signals
	if sigs == nil {
		sigs = subscribe()
	}
	if err := becomeSubreaper(); err != nil {
		cfg.Log.Warn("supervisor.subreaper_failed", "err", err,
			"effect", "orphans of the trainer will be reaped by the real PID 1, not lifeboat")
	}
	env := cfg.Env
	if env == nil {
		env = os.Environ()
	}
	pid, err := spawn(cfg.Argv, env)
	if err != nil {
		l := &loop{cfg: cfg}
		l.writeTerminationLog(err.Error())
		return err
	}
	cfg.Log.Info("supervisor.started", "pid", pid, "argv0", cfg.Argv[0], "pid1", os.Getpid() == 1,
		"grace", cfg.Grace.String())
	l := &loop{cfg: cfg, target: signals.Target{Pid: pid, ChildOnly: cfg.ChildOnly}}
	return l.run(ctx, sigs)
}

func (l *loop) run(ctx context.Context, sigs <-chan os.Signal) error {
	tick := time.NewTicker(reapInterval)
	defer tick.Stop()
	done := ctx.Done()
	var killWaitC <-chan time.Time
	for {
		var deadlineC <-chan time.Time
		if l.deadline != nil {
			deadlineC = l.deadline.C
		}
		select {
		case s := <-sigs:
			if sig, ok := s.(unix.Signal); ok {
				l.signal(sig)
			}
		case <-tick.C:
		case <-done:
			done = nil
			l.stopCtx = true
			l.cfg.Log.Info("supervisor.context_done", "action", "stopping the trainer")
			if !l.childDone {
				signals.Deliver(l.target, l.cfg.Rewrite, l.cfg.Kill, l.cfg.StopSignals[0], l.cfg.Log)
			}
			l.startStop(l.cfg.StopSignals[0])
		case <-deadlineC:
			l.deadline = nil
			l.cfg.Log.Warn("supervisor.grace_expired", "grace", l.cfg.Grace.String(), "action", "SIGKILL everything left")
			l.killTree()
			killWaitC = time.After(killWait)
		case <-killWaitC:
			l.cfg.Log.Error("supervisor.unreaped", "waited", killWait.String(),
				"effect", "exiting with processes that did not die after SIGKILL")
			return l.finish()
		}
		l.reap()
		if l.childDone && !l.treeSignal {
			l.treeSignal = true
			l.signalLeftovers()
		}
		if l.childDone && l.noChildren {
			l.afterExit(sigs)
			return l.finish()
		}
	}
}

// afterExit runs cfg.AfterExit under its deadline while still answering
// signals (a second SIGINT cancels it) and reaping.
func (l *loop) afterExit(sigs <-chan os.Signal) {
	if l.cfg.AfterExit == nil {
		return
	}
	stopped := l.stopSig != 0 || l.stopCtx
	var ctx context.Context
	var cancel context.CancelFunc
	if stopped {
		ctx, cancel = context.WithDeadline(context.Background(), l.stopAt.Add(l.cfg.Grace-ExitMargin))
	} else {
		ctx, cancel = context.WithTimeout(context.Background(), l.cfg.AfterExitTimeout)
	}
	defer cancel()
	l.cancelExit = cancel
	done := make(chan error, 1)
	go func() {
		defer func() {
			if r := recover(); r != nil {
				done <- fmt.Errorf("final upload panicked: %v", r)
			}
		}()
		done <- l.cfg.AfterExit(ctx, stopped)
	}()
	tick := time.NewTicker(reapInterval)
	defer tick.Stop()
	for {
		select {
		case err := <-done:
			l.flushErr = err
			if err != nil {
				l.cfg.Log.Error("supervisor.final_upload_failed", "err", err)
			}
			return
		case s := <-sigs:
			if sig, ok := s.(unix.Signal); ok {
				l.signal(sig)
			}
		case <-tick.C:
		}
		l.reap()
	}
}

// signal handles one received signal.
func (l *loop) signal(sig unix.Signal) {
	if sig == unix.SIGCHLD {
		return // the loop reaps after every event
	}
	if !signals.Forwardable(sig) {
		return
	}
	if sig == unix.SIGINT {
		l.ints++
	}
	isStop := false
	for _, s := range l.cfg.StopSignals {
		if s == sig {
			isStop = true
		}
	}
	if !l.childDone {
		signals.Deliver(l.target, l.cfg.Rewrite, l.cfg.Kill, sig, l.cfg.Log)
	}
	if isStop {
		l.startStop(sig)
	}
	if sig == unix.SIGINT && l.ints >= 2 {
		// A second INT means "stop now", as when Ctrl-C is pressed twice.
		if l.cancelExit != nil {
			l.cfg.Log.Warn("supervisor.second_interrupt", "action", "cancel the final upload")
			l.cancelExit()
		} else if l.killedAt.IsZero() {
			l.cfg.Log.Warn("supervisor.second_interrupt", "action", "SIGKILL everything now")
			l.killTree()
		}
	}
}

// startStop records the first stop and starts the grace deadline; later
// stop signals do not move it.
func (l *loop) startStop(sig unix.Signal) {
	if l.stopSig != 0 {
		return
	}
	l.stopSig = sig
	l.stopAt = l.cfg.Clock()
	budget := l.cfg.Grace
	var reserve time.Duration
	why := "no final upload"
	if l.cfg.Reserve != nil {
		reserve, why = l.cfg.Reserve()
		reserve = min(max(reserve, 0), l.cfg.Grace/2)
		budget -= reserve
	}
	switch {
	case l.childDone: // leftovers are already being waited for under their own deadline
		l.armDeadline()
	case l.killedAt.IsZero():
		l.deadline = time.NewTimer(budget)
	}
	l.cfg.Log.Info("supervisor.stopping", "signal", signals.Name(sig),
		"delivered", signals.Name(l.cfg.Rewrite.Apply(sig)),
		"budget", fmt.Sprintf("grace %s = trainer %s + final upload reserve %s (%s)", l.cfg.Grace, budget, reserve, why),
		"kill_at", l.stopAt.Add(budget).Format(time.RFC3339Nano),
		"deadline", l.stopAt.Add(l.cfg.Grace).Format(time.RFC3339Nano))
}

// armDeadline starts the grace timer for leftovers when no stop started one.
func (l *loop) armDeadline() {
	if l.deadline == nil && l.killedAt.IsZero() {
		l.deadline = time.NewTimer(l.cfg.Grace)
	}
}

// reap collects every exited child without blocking. It is the only caller
// of Wait4.
func (l *loop) reap() {
	for {
		var ws unix.WaitStatus
		pid, err := unix.Wait4(-1, &ws, unix.WNOHANG, nil)
		switch {
		case errors.Is(err, unix.EINTR):
			continue
		case errors.Is(err, unix.ECHILD):
			l.noChildren = true
			return
		case err != nil:
			l.cfg.Log.Error("supervisor.wait_failed", "err", err)
			return
		case pid <= 0:
			l.noChildren = false
			return
		}
		if pid == l.target.Pid {
			l.childDone = true
			l.childStatus = ws
			l.cfg.Log.Info("supervisor.child_exited", "pid", pid, "status", describeStatus(ws))
		} else {
			l.cfg.Log.Debug("supervisor.reaped", "pid", pid, "code", StatusCode(ws))
		}
	}
}

// signalLeftovers runs once the main child has exited: whatever is left of
// its tree gets the stop signal and until the deadline to finish, instead of
// being killed mid-cleanup when lifeboat exits.
func (l *loop) signalLeftovers() {
	l.reap()
	if l.noChildren {
		return
	}
	left := l.descendants()
	if len(left) == 0 {
		return
	}
	sig := l.cfg.StopSignals[0]
	l.cfg.Log.Info("supervisor.waiting_for_tree", "processes", len(left), "signal", signals.Name(sig),
		"grace", l.cfg.Grace.String())
	for _, pid := range left {
		if err := l.cfg.Kill(pid, sig); err != nil && !errors.Is(err, unix.ESRCH) {
			l.cfg.Log.Warn("supervisor.signal_failed", "pid", pid, "signal", signals.Name(sig), "err", err)
		}
	}
	l.armDeadline()
}

func (l *loop) descendants() []int {
	procs, err := readProcs(l.cfg.ProcRoot)
	if err != nil {
		l.cfg.Log.Error("supervisor.list_processes_failed", "err", err)
		return nil
	}
	return descendants(procs, os.Getpid())
}

// killTree SIGKILLs the child's process group and every descendant,
// including those that left the group with setsid or a double fork. It
// repeats while new processes appear (a fork racing the kill).
func (l *loop) killTree() {
	l.killedAt = l.cfg.Clock()
	if l.deadline != nil {
		l.deadline.Stop()
		l.deadline = nil
	}
	if !l.childDone {
		if err := l.cfg.Kill(-l.target.Pid, unix.SIGKILL); err != nil && !errors.Is(err, unix.ESRCH) {
			l.cfg.Log.Warn("supervisor.kill_failed", "pgid", l.target.Pid, "err", err)
		}
	}
	killed := 0
	for round := 0; round < 10; round++ {
		left := l.descendants()
		if len(left) == 0 {
			break
		}
		for _, pid := range left {
			if err := l.cfg.Kill(pid, unix.SIGKILL); err == nil {
				killed++
			} else if !errors.Is(err, unix.ESRCH) {
				l.cfg.Log.Warn("supervisor.kill_failed", "pid", pid, "err", err)
			}
		}
	}
	l.cfg.Log.Warn("supervisor.killed", "processes", killed)
}

// finish turns the outcome into Run's result and writes the termination log.
func (l *loop) finish() error {
	preempted := l.stopSig != 0 || l.stopCtx
	code := exitCode(l.childStatus, preempted, l.cfg.PreemptExitCode)
	if !l.childDone {
		code = CodeInternal
	}
	if l.flushErr != nil && code == 0 {
		code = CodeFlushFailed
	}
	var msg string
	switch {
	case !l.childDone:
		msg = "lifeboat: the trainer could not be reaped"
	case preempted && l.stopSig != 0:
		msg = fmt.Sprintf("lifeboat: stopped by SIG%s; %s", signals.Name(l.stopSig), describeStatus(l.childStatus))
	case preempted:
		msg = fmt.Sprintf("lifeboat: stopped; %s", describeStatus(l.childStatus))
	default:
		msg = fmt.Sprintf("lifeboat: %s", describeStatus(l.childStatus))
	}
	if !l.killedAt.IsZero() {
		msg += "; processes still running at the grace deadline were killed"
	}
	if l.flushErr != nil {
		msg += "; the last checkpoint could not be uploaded: " + l.flushErr.Error()
	}
	msg += fmt.Sprintf("; exit code %d", code)
	l.writeTerminationLog(msg)
	l.cfg.Log.Info("supervisor.exit", "code", code, "preempted", preempted)
	if code == 0 {
		return nil
	}
	return &ExitError{Status: l.childStatus, Started: true, Preempted: preempted, Code: code}
}

// writeTerminationLog writes msg as one line where Kubernetes reads the
// reason a container stopped. Failure is logged, never fatal.
func (l *loop) writeTerminationLog(msg string) {
	path := l.cfg.TerminationLog
	if path == "" {
		return
	}
	flags := os.O_WRONLY | os.O_TRUNC
	if l.cfg.TerminationLogCreate {
		flags |= os.O_CREATE
	}
	f, err := os.OpenFile(path, flags, 0o644)
	if err != nil {
		if !errors.Is(err, os.ErrNotExist) || l.cfg.TerminationLogCreate {
			l.cfg.Log.Warn("supervisor.termination_log_failed", "path", path, "err", err)
		}
		return
	}
	defer f.Close()
	if _, err := fmt.Fprintln(f, msg); err != nil {
		l.cfg.Log.Warn("supervisor.termination_log_failed", "path", path, "err", err)
	}
}

// subscribe relays every signal to the returned channel for the rest of the
// process's life. It runs before the child is spawned, so a TERM that
// arrives during start-up is queued and forwarded as soon as the child's
// group exists. There is no unsubscribe: Run is for main, and os/signal
// disables each signal with a round trip to a dedicated thread, which would
// only slow lifeboat's exit.
func subscribe() <-chan os.Signal {
	ch := make(chan os.Signal, 1024)
	signal.Notify(ch)
	return ch
}
