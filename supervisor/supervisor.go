package supervisor

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/lifeboat-project/lifeboat/signals"
)

// phase is where one supervision stands. The loop reads it to decide what
// an event means; every phase answers signals, notices and the reap tick
// in the same select, so none can miss a signal or its deadline.
type phase int

const (
	phaseRunning    phase = iota // the trainer, or what is left of its tree, runs
	phaseChecking                // the trainer failed; Job.PeerStop looks for a job-wide stop
	phaseBackoff                 // the tree is gone; waiting before a restart
	phaseRestarting              // Checkpoints.BeforeRestart runs
	phaseFlushing                // Checkpoints.Flush (the final upload) runs
	phaseDone                    // nothing left to wait for: Run returns
)

func (p phase) String() string {
	switch p {
	case phaseRunning:
		return "running"
	case phaseChecking:
		return "checking"
	case phaseBackoff:
		return "backoff"
	case phaseRestarting:
		return "restarting"
	case phaseFlushing:
		return "flushing"
	}
	return "done"
}

// loop is the state of one supervision; one goroutine owns it.
type loop struct {
	cfg    Config
	phase  phase
	target signals.Target

	childDone   bool
	childStatus unix.WaitStatus
	noChildren  bool // Wait4 said ECHILD: nothing left to reap

	stopping     bool        // a stop began: signal, context, max runtime or notice
	stop         Stop        // that stop: why, the signal received, when, and when its grace budget ends
	ints         int         // SIGINTs received
	killedAt     time.Time   // when the tree was SIGKILLed, zero if not
	killAt       time.Time   // when the kill alarm fires, once a stop armed it
	killedMain   bool        // that SIGKILL reached the main child, still running then
	deadlineKill bool        // that SIGKILL was the grace deadline's
	treeSignal   bool        // leftovers were sent the stop signal after the child exited
	stopSent     unix.Signal // the signal the main process was sent for the stop, 0 if none
	noticed      bool        // a preemption notice came: a SIGKILL at its deadline is a preemption
	stopOwed     bool        // the trainer got only a signal that does not stop it (--notice-signal USR1): the term alarm sends the stop signal
	treeStop     bool        // the whole tree gets stop signals (Group, or the tree alarm fired)
	handDown     unix.Signal // signalTops hands this down the tree, 0 while it does not
	handedTo     map[int]bool
	restarts     int      // restarts done
	env          []string // the trainer's environment
	oomBefore    uint64   // OOM kills counted before this trainer started
	oomKilled    bool     // the main trainer process was OOM-killed
	flushErr     error    // why the last checkpoint was not made durable, if it was not

	// Every timer is a case of the loop's select.
	maxRuntime alarm // MaxRuntime after the start
	kill       alarm // the grace deadline: SIGKILL what is left of the tree
	tree       alarm // MainFirst: TreeShare of the trainer's budget, the stop signal to the rest of the tree
	term       alarm // stopOwed: the stop signal to the trainer, in time for it to exit on its own
	killWait   alarm // after the SIGKILL: stop waiting for processes that do not die
	backoff    alarm // the wait before a restart

	// The hook in flight (BeforeRestart, Flush or PeerStop): its context's
	// cancel, the time after which the loop stops waiting for it (and why
	// then), and the channel its result arrives on.
	cancelHook   context.CancelFunc
	hookEnd      alarm
	hookEndAt    time.Time
	hookLimit    string // "the grace period", or the timeout
	restartDone  chan restartResult
	flushDone    chan error
	checkDone    chan string
	restartEnded bool // a stop cancelled the BeforeRestart in flight
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
	for _, a := range l.alarms() {
		a.clock = cfg.Clock
	}
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
	l.phase = phaseRunning
	l.oomKilled = false
	l.target = signals.Target{Pid: pid, ChildOnly: l.cfg.ChildOnly}
	l.childDone, l.childStatus, l.noChildren, l.treeSignal = false, 0, false, false
	l.treeStop = l.cfg.StopDelivery == signals.Group
	l.handDown, l.handedTo = 0, nil
	l.tree.stop()
	l.cfg.Log.Info("supervisor.started", "pid", pid, "argv0", l.cfg.Argv[0], "pid1", os.Getpid() == 1,
		"grace", l.cfg.Grace.String(), "restarts", l.restarts)
	return nil
}

// run is the one supervision loop, in the manner of tini's: wait for an
// event (a signal, a timer, a hook's result, a notice, the reap tick),
// handle it, reap, and move to the next phase when the current one is over.
func (l *loop) run(ctx context.Context, sigs <-chan os.Signal) error {
	tick := time.NewTicker(reapInterval)
	defer tick.Stop()
	defer l.stopTimers()
	done := ctx.Done()
	if l.cfg.MaxRuntime > 0 {
		l.maxRuntime.set(l.cfg.MaxRuntime)
	}
	notices := l.cfg.Notices
	var ooms <-chan struct{}
	if l.cfg.Memory != nil {
		ooms = l.cfg.Memory.OOMKills()
	}
	for l.phase != phaseDone {
		select {
		case s, ok := <-sigs:
			if !ok {
				sigs = nil // a closed channel would spin the loop
				continue
			}
			if sig, ok := s.(unix.Signal); ok {
				l.signal(sig)
			}
		case <-tick.C:
		case <-done:
			done = nil
			l.cfg.Log.Info("supervisor.context_done", "effect", "stopping the trainer")
			l.stopWith(l.cfg.StopSignals[0], true, "lifeboat was asked to stop", time.Time{})
		case <-l.maxRuntime.c():
			l.maxRuntime.stop()
			reason := fmt.Sprintf("max runtime %s reached", l.cfg.MaxRuntime)
			l.cfg.Log.Warn("supervisor.max_runtime", "max_runtime", l.cfg.MaxRuntime.String(), "effect", "stopping as on preemption")
			l.stopWith(l.cfg.StopSignals[0], true, reason, time.Time{})
		case _, ok := <-ooms:
			if !ok {
				ooms = nil
				continue
			}
			// memory.oom_kill logs the kill; this only counts it.
			l.cfg.Observer.OOMKilled()
		case n, ok := <-notices:
			if !ok {
				notices = nil
				continue
			}
			l.cfg.Log.Warn("supervisor.preemption_notice", withDeadline([]any{"source", n.Source}, n.Deadline,
				"detail", n.Detail, "signal", signals.Name(l.cfg.NoticeSignal))...)
			l.noticed = true
			l.stopWith(l.cfg.NoticeSignal, false, n.Source+" preemption notice", l.noticeEnd(n))
		case <-l.tree.c():
			l.tree.stop()
			l.stopTree()
		case <-l.term.c():
			l.term.stop()
			l.stopAfterNotice()
		case <-l.kill.c():
			l.kill.stop()
			args := []any{"grace", l.cfg.Grace.String()}
			if l.stopping {
				// The budget actually used: a notice may have pulled it in.
				args = []any{"grace", l.stop.Deadline.Sub(l.stop.At).Round(time.Millisecond).String(), "deadline", logTime(l.stop.Deadline)}
			}
			l.cfg.Log.Warn("supervisor.grace_expired", append(args, "effect", "SIGKILL everything left")...)
			l.killTree()
			l.deadlineKill = l.killedMain
		case <-l.killWait.c():
			l.killWait.stop()
			l.cfg.Log.Error("supervisor.unreaped", "waited", killWait.String(),
				"effect", "exiting with processes that did not die after SIGKILL")
			l.phase = phaseDone
		case <-l.backoff.c():
			l.backoff.stop()
			l.beginRestart()
		case r := <-l.restartDone:
			l.endRestart(r)
		case err := <-l.flushDone:
			l.endFlush(err)
		case stop := <-l.checkDone:
			l.endCheck(stop)
		case <-l.hookEnd.c():
			l.hookEnd.stop()
			l.hookOverdue()
		}
		l.reap()
		l.step()
	}
	return l.finish()
}

// step moves the supervision to its next phase once what the current one
// waits for has happened. It runs after every event.
func (l *loop) step() {
	switch l.phase {
	case phaseRunning:
		if !l.childDone {
			if l.handDown != 0 && l.killedAt.IsZero() {
				l.signalTops() // to those whose parent has exited since
			}
			return
		}
		l.tree.stop() // the leftovers get the stop signal now
		if !l.treeSignal {
			l.treeSignal = true
			l.signalLeftovers()
		} else if l.handDown != 0 && !l.noChildren && l.killedAt.IsZero() {
			l.signalTops()
		}
		if !l.noChildren {
			return
		}
		// The trainer and its whole tree are gone: their deadlines with them.
		l.kill.stop()
		l.killWait.stop()
		if !l.stopping && l.failed() && l.cfg.Job != nil {
			l.beginCheck()
			return
		}
		l.afterTrainer()
	case phaseBackoff:
		if l.stopping {
			l.backoff.stop()
			l.cfg.Log.Info("supervisor.restart_cancelled", "reason", l.stop.Reason, "phase", phaseBackoff.String())
			l.beginFlush()
		}
	case phaseRestarting:
		if l.stopping && !l.restartEnded {
			l.restartEnded = true
			l.cfg.Log.Info("supervisor.restart_cancelled", "reason", l.stop.Reason, "phase", phaseRestarting.String())
			l.cancelHook()
		}
	}
}

// alarms lists every timer of the loop.
func (l *loop) alarms() []*alarm {
	return []*alarm{&l.maxRuntime, &l.kill, &l.tree, &l.term, &l.killWait, &l.backoff, &l.hookEnd}
}

// stopTimers stops every timer the loop may have armed.
func (l *loop) stopTimers() {
	for _, a := range l.alarms() {
		a.stop()
	}
	if l.cancelHook != nil {
		l.cancelHook()
	}
}

// stopWith begins a stop that no signal caused (context, max runtime,
// notice): it delivers sig to the trainer (through the rewrite rules when
// rewrite is set) and starts the grace budget, ending at end when that is
// set and earlier than the usual end.
func (l *loop) stopWith(sig unix.Signal, rewrite bool, reason string, end time.Time) {
	rw := l.cfg.Rewrite
	if !rewrite {
		rw = nil
	}
	if !l.stopping && !slices.Contains(l.cfg.StopSignals, sig) {
		l.stopOwed = true // a "save now" signal: the stop signal follows (startStop arms it)
	}
	l.startStop(0, l.deliver(sig, rw, true), reason, end)
}

// noticeEnd is the end of the grace budget a notice asks for: its
// deadline less ExitMargin, or zero (Grace from now) when it has none or
// when that leaves less than NoticeMinLead.
func (l *loop) noticeEnd(n Notice) time.Time {
	if n.Deadline.IsZero() {
		return time.Time{}
	}
	end := n.Deadline.Add(-ExitMargin)
	left := end.Sub(l.cfg.Clock.Now())
	if left >= NoticeMinLead {
		return end
	}
	what := "only " + left.Round(time.Millisecond).String() + " away"
	if left < 0 {
		what = "already past by " + (-left).Round(time.Millisecond).String()
	}
	l.cfg.Log.Warn("supervisor.notice_deadline_unusable", "source", n.Source, "deadline", logTime(n.Deadline),
		"left", left.Round(time.Millisecond).String(), "grace", l.cfg.Grace.String(),
		"effect", fmt.Sprintf("the notice's deadline (less %s) is %s, less than the %s a trainer needs: the stop runs on the grace period from now instead", ExitMargin, what, NoticeMinLead),
		"hint", "a notice read late, or this node's clock behind the cloud's; check the node's time synchronisation")
	return time.Time{}
}

// stopAfterNotice sends the first stop signal to a trainer that was sent
// only a signal that does not stop it (--notice-signal USR1), so that it
// exits on its own before its budget ends rather than being SIGKILLed.
// From here on the stop is delivered as one that began with that signal.
func (l *loop) stopAfterNotice() {
	if !l.stopOwed || l.childDone || !l.killedAt.IsZero() {
		return
	}
	l.stopOwed = false
	sig := l.cfg.StopSignals[0]
	sent := l.deliver(sig, l.cfg.Rewrite, true)
	l.stopSent = sent
	left := max(l.killAt.Sub(l.cfg.Clock.Now()), 0)
	if !l.treeStop && l.cfg.StopDelivery == signals.MainFirst {
		l.tree.set(time.Duration(float64(left) * TreeShare))
	}
	l.cfg.Log.Info("supervisor.stop_after_notice", "signal", signals.Name(sig), "delivered", signalName(sent),
		"kill_at", logTime(l.killAt),
		"effect", "the notice's signal does not stop the trainer: the stop signal now lets it exit on its own before its budget ends")
}

// deliver sends sig, rewritten by rw, to the trainer while it runs. A
// stop goes to the main process alone until the whole tree is to get it
// (Config.StopDelivery); other signals go to the target. It returns the
// signal sent, or 0 when none reached it.
func (l *loop) deliver(sig unix.Signal, rw signals.Rewrite, stop bool) unix.Signal {
	t := l.target
	if stop && !l.treeStop {
		t.ChildOnly = true
	}
	if l.childDone || !signals.Deliver(t, rw, l.cfg.Kill, sig, l.cfg.Log) {
		return 0
	}
	return rw.Apply(sig)
}

// stopTree runs when TreeShare of the trainer's budget has passed after a
// stop (signals.MainFirst) and the main process still runs: a launcher
// that caught the stop signal without passing it on. The signal the main
// process was sent is handed down its tree (signalTops), starting with the
// processes it started; later stop signals go to the whole group.
func (l *loop) stopTree() {
	if l.childDone || l.treeStop || !l.killedAt.IsZero() {
		return
	}
	l.treeStop = true
	sig := l.stopSent
	if sig == 0 {
		sig = l.cfg.StopSignals[0]
	}
	l.handDown, l.handedTo = sig, map[int]bool{}
	n := l.signalTops()
	l.cfg.Log.Warn("supervisor.stop_tree", "pid", l.target.Pid, "processes", n, "signal", signals.Name(sig),
		"effect", "the trainer's main process has not exited after half its budget (a launcher that does not pass the signal on?): the processes it started get the signal now, theirs once they have exited")
}

// signalTops hands the stop signal down what is left of the trainer's
// tree, once to each process: to the processes at its top, which are the
// main process's children while it runs and every process lifeboat
// adopted (whose parent has exited). A process's own children get the
// signal from it, or from lifeboat once it has exited: a PyTorch
// DataLoader worker dies of a stop signal that does not come from its
// parent, and takes its trainer's save with it. It runs after every event
// until the tree is gone, and returns how many processes it signalled.
func (l *loop) signalTops() int {
	procs, err := readProcs(l.cfg.ProcRoot)
	if err != nil {
		l.cfg.Log.Error("supervisor.list_processes_failed", "err", err)
		return 0
	}
	self, main, n := os.Getpid(), l.target.Pid, 0
	for _, p := range procs {
		top := p.ppid == self || p.ppid == main && !l.childDone
		if !top || p.pid == main || p.state == 'Z' || p.state == 'X' || l.handedTo[p.pid] {
			continue
		}
		l.handedTo[p.pid] = true
		n++
		if err := l.cfg.Kill(p.pid, l.handDown); err != nil && !errors.Is(err, unix.ESRCH) {
			l.cfg.Log.Warn("supervisor.signal_failed", "pid", p.pid, "signal", signals.Name(l.handDown), "err", err)
		}
	}
	return n
}

// signal handles one received signal. Signals that are not Forwardable
// are dropped: SIGCHLD (the loop reaps after every event), SIGPIPE
// (lifeboat's own, from a log reader that went away), and the rest that
// signals.Forwardable lists.
func (l *loop) signal(sig unix.Signal) {
	if !signals.Forwardable(sig) {
		return
	}
	if sig == unix.SIGINT {
		l.ints++
	}
	stop := slices.Contains(l.cfg.StopSignals, sig)
	sent := l.deliver(sig, l.cfg.Rewrite, stop)
	if stop && l.stopOwed {
		// The trainer has its stop signal: nothing is owed any more, and the
		// rest of its tree follows as after any stop signal.
		l.stopOwed = false
		l.term.stop()
		l.stopSent = sent
		if !l.treeStop && l.cfg.StopDelivery == signals.MainFirst && l.killedAt.IsZero() && !l.childDone {
			l.tree.set(time.Duration(float64(max(l.killAt.Sub(l.cfg.Clock.Now()), 0)) * TreeShare))
		}
	}
	if stop {
		l.cfg.Observer.StopSignal(sig)
		l.startStop(sig, sent, "SIG"+signals.Name(sig), time.Time{})
	}
	if sig != unix.SIGINT || l.ints < 2 {
		return
	}
	// A second INT means "stop now", as when Ctrl-C is pressed twice.
	switch {
	case l.phase == phaseFlushing:
		l.cfg.Log.Warn("supervisor.second_interrupt", "effect", "cancel the final upload")
		l.cancelHook()
	case l.phase == phaseRunning && l.killedAt.IsZero():
		l.cfg.Log.Warn("supervisor.second_interrupt", "effect", "SIGKILL everything now")
		l.killTree()
	}
}

// startStop records the first stop and starts the grace budget: the
// trainer's tree is SIGKILLed at its end less the final upload's reserve.
// Later stops do not move the end, unless they bring it forward (a
// preemption notice with an earlier deadline). sig is the signal received,
// 0 when the stop had another cause; sent is the signal the trainer was
// sent for it, 0 when none reached it; end, when set, is the budget's end.
// After the trainer's tree is gone (backoff, restarting, flushing) the
// budget bounds the hook in flight and the final flush instead.
func (l *loop) startStop(sig, sent unix.Signal, reason string, end time.Time) {
	now := l.cfg.Clock.Now()
	if end.IsZero() || end.After(now.Add(l.cfg.Grace)) {
		end = now.Add(l.cfg.Grace)
	}
	if l.stopping {
		if !end.Before(l.stop.Deadline) {
			return
		}
		l.cfg.Log.Warn("supervisor.deadline_moved", "reason", reason, "deadline", logTime(end))
	} else {
		l.stopping, l.stop, l.stopSent = true, Stop{Reason: reason, Signal: sig, At: now}, sent
	}
	l.stop.Deadline = end
	l.cfg.Observer.Stopping(l.stop)
	if l.cfg.Job != nil {
		l.cfg.Job.Stopping(l.stop)
	}
	received, delivered := signalName(sig), signalName(sent)
	grace := end.Sub(now)
	if l.phase != phaseRunning {
		// The tree is gone: the whole budget is the final upload's.
		l.boundHook(l.stop.FlushEnd(), "the grace period")
		l.cfg.Log.Info("supervisor.stopping", "reason", reason, "signal", received, "delivered", delivered,
			"phase", l.phase.String(), "delivery", l.cfg.StopDelivery.String(),
			"budget", fmt.Sprintf("grace %s, all of it for the final upload (the trainer's tree is gone)", grace.Round(time.Millisecond)),
			"deadline", logTime(end))
		return
	}
	budget := grace
	var reserve time.Duration
	why := "no final upload"
	if l.cfg.Checkpoints != nil {
		reserve, why = l.cfg.Checkpoints.Reserve()
		reserve = min(max(reserve, 0), grace/2)
		budget -= reserve
	}
	switch {
	case l.childDone: // leftovers are already being waited for under their own deadline
		l.armDeadline()
	case l.killedAt.IsZero():
		l.kill.set(budget)
		l.killAt = now.Add(budget)
		switch {
		case l.stopOwed:
			// The stop signal comes when TreeShare of the budget has passed;
			// the budget is never more than a plain stop's (Grace), so the
			// trainer has at least half of that to exit on its own.
			l.term.set(time.Duration(float64(budget) * TreeShare))
		case !l.treeStop && l.cfg.StopDelivery == signals.MainFirst:
			l.tree.set(time.Duration(float64(budget) * TreeShare))
		}
	}
	l.cfg.Log.Info("supervisor.stopping", "reason", reason, "signal", received, "delivered", delivered,
		"phase", l.phase.String(), "delivery", l.cfg.StopDelivery.String(),
		"budget", fmt.Sprintf("grace %s = trainer %s + final upload reserve %s (%s)", grace.Round(time.Millisecond), budget.Round(time.Millisecond), reserve.Round(time.Millisecond), why),
		"kill_at", logTime(now.Add(budget)),
		"deadline", logTime(end))
}

// logTimeFormat is how log lines give a time (deadline, kill_at): RFC 3339
// in UTC, to the millisecond, trailing zeros dropped.
const logTimeFormat = "2006-01-02T15:04:05.999Z07:00"

// logTime formats t for a log line.
func logTime(t time.Time) string { return t.UTC().Format(logTimeFormat) }

// withDeadline appends "deadline" (when t is set) and then rest to args:
// a deadline that is not known is left out, not logged as year 1.
func withDeadline(args []any, t time.Time, rest ...any) []any {
	if !t.IsZero() {
		args = append(args, "deadline", logTime(t))
	}
	return append(args, rest...)
}

// signalName names sig for the log: "none" for 0.
func signalName(sig unix.Signal) string {
	if sig == 0 {
		return "none"
	}
	return signals.Name(sig)
}

// armDeadline starts the grace timer for leftovers when no stop started one.
func (l *loop) armDeadline() {
	if !l.kill.armed() && l.killedAt.IsZero() {
		l.kill.set(l.cfg.Grace)
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
		l.cfg.Observer.Reaped(pid, ws, l.cfg.Clock.Now())
		if pid == l.target.Pid {
			l.childDone = true
			l.childStatus = ws
			l.cfg.Log.Info("supervisor.child_exited", "pid", pid, "status", describeStatus(ws))
			l.checkOOM(ws)
		} else {
			l.cfg.Log.Debug("supervisor.reaped", "pid", pid, "status", strings.TrimPrefix(describeStatus(ws), "trainer "))
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
// being killed mid-cleanup when lifeboat exits. With signals.Group every
// process gets it at once; otherwise it is handed down the tree
// (signalTops), parents before their children.
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
	l.armDeadline()
	if l.cfg.StopDelivery != signals.Group {
		if l.handDown == 0 {
			l.handDown, l.handedTo = sig, map[int]bool{}
		}
		l.signalTops()
		return
	}
	for _, pid := range left {
		if err := l.cfg.Kill(pid, sig); err != nil && !errors.Is(err, unix.ESRCH) {
			l.cfg.Log.Warn("supervisor.signal_failed", "pid", pid, "signal", signals.Name(sig), "err", err)
		}
	}
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
// repeats while new processes appear (a fork racing the kill), then gives
// the killed processes killWait to be reaped: PID 1 must never hang on one
// in uninterruptible sleep.
//
// supervisor.killed counts the processes that were alive and got the
// SIGKILL, each once. The tree is listed before the group is killed, and a
// listed process stays there (a zombie at worst) until this loop reaps it,
// so every one of them is still there to be sent its own SIGKILL and
// counted; later rounds only kill processes not sent one before.
func (l *loop) killTree() {
	l.killedAt, l.killedMain = l.cfg.Clock.Now(), !l.childDone
	l.cfg.Observer.Killing(l.killedAt)
	l.kill.stop()
	l.tree.stop()
	l.killWait.set(killWait)
	left := l.descendants()
	if !l.childDone {
		if err := l.cfg.Kill(-l.target.Pid, unix.SIGKILL); err != nil && !errors.Is(err, unix.ESRCH) {
			l.cfg.Log.Warn("supervisor.kill_failed", "pgid", l.target.Pid, "err", err)
		}
	}
	sent, killed := map[int]bool{}, 0
	for round := 0; round < 10 && len(left) > 0; round++ {
		for _, pid := range left {
			sent[pid] = true
			if err := l.cfg.Kill(pid, unix.SIGKILL); err == nil {
				killed++
			} else if !errors.Is(err, unix.ESRCH) {
				l.cfg.Log.Warn("supervisor.kill_failed", "pid", pid, "err", err)
			}
		}
		left = slices.DeleteFunc(l.descendants(), func(pid int) bool { return sent[pid] })
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
	jobWide := l.jobWideStop()
	if jobWide != "" {
		code = l.cfg.PreemptExitCode
	}
	atNotice := jobWide == "" && l.killedAtNotice()
	if atNotice {
		code = l.cfg.PreemptExitCode
	}
	var msg string
	switch {
	case !l.childDone:
		msg = "lifeboat: the trainer could not be reaped"
	case l.oomKilled:
		msg = fmt.Sprintf("lifeboat: the trainer was killed by the kernel's OOM killer (%s)", l.cfg.Memory.Describe())
	case preempted && l.stop.Signal != 0:
		msg = fmt.Sprintf("lifeboat: stopped by SIG%s; %s", signals.Name(l.stop.Signal), describeStatus(l.childStatus))
	case preempted:
		msg = fmt.Sprintf("lifeboat: stopped: %s; %s", l.stop.Reason, describeStatus(l.childStatus))
	default:
		msg = fmt.Sprintf("lifeboat: %s", describeStatus(l.childStatus))
	}
	if !l.killedAt.IsZero() {
		msg += "; processes still running at the grace deadline were killed"
	}
	if jobWide != "" {
		msg += fmt.Sprintf("; part of a job-wide stop (%s), so a preemption", jobWide)
	}
	if atNotice {
		msg += "; killed at the end of a preemption notice's budget, so a preemption"
	}
	if l.restarts > 0 {
		msg += fmt.Sprintf("; after %d restarts", l.restarts)
	}
	if l.flushErr != nil {
		msg += "; the last checkpoint could not be uploaded: " + l.flushErr.Error()
	} else if l.cfg.Checkpoints != nil && l.childDone {
		if note := l.cfg.Checkpoints.FlushNote(); note != "" {
			msg += "; " + note
		}
	}
	msg += fmt.Sprintf("; exit code %d", code)
	l.writeTerminationLog(msg)
	l.cfg.Log.Info("supervisor.exit", "code", code, "preempted", preempted)
	if code == 0 {
		return nil
	}
	return &ExitError{Status: l.childStatus, Started: true, Preempted: preempted, Code: code}
}

// jobWideStop names the job-wide stop that makes a trainer that failed
// during a stop a preemption (Job.JobWideStop); "" when it is not one. Once a rank takes part in a job-wide stop, a trainer that fails (a
// collective whose peer left) or that lifeboat SIGKILLed at the grace
// deadline (blocked in such a collective) ended because of it. A trainer
// killed by another (the OOM killer) stays a failure.
func (l *loop) jobWideStop() string {
	ws := l.childStatus
	if !l.childDone || !l.stopping || !l.failed() || l.oomKilled ||
		l.cfg.Job == nil || l.cfg.PreemptExitCode == PreemptChild {
		return ""
	}
	if ws.Signaled() && ws.Signal() == unix.SIGKILL && !l.killedMain {
		return ""
	}
	return l.cfg.Job.JobWideStop()
}

// killedAtNotice reports whether lifeboat SIGKILLed the trainer's main
// process at the end of a stop's budget after a preemption notice came:
// the machine is going away, so the kill is the preemption, not the
// trainer's failure, and the Job must retry without counting one.
func (l *loop) killedAtNotice() bool {
	ws := l.childStatus
	return l.childDone && l.stopping && l.noticed && l.deadlineKill && !l.oomKilled &&
		l.cfg.PreemptExitCode != PreemptChild && ws.Signaled() && ws.Signal() == unix.SIGKILL
}

func (l *loop) writeTerminationLog(msg string) {
	WriteTerminationLog(l.cfg.TerminationLog, l.cfg.TerminationLogCreate, msg, l.cfg.Log)
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
