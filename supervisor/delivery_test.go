package supervisor

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/lifeboat-project/lifeboat/signals"
)

// The tests in this file check how a stop reaches the trainer's tree
// (Config.StopDelivery): the main process first, the rest of its tree when
// the main process exits or after TreeShare of the trainer's budget. The
// trainer is a real process tree; the clock is moved by hand, so no test
// waits for, or depends on, the wall clock.

// fakeClock is a Clock whose time moves only when the test advances it.
type fakeClock struct {
	mu     sync.Mutex
	now    time.Time
	timers []*fakeTimer
}

type fakeTimer struct {
	clock *fakeClock
	when  time.Time
	ch    chan time.Time
	live  bool
}

func newFakeClock() *fakeClock { return &fakeClock{now: time.Now()} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) NewTimer(d time.Duration) Timer {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := &fakeTimer{clock: c, when: c.now.Add(d), ch: make(chan time.Time, 1), live: true}
	c.timers = append(c.timers, t)
	return t
}

func (t *fakeTimer) C() <-chan time.Time { return t.ch }

func (t *fakeTimer) Stop() bool {
	t.clock.mu.Lock()
	defer t.clock.mu.Unlock()
	was := t.live
	t.live = false
	return was
}

// armed returns how far ahead of now each live timer fires, soonest first.
func (c *fakeClock) armed() []time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []time.Duration
	for _, t := range c.timers {
		if t.live {
			out = append(out, t.when.Sub(c.now))
		}
	}
	slices.Sort(out)
	return out
}

// advance moves the clock by d and fires the timers due.
func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	for _, t := range c.timers {
		if t.live && !t.when.After(c.now) {
			t.live = false
			t.ch <- c.now
		}
	}
}

// killLog records every signal sent (then sends it).
type killLog struct {
	mu   sync.Mutex
	sent []string // "pid:SIG", the pid negative for a group
}

func (k *killLog) kill(pid int, sig unix.Signal) error {
	k.mu.Lock()
	k.sent = append(k.sent, fmt.Sprintf("%d:%s", pid, signals.Name(sig)))
	k.mu.Unlock()
	return unix.Kill(pid, sig)
}

// list returns what was sent to the pids given (the test's trainer
// tree), in order: processes other tests left to this test binary, a
// subreaper, may be sent signals too.
func (k *killLog) list(pids ...int) []string {
	k.mu.Lock()
	defer k.mu.Unlock()
	var out []string
	for _, s := range k.sent {
		var pid int
		if _, err := fmt.Sscanf(s, "%d:", &pid); err == nil && (slices.Contains(pids, pid) || slices.Contains(pids, -pid)) {
			out = append(out, s)
		}
	}
	return out
}

// waitFor polls cond until it holds.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(hangLimit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s never happened", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestStopDeliveryEscalation: a SIGTERM goes to the main process alone
// (MainFirst, the default); the rest of the tree gets it exactly when half
// the trainer's budget has passed with the main process still running (a
// launcher that ignores TERM), the processes the main process started
// but not theirs, and everything is SIGKILLed at the end of the budget. With MainOnly the tree gets nothing before the SIGKILL; with
// Group it gets the TERM at once, as lifeboat did before.
func TestStopDeliveryEscalation(t *testing.T) {
	const grace = 10 * time.Second
	for _, tc := range []struct {
		delivery signals.Delivery
		atStop   func(main, worker int) []string // sent at the SIGTERM
		atShare  func(main, worker int) []string // sent when half the budget has passed
	}{
		{signals.MainFirst,
			func(main, _ int) []string { return []string{fmt.Sprintf("%d:TERM", main)} },
			func(_, worker int) []string { return []string{fmt.Sprintf("%d:TERM", worker)} }},
		{signals.MainOnly,
			func(main, _ int) []string { return []string{fmt.Sprintf("%d:TERM", main)} },
			func(int, int) []string { return nil }},
		{signals.Group,
			func(main, _ int) []string { return []string{fmt.Sprintf("%d:TERM", -main)} },
			func(int, int) []string { return nil }},
	} {
		t.Run(tc.delivery.String(), func(t *testing.T) {
			dir := t.TempDir()
			pids := filepath.Join(dir, "pids")
			clock := newFakeClock()
			k := &killLog{}
			in := make(chan os.Signal, 1)
			logs := &logBuffer{}
			// A launcher that ignores TERM and does not pass it on, with
			// one worker that ignores it too (until SIGKILL), which has a
			// helper of its own (a DataLoader worker, say).
			script := `trap '' TERM; sh -c 'sleep 1000 & echo $! > "$0.helper"; wait' "$0" & echo "$$ $!" > "$0.tmp"; mv "$0.tmp" "$0"; wait`
			done := make(chan error, 1)
			go func() {
				done <- Run(context.Background(), Config{Argv: []string{"sh", "-c", script, pids},
					Signals: in, Kill: k.kill, Clock: clock, Grace: grace, StopDelivery: tc.delivery, Log: logs.logger()})
			}()
			var main, worker int
			waitFor(t, "the trainer's pids", func() bool {
				b, err := os.ReadFile(pids)
				if err != nil {
					return false
				}
				_, err = fmt.Sscan(string(b), &main, &worker)
				return err == nil
			})
			helper := 0
			waitFor(t, "the helper's pid", func() bool {
				b, err := os.ReadFile(pids + ".helper")
				_, serr := fmt.Sscan(string(b), &helper)
				return err == nil && serr == nil
			})
			in <- unix.SIGTERM
			waitLog(t, logs, "supervisor.stopping", done) // logged once the timers are armed
			if got, want := k.list(main, worker, helper), tc.atStop(main, worker); !slices.Equal(got, want) {
				t.Fatalf("at the SIGTERM sent %v, want %v", got, want)
			}
			// The deadline, and with MainFirst the tree's TERM at half the
			// budget, are armed; nothing else.
			armed := []time.Duration{grace}
			if tc.delivery == signals.MainFirst {
				armed = []time.Duration{grace / 2, grace}
			}
			if got := clock.armed(); !slices.Equal(got, armed) {
				t.Fatalf("timers armed at the stop: %v, want %v", got, armed)
			}
			clock.advance(grace/2 - time.Millisecond) // fires nothing
			if got, want := k.list(main, worker, helper), tc.atStop(main, worker); !slices.Equal(got, want) {
				t.Fatalf("before half the budget sent %v, want still %v", got, want)
			}
			clock.advance(time.Millisecond)
			want := append(tc.atStop(main, worker), tc.atShare(main, worker)...)
			if len(want) > 1 {
				waitFor(t, "the worker's TERM", func() bool { return len(k.list(main, worker, helper)) >= len(want) })
			}
			if got := k.list(main, worker, helper); !slices.Equal(got, want) {
				t.Fatalf("at half the budget sent %v, want %v", got, want)
			}
			clock.advance(grace / 2)
			err := waitRun(t, done, logs)
			var ee *ExitError
			if !errors.As(err, &ee) || ee.Code != 137 || !ee.Preempted {
				t.Fatalf("Run = %v, want 137 (killed at the deadline), preempted", err)
			}
			got := k.list(main, worker, helper)
			for _, want := range []string{fmt.Sprintf("%d:KILL", -main), fmt.Sprintf("%d:KILL", worker), fmt.Sprintf("%d:KILL", helper)} {
				if !slices.Contains(got, want) {
					t.Errorf("sent %v, want %s at the deadline", got, want)
				}
			}
			ev := logEvents(t, logs, "supervisor.stop_tree")
			if tc.delivery == signals.MainFirst && len(ev) != 1 || tc.delivery != signals.MainFirst && len(ev) != 0 {
				t.Errorf("%d supervisor.stop_tree events; log:\n%s", len(ev), logs.String())
			}
		})
	}
}

// TestStopDeliveryMainExits: with MainFirst, a main process that saves
// and exits at the SIGTERM gets it alone; its worker gets the stop signal
// when it has exited, and the worker's own helper when the worker has
// exited in turn (a DataLoader worker dies of a signal that does not come
// from its parent), all with no time having passed.
func TestStopDeliveryMainExits(t *testing.T) {
	dir := t.TempDir()
	pids := filepath.Join(dir, "pids")
	clock := newFakeClock()
	k := &killLog{}
	in := make(chan os.Signal, 1)
	logs := &logBuffer{}
	script := `sh -c 'sleep 1000 & echo $! > "$0.helper"; wait' "$0" & echo "$$ $!" > "$0.tmp"; mv "$0.tmp" "$0"; trap 'exit 0' TERM; wait`
	done := make(chan error, 1)
	go func() {
		done <- Run(context.Background(), Config{Argv: []string{"sh", "-c", script, pids},
			Signals: in, Kill: k.kill, Clock: clock, Grace: time.Hour, Log: logs.logger()})
	}()
	var main, worker, helper int
	waitFor(t, "the trainer's pids", func() bool {
		b, err := os.ReadFile(pids)
		h, herr := os.ReadFile(pids + ".helper")
		if err != nil || herr != nil {
			return false
		}
		_, err = fmt.Sscan(string(b), &main, &worker)
		_, herr = fmt.Sscan(string(h), &helper)
		return err == nil && herr == nil
	})
	in <- unix.SIGTERM
	err := waitRun(t, done, logs)
	var ee *ExitError
	if !errors.As(err, &ee) || ee.Code != 143 || !ee.Preempted {
		t.Fatalf("Run = %v, want 143, preempted", err)
	}
	want := []string{fmt.Sprintf("%d:TERM", main), fmt.Sprintf("%d:TERM", worker), fmt.Sprintf("%d:TERM", helper)}
	if got := k.list(main, worker, helper); !slices.Equal(got, want) {
		t.Errorf("sent %v, want TERM to the main process, then to the worker, then to its helper", got)
	}
}
