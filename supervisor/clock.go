package supervisor

import "time"

// Clock tells the supervision loop the time and makes its timers: the
// real clock in production, one a test moves by hand.
type Clock interface {
	Now() time.Time
	NewTimer(d time.Duration) Timer
}

// Timer is one timer of a Clock.
type Timer interface {
	C() <-chan time.Time
	Stop() bool
}

// realClock is the system's clock.
type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

func (realClock) NewTimer(d time.Duration) Timer { return realTimer{time.NewTimer(d)} }

type realTimer struct{ t *time.Timer }

func (r realTimer) C() <-chan time.Time { return r.t.C }
func (r realTimer) Stop() bool          { return r.t.Stop() }

// alarm is a timer of the loop that may be unset. An unset alarm's
// channel is nil, so its case in a select never fires.
type alarm struct {
	clock Clock
	t     Timer
}

func (a *alarm) set(d time.Duration) {
	a.stop()
	a.t = a.clock.NewTimer(d)
}

func (a *alarm) stop() {
	if a.t != nil {
		a.t.Stop()
		a.t = nil
	}
}

func (a *alarm) armed() bool { return a.t != nil }

func (a *alarm) c() <-chan time.Time {
	if a.t == nil {
		return nil
	}
	return a.t.C()
}
