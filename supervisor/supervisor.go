package supervisor

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/lifeboat-project/lifeboat/signals"
)

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
