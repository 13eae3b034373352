package pipeline

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/lifeboat-project/lifeboat/agent"
	"github.com/lifeboat-project/lifeboat/coord"
	"github.com/lifeboat-project/lifeboat/storage"
	"github.com/lifeboat-project/lifeboat/storage/mem"
	"github.com/lifeboat-project/lifeboat/supervisor"
)

// calls records, in order, what the stop-and-flush sequence asked of the
// fakes.
type calls struct {
	mu   sync.Mutex
	list []string
}

func (c *calls) add(format string, args ...any) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.list = append(c.list, fmt.Sprintf(format, args...))
}

func (c *calls) take() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	l := c.list
	c.list = nil
	return l
}

// fakeAgent is an Agent that records its calls; flushErr is what its
// final upload returns, reserve its reserve. until and deadline are what
// FlushWhenWritten was given.
type fakeAgent struct {
	calls    *calls
	flushErr error
	reserve  time.Duration

	until, deadline time.Time
}

func (a *fakeAgent) Stopping()                        { a.calls.add("agent.Stopping") }
func (a *fakeAgent) Reserve() (time.Duration, string) { return a.reserve, "fake" }
func (a *fakeAgent) FlushNote() string                { return "" }
func (a *fakeAgent) Newest() int64                    { return -1 }
func (a *fakeAgent) Killing(time.Time)                { a.calls.add("agent.Killing") }

func (a *fakeAgent) Flush(ctx context.Context) error {
	a.deadline, _ = ctx.Deadline()
	a.calls.add("agent.Flush")
	return a.flushErr
}

func (a *fakeAgent) FlushWhenWritten(ctx context.Context, until time.Time) error {
	a.deadline, _ = ctx.Deadline()
	a.until = until
	a.calls.add("agent.FlushWhenWritten")
	return a.flushErr
}

func (a *fakeAgent) CommitStep(context.Context, int64) (bool, error) {
	a.calls.add("agent.CommitStep")
	return true, nil
}

func (a *fakeAgent) Reaped(pid int, _ unix.WaitStatus, _ time.Time) {
	a.calls.add("agent.Reaped %d", pid)
}

// fakePod is a Pod that records its calls.
type fakePod struct{ calls *calls }

func (p fakePod) Stopping(at time.Time) { p.calls.add("pod.Stopping %s", at.Format(time.TimeOnly)) }
func (p fakePod) Flushed(stopped bool, err error) {
	p.calls.add("pod.Flushed stopped=%v err=%v", stopped, err)
}
func (p fakePod) RankClaimed(run, otherRun, otherHost string) {
	p.calls.add("pod.RankClaimed %s %s %s", run, otherRun, otherHost)
}
func (p fakePod) Restored(step int64, source string, _ float64) {
	p.calls.add("pod.Restored %d %s", step, source)
}
func (p fakePod) FreshStartOverProgress(step int64, _ string) {
	p.calls.add("pod.FreshStartOverProgress %d", step)
}
func (p fakePod) Committed(step, _ int64, _ float64, _ time.Time, final bool) {
	p.calls.add("pod.Committed %d final=%v", step, final)
}
func (p fakePod) UploadFailed(step int64, err string) {
	p.calls.add("pod.UploadFailed %d %s", step, err)
}
func (p fakePod) Interrupted(step int64, path, _ string) {
	p.calls.add("pod.Interrupted %d %s", step, path)
}

var (
	stopAt   = time.Date(2026, 1, 2, 15, 4, 5, 0, time.UTC)
	testStop = supervisor.Stop{Reason: "SIGTERM", Signal: unix.SIGTERM, At: stopAt, Deadline: stopAt.Add(30 * time.Second)}
)

// TestStopperRun: run's sequence as the supervisor drives it. The stop
// begins with the agent's stream and the pod's record of its start; the
// final upload runs under the context the supervisor gives it, and the
// pod then records its end with its error, whether a stop was in progress
// or the trainer exited on its own.
func TestStopperRun(t *testing.T) {
	for _, tc := range []struct {
		name    string
		stop    *supervisor.Stop
		err     error
		flushed string
	}{
		{"stop", &testStop, nil, "pod.Flushed stopped=true err=<nil>"},
		{"stop, upload failed", &testStop, errors.New("store down"), "pod.Flushed stopped=true err=store down"},
		{"trainer exited", nil, nil, "pod.Flushed stopped=false err=<nil>"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &calls{}
			a := &fakeAgent{calls: c, flushErr: tc.err}
			s := &Stopper{Agent: a, Pod: fakePod{c}}
			if !s.End().IsZero() {
				t.Errorf("End before a stop is %s, want zero", s.End())
			}
			if tc.stop != nil {
				s.Stopping(*tc.stop)
				s.StopSignal(unix.SIGTERM)
				if got, want := c.take(), []string{"agent.Stopping", "pod.Stopping 15:04:05"}; !slices.Equal(got, want) {
					t.Errorf("Stopping made %q, want %q", got, want)
				}
				if !s.End().Equal(tc.stop.Deadline) {
					t.Errorf("End is %s, want the stop's deadline %s", s.End(), tc.stop.Deadline)
				}
			}
			s.Reaped(42, 0, stopAt)
			end := stopAt.Add(time.Minute)
			ctx, cancel := context.WithDeadline(context.Background(), end)
			defer cancel()
			if err := s.Flush(ctx, tc.stop); !errors.Is(err, tc.err) {
				t.Errorf("Flush returned %v, want %v", err, tc.err)
			}
			if got, want := c.take(), []string{"agent.Reaped 42", "agent.Flush", tc.flushed}; !slices.Equal(got, want) {
				t.Errorf("the final upload made %q, want %q", got, want)
			}
			if !a.deadline.Equal(end) {
				t.Errorf("the agent's final upload ran until %s, want the supervisor's %s", a.deadline, end)
			}
		})
	}
}

// TestStopperSidecar: the sidecar's stop runs the same sequence without a
// supervisor. Its agent streams only from the final upload
// (FlushWhenWritten begins it), which runs until the stop's FlushEnd (the
// grace budget less ExitMargin) and waits for a trainer still writing
// until that end less the upload's reserve, at most half the grace. A
// trainer still writing at that moment (agent.ErrStillWriting) is the
// sidecar's failure, and the pod records it.
func TestStopperSidecar(t *testing.T) {
	grace := testStop.Deadline.Sub(testStop.At)
	flushEnd := testStop.Deadline.Add(-supervisor.ExitMargin)
	for _, tc := range []struct {
		name      string
		reserve   time.Duration
		err       error
		wantUntil time.Time
	}{
		{"small reserve", 3 * time.Second, nil, flushEnd.Add(-3 * time.Second)},
		{"reserve capped at half the grace", time.Hour, nil, flushEnd.Add(-grace / 2)},
		{"still writing", time.Second, agent.ErrStillWriting, flushEnd.Add(-time.Second)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &calls{}
			a := &fakeAgent{calls: c, reserve: tc.reserve, flushErr: tc.err}
			s := &Stopper{Agent: a, Pod: fakePod{c}, Sidecar: true}
			err := s.StopSidecar(testStop, 0)
			if !errors.Is(err, tc.err) {
				t.Errorf("StopSidecar returned %v, want %v", err, tc.err)
			}
			want := []string{"pod.Stopping 15:04:05", "agent.FlushWhenWritten", fmt.Sprintf("pod.Flushed stopped=true err=%v", tc.err)}
			if got := c.take(); !slices.Equal(got, want) {
				t.Errorf("the sidecar's stop made %q, want %q", got, want)
			}
			if !a.deadline.Equal(flushEnd) {
				t.Errorf("the final upload ran until %s, want the stop's FlushEnd %s", a.deadline, flushEnd)
			}
			if !a.until.Equal(tc.wantUntil) {
				t.Errorf("the final upload waited for the trainer until %s, want %s", a.until, tc.wantUntil)
			}
			if !s.End().Equal(testStop.Deadline) {
				t.Errorf("End is %s, want the stop's deadline %s", s.End(), testStop.Deadline)
			}
		})
	}
}

// TestStopperObserverWithoutStore: without a store the Stopper is only
// the supervisor's Observer: nothing of it needs an agent, a claim, a job,
// a pod or metrics.
func TestStopperObserverWithoutStore(t *testing.T) {
	s := &Stopper{}
	s.Stopping(testStop)
	s.StopSignal(unix.SIGTERM)
	s.Restarted("oom")
	s.OOMKilled()
	s.Reaped(1, 0, stopAt)
	s.Killing(stopAt)
	if !s.End().Equal(testStop.Deadline) {
		t.Errorf("End is %s, want %s", s.End(), testStop.Deadline)
	}
	var none *Stopper
	if !none.End().IsZero() {
		t.Error("a nil Stopper's End is not zero")
	}
}

// TestStopperReleasesTheClaim: this rank's claim is released when the
// stop begins (a replacement pod may start while the final upload runs)
// and deleted from the store by the end of the final upload, for run and
// the sidecar alike.
func TestStopperReleasesTheClaim(t *testing.T) {
	for _, sidecar := range []bool{false, true} {
		t.Run(fmt.Sprintf("sidecar=%v", sidecar), func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			st := mem.New()
			cl, err := coord.NewClaim(coord.ClaimConfig{Store: st, Rank: 0, WorldSize: 1, Host: "pod-a",
				Interval: time.Hour, Started: time.Now()})
			if err != nil {
				t.Fatal(err)
			}
			cl.Start(ctx)
			go cl.Loop(ctx)
			if n := claims(t, st); n != 1 {
				t.Fatalf("%d claims in the store after the start, want 1", n)
			}
			c := &calls{}
			s := &Stopper{Agent: &fakeAgent{calls: c}, Claim: cl, Pod: fakePod{c}, Sidecar: sidecar}
			stop := testStop
			stop.At = time.Now()
			stop.Deadline = stop.At.Add(time.Hour)
			if sidecar {
				err = s.StopSidecar(stop, 0)
			} else {
				s.Stopping(stop)
				// Released at the stop's start: the claim's loop deletes
				// it and returns (without a release, this waits forever).
				cl.Wait(ctx)
				if n := claims(t, st); n != 0 {
					t.Errorf("%d claims in the store once the stop began, want 0", n)
				}
				fctx, fcancel := context.WithDeadline(context.Background(), stop.FlushEnd())
				err = s.Flush(fctx, &stop)
				fcancel()
			}
			if err != nil {
				t.Fatal(err)
			}
			if n := claims(t, st); n != 0 {
				t.Errorf("%d claims in the store after the final upload, want 0 (deleted at the exit)", n)
			}
		})
	}
}

// claims counts the claims in st.
func claims(t *testing.T, st storage.Store) int {
	t.Helper()
	n := 0
	err := st.List(context.Background(), coord.ClaimPrefix, func(storage.ObjectInfo) error { n++; return nil })
	if err != nil {
		t.Fatal(err)
	}
	return n
}
