package checkpoint

import (
	"context"
	"math/rand/v2"
	"time"

	"github.com/lifeboat-project/lifeboat/storage"
)

// Clock returns the current time: time.Now in production, a fake in tests.
type Clock func() time.Time

// Backoff returns how long to wait before retry number attempt (1 for the
// first retry) of a store call that failed with a transient error, and false
// when no retry is left. Tests pass one that returns 0 so nothing sleeps.
type Backoff func(attempt int) (time.Duration, bool)

// ExponentialBackoff allows retries retries, waiting a random time up to
// base*2^(attempt-1), capped at max ("full jitter").
func ExponentialBackoff(base, max time.Duration, retries int) Backoff {
	return func(attempt int) (time.Duration, bool) {
		if attempt > retries {
			return 0, false
		}
		d := base << min(attempt-1, 30)
		if d <= 0 || d > max {
			d = max
		}
		return rand.N(d) + 1, true
	}
}

// DefaultBackoff retries 8 times from 100ms up to 10s between tries.
func DefaultBackoff() Backoff { return ExponentialBackoff(100*time.Millisecond, 10*time.Second, 8) }

// retry runs op until it succeeds, fails with a permanent error
// (storage.IsPermanent), ctx ends, or backoff gives up; it returns op's last
// error.
func retry(ctx context.Context, backoff Backoff, op func() error) error {
	for attempt := 1; ; attempt++ {
		err := op()
		if err == nil || storage.IsPermanent(err) || ctx.Err() != nil {
			return err
		}
		d, ok := backoff(attempt)
		if !ok {
			return err
		}
		if d > 0 {
			t := time.NewTimer(d)
			select {
			case <-ctx.Done():
				t.Stop()
				return err
			case <-t.C:
			}
		}
	}
}

func orDefaultBackoff(b Backoff) Backoff {
	if b == nil {
		return DefaultBackoff()
	}
	return b
}

func orDefaultClock(c Clock) Clock {
	if c == nil {
		return time.Now
	}
	return c
}
