package supervisor

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
	"golang.org/x/sys/unix"

	"github.com/lifeboat-project/lifeboat/signals"
)

// The tests in this file check what the loop tells its caller and its log
// about each event: the signal a stop delivered, how many processes the
// grace deadline killed, why a trainer was restarted, and which stop
// signals arrived. Metrics and users read exactly these.

// logEvents returns the fields of every log line named msg.
func logEvents(t *testing.T, logs *logBuffer, msg string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, line := range strings.Split(logs.String(), "\n") {
		var e map[string]any
		if json.Unmarshal([]byte(line), &e) == nil && e["msg"] == msg {
			out = append(out, e)
		}
	}
	return out
}

// TestStopLogsTheSignalDelivered: every kind of stop says in
// supervisor.stopping which signal the trainer was sent (after --rewrite
// where the stop goes through it), not "none".
func TestStopLogsTheSignalDelivered(t *testing.T) {
	for _, tc := range []struct {
		name      string
		setup     func(*Config)
		trigger   func(chan<- os.Signal, chan<- Notice, context.CancelFunc)
		received  string
		delivered string
	}{
		{
			name:      "signal",
			setup:     func(c *Config) { c.Rewrite = signals.Rewrite{unix.SIGTERM: unix.SIGUSR1} },
			trigger:   func(in chan<- os.Signal, _ chan<- Notice, _ context.CancelFunc) { in <- unix.SIGTERM },
			received:  "TERM",
			delivered: "USR1",
		},
		{
			name:  "notice",
			setup: func(c *Config) { c.NoticeSignal = unix.SIGUSR2 },
			trigger: func(_ chan<- os.Signal, n chan<- Notice, _ context.CancelFunc) {
				n <- Notice{Source: "url", Deadline: time.Now().Add(time.Hour)}
			},
			received:  "none",
			delivered: "USR2",
		},
		{
			name: "max runtime",
			setup: func(c *Config) {
				c.MaxRuntime = 500 * time.Millisecond
				c.Rewrite = signals.Rewrite{unix.SIGTERM: unix.SIGUSR1}
			},
			trigger:   func(chan<- os.Signal, chan<- Notice, context.CancelFunc) {},
			received:  "none",
			delivered: "USR1",
		},
		{
			name:      "context",
			setup:     func(*Config) {},
			trigger:   func(_ chan<- os.Signal, _ chan<- Notice, cancel context.CancelFunc) { cancel() },
			received:  "none",
			delivered: "TERM",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			defer goleak.VerifyNone(t)
			ready := filepath.Join(t.TempDir(), "ready")
			in := make(chan os.Signal, 1)
			notices := make(chan Notice, 1)
			logs := &logBuffer{}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			cfg := Config{
				Argv:    []string{"sh", "-c", `trap 'exit 0' TERM USR1 USR2; touch "$0"; while :; do sleep 0.05; done`, ready},
				Signals: in, Notices: notices, Grace: time.Hour, Log: logs.logger(),
			}
			tc.setup(&cfg)
			done := make(chan error, 1)
			go func() { done <- Run(ctx, cfg) }()
			waitFile(t, ready)
			tc.trigger(in, notices, cancel)
			var ee *ExitError
			if err := waitRun(t, done, logs); !errors.As(err, &ee) || !ee.Preempted {
				t.Errorf("Run = %v, want a preemption", err)
			}
			ev := logEvents(t, logs, "supervisor.stopping")
			if len(ev) != 1 {
				t.Fatalf("%d supervisor.stopping events, want 1; log:\n%s", len(ev), logs.String())
			}
			if ev[0]["signal"] != tc.received || ev[0]["delivered"] != tc.delivered {
				t.Errorf("supervisor.stopping signal=%v delivered=%v, want signal=%s delivered=%s",
					ev[0]["signal"], ev[0]["delivered"], tc.received, tc.delivered)
			}
		})
	}
}

// TestKilledCountsProcesses: at the grace deadline, supervisor.killed
// names how many processes were SIGKILLed, each once, however many rounds
// the kill took.
func TestKilledCountsProcesses(t *testing.T) {
	for _, tc := range []struct {
		name   string
		script string
		want   float64
	}{
		{"one process", `trap '' TERM; touch "$0"; exec sleep 60`, 1},
		{"a shell and two children", `trap '' TERM; sleep 60 & sleep 60 & touch "$0"; wait`, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ready := filepath.Join(t.TempDir(), "ready")
			in := make(chan os.Signal, 1)
			logs := &logBuffer{}
			done := make(chan error, 1)
			go func() {
				done <- Run(context.Background(), Config{
					Argv: []string{"sh", "-c", tc.script, ready}, Signals: in, Grace: 300 * time.Millisecond, Log: logs.logger(),
				})
			}()
			waitFile(t, ready)
			time.Sleep(50 * time.Millisecond) // exec sleep, or the children started
			in <- unix.SIGTERM
			var ee *ExitError
			if err := waitRun(t, done, logs); !errors.As(err, &ee) || ee.Code != 137 {
				t.Fatalf("Run = %v, want 137 (killed at the grace deadline)", err)
			}
			ev := logEvents(t, logs, "supervisor.killed")
			if len(ev) != 1 || ev[0]["processes"] != tc.want {
				t.Errorf("supervisor.killed events %v, want one with processes=%v; log:\n%s", ev, tc.want, logs.String())
			}
		})
	}
}

// fakeMemory stands in for the trainer's memory cgroup: the kernel's OOM
// kill count goes up by one for each run that oom lists (1-based), as the
// kernel counts a kill before it sends the SIGKILL.
type fakeMemory struct {
	oom   map[int]bool
	runs  atomic.Int32
	kills atomic.Uint64
}

func (m *fakeMemory) Spawn(start func() (int, error)) (int, error) {
	pid, err := start()
	if err == nil && m.oom[int(m.runs.Add(1))] {
		m.kills.Add(1)
	}
	return pid, err
}

func (m *fakeMemory) OOMKillCount() (uint64, error) { return m.kills.Load(), nil }
func (m *fakeMemory) OOMKills() <-chan struct{}     { return nil }
func (m *fakeMemory) Describe() string              { return "fake 1MiB" }

// TestRestartReasons: Observer.Restarted is told why each restart happened:
// "oom" when the OOM killer killed the trainer, "signal" for another
// signal, "exit_code" for a non-zero exit.
func TestRestartReasons(t *testing.T) {
	defer goleak.VerifyNone(t)
	runs := filepath.Join(t.TempDir(), "runs")
	// Run 1 is SIGKILLed "by the OOM killer", run 2 by a plain SIGKILL
	// (no OOM kill counted), run 3 exits 3, run 4 exits 0.
	script := `echo run >> "$0"; n=$(wc -l < "$0"); case $n in 1|2) kill -KILL $$;; 3) exit 3;; esac; exit 0`
	var mu sync.Mutex
	var reasons []string
	logs := &logBuffer{}
	err := Run(context.Background(), Config{
		Argv: []string{"sh", "-c", script, runs}, Signals: make(chan os.Signal), Log: logs.logger(),
		Memory:  &fakeMemory{oom: map[int]bool{1: true}},
		Restart: RestartPolicy{OnFailure: true, Max: 5, Backoff: time.Millisecond},
		Observer: &hooks{restarted: func(reason string) {
			mu.Lock()
			defer mu.Unlock()
			reasons = append(reasons, reason)
		}},
	})
	if err != nil {
		t.Fatalf("Run = %v, want nil after the fourth run exited 0; log:\n%s", err, logs.String())
	}
	mu.Lock()
	defer mu.Unlock()
	if want := []string{"oom", "signal", "exit_code"}; !reflect.DeepEqual(reasons, want) {
		t.Errorf("restart reasons %v, want %v; log:\n%s", reasons, want, logs.String())
	}
}

// TestStopSignalsReported: Observer.StopSignal is told of each stop signal
// received (the kubelet's TERM is the pod's preemption notice), and of
// nothing else: not of a forwarded USR1, nor of a cloud notice.
func TestStopSignalsReported(t *testing.T) {
	defer goleak.VerifyNone(t)
	ready := filepath.Join(t.TempDir(), "ready")
	in := make(chan os.Signal, 4)
	notices := make(chan Notice, 1)
	var mu sync.Mutex
	var got []string
	done := make(chan error, 1)
	go func() {
		done <- Run(context.Background(), Config{
			Argv:    []string{"sh", "-c", `trap '' USR1; trap 'sleep 0.3; exit 0' TERM; touch "$0"; while :; do sleep 0.05; done`, ready},
			Signals: in, Notices: notices, NoticeSignal: unix.SIGUSR1, Grace: time.Hour,
			Observer: &hooks{stopSignal: func(sig unix.Signal) {
				mu.Lock()
				defer mu.Unlock()
				got = append(got, signals.Name(sig))
			}},
		})
	}()
	waitFile(t, ready)
	in <- unix.SIGUSR1
	notices <- Notice{Source: "url"}
	in <- unix.SIGTERM
	in <- unix.SIGTERM
	var ee *ExitError
	if err := waitRun(t, done, &logBuffer{}); !errors.As(err, &ee) || !ee.Preempted {
		t.Fatalf("Run = %v, want a preemption", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if want := []string{"TERM", "TERM"}; !reflect.DeepEqual(got, want) {
		t.Errorf("Observer.StopSignal got %v, want %v", got, want)
	}
}
