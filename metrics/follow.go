package metrics

import (
	"context"
	"time"
)

// Totals are an uploader's figures as it reports them: running totals
// since it started (Commits, Uploaded, Deduped, Failures, Interrupted,
// Retries) and current values (LastStep, LastCommit, Pending, Throughput).
type Totals struct {
	Commits     int       // checkpoints committed; LastStep counts only after the first
	LastStep    int64     // step of the last commit
	LastCommit  time.Time // when it was committed
	Uploaded    int64     // chunk bytes stored
	Deduped     int64     // chunk bytes found already stored
	Failures    int       // failed upload attempts
	Interrupted int       // checkpoints never stored because their save was cut short
	Torn        int       // commits found torn afterwards
	Retries     int64     // store requests retried
	Pending     int64     // bytes of the checkpoint being uploaded, 0 if none
	Throughput  float64   // bytes/s of new data, 0 before any
}

// Follow reads totals every interval until ctx ends, and once more then,
// and records each reading in m: counters get the increase since the last
// reading, gauges the value read. A nil m returns at once.
func (m *Metrics) Follow(ctx context.Context, read func() Totals, interval time.Duration) {
	if m == nil {
		return
	}
	f := &follower{m: m}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			f.record(read())
			return
		case <-t.C:
			f.record(read())
		}
	}
}

// follower turns successive Totals into counter increases.
type follower struct {
	m    *Metrics
	last Totals
}

func (f *follower) record(t Totals) {
	m, last := f.m, f.last
	if t.Commits > 0 && (t.LastStep != last.LastStep || !t.LastCommit.Equal(last.LastCommit)) {
		m.SetCheckpoint(t.LastStep, t.LastCommit)
	}
	m.AddUploaded(t.Uploaded - last.Uploaded)
	m.AddDeduped(t.Deduped - last.Deduped)
	for i := last.Failures; i < t.Failures; i++ {
		m.IncUploadFailure()
	}
	for i := last.Interrupted; i < t.Interrupted; i++ {
		m.IncInterrupted()
	}
	for i := last.Torn; i < t.Torn; i++ {
		m.IncTorn()
	}
	for i := last.Retries; i < t.Retries; i++ {
		m.IncRetry()
	}
	m.SetPending(t.Pending)
	m.SetThroughput(t.Throughput)
	f.last = t
}
