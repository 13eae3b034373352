package supervisor

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// The tests in this file check a trainer that fails in a multi-rank job:
// during a job-wide stop its failure (a collective whose peer left) is
// part of the stop; before this rank has seen the stop, Job.PeerStop
// finds it; with no stop at all, Job.Failed tells the other ranks.

// TestFailureDuringJobStop: a trainer that exits 1 after the stop signal
// of a job-wide stop makes lifeboat exit with the preemption code, and the
// termination log keeps the trainer's own code.
func TestFailureDuringJobStop(t *testing.T) {
	ready := filepath.Join(t.TempDir(), "ready")
	tlog := filepath.Join(t.TempDir(), "termination-log")
	in := make(chan os.Signal, 1)
	logs := &logBuffer{}
	done := make(chan error, 1)
	go func() {
		done <- Run(context.Background(), Config{
			Argv:    []string{"sh", "-c", `trap 'exit 1' TERM; touch "$0"; while :; do sleep 0.05; done`, ready},
			Signals: in, Log: logs.logger(), TerminationLog: tlog, TerminationLogCreate: true,
			Job: &hooks{jobWideStop: func() string { return "rank 0: SIGTERM" }},
		})
	}()
	waitFile(t, ready)
	in <- unix.SIGTERM
	var ee *ExitError
	if err := waitRun(t, done, logs); !errors.As(err, &ee) || ee.Code != 143 || !ee.Preempted {
		t.Fatalf("Run = %v, want 143, preempted", err)
	}
	b, _ := os.ReadFile(tlog)
	want := "lifeboat: stopped by SIGTERM; trainer exited with code 1; part of a job-wide stop (rank 0: SIGTERM), so a preemption; exit code 143\n"
	if string(b) != want {
		t.Errorf("termination log %q, want %q", b, want)
	}
}

// peerRecord records the calls to PeerStop, Failed and Flush.
type peerRecord struct {
	mu       sync.Mutex
	answer   string
	checks   int
	failures []string
	flushes  []bool
}

func (p *peerRecord) peerStop(context.Context) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.checks++
	return p.answer
}

func (p *peerRecord) onFailure(reason string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.failures = append(p.failures, reason)
}

func (p *peerRecord) flush(_ context.Context, stop *Stop) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.flushes = append(p.flushes, stop != nil)
	return nil
}

// TestFailureBeforeJobStopSeen: a trainer that fails with no stop in
// progress is checked against the store (Job.PeerStop). When another
// rank's stop is there, the failure is part of it: no restart although one
// is allowed, the final flush runs as after a stop, and lifeboat exits
// 143. When none is there, Job.Failed tells the other ranks (once no
// restart is left) and lifeboat exits with the trainer's code.
func TestFailureBeforeJobStopSeen(t *testing.T) {
	for _, tc := range []struct {
		name     string
		answer   string
		restarts int
		code     int
		runs     int
		checks   int
		failures []string
		flushes  []bool
	}{
		{"peer stop", "rank 0: SIGTERM", 2, 143, 1, 1, nil, []bool{true}},
		{"no peer stop", "", 0, 3, 1, 1, []string{"trainer exited with code 3"}, []bool{false}},
		{"no peer stop, restarts", "", 1, 3, 2, 2, []string{"trainer exited with code 3 after 1 restarts"}, []bool{false}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			runs := filepath.Join(t.TempDir(), "runs")
			rec := &peerRecord{answer: tc.answer}
			logs := &logBuffer{}
			cfg := Config{
				Argv: crashingTrainer(runs), Signals: make(chan os.Signal), Log: logs.logger(),
				Job:         &hooks{peerStop: rec.peerStop, failed: rec.onFailure, jobWideStop: func() string { return tc.answer }},
				Checkpoints: &hooks{flush: rec.flush},
			}
			if tc.restarts > 0 {
				cfg.Restart = RestartPolicy{OnFailure: true, Max: tc.restarts, Backoff: time.Millisecond}
			}
			done := make(chan error, 1)
			go func() { done <- Run(context.Background(), cfg) }()
			var ee *ExitError
			if err := waitRun(t, done, logs); !errors.As(err, &ee) || ee.Code != tc.code {
				t.Fatalf("Run = %v, want exit %d; log:\n%s", err, tc.code, logs.String())
			}
			if n := countRuns(t, runs); n != tc.runs {
				t.Errorf("the trainer ran %d times, want %d", n, tc.runs)
			}
			rec.mu.Lock()
			defer rec.mu.Unlock()
			if rec.checks != tc.checks || !slices.Equal(rec.failures, tc.failures) || !slices.Equal(rec.flushes, tc.flushes) {
				t.Errorf("PeerStop asked %d times, Failed %q, Flush(stopped) %v; want %d, %q, %v",
					rec.checks, rec.failures, rec.flushes, tc.checks, tc.failures, tc.flushes)
			}
		})
	}
}
