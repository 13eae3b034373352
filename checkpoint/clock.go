package checkpoint

import "time"

// Clock returns the current time: time.Now in production, a fake in tests.
type Clock func() time.Time

func orDefaultClock(c Clock) Clock {
	if c == nil {
		return time.Now
	}
	return c
}
