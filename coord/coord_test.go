package coord

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/lifeboat-project/lifeboat/internal/testenv"
	"github.com/lifeboat-project/lifeboat/storage"
	fsstore "github.com/lifeboat-project/lifeboat/storage/fs"
	"github.com/lifeboat-project/lifeboat/storage/mem"
	"github.com/lifeboat-project/lifeboat/storage/s3"
)

// eachStore runs fn on an in-memory store (checking that no goroutine is
// left behind), a directory store and a fresh prefix of the test MinIO
// server (skipped without one, see testenv.RequireMinIO).
func eachStore(t *testing.T, fn func(t *testing.T, st storage.Store)) {
	t.Run("mem", func(t *testing.T) {
		noLeaks(t)
		fn(t, mem.New())
	})
	t.Run("fs", func(t *testing.T) {
		st, err := fsstore.New(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		fn(t, st)
	})
	t.Run("s3", func(t *testing.T) {
		m := testenv.RequireMinIO(t)
		st, err := s3.New(context.Background(), s3.Config{
			Endpoint: m.Endpoint, Bucket: "lifeboat-test", Prefix: "coord-" + strings.ToLower(rand.Text()[:12]),
			AccessKey: m.AccessKey, SecretKey: m.SecretKey, CreateBucket: true, BucketLookup: s3.LookupPath,
		})
		if err != nil {
			t.Fatalf("open the test MinIO: %v", err)
		}
		fn(t, st)
	})
}

// noLeaks checks at the end of the test that no goroutine is left behind,
// but the idle connections of the S3 client other tests used.
func noLeaks(t *testing.T) {
	t.Cleanup(func() {
		goleak.VerifyNone(t, goleak.IgnoreTopFunction("net/http.(*persistConn).readLoop"),
			goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"),
			goleak.IgnoreTopFunction("internal/poll.runtime_pollWait"))
	})
}

// logBuf collects a coordinator's JSON log lines.
type logBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// records returns the log records named msg.
func (l *logBuf) records(msg string) []map[string]any {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []map[string]any
	for _, line := range strings.Split(l.b.String(), "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(line), &m) == nil && m["msg"] == msg {
			out = append(out, m)
		}
	}
	return out
}

// rank is one running Coordinator.
type rank struct {
	*Coordinator
	dir string
	log *logBuf
}

// startRanks runs one Coordinator for each of ranks (of world) on st.
func startRanks(t *testing.T, st storage.Store, world int, started time.Time, stepWait time.Duration, ranks ...int) []*rank {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	var out []*rank
	for _, r := range ranks {
		lb := &logBuf{}
		dir := t.TempDir()
		c, err := New(Config{Store: st, Rank: r, WorldSize: world, Host: "pod-" + string(rune('a'+r)), Interval: 5 * time.Millisecond,
			Started: started, Dir: dir, StepWait: stepWait, Log: slog.New(slog.NewJSONHandler(lb, nil))})
		if err != nil {
			t.Fatal(err)
		}
		wg.Go(func() { c.Run(ctx) })
		out = append(out, &rank{Coordinator: c, dir: dir, log: lb})
	}
	return out
}

// eventually polls cond every millisecond for up to 10s.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatalf("never: %s", what)
}

// stopFile reads the rank's StopFile; ok is false when there is none.
func (r *rank) stopFile(t *testing.T) (StopInfo, bool) {
	t.Helper()
	var info StopInfo
	b, err := os.ReadFile(filepath.Join(r.dir, StopFile))
	if errors.Is(err, os.ErrNotExist) {
		return info, false
	}
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &info); err != nil {
		t.Fatalf("%s: %q: %v", StopFile, b, err)
	}
	return info, true
}

// ask writes the trainer's step request, as lifeboat.stop_step does.
func (r *rank) ask(t *testing.T, step int64) {
	t.Helper()
	if err := writeFile(r.dir, StepRequestFile, StepRequest{Step: step}); err != nil {
		t.Fatal(err)
	}
}

// agreedStep waits for the step in the rank's StopFile.
func (r *rank) agreedStep(t *testing.T) int64 {
	t.Helper()
	var step int64
	eventually(t, "the agreed step in "+r.dir, func() bool {
		info, ok := r.stopFile(t)
		if ok && info.Step != nil {
			step = *info.Step
		}
		return ok && info.Step != nil
	})
	return step
}

func TestStopIDs(t *testing.T) {
	base := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	ids := []string{
		StopID(base.Add(time.Second), 2),
		StopID(base, 10),
		StopID(base.Add(time.Nanosecond), 1),
		StopID(base.Add(999*time.Millisecond).In(time.FixedZone("x", 3600)), 0),
	}
	sorted := slices.Sorted(slices.Values(ids))
	want := []string{ids[1], ids[2], ids[3], ids[0]}
	if !slices.Equal(sorted, want) {
		t.Fatalf("ids sort as %q, want time order %q", sorted, want)
	}
	for _, tc := range []struct {
		id   string
		ok   bool
		rank int
	}{
		{ids[0], true, 2},
		{ids[1], true, 10},
		{"20250301T120000.000000000Z-rank-x", false, 0},
		{"20250301T120000Z-rank-000001", false, 0},
		{"garbage", false, 0},
	} {
		tm, r, ok := parseStopID(tc.id)
		if ok != tc.ok || ok && r != tc.rank {
			t.Errorf("parseStopID(%q) = %v, %d, %v; want rank %d, %v", tc.id, tm, r, ok, tc.rank, tc.ok)
		}
	}
	if tm, _, _ := parseStopID(ids[2]); !tm.Equal(base.Add(time.Nanosecond)) {
		t.Errorf("time %v, want %v", tm, base.Add(time.Nanosecond))
	}
	for _, tc := range []struct {
		name string
		rank int
		step int64
		ok   bool
	}{
		{"rank-000003.step-120", 3, 120, true},
		{"rank-000000.step-0", 0, 0, true},
		{"agreed.json", 0, 0, false},
		{"rank-1.step-x", 0, 0, false},
		{"rank--1.step-5", 0, 0, false},
	} {
		r, s, ok := parseReport(tc.name)
		if ok != tc.ok || ok && (r != tc.rank || s != tc.step) {
			t.Errorf("parseReport(%q) = %d, %d, %v", tc.name, r, s, ok)
		}
	}
	if k := reportKey(ids[0], 3, 120); k != StepsPrefix+ids[0]+"/rank-000003.step-120" {
		t.Errorf("reportKey = %q", k)
	}
}

// TestPeerStop: a stop that begins on rank 1 reaches rank 0 and rank 2
// through the store; rank 1 itself is not told of its own stop.
func TestPeerStop(t *testing.T) {
	eachStore(t, func(t *testing.T, st storage.Store) {
		rs := startRanks(t, st, 3, time.Now(), time.Minute, 0, 1, 2)
		if _, ok := rs[0].stopFile(t); ok {
			t.Fatal("a stop file before any stop")
		}
		deadline := time.Now().Add(30 * time.Second)
		rs[1].Begin("SIGTERM", deadline)
		rs[1].Begin("max runtime 1h reached", deadline) // only the first counts
		for _, r := range []*rank{rs[0], rs[2]} {
			select {
			case s := <-r.Peer():
				if s.Rank != 1 || s.Reason != "SIGTERM" || s.Host != "pod-b" || !s.Deadline.Equal(deadline) {
					t.Errorf("peer stop %+v, want rank 1's SIGTERM", s)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("rank 1's stop never reached the others")
			}
			info, ok := r.stopFile(t)
			if !ok || info.FromRank != 1 || info.Reason != "SIGTERM" || info.Step != nil {
				t.Errorf("stop file %+v (present %v), want one from rank 1 without a step", info, ok)
			}
			seen := r.log.records("coord.stop_seen")
			if len(seen) != 1 || seen[0]["from_rank"] != 1.0 || seen[0]["reason"] != "SIGTERM" || seen[0]["age"] == nil {
				t.Errorf("coord.stop_seen records %v", seen)
			}
			if j, ok := r.Joined(); !ok || j.Rank != 1 {
				t.Errorf("Joined() = %+v, %v", j, ok)
			}
		}
		eventually(t, "coord.stop_written logged", func() bool { return len(rs[1].log.records("coord.stop_written")) > 0 })
		if w := rs[1].log.records("coord.stop_written"); len(w) != 1 || w[0]["reason"] != "SIGTERM" || w[0]["rank"] != 1.0 {
			t.Errorf("coord.stop_written records %v", w)
		}
		if info, ok := rs[1].stopFile(t); !ok || info.FromRank != 1 {
			t.Errorf("rank 1's own stop file %+v, %v", info, ok)
		}
		select {
		case s := <-rs[1].Peer():
			t.Errorf("rank 1 was told of a peer stop %+v", s)
		case <-time.After(50 * time.Millisecond):
		}
		// A stop that begins on a rank already following writes nothing.
		rs[0].Begin("SIGTERM", deadline)
		time.Sleep(20 * time.Millisecond)
		var n int
		_ = st.List(context.Background(), StopPrefix, func(storage.ObjectInfo) error { n++; return nil })
		if n != 1 {
			t.Errorf("%d stop records, want 1", n)
		}
	})
}

// TestStaleStops: a record written before this lifeboat started (less the
// allowed clock skew), or by this rank's number but not by this
// lifeboat, does not stop it; one written just before its start, within
// the skew, does.
func TestStaleStops(t *testing.T) {
	eachStore(t, func(t *testing.T, st storage.Store) {
		ctx := context.Background()
		started := time.Now()
		for _, s := range []Stop{
			{Rank: 1, Reason: "an earlier run", Written: started.Add(-DefaultClockSkew - time.Millisecond)},
			{Rank: 0, Reason: "this rank's predecessor", Written: started.Add(time.Second)},
		} {
			if _, err := Write(ctx, st, s); err != nil {
				t.Fatal(err)
			}
		}
		rs := startRanks(t, st, 2, started, time.Minute, 0)
		time.Sleep(50 * time.Millisecond) // ten intervals
		select {
		case s := <-rs[0].Peer():
			t.Fatalf("stopped by %+v", s)
		default:
		}
		if _, ok := rs[0].stopFile(t); ok {
			t.Fatal("a stop file for a stale stop")
		}
		announce(t, st, Stop{Rank: 1, Reason: "SIGTERM", Written: started.Add(-DefaultClockSkew / 2)})
		select {
		case s := <-rs[0].Peer():
			if s.Reason != "SIGTERM" {
				t.Errorf("stopped by %+v, want the new SIGTERM", s)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("a stop written within the clock skew before the start was not seen")
		}
	})
}

// TestStaleFilesRemoved: New removes the stop files an earlier run left in
// the directory before the trainer starts.
func TestStaleFilesRemoved(t *testing.T) {
	dir := t.TempDir()
	for _, name := range []string{StopFile, StepRequestFile, ".lifeboat-tmp-coord-123"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(`{"step": 5}`), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "model.pdparams"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := New(Config{Store: mem.New(), WorldSize: 2, Interval: time.Second, Started: time.Now(), Dir: dir}); err != nil {
		t.Fatal(err)
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 1 || ents[0].Name() != "model.pdparams" {
		t.Fatalf("left %v, want only the trainer's file", ents)
	}
}

// TestCleanup: rank 0 deletes the records and steps written more than a
// minute before it started, and nothing newer; other ranks delete nothing.
func TestCleanup(t *testing.T) {
	eachStore(t, func(t *testing.T, st storage.Store) {
		ctx := context.Background()
		started := time.Now()
		old := StopID(started.Add(-2*time.Minute), 1)
		recent := StopID(started.Add(-30*time.Second), 2)
		for _, id := range []string{old, recent} {
			t0, r, _ := parseStopID(id)
			if _, err := Write(ctx, st, Stop{ID: id, Rank: r, Written: t0}); err != nil {
				t.Fatal(err)
			}
			for _, k := range []string{reportKey(id, 0, 7), agreedKey(id)} {
				if err := putJSON(ctx, st, k, StepRequest{Step: 7}, false); err != nil {
					t.Fatal(err)
				}
			}
		}
		keys := func() []string {
			var ks []string
			_ = st.List(ctx, "coord/", func(oi storage.ObjectInfo) error { ks = append(ks, oi.Key); return nil })
			return ks
		}
		all := keys()
		rs := startRanks(t, st, 3, started, time.Minute, 1)
		time.Sleep(30 * time.Millisecond)
		if got := keys(); !slices.Equal(got, all) {
			t.Fatalf("rank 1 deleted %v", got)
		}
		rs = append(rs, startRanks(t, st, 3, started, time.Minute, 0)...)
		want := []string{stopKey(recent), agreedKey(recent), reportKey(recent, 0, 7)}
		slices.Sort(want)
		eventually(t, "rank 0 deletes the old run's records", func() bool { return slices.Equal(keys(), want) })
		eventually(t, "coord.cleaned logged", func() bool { return len(rs[1].log.records("coord.cleaned")) == 1 })
		if c := rs[1].log.records("coord.cleaned"); c[0]["deleted"] != 3.0 {
			t.Errorf("coord.cleaned records %v", c)
		}
	})
}

// TestStepEveryRankAsked: when every rank's trainer asks, the agreed step
// is the highest asked, on every rank.
func TestStepEveryRankAsked(t *testing.T) {
	eachStore(t, func(t *testing.T, st storage.Store) {
		rs := startRanks(t, st, 3, time.Now(), time.Minute, 0, 1, 2)
		rs[2].Begin("SIGTERM", time.Time{})
		for _, r := range rs[:2] {
			<-r.Peer()
		}
		for i, r := range rs {
			r.ask(t, int64(9+min(i, 1)))
		}
		for _, r := range rs {
			if s := r.agreedStep(t); s != 10 {
				t.Errorf("rank agreed on %d, want 10 (every rank asked; the highest)", s)
			}
		}
		eventually(t, "coord.stop_step_agreed logged", func() bool { return len(rs[0].log.records("coord.stop_step_agreed")) > 0 })
		a := rs[0].log.records("coord.stop_step_agreed")
		if len(a) != 1 || a[0]["how"] != "every rank asked" {
			t.Errorf("coord.stop_step_agreed records %v", a)
		}
	})
}

// TestStepNotEveryRankAsked: a rank whose trainer is blocked in the next
// step's collective never asks; after StepWait the others agree on the
// highest step asked plus one, and the late rank, asking at that step,
// gets the same answer.
func TestStepNotEveryRankAsked(t *testing.T) {
	eachStore(t, func(t *testing.T, st storage.Store) {
		rs := startRanks(t, st, 3, time.Now(), 100*time.Millisecond, 0, 1, 2)
		rs[0].Begin("gcp preemption notice", time.Time{})
		<-rs[1].Peer()
		<-rs[2].Peer()
		rs[0].ask(t, 20)
		rs[1].ask(t, 20)
		for _, r := range rs[:2] {
			if s := r.agreedStep(t); s != 21 {
				t.Errorf("agreed on %d, want 21", s)
			}
		}
		rs[2].ask(t, 21)
		if s := rs[2].agreedStep(t); s != 21 {
			t.Errorf("the late rank got %d, want 21", s)
		}
	})
}

// TestTwoRanksStopAtOnce: two ranks preempted at the same moment both
// write a record; every rank agrees under the lowest one.
// twoStopAtOnce runs three ranks on inner, of which ranks 1 and 2 begin a
// stop at the same moment: neither sees the other's record before its own
// stop began. Listings show no stop record until both are written;
// otherwise a pause of the test between the two Begins lets rank 1 see
// rank 2's record and follow it instead. The stop flag is hidden as long,
// and appears once with both flags written. It returns once rank 0 follows
// the stop, with the store the ranks use.
func twoStopAtOnce(t *testing.T, inner storage.Store) ([]*rank, storage.Store) {
	t.Helper()
	var hide atomic.Bool
	hide.Store(true)
	st := &mem.FaultStore{Inner: inner,
		OnList: func(ctx context.Context, prefix string, fn func(storage.ObjectInfo) error) error {
			if hide.Load() && strings.HasPrefix(prefix, StopPrefix) {
				return nil
			}
			return inner.List(ctx, prefix, fn)
		},
		OnStat: func(ctx context.Context, key string) (storage.ObjectInfo, error) {
			if hide.Load() && key == FlagKey {
				return storage.ObjectInfo{}, storage.ErrNotExist
			}
			return inner.Stat(ctx, key)
		},
	}
	rs := startRanks(t, st, 3, time.Now(), time.Minute, 0, 1, 2)
	rs[2].Begin("SIGTERM", time.Time{})
	rs[1].Begin("SIGTERM", time.Time{})
	for _, r := range rs[1:] {
		if err := r.Settle(context.Background()); err != nil { // the record and the flag
			t.Fatal(err)
		}
	}
	hide.Store(false)
	<-rs[0].Peer()
	return rs, st
}

func TestTwoRanksStopAtOnce(t *testing.T) {
	eachStore(t, func(t *testing.T, inner storage.Store) {
		rs, st := twoStopAtOnce(t, inner)
		for _, r := range rs {
			r.ask(t, 5)
		}
		for _, r := range rs {
			if s := r.agreedStep(t); s != 5 {
				t.Errorf("agreed on %d, want 5", s)
			}
		}
		var ids []string
		_ = st.List(context.Background(), StopPrefix, func(oi storage.ObjectInfo) error { ids = append(ids, oi.Key); return nil })
		if len(ids) != 2 {
			t.Fatalf("stop records %v, want two", ids)
		}
		lowest := strings.TrimSuffix(strings.TrimPrefix(ids[0], StopPrefix), ".json")
		for _, r := range rs {
			if info, _ := r.stopFile(t); info.ID != lowest {
				t.Errorf("stop file names %s, want the lowest record %s", info.ID, lowest)
			}
		}
	})
}

// TestStoreDown: with every store request failing, a stop still tells the
// trainer (the stop file), each failing request is logged once, not once
// per interval, and after twice StepWait the rank decides its step alone.
// When the store answers again, the record is written.
func TestStoreDown(t *testing.T) {
	noLeaks(t)
	var mu sync.Mutex
	down := true
	isDown := func() bool { mu.Lock(); defer mu.Unlock(); return down }
	errDown := errors.New("connection refused")
	inner := mem.New()
	st := &mem.FaultStore{Inner: inner,
		OnPut: func(ctx context.Context, key string, r io.Reader, size int64, opts storage.PutOptions) (storage.ObjectInfo, error) {
			if isDown() {
				return storage.ObjectInfo{}, errDown
			}
			return inner.Put(ctx, key, r, size, opts)
		},
		OnList: func(ctx context.Context, prefix string, fn func(storage.ObjectInfo) error) error {
			if isDown() {
				return errDown
			}
			return inner.List(ctx, prefix, fn)
		},
	}
	rs := startRanks(t, st, 2, time.Now(), 50*time.Millisecond, 1)
	time.Sleep(30 * time.Millisecond)
	rs[0].Begin("SIGTERM", time.Time{})
	eventually(t, "the stop file", func() bool { _, ok := rs[0].stopFile(t); return ok })
	rs[0].ask(t, 3)
	if s := rs[0].agreedStep(t); s != 4 {
		t.Errorf("decided %d alone, want 4", s)
	}
	if a := rs[0].log.records("coord.stop_step_alone"); len(a) != 1 {
		t.Errorf("coord.stop_step_alone records %v", a)
	}
	per := map[any]int{}
	for _, r := range rs[0].log.records("coord.store_failed") {
		per[r["op"]]++
	}
	for op, n := range per {
		if n != 1 {
			t.Errorf("%s failed: logged %d times, want once", op, n)
		}
	}
	if per["list stops"] != 1 || per["write stop"] != 1 {
		t.Errorf("failures logged %v, want list stops and write stop", per)
	}
	mu.Lock()
	down = false
	mu.Unlock()
	eventually(t, "the record written once the store answers", func() bool { return len(rs[0].log.records("coord.stop_written")) == 1 })
	if r := rs[0].log.records("coord.store_recovered"); len(r) == 0 {
		t.Error("no coord.store_recovered")
	}
}

func TestConfigValidate(t *testing.T) {
	now := time.Now()
	for _, c := range []Config{
		{WorldSize: 2, Interval: time.Second, Started: now},
		{Store: mem.New(), WorldSize: 2, Started: now},
		{Store: mem.New(), Rank: 2, WorldSize: 2, Interval: time.Second, Started: now},
		{Store: mem.New(), WorldSize: 2, Interval: time.Second},
	} {
		if err := c.Validate(); err == nil {
			t.Errorf("%+v: no error", c)
		}
	}
}

// TestSettle: Settle returns once this rank's record is stored (a slow
// store), at once when no stop began here or the rank followed another's,
// and with an error when its context ends first.
func TestSettle(t *testing.T) {
	noLeaks(t)
	inner := mem.New()
	release := make(chan struct{})
	st := &mem.FaultStore{Inner: inner,
		OnPut: func(ctx context.Context, key string, r io.Reader, size int64, opts storage.PutOptions) (storage.ObjectInfo, error) {
			if strings.HasPrefix(key, StopPrefix) {
				select {
				case <-release:
				case <-ctx.Done():
					return storage.ObjectInfo{}, ctx.Err()
				}
			}
			return inner.Put(ctx, key, r, size, opts)
		},
	}
	rs := startRanks(t, st, 2, time.Now(), time.Minute, 0, 1)
	if err := rs[0].Settle(context.Background()); err != nil {
		t.Fatalf("Settle without a stop: %v", err)
	}
	rs[0].Begin("SIGTERM", time.Time{})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if err := rs[0].Settle(ctx); err == nil {
		t.Fatal("Settle returned before the record was stored")
	}
	close(release)
	if err := rs[0].Settle(context.Background()); err != nil {
		t.Fatal(err)
	}
	var n int
	_ = inner.List(context.Background(), StopPrefix, func(storage.ObjectInfo) error { n++; return nil })
	if n != 1 {
		t.Fatalf("%d records stored when Settle returned, want 1", n)
	}
	<-rs[1].Peer()
	rs[1].Begin("SIGTERM", time.Time{}) // the stop it follows
	if err := rs[1].Settle(context.Background()); err != nil {
		t.Fatalf("Settle on a follower: %v", err)
	}
}

// TestFutureStops: a stop record stamped half an hour ahead (an earlier
// run on a node whose clock was ahead) does not stop a new run, is logged
// once as such, and rank 0 deletes it when it starts; a real stop written
// meanwhile is followed.
func TestFutureStops(t *testing.T) {
	eachStore(t, func(t *testing.T, st storage.Store) {
		ctx := context.Background()
		started := time.Now()
		ahead, err := Write(ctx, st, Stop{Rank: 2, Reason: "SIGTERM of an earlier run", Written: started.Add(30 * time.Minute)})
		if err != nil {
			t.Fatal(err)
		}
		if err := putJSON(ctx, st, agreedKey(ahead.ID), Agreed{Step: 7}, true); err != nil {
			t.Fatal(err)
		}
		rs := startRanks(t, st, 3, started, time.Minute, 1)
		eventually(t, "coord.stop_from_future logged", func() bool { return len(rs[0].log.records("coord.stop_from_future")) > 0 })
		announce(t, st, Stop{Rank: 2, Reason: "SIGTERM", Written: time.Now()})
		select {
		case s := <-rs[0].Peer():
			if s.Reason != "SIGTERM" {
				t.Errorf("stopped by %+v, want the new SIGTERM", s)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("a stop written during the run was not seen")
		}
		if n := len(rs[0].log.records("coord.stop_from_future")); n != 1 {
			t.Errorf("coord.stop_from_future logged %d times, want once", n)
		}
		rs = append(rs, startRanks(t, st, 3, started, time.Minute, 0)...)
		eventually(t, "rank 0 deletes the record from the future", func() bool {
			gone := true
			_ = st.List(ctx, "coord/", func(oi storage.ObjectInfo) error {
				gone = gone && !strings.Contains(oi.Key, ahead.ID)
				return nil
			})
			return gone
		})
		eventually(t, "coord.cleaned logged", func() bool { return len(rs[1].log.records("coord.cleaned")) == 1 })
		if c := rs[1].log.records("coord.cleaned"); c[0]["deleted"] != 2.0 {
			t.Errorf("coord.cleaned records %v, want 2 deleted (the record and its step)", c)
		}
	})
}

// TestCheck: Check finds another rank's stop at once, between the looks
// at the Interval (an hour here), and follows it: Peer delivers it and
// Joined names it. With no stop in the store it finds none.
func TestCheck(t *testing.T) {
	eachStore(t, func(t *testing.T, st storage.Store) {
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		defer wg.Wait()
		defer cancel()
		c, err := New(Config{Store: st, Rank: 1, WorldSize: 2, Interval: time.Hour, Started: time.Now()})
		if err != nil {
			t.Fatal(err)
		}
		wg.Go(func() { c.Run(ctx) })
		if s, ok := c.Check(ctx); ok {
			t.Fatalf("Check found %+v in an empty store", s)
		}
		if _, err := Write(ctx, st, Stop{Rank: 0, Reason: "SIGTERM", Written: time.Now()}); err != nil {
			t.Fatal(err)
		}
		s, ok := c.Check(ctx)
		if !ok || s.Rank != 0 || s.Reason != "SIGTERM" {
			t.Fatalf("Check = %+v, %v; want rank 0's SIGTERM", s, ok)
		}
		select {
		case p := <-c.Peer():
			if p.ID != s.ID {
				t.Errorf("Peer delivered %+v, want %+v", p, s)
			}
		default:
			t.Error("Peer delivered nothing")
		}
	})
}
