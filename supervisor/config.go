package supervisor

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
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
	// StopDelivery says how a stop signal reaches the trainer's tree: by
	// default (signals.MainFirst) the main process first, the rest of its
	// tree when the main process has exited or TreeShare of the trainer's
	// budget has passed. Signals that start no stop follow ChildOnly.
	StopDelivery signals.Delivery
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
	// Clock tells the time and makes the loop's timers (tests move one by
	// hand). Default the system's clock.
	Clock Clock

	// Checkpoints, when set, is the checkpoint pipeline beside the
	// trainer: the grace budget keeps a reserve for its final upload,
	// which runs when the trainer's tree is gone, and a restart waits for
	// its commit and restore. Without it a stop gives the trainer the whole
	// grace and a crashed trainer restarts at once.
	Checkpoints Checkpoints
	// AfterExitTimeout bounds Checkpoints' final upload when the trainer
	// exited on its own, and its work before a restart. Default Grace.
	AfterExitTimeout time.Duration
	// Job, when set, is the rest of a job whose ranks stop together (the
	// job-wide stop): told of this rank's stop and failure, and asked
	// whether a failure or a SIGKILL at the deadline is part of a stop
	// another rank began. Nil for a job of one rank.
	Job Job
	// Observer, when set, is told what happens: each stop (its reason,
	// signal, start and deadline, determined once), stop signal, restart,
	// OOM kill, reaped process, and the SIGKILL of the tree.
	Observer Observer

	// MaxRuntime, when set, stops the trainer exactly as a preemption would
	// once it has run this long (clusters that reclaim jobs older than 72h),
	// so the last checkpoint is saved and committed and the pod is retried.
	MaxRuntime time.Duration
	// Notices delivers cloud preemption notices. Each sends NoticeSignal to
	// the trainer (default: the first stop signal) and pulls the grace
	// deadline in to the notice's deadline (less ExitMargin; a deadline
	// nearer than NoticeMinLead is not believed). A NoticeSignal that is
	// not a stop signal (USR1: "save now") is followed by the first stop
	// signal in time for the trainer to exit on its own, when TreeShare of
	// its budget has passed. A trainer SIGKILLed at the end of
	// a notice's budget was preempted: lifeboat exits with PreemptExitCode.
	Notices      <-chan Notice
	NoticeSignal unix.Signal
	// Restart restarts a crashed trainer in place.
	Restart RestartPolicy

	// Memory, when set, puts the trainer in its own memory cgroup and
	// counts OOM kills there (limits/memory in production).
	Memory Memory
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

// NoticeMinLead is the least time a preemption notice's deadline (less
// ExitMargin) must leave for it to be believed. A real notice gives 30 s
// (GCP) to 2 minutes (AWS); one whose deadline is past, or nearer than
// this, was read late or comes from a clock that disagrees with this
// node's, and pulling the grace budget in to it would SIGKILL the trainer
// before its save. Such a stop runs on Grace from the moment the notice
// was seen (supervisor.notice_deadline_unusable).
const NoticeMinLead = 5 * time.Second

// TreeShare is the share of the trainer's budget (the grace less the
// final upload's reserve) after which, with signals.MainFirst, the rest of
// the trainer's tree gets the stop signal when the main process has not
// exited: the main process saves in the first half, and a launcher that
// catches the signal without passing it on leaves its workers the second.
const TreeShare = 0.5

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
		c.Clock = realClock{}
	}
	if c.AfterExitTimeout == 0 {
		c.AfterExitTimeout = c.Grace
	}
	if c.NoticeSignal == 0 {
		c.NoticeSignal = c.StopSignals[0]
	}
	if c.Observer == nil {
		c.Observer = nopObserver{}
	}
}

// nopObserver is the Observer of a Config without one.
type nopObserver struct{}

func (nopObserver) Stopping(Stop)                          {}
func (nopObserver) StopSignal(unix.Signal)                 {}
func (nopObserver) Restarted(string)                       {}
func (nopObserver) OOMKilled()                             {}
func (nopObserver) Reaped(int, unix.WaitStatus, time.Time) {}
func (nopObserver) Killing(time.Time)                      {}

// Fields of a FieldError: which of Config was wrong.
const (
	FieldGrace           = "grace"
	FieldPreemptExitCode = "preempt_exit_code"
	FieldStopSignals     = "stop_signals"
	FieldStopDelivery    = "stop_delivery"
	FieldMaxRuntime      = "max_runtime"
	FieldMaxRestarts     = "max_restarts"
	FieldRestartBackoff  = "restart_backoff"
)

// ErrGroupChildOnly: StopDelivery is signals.Group, which ChildOnly
// forbids (a FieldError of FieldStopDelivery wraps it).
var ErrGroupChildOnly = errors.New("sends stop signals to the trainer's process group, which child-only signalling forbids")

// ErrNoRestarts: Restart.OnFailure with Restart.Max 0 (a FieldError of
// FieldMaxRestarts wraps it).
var ErrNoRestarts = errors.New("restarting on failure needs at least 1")

// FieldError says which of Config was wrong, and why. The caller names
// the field as its user gave it (a flag, a variable).
type FieldError struct {
	Field string // one of the Field constants
	Value string
	Err   error
}

func (e *FieldError) Error() string {
	return fmt.Sprintf("supervisor: %s %s: %v", e.Field, e.Value, e.Err)
}
func (e *FieldError) Unwrap() error { return e.Err }

// Validate reports the first thing wrong with c: a *FieldError, or an
// error for a Config without Argv.
func (c *Config) Validate() error {
	field := func(f string, v any, why string) error {
		return &FieldError{Field: f, Value: fmt.Sprint(v), Err: errors.New(why)}
	}
	if len(c.Argv) == 0 {
		return errors.New("supervisor: no command to run (Argv is empty)")
	}
	if c.Grace < 0 {
		return field(FieldGrace, c.Grace, "it must be positive, for example 30s")
	}
	if c.PreemptExitCode != PreemptChild && (c.PreemptExitCode < 0 || c.PreemptExitCode > 255) {
		return field(FieldPreemptExitCode, c.PreemptExitCode, "it must be 0..255 or PreemptChild")
	}
	for _, s := range c.StopSignals {
		if !signals.Forwardable(s) {
			return field(FieldStopSignals, signals.Name(s), "lifeboat cannot receive or forward it")
		}
	}
	switch c.StopDelivery {
	case signals.MainFirst, signals.MainOnly:
	case signals.Group:
		if c.ChildOnly {
			return &FieldError{Field: FieldStopDelivery, Value: c.StopDelivery.String(), Err: ErrGroupChildOnly}
		}
	default:
		return field(FieldStopDelivery, c.StopDelivery, "use main-first, group or main-only")
	}
	if c.MaxRuntime < 0 {
		return field(FieldMaxRuntime, c.MaxRuntime, "it must be positive, for example 72h")
	}
	if c.Restart.Max < 0 {
		return field(FieldMaxRestarts, c.Restart.Max, "it must not be negative")
	}
	if c.Restart.Backoff < 0 {
		return field(FieldRestartBackoff, c.Restart.Backoff, "it must not be negative")
	}
	if c.Restart.OnFailure && c.Restart.Max == 0 {
		return &FieldError{Field: FieldMaxRestarts, Value: "0", Err: ErrNoRestarts}
	}
	return nil
}
