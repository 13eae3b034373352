package supervisor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
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

	// MaxRuntime, when set, stops the trainer exactly as a preemption would
	// once it has run this long (clusters that reclaim jobs older than 72h),
	// so the last checkpoint is saved and committed and the pod is retried.
	MaxRuntime time.Duration
	// Notices delivers cloud preemption notices. Each sends NoticeSignal to
	// the trainer (default: the first stop signal) and pulls the grace
	// deadline in to the notice's deadline (less ExitMargin).
	Notices      <-chan Notice
	NoticeSignal unix.Signal
	// Restart restarts a crashed trainer in place.
	Restart RestartPolicy
	// BeforeRestart, when set, runs between a crash and the restart (with
	// the trainer's tree gone): it commits what the trainer completed and
	// restores the newest committed checkpoint, and returns environment
	// variables to set for the new trainer.
	BeforeRestart func(ctx context.Context, attempt int) ([]string, error)

	// OnStop, when set, is told when a stop begins or its deadline moves:
	// the end of the grace budget (metrics show the budget left).
	OnStop func(end time.Time)
	// OnRestart, when set, is told of each restart and why: "exit_code" or
	// "signal".
	OnRestart func(reason string)

	// Memory, when set, puts the trainer in its own memory cgroup and
	// counts OOM kills there (limits/memory in production).
	Memory Memory
	// OnOOMKill, when set, is told of each OOM kill in the trainer's cgroup.
	OnOOMKill func()

	// OnReap, when set, is told of every process lifeboat reaps (the
	// trainer and each orphan of its tree): its pid, how it ended and when.
	// The checkpoint pipeline tells an interrupted save from a whole one by
	// it. It runs in the supervision loop and must not block.
	OnReap func(pid int, status unix.WaitStatus, at time.Time)
	// BeforeKill, when set, runs just before the trainer's tree is
	// SIGKILLed (the grace deadline, or a second SIGINT): a file still open
	// for writing then is an interrupted save. It must not block.
	BeforeKill func()
}

// Memory is what the supervisor needs of the trainer's memory cgroup.
type Memory interface {
	// Spawn runs start (which forks the trainer and returns its pid) so
	// that the trainer is in its cgroup from its first instruction.
	Spawn(start func() (int, error)) (int, error)
	// OOMKillCount is the number of OOM kills in the trainer's cgroup so
	// far, as the kernel counts them (before it sends the SIGKILL).
	OOMKillCount() (uint64, error)
	// OOMKills delivers one value per OOM kill (it may lag the kill).
	OOMKills() <-chan struct{}
	// Describe says what the limit is, for the log and termination message.
	Describe() string
}

// Notice is a cloud provider's warning that the machine goes away.
type Notice struct {
	Source   string    // "aws", "gcp", ...
	Deadline time.Time // when the machine goes away; zero if unknown
	Detail   string
}

// RestartPolicy says when a trainer that exited on its own is started
// again in the same container.
type RestartPolicy struct {
	// OnFailure restarts a trainer that exited non-zero (or was killed by a
	// signal) without lifeboat having stopped it: NCCL timeouts, segfaults.
	OnFailure bool
	Max       int           // restarts allowed; 0 means none
	Backoff   time.Duration // wait before the first restart, doubled each time (max 5m)
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
	if c.NoticeSignal == 0 {
		c.NoticeSignal = c.StopSignals[0]
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
	if c.MaxRuntime < 0 {
		return fmt.Errorf("--max-runtime (LIFEBOAT_MAX_RUNTIME) is %s; it must be positive, for example 72h", c.MaxRuntime)
	}
	if c.Restart.Max < 0 || c.Restart.Backoff < 0 {
		return errors.New("--max-restarts (LIFEBOAT_MAX_RESTARTS) and --restart-backoff (LIFEBOAT_RESTART_BACKOFF) must not be negative")
	}
	if c.Restart.OnFailure && c.Restart.Max == 0 {
		return errors.New("--restart on-failure needs --max-restarts (LIFEBOAT_MAX_RESTARTS) of at least 1")
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

	stopping   bool        // a stop began: signal, context, max runtime or notice
	stopSig    unix.Signal // the stop signal received, 0 if the stop had another cause
	stopReason string      // why, for the termination log ("SIGTERM", "max runtime 72h0m0s", ...)
	stopAt     time.Time   // when the stop began
	graceEnd   time.Time   // when the grace budget ends
	flushErr   error       // what AfterExit returned
	restarts   int         // restarts done
	env        []string    // the trainer's environment
	oomBefore  uint64      // OOM kills counted before this trainer started
	oomKilled  bool        // the main trainer process was OOM-killed
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
	l := &loop{cfg: cfg, env: env}
	if err := l.start(); err != nil {
		l.writeTerminationLog(err.Error())
		return err
	}
	return l.run(ctx, sigs)
}

// start spawns the trainer and resets the per-trainer state.
func (l *loop) start() error {
	start := func() (int, error) { return spawn(l.cfg.Argv, l.env) }
	var pid int
	var err error
	if m := l.cfg.Memory; m != nil {
		l.oomBefore, _ = m.OOMKillCount()
		pid, err = m.Spawn(start)
	} else {
		pid, err = start()
	}
	if err != nil {
		return err
	}
	l.oomKilled = false
	l.target = signals.Target{Pid: pid, ChildOnly: l.cfg.ChildOnly}
	l.childDone, l.childStatus, l.noChildren, l.treeSignal = false, 0, false, false
	l.cfg.Log.Info("supervisor.started", "pid", pid, "argv0", l.cfg.Argv[0], "pid1", os.Getpid() == 1,
		"grace", l.cfg.Grace.String(), "restarts", l.restarts)
	return nil
}

func (l *loop) run(ctx context.Context, sigs <-chan os.Signal) error {
	tick := time.NewTicker(reapInterval)
	defer tick.Stop()
	done := ctx.Done()
	var maxRuntimeC <-chan time.Time
	if l.cfg.MaxRuntime > 0 {
		t := time.NewTimer(l.cfg.MaxRuntime)
		defer t.Stop()
		maxRuntimeC = t.C
	}
	notices := l.cfg.Notices
	var ooms <-chan struct{}
	if l.cfg.Memory != nil {
		ooms = l.cfg.Memory.OOMKills()
	}
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
			l.cfg.Log.Info("supervisor.context_done", "action", "stopping the trainer")
			l.stopWith(l.cfg.StopSignals[0], true, "lifeboat was asked to stop", time.Time{})
		case <-maxRuntimeC:
			maxRuntimeC = nil
			reason := fmt.Sprintf("max runtime %s reached", l.cfg.MaxRuntime)
			l.cfg.Log.Warn("supervisor.max_runtime", "max_runtime", l.cfg.MaxRuntime.String(), "action", "stopping as on preemption")
			l.stopWith(l.cfg.StopSignals[0], true, reason, time.Time{})
		case _, ok := <-ooms:
			if !ok {
				ooms = nil
				continue
			}
			if l.cfg.OnOOMKill != nil {
				l.cfg.OnOOMKill()
			}
			l.cfg.Log.Warn("supervisor.oom_kill", "limit", l.cfg.Memory.Describe(),
				"effect", "a process of the trainer was killed by the OOM killer")
		case n, ok := <-notices:
			if !ok {
				notices = nil
				continue
			}
			end := time.Time{}
			if !n.Deadline.IsZero() {
				end = n.Deadline.Add(-ExitMargin)
			}
			l.cfg.Log.Warn("supervisor.preemption_notice", "source", n.Source, "deadline", n.Deadline.Format(time.RFC3339),
				"detail", n.Detail, "signal", signals.Name(l.cfg.NoticeSignal))
			l.stopWith(l.cfg.NoticeSignal, false, n.Source+" preemption notice", end)
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
			if l.shouldRestart() {
				if l.restart(sigs) {
					killWaitC = nil
					continue
				}
			}
			l.afterExit(sigs)
			return l.finish()
		}
	}
}

// stopWith begins a stop that no signal caused (context, max runtime,
// notice): it delivers sig to the trainer (through the rewrite rules when
// rewrite is set) and starts the grace budget, ending at end when that is
// set and earlier than the usual end.
func (l *loop) stopWith(sig unix.Signal, rewrite bool, reason string, end time.Time) {
	if !l.childDone {
		rw := l.cfg.Rewrite
		if !rewrite {
			rw = nil
		}
		signals.Deliver(l.target, rw, l.cfg.Kill, sig, l.cfg.Log)
	}
	l.startStop(0, reason, end)
}

// shouldRestart reports whether the trainer that just ended (with its
// tree) is to be started again.
func (l *loop) shouldRestart() bool {
	p := l.cfg.Restart
	return p.OnFailure && !l.stopping && l.restarts < p.Max && StatusCode(l.childStatus) != 0
}

// restart waits the backoff (still answering signals: a stop signal during
// it cancels the restart), runs BeforeRestart and starts the trainer again.
// It reports whether a new trainer runs.
func (l *loop) restart(sigs <-chan os.Signal) bool {
	backoff := l.cfg.Restart.Backoff
	for i := 0; i < l.restarts && backoff < 5*time.Minute; i++ {
		backoff *= 2
	}
	backoff = min(backoff, 5*time.Minute)
	l.cfg.Log.Warn("supervisor.restart", "status", describeStatus(l.childStatus), "attempt", l.restarts+1,
		"max", l.cfg.Restart.Max, "backoff", backoff.String())
	wait := time.NewTimer(backoff)
	defer wait.Stop()
	for waiting := true; waiting; {
		select {
		case s := <-sigs:
			if sig, ok := s.(unix.Signal); ok {
				l.signal(sig)
			}
			if l.stopping {
				l.cfg.Log.Info("supervisor.restart_cancelled", "reason", l.stopReason)
				return false
			}
		case <-wait.C:
			waiting = false
		}
		l.reap()
	}
	env := l.env
	if l.cfg.BeforeRestart != nil {
		ctx, cancel := context.WithTimeout(context.Background(), l.cfg.AfterExitTimeout)
		extra, err := l.cfg.BeforeRestart(ctx, l.restarts+1)
		cancel()
		if err != nil {
			l.cfg.Log.Error("supervisor.restart_failed", "err", err, "effect", "not restarting")
			return false
		}
		env = MergeEnv(env, extra)
	}
	l.restarts++
	// The previous trainer's leftovers are gone: its deadline must not fire
	// on the new one.
	if l.deadline != nil {
		l.deadline.Stop()
		l.deadline = nil
	}
	l.killedAt = time.Time{}
	if l.cfg.OnRestart != nil {
		reason := "exit_code"
		if l.childStatus.Signaled() {
			reason = "signal"
		}
		l.cfg.OnRestart(reason)
	}
	prev := l.env
	l.env = env
	if err := l.start(); err != nil {
		l.cfg.Log.Error("supervisor.restart_failed", "err", err)
		l.env = prev
		return false
	}
	return true
}

// MergeEnv returns base with the variables in extra set, replacing earlier
// values (getenv in the child sees only the first of duplicates).
func MergeEnv(base, extra []string) []string {
	set := map[string]bool{}
	for _, kv := range extra {
		k, _, _ := strings.Cut(kv, "=")
		set[k] = true
	}
	out := make([]string, 0, len(base)+len(extra))
	for _, kv := range base {
		k, _, _ := strings.Cut(kv, "=")
		if !set[k] {
			out = append(out, kv)
		}
	}
	return append(out, extra...)
}

// afterExit runs cfg.AfterExit under its deadline while still answering
// signals (a second SIGINT cancels it) and reaping.
func (l *loop) afterExit(sigs <-chan os.Signal) {
	if l.cfg.AfterExit == nil {
		return
	}
	stopped := l.stopping
	var ctx context.Context
	var cancel context.CancelFunc
	if stopped {
		ctx, cancel = context.WithDeadline(context.Background(), l.graceEnd.Add(-ExitMargin))
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
		l.startStop(sig, "SIG"+signals.Name(sig), time.Time{})
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

// startStop records the first stop and starts the grace budget: the
// trainer's tree is SIGKILLed at its end less the final upload's reserve.
// Later stops do not move the end, unless they bring it forward (a
// preemption notice with an earlier deadline). sig is the signal received,
// 0 when the stop had another cause; end, when set, is the budget's end.
func (l *loop) startStop(sig unix.Signal, reason string, end time.Time) {
	now := l.cfg.Clock()
	if end.IsZero() || end.After(now.Add(l.cfg.Grace)) {
		end = now.Add(l.cfg.Grace)
	}
	if l.stopping {
		if !end.Before(l.graceEnd) {
			return
		}
		l.cfg.Log.Warn("supervisor.deadline_moved", "reason", reason, "deadline", end.Format(time.RFC3339Nano))
	} else {
		l.stopping, l.stopSig, l.stopReason, l.stopAt = true, sig, reason, now
	}
	l.graceEnd = end
	if l.cfg.OnStop != nil {
		l.cfg.OnStop(end)
	}
	grace := end.Sub(now)
	budget := grace
	var reserve time.Duration
	why := "no final upload"
	if l.cfg.Reserve != nil {
		reserve, why = l.cfg.Reserve()
		reserve = min(max(reserve, 0), grace/2)
		budget -= reserve
	}
	switch {
	case l.childDone: // leftovers are already being waited for under their own deadline
		l.armDeadline()
	case l.killedAt.IsZero():
		if l.deadline != nil {
			l.deadline.Stop()
		}
		l.deadline = time.NewTimer(budget)
	}
	delivered := "none"
	if sig != 0 {
		delivered = signals.Name(l.cfg.Rewrite.Apply(sig))
	}
	l.cfg.Log.Info("supervisor.stopping", "reason", reason, "signal", signals.Name(sig), "delivered", delivered,
		"budget", fmt.Sprintf("grace %s = trainer %s + final upload reserve %s (%s)", grace.Round(time.Millisecond), budget.Round(time.Millisecond), reserve.Round(time.Millisecond), why),
		"kill_at", now.Add(budget).Format(time.RFC3339Nano),
		"deadline", end.Format(time.RFC3339Nano))
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
		if l.cfg.OnReap != nil {
			l.cfg.OnReap(pid, ws, l.cfg.Clock())
		}
		if pid == l.target.Pid {
			l.childDone = true
			l.childStatus = ws
			l.cfg.Log.Info("supervisor.child_exited", "pid", pid, "status", describeStatus(ws))
			l.checkOOM(ws)
		} else {
			l.cfg.Log.Debug("supervisor.reaped", "pid", pid, "code", StatusCode(ws))
		}
	}
}

// checkOOM decides whether the main trainer process, killed by SIGKILL,
// was killed by the OOM killer: the kernel counts the kill in the trainer's
// cgroup before it sends the signal.
func (l *loop) checkOOM(ws unix.WaitStatus) {
	m := l.cfg.Memory
	if m == nil || !ws.Signaled() || ws.Signal() != unix.SIGKILL || !l.killedAt.IsZero() {
		return
	}
	n, err := m.OOMKillCount()
	if err != nil || n <= l.oomBefore {
		return
	}
	l.oomKilled = true
	l.cfg.Log.Error("supervisor.oom_killed", "pid", l.target.Pid, "limit", m.Describe(),
		"effect", "the trainer ran out of memory and the kernel killed it; lifeboat is unharmed and uploads what was saved",
		"hint", "raise the container's memory limit or lower the trainer's memory use (batch size, workers)")
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
	if l.cfg.BeforeKill != nil {
		l.cfg.BeforeKill()
	}
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
	preempted := l.stopping
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
	case l.oomKilled:
		msg = fmt.Sprintf("lifeboat: the trainer was killed by the kernel's OOM killer (%s)", l.cfg.Memory.Describe())
	case preempted && l.stopSig != 0:
		msg = fmt.Sprintf("lifeboat: stopped by SIG%s; %s", signals.Name(l.stopSig), describeStatus(l.childStatus))
	case preempted:
		msg = fmt.Sprintf("lifeboat: stopped: %s; %s", l.stopReason, describeStatus(l.childStatus))
	default:
		msg = fmt.Sprintf("lifeboat: %s", describeStatus(l.childStatus))
	}
	if !l.killedAt.IsZero() {
		msg += "; processes still running at the grace deadline were killed"
	}
	if l.restarts > 0 {
		msg += fmt.Sprintf("; after %d restarts", l.restarts)
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
