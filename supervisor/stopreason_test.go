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

// TestOnStopSaysWhy: OnStop is told why the stop began, for each cause,
// and a later stop that moves the deadline is told with the first
// stop's reason: the job-wide stop's record names the cause the
// supervisor knows, not one guessed again outside it.
func TestOnStopSaysWhy(t *testing.T) {
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
					OnStop: func(reason string, _ time.Time) {
						mu.Lock()
						got = append(got, reason)
						mu.Unlock()
					},
				})
			}()
			if tc.stop != nil { // the maximum runtime may end before the trainer is ready
				waitFile(t, ready)
				tc.stop(in, notices, cancel)
			}
			// Wait for OnStop's calls, then let the trainer go.
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
					t.Fatalf("OnStop told %d times, want %d", n, len(tc.want))
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
				t.Errorf("OnStop told %q, want %q", got, tc.want)
			}
		})
	}
}
