package agent

import "time"

// EventKind says what an Event reports.
type EventKind int

const (
	// EventCommitted: a checkpoint was committed (Step, Bytes, Seconds,
	// Saved; Final when the final flush committed it).
	EventCommitted EventKind = iota + 1
	// EventUploadFailed: an upload attempt of Step failed (Err); it is
	// retried.
	EventUploadFailed
	// EventInterrupted: an interrupted save (ID, Step, Path, Why) was
	// ignored.
	EventInterrupted
	// EventRestored: Step was restored into the directory (a restart's
	// restore; see Restored).
	EventRestored
)

// Event is one thing the agent did that lifeboat reports beyond its log
// (events and annotations on the Kubernetes pod).
type Event struct {
	Kind    EventKind
	At      time.Time
	Step    int64
	Bytes   int64     // EventCommitted: the checkpoint's size
	Seconds float64   // EventCommitted: how long its upload took
	Saved   time.Time // EventCommitted: when the trainer last changed its files
	Final   bool      // EventCommitted: by the final flush (Flush or Sync)
	ID      string    // EventInterrupted
	Path    string    // EventInterrupted: the file that shows it, may be empty
	Why     string    // EventInterrupted
	Err     string    // EventUploadFailed
}

// Notify has f told of every Event from now on, in the agent's goroutines;
// f must not block. Call it before Run.
func (a *Agent) Notify(f func(Event)) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.notify = f
}

// emit tells the Notify function of e. The caller must not hold a.mu.
func (a *Agent) emit(e Event) {
	a.mu.Lock()
	f := a.notify
	a.mu.Unlock()
	if f == nil {
		return
	}
	if e.At.IsZero() {
		e.At = a.cfg.Clock()
	}
	f(e)
}
