package supervisor

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	"golang.org/x/sys/unix"
)

// The tests in this file send a stop signal in each phase after the
// trainer: the restart's backoff, BeforeRestart, and the final flush. The
// trainer is a real process; signals come through the injected channel.

// hangLimit bounds how long a test waits for Run before calling it hung. It
// is far above any expected time, not a speed claim.
const hangLimit = 60 * time.Second

// logBuffer collects lifeboat's log lines for a test to grep.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func (l *logBuffer) logger() *slog.Logger {
	return slog.New(slog.NewJSONHandler(l, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// waitLog waits until the log holds an event named msg.
func waitLog(t *testing.T, logs *logBuffer, msg string, done <-chan error) {
	t.Helper()
	deadline := time.Now().Add(hangLimit)
	for time.Now().Before(deadline) {
		if strings.Contains(logs.String(), `"msg":"`+msg+`"`) {
			return
		}
		select {
		case err := <-done:
			t.Fatalf("Run returned %v before %s was logged; log:\n%s", err, msg, logs.String())
		case <-time.After(5 * time.Millisecond):
		}
	}
	t.Fatalf("%s never logged; log:\n%s", msg, logs.String())
}

// waitRun waits for Run's result.
func waitRun(t *testing.T, done <-chan error, logs *logBuffer) error {
	t.Helper()
	select {
	case err := <-done:
		return err
	case <-time.After(hangLimit):
		t.Fatalf("Run did not return within %s; log:\n%s", hangLimit, logs.String())
		return nil
	}
}

// waitFile waits until path exists.
func waitFile(t *testing.T, path string) {
	t.Helper()
	deadline := time.Now().Add(hangLimit)
	for time.Now().Before(deadline) {
		if _, err := os.Stat(path); err == nil {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("%s never appeared", path)
}

// flushRecord records Checkpoints.Flush's calls.
type flushRecord struct {
	mu      sync.Mutex
	stopped []bool
}

func (f *flushRecord) flush(ctx context.Context, stop *Stop) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.stopped = append(f.stopped, stop != nil)
	return nil
}

func (f *flushRecord) calls() []bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]bool(nil), f.stopped...)
}

// crashingTrainer counts its runs in a file and exits 3.
func crashingTrainer(runs string) []string {
	return []string{"sh", "-c", `echo run >> "$0"; exit 3`, runs}
}

func countRuns(t *testing.T, runs string) int {
	t.Helper()
	b, err := os.ReadFile(runs)
	if err != nil {
		t.Fatal(err)
	}
	return strings.Count(string(b), "run")
}

// wantPreempted checks that Run ended as a preemption with the crashed
// trainer's code, and that the termination log says why.
func wantPreempted(t *testing.T, err error, code int, tlog string) {
	t.Helper()
	var ee *ExitError
	if !errors.As(err, &ee) || !ee.Preempted || ee.Code != code {
		t.Errorf("Run = %v, want a preempted exit with code %d", err, code)
	}
	b, _ := os.ReadFile(tlog)
	if !strings.Contains(string(b), "stopped by SIGTERM") {
		t.Errorf("termination log %q does not say SIGTERM stopped lifeboat", b)
	}
}

// TestStopDuringBackoff: a SIGTERM during a restart's backoff (1h) ends the
// supervision at once: no second trainer, one final flush as a stop.
func TestStopDuringBackoff(t *testing.T) {
	defer goleak.VerifyNone(t)
	dir := t.TempDir()
	runs, tlog := filepath.Join(dir, "runs"), filepath.Join(dir, "tlog")
	in := make(chan os.Signal, 1)
	logs := &logBuffer{}
	flush := &flushRecord{}
	done := make(chan error, 1)
	go func() {
		done <- Run(context.Background(), Config{
			Argv: crashingTrainer(runs), Signals: in, Grace: time.Hour, Log: logs.logger(),
			TerminationLog: tlog, TerminationLogCreate: true,
			Restart: RestartPolicy{OnFailure: true, Max: 3, Backoff: time.Hour},
			Checkpoints: &hooks{beforeRestart: func(ctx context.Context, attempt int) ([]string, error) {
				t.Errorf("BeforeRestart ran although the backoff was cut short by SIGTERM")
				return nil, nil
			}, flush: flush.flush},
		})
	}()
	waitLog(t, logs, "supervisor.restart", done)
	in <- unix.SIGTERM
	err := waitRun(t, done, logs)
	wantPreempted(t, err, 3, tlog)
	if n := countRuns(t, runs); n != 1 {
		t.Errorf("the trainer ran %d times, want 1", n)
	}
	if got := flush.calls(); len(got) != 1 || !got[0] {
		t.Errorf("Flush calls (stopped) = %v, want one with stopped=true", got)
	}
	if !strings.Contains(logs.String(), `"msg":"supervisor.restart_cancelled"`) {
		t.Errorf("no restart_cancelled event; log:\n%s", logs.String())
	}
}

// TestStopDuringBeforeRestart: a SIGTERM while BeforeRestart runs cancels
// its context, and lifeboat exits as a preemption after the final flush.
func TestStopDuringBeforeRestart(t *testing.T) {
	defer goleak.VerifyNone(t)
	dir := t.TempDir()
	runs, tlog := filepath.Join(dir, "runs"), filepath.Join(dir, "tlog")
	in := make(chan os.Signal, 1)
	logs := &logBuffer{}
	flush := &flushRecord{}
	entered := make(chan struct{})
	var restartErr error
	done := make(chan error, 1)
	go func() {
		done <- Run(context.Background(), Config{
			Argv: crashingTrainer(runs), Signals: in, Grace: time.Hour, Log: logs.logger(),
			TerminationLog: tlog, TerminationLogCreate: true,
			Restart: RestartPolicy{OnFailure: true, Max: 3, Backoff: time.Millisecond},
			Checkpoints: &hooks{beforeRestart: func(ctx context.Context, attempt int) ([]string, error) {
				close(entered)
				<-ctx.Done()
				restartErr = ctx.Err()
				return nil, ctx.Err()
			}, flush: flush.flush},
		})
	}()
	select {
	case <-entered:
	case err := <-done:
		t.Fatalf("Run returned %v before BeforeRestart ran; log:\n%s", err, logs.String())
	case <-time.After(hangLimit):
		t.Fatalf("BeforeRestart never ran; log:\n%s", logs.String())
	}
	in <- unix.SIGTERM
	err := waitRun(t, done, logs)
	wantPreempted(t, err, 3, tlog)
	if !errors.Is(restartErr, context.Canceled) {
		t.Errorf("BeforeRestart's context ended with %v, want it cancelled by the stop", restartErr)
	}
	if n := countRuns(t, runs); n != 1 {
		t.Errorf("the trainer ran %d times, want 1", n)
	}
	if got := flush.calls(); len(got) != 1 || !got[0] {
		t.Errorf("Flush calls (stopped) = %v, want one with stopped=true", got)
	}
}

// TestFlushPastDeadline: a Flush that ignores its context does not
// hold Run past the grace deadline: Run returns with the flush error in
// the log and the termination log, and the flush's context is cancelled.
func TestFlushPastDeadline(t *testing.T) {
	dir := t.TempDir()
	ready, tlog := filepath.Join(dir, "ready"), filepath.Join(dir, "tlog")
	in := make(chan os.Signal, 1)
	logs := &logBuffer{}
	release := make(chan struct{})
	defer func() {
		close(release)
		goleak.VerifyNone(t)
	}()
	var flushCtx context.Context
	var mu sync.Mutex
	done := make(chan error, 1)
	go func() {
		done <- Run(context.Background(), Config{
			Argv:    []string{"sh", "-c", `trap 'exit 0' TERM; touch "$0"; while :; do sleep 0.05; done`, ready},
			Signals: in, Grace: 3 * time.Second, Log: logs.logger(),
			TerminationLog: tlog, TerminationLogCreate: true,
			Checkpoints: &hooks{flush: func(ctx context.Context, stop *Stop) error {
				mu.Lock()
				flushCtx = ctx
				mu.Unlock()
				<-release
				return nil
			}},
		})
	}()
	waitFile(t, ready)
	in <- unix.SIGTERM
	err := waitRun(t, done, logs)
	var ee *ExitError
	if !errors.As(err, &ee) || !ee.Preempted || ee.Code != DefaultPreemptExitCode {
		t.Errorf("Run = %v, want the preempted exit %d", err, DefaultPreemptExitCode)
	}
	const want = "the final upload did not finish within the grace period"
	if b, _ := os.ReadFile(tlog); !strings.Contains(string(b), want) {
		t.Errorf("termination log %q does not say %q", b, want)
	}
	if !strings.Contains(logs.String(), `"msg":"supervisor.final_upload_failed"`) || !strings.Contains(logs.String(), want) {
		t.Errorf("no final_upload_failed event saying %q; log:\n%s", want, logs.String())
	}
	mu.Lock()
	defer mu.Unlock()
	if flushCtx == nil || flushCtx.Err() == nil {
		t.Errorf("the final flush's context was not ended when Run gave up on it")
	}
}

// TestStopDuringFlushPullsInDeadline: the trainer exited on its own and
// its final flush (allowed an hour) is running when SIGTERM arrives: the
// flush now has until the grace deadline, not the hour.
func TestStopDuringFlushPullsInDeadline(t *testing.T) {
	dir := t.TempDir()
	tlog := filepath.Join(dir, "tlog")
	in := make(chan os.Signal, 1)
	logs := &logBuffer{}
	release := make(chan struct{})
	defer func() {
		close(release)
		goleak.VerifyNone(t)
	}()
	flushing := make(chan bool, 1)
	done := make(chan error, 1)
	go func() {
		done <- Run(context.Background(), Config{
			Argv: []string{"true"}, Signals: in, Grace: time.Second, AfterExitTimeout: time.Hour,
			Log: logs.logger(), TerminationLog: tlog, TerminationLogCreate: true,
			Checkpoints: &hooks{flush: func(ctx context.Context, stop *Stop) error {
				flushing <- stop != nil
				<-release
				return nil
			}},
		})
	}()
	select {
	case stopped := <-flushing:
		if stopped {
			t.Errorf("Flush got a stop for a trainer that exited on its own")
		}
	case err := <-done:
		t.Fatalf("Run returned %v before the flush; log:\n%s", err, logs.String())
	case <-time.After(hangLimit):
		t.Fatalf("the flush never began; log:\n%s", logs.String())
	}
	in <- unix.SIGTERM
	err := waitRun(t, done, logs)
	var ee *ExitError
	if !errors.As(err, &ee) || !ee.Preempted {
		t.Errorf("Run = %v, want a preempted exit", err)
	}
	if b, _ := os.ReadFile(tlog); !strings.Contains(string(b), "the final upload did not finish within the grace period") {
		t.Errorf("termination log %q does not say the flush ran out of time", b)
	}
}

// TestRestartWithBeforeRestart: a crashed trainer is started again after
// BeforeRestart, with the variables it returned; the run then ends
// normally with one final flush.
func TestRestartWithBeforeRestart(t *testing.T) {
	defer goleak.VerifyNone(t)
	dir := t.TempDir()
	runs := filepath.Join(dir, "runs")
	logs := &logBuffer{}
	flush := &flushRecord{}
	var attempts []int
	restarts := 0
	err := Run(context.Background(), Config{
		Argv:    []string{"sh", "-c", `echo "run $RESUME" >> "$0"; [ "$RESUME" = 1 ] || exit 3`, runs},
		Signals: make(chan os.Signal), Log: logs.logger(),
		Restart: RestartPolicy{OnFailure: true, Max: 3, Backoff: time.Millisecond},
		Checkpoints: &hooks{beforeRestart: func(ctx context.Context, attempt int) ([]string, error) {
			attempts = append(attempts, attempt)
			return []string{"RESUME=1"}, nil
		}, flush: flush.flush},
		Observer: &hooks{restarted: func(reason string) { restarts++ }},
	})
	if err != nil {
		t.Fatalf("Run = %v, want nil (the restarted trainer exited 0); log:\n%s", err, logs.String())
	}
	b, _ := os.ReadFile(runs)
	if got := strings.Fields(string(b)); strings.Join(got, " ") != "run run 1" {
		t.Errorf("runs %q, want a crash, then a run with RESUME=1", b)
	}
	if len(attempts) != 1 || attempts[0] != 1 || restarts != 1 {
		t.Errorf("BeforeRestart attempts %v, Restarted calls %d; want [1] and 1", attempts, restarts)
	}
	if got := flush.calls(); len(got) != 1 || got[0] {
		t.Errorf("Flush calls (stopped) = %v, want one with stopped=false", got)
	}
}

// TestSecondInterruptCancelsFlush: a second SIGINT during the final flush
// cancels the flush's context; Run returns with what the flush returned.
func TestSecondInterruptCancelsFlush(t *testing.T) {
	defer goleak.VerifyNone(t)
	in := make(chan os.Signal, 2)
	logs := &logBuffer{}
	flushing := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- Run(context.Background(), Config{
			Argv: []string{"true"}, Signals: in, Grace: time.Hour, Log: logs.logger(),
			Checkpoints: &hooks{flush: func(ctx context.Context, stop *Stop) error {
				close(flushing)
				<-ctx.Done()
				return ctx.Err()
			}},
		})
	}()
	select {
	case <-flushing:
	case err := <-done:
		t.Fatalf("Run returned %v before the flush; log:\n%s", err, logs.String())
	case <-time.After(hangLimit):
		t.Fatalf("the flush never began; log:\n%s", logs.String())
	}
	in <- unix.SIGINT
	in <- unix.SIGINT
	err := waitRun(t, done, logs)
	var ee *ExitError
	if !errors.As(err, &ee) || !ee.Preempted {
		t.Errorf("Run = %v, want a preempted exit", err)
	}
	if !strings.Contains(logs.String(), `"msg":"supervisor.second_interrupt"`) || !strings.Contains(logs.String(), "context canceled") {
		t.Errorf("the second SIGINT did not cancel the flush; log:\n%s", logs.String())
	}
}

// TestStopDuringStuckBeforeRestart: a BeforeRestart that ignores its
// context does not hold Run past the stop's grace deadline either; the
// final flush, which must not run beside it, is recorded as not run.
func TestStopDuringStuckBeforeRestart(t *testing.T) {
	dir := t.TempDir()
	runs, tlog := filepath.Join(dir, "runs"), filepath.Join(dir, "tlog")
	in := make(chan os.Signal, 1)
	logs := &logBuffer{}
	flush := &flushRecord{}
	entered, release := make(chan struct{}), make(chan struct{})
	defer func() {
		close(release)
		goleak.VerifyNone(t)
	}()
	done := make(chan error, 1)
	go func() {
		done <- Run(context.Background(), Config{
			Argv: crashingTrainer(runs), Signals: in, Grace: time.Second, Log: logs.logger(),
			TerminationLog: tlog, TerminationLogCreate: true,
			Restart: RestartPolicy{OnFailure: true, Max: 3, Backoff: time.Millisecond},
			Checkpoints: &hooks{beforeRestart: func(ctx context.Context, attempt int) ([]string, error) {
				close(entered)
				<-release
				return nil, nil
			}, flush: flush.flush},
		})
	}()
	select {
	case <-entered:
	case err := <-done:
		t.Fatalf("Run returned %v before BeforeRestart ran; log:\n%s", err, logs.String())
	case <-time.After(hangLimit):
		t.Fatalf("BeforeRestart never ran; log:\n%s", logs.String())
	}
	in <- unix.SIGTERM
	err := waitRun(t, done, logs)
	wantPreempted(t, err, 3, tlog)
	const want = "the final upload did not run: the commit before the restart did not end within the grace period"
	if b, _ := os.ReadFile(tlog); !strings.Contains(string(b), want) {
		t.Errorf("termination log %q does not say %q", b, want)
	}
	if got := flush.calls(); len(got) != 0 {
		t.Errorf("Flush ran (%v) beside a BeforeRestart still running", got)
	}
}
