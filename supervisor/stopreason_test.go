package supervisor

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestStopSaysWhy: Observer.Stopping is told why the stop began, for each cause,
// and a later stop that moves the deadline is told with the first
// stop's reason: the job-wide stop's record names the cause the
// supervisor knows, not one guessed again outside it.
func TestStopSaysWhy(t *testing.T) {
	for _, tc := range []struct {
		name string
		// stop starts the stop(s) once the trainer runs.
		stop func(in chan<- os.Signal, notices chan<- Notice, cancel context.CancelFunc)
		max  time.Duration
		want []string
	}{
		{"signal", func(in chan<- os.Signal, _ chan<- Notice, _ context.CancelFunc) { in <- unix.SIGTERM }, 0, []string{"SIGTERM"}},
		{"notice", func(_ chan<- os.Signal, n chan<- Notice, _ context.CancelFunc) { n <- Notice{Source: "aws"} }, 0, []string{"aws preemption notice"}},
		{"context", func(_ chan<- os.Signal, _ chan<- Notice, cancel context.CancelFunc) { cancel() }, 0, []string{"lifeboat was asked to stop"}},
		{"max runtime", nil, time.Millisecond, []string{"max runtime 1ms reached"}},
		{"deadline moved", func(in chan<- os.Signal, n chan<- Notice, _ context.CancelFunc) {
			in <- unix.SIGTERM
			n <- Notice{Source: "gcp", Deadline: time.Now().Add(time.Minute)}
		}, 0, []string{"SIGTERM", "SIGTERM"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ready := filepath.Join(t.TempDir(), "ready")
			in := make(chan os.Signal, 2)
			notices := make(chan Notice, 2)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			var mu sync.Mutex
			var got []string
			// The trainer ignores the stop until the test has sent all of
			// it, then exits.
			gone := filepath.Join(t.TempDir(), "gone")
			done := make(chan error, 1)
			go func() {
				done <- Run(ctx, Config{
					Argv:    []string{"sh", "-c", `trap '' TERM; touch "$0"; while [ ! -e "$1" ]; do sleep 0.05; done`, ready, gone},
					Signals: in, Kill: (&sendRecorder{}).kill, Grace: time.Hour, MaxRuntime: tc.max,
					Notices: notices, NoticeSignal: unix.SIGTERM,
					Observer: &hooks{stopping: func(s Stop) {
						mu.Lock()
						got = append(got, s.Reason)
						mu.Unlock()
					}},
				})
			}()
			if tc.stop != nil { // the maximum runtime may end before the trainer is ready
				waitFile(t, ready)
				tc.stop(in, notices, cancel)
			}
			// Wait for Stopping's calls, then let the trainer go.
			deadline := time.After(time.Minute)
			for {
				mu.Lock()
				n := len(got)
				mu.Unlock()
				if n >= len(tc.want) {
					break
				}
				select {
				case <-deadline:
					t.Fatalf("Stopping told %d times, want %d", n, len(tc.want))
				case <-time.After(10 * time.Millisecond):
				}
			}
			if err := os.WriteFile(gone, nil, 0o600); err != nil {
				t.Fatal(err)
			}
			<-done
			mu.Lock()
			defer mu.Unlock()
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("Stopping told %q, want %q", got, tc.want)
			}
		})
	}
}

// TestStopHandedOnce: the supervisor determines a stop once (its reason,
// the signal received, when it began, the end of its grace budget) and
// hands the same Stop to Observer.Stopping and to the final upload. A
// notice that brings the deadline in is told with the first stop's
// reason, signal and start, and the new deadline, and the final upload
// gets that deadline.
func TestStopHandedOnce(t *testing.T) {
	ready := filepath.Join(t.TempDir(), "ready")
	gone := filepath.Join(t.TempDir(), "gone")
	in := make(chan os.Signal, 1)
	notices := make(chan Notice, 1)
	const grace = time.Hour
	var mu sync.Mutex
	var told []Stop
	var flushed *Stop
	h := &hooks{
		stopping: func(s Stop) {
			mu.Lock()
			told = append(told, s)
			mu.Unlock()
		},
		flush: func(_ context.Context, s *Stop) error {
			mu.Lock()
			flushed = s
			mu.Unlock()
			return nil
		},
	}
	logs := &logBuffer{}
	done := make(chan error, 1)
	go func() {
		done <- Run(context.Background(), Config{
			Argv:    []string{"sh", "-c", `trap '' TERM; touch "$0"; while [ ! -e "$1" ]; do sleep 0.05; done`, ready, gone},
			Signals: in, Kill: (&sendRecorder{}).kill, Grace: grace, Log: logs.logger(),
			Notices: notices, Observer: h, Checkpoints: h,
		})
	}()
	waitFile(t, ready)
	waitTold := func(n int) {
		t.Helper()
		deadline := time.After(time.Minute)
		for {
			mu.Lock()
			got := len(told)
			mu.Unlock()
			if got >= n {
				return
			}
			select {
			case <-deadline:
				t.Fatalf("Stopping told %d times, want %d; log:\n%s", got, n, logs.String())
			case <-time.After(10 * time.Millisecond):
			}
		}
	}
	in <- unix.SIGTERM
	waitTold(1)
	noticeEnd := time.Now().Add(time.Minute)
	notices <- Notice{Source: "gcp", Deadline: noticeEnd}
	waitTold(2)
	if err := os.WriteFile(gone, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	waitRun(t, done, logs)
	mu.Lock()
	defer mu.Unlock()
	if len(told) != 2 {
		t.Fatalf("Stopping told %d times, want 2: %+v", len(told), told)
	}
	first, second := told[0], told[1]
	if first.Reason != "SIGTERM" || first.Signal != unix.SIGTERM || first.At.IsZero() || !first.Deadline.Equal(first.At.Add(grace)) {
		t.Errorf("first stop %+v, want SIGTERM, signal TERM, a start, and a deadline %s after it", first, grace)
	}
	if second.Reason != first.Reason || second.Signal != first.Signal || !second.At.Equal(first.At) {
		t.Errorf("second stop %+v, want the first's reason, signal and start (%+v)", second, first)
	}
	if want := noticeEnd.Add(-ExitMargin); !second.Deadline.Equal(want) {
		t.Errorf("second stop's deadline %s, want the notice's less ExitMargin, %s", second.Deadline, want)
	}
	if flushed == nil || *flushed != second {
		t.Errorf("Flush got %+v, want the stop as last told, %+v", flushed, second)
	}
}
