package metrics

import (
	"context"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"go.uber.org/goleak"
)

// gather reads m's metric families by name.
func gather(t *testing.T, m *Metrics) map[string]*dto.MetricFamily {
	t.Helper()
	fams, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*dto.MetricFamily{}
	for _, f := range fams {
		out[f.GetName()] = f
	}
	return out
}

// TestFollowRecordsIncreases: counters move by the increase between two
// readings, not by the running totals; gauges take the value read; the
// checkpoint is set only once something was committed.
func TestFollowRecordsIncreases(t *testing.T) {
	m := New("test")
	f := &follower{m: m}
	f.record(Totals{LastStep: 7, Pending: 10})
	fams := gather(t, m)
	want(t, fams, "lifeboat_checkpoint_last_step", -1)
	want(t, fams, "lifeboat_upload_pending_bytes", 10)

	at := time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)
	f.record(Totals{Commits: 1, LastStep: 100, LastCommit: at, Uploaded: 1000, Deduped: 500, Failures: 2, Interrupted: 1, Retries: 3, Throughput: 50})
	f.record(Totals{Commits: 2, LastStep: 200, LastCommit: at.Add(time.Minute), Uploaded: 1500, Deduped: 500, Failures: 3, Interrupted: 1, Retries: 5})
	fams = gather(t, m)
	want(t, fams, "lifeboat_checkpoint_last_step", 200)
	want(t, fams, "lifeboat_checkpoint_last_commit_timestamp_seconds", float64(at.Add(time.Minute).Unix()))
	want(t, fams, "lifeboat_upload_bytes_total", 1500)
	want(t, fams, "lifeboat_upload_deduped_bytes_total", 500)
	want(t, fams, "lifeboat_upload_failures_total", 3)
	want(t, fams, "lifeboat_checkpoints_interrupted_total", 1)
	want(t, fams, "lifeboat_upload_retries_total", 5)
	want(t, fams, "lifeboat_upload_pending_bytes", 0)
	want(t, fams, "lifeboat_upload_throughput_bytes_per_second", 0)
}

// TestFollowReadsOnceMoreAtTheEnd: when ctx ends, Follow records a last
// reading and returns; a nil Metrics returns at once.
func TestFollowReadsOnceMoreAtTheEnd(t *testing.T) {
	defer goleak.VerifyNone(t)
	m := New("test")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	m.Follow(ctx, func() Totals { return Totals{Uploaded: 42} }, time.Hour)
	want(t, gather(t, m), "lifeboat_upload_bytes_total", 42)
	var none *Metrics
	none.Follow(context.Background(), func() Totals { t.Error("read with a nil Metrics"); return Totals{} }, time.Hour)
}
