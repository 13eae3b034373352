package coord

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"maps"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lifeboat-project/lifeboat/storage"
	"github.com/lifeboat-project/lifeboat/storage/mem"
)

// requests counts a store's requests by kind and key (or prefix).
type requests struct {
	mu sync.Mutex
	n  map[string]int // "stat coord/...", "list coord/stop/", ...
}

func (r *requests) add(kind, key string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.n == nil {
		r.n = map[string]int{}
	}
	r.n[kind+" "+key]++
}

// take returns the counts since the last take, and starts again.
func (r *requests) take() map[string]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := r.n
	r.n = nil
	if n == nil {
		n = map[string]int{}
	}
	return n
}

// counted wraps inner so that every request is counted in n.
func counted(inner storage.Store, n *requests) *mem.FaultStore {
	return &mem.FaultStore{Inner: inner,
		OnPut: func(ctx context.Context, key string, r io.Reader, size int64, opts storage.PutOptions) (storage.ObjectInfo, error) {
			n.add("put", key)
			return inner.Put(ctx, key, r, size, opts)
		},
		OnGet: func(ctx context.Context, key string, offset, length int64) (io.ReadCloser, error) {
			n.add("get", key)
			return inner.Get(ctx, key, offset, length)
		},
		OnStat: func(ctx context.Context, key string) (storage.ObjectInfo, error) {
			n.add("stat", key)
			return inner.Stat(ctx, key)
		},
		OnList: func(ctx context.Context, prefix string, fn func(storage.ObjectInfo) error) error {
			n.add("list", prefix)
			return inner.List(ctx, prefix, fn)
		},
		OnDelete: func(ctx context.Context, key string) error {
			n.add("delete", key)
			return inner.Delete(ctx, key)
		},
	}
}

// watcher returns a Coordinator of rank 1 of 3 on st that the test drives
// itself, one interval at a time (tick), without Run; its Interval is
// the default, which only sets how many looks make relistAfter.
func watcher(t *testing.T, st storage.Store, started time.Time) (*Coordinator, *logBuf) {
	t.Helper()
	lb := &logBuf{}
	c, err := New(Config{Store: st, Rank: 1, WorldSize: 3, Interval: DefaultInterval, Started: started,
		Log: jsonLog(lb)})
	if err != nil {
		t.Fatal(err)
	}
	return c, lb
}

// peerStopped reports whether c has followed another rank's stop.
func peerStopped(c *Coordinator) (Stop, bool) {
	select {
	case s := <-c.peer:
		return s, true
	default:
		return Stop{}, false
	}
}

// TestWatchCostsOneHead: while nothing happens, a watching rank makes one
// request per interval, a HEAD (Stat) of the stop flag; only its first
// look lists coord/stop/ (the records already there are judged by their
// names, as always).
func TestWatchCostsOneHead(t *testing.T) {
	eachStore(t, func(t *testing.T, inner storage.Store) {
		ctx := context.Background()
		var n requests
		c, _ := watcher(t, counted(inner, &n), time.Now())
		c.tick(ctx)
		first := n.take()
		if first["list "+StopPrefix] != 1 {
			t.Errorf("first look: %v, want one LIST of %s", first, StopPrefix)
		}
		const intervals = 10
		for range intervals {
			c.tick(ctx)
		}
		got := n.take()
		want := map[string]int{"stat " + FlagKey: intervals}
		if len(got) != len(want) || got["stat "+FlagKey] != intervals {
			t.Errorf("%d intervals of watching made %v, want %v (one HEAD of the flag per interval, no LIST)", intervals, got, want)
		}
	})
}

// jsonLog logs JSON lines into lb.
func jsonLog(lb *logBuf) *slog.Logger { return slog.New(slog.NewJSONHandler(lb, nil)) }

// announce stores s and its flag, as a rank that stops does.
func announce(t *testing.T, st storage.Store, s Stop) Stop {
	t.Helper()
	s, err := Write(context.Background(), st, s)
	if err != nil {
		t.Fatal(err)
	}
	if err := Flag(context.Background(), st, s); err != nil {
		t.Fatal(err)
	}
	return s
}

// stopper returns a Coordinator of rank 2 of 3 on st whose stop the test
// begins itself (stop), without Run.
func stopper(t *testing.T, st storage.Store) (*Coordinator, *logBuf) {
	t.Helper()
	lb := &logBuf{}
	c, err := New(Config{Store: st, Rank: 2, WorldSize: 3, Host: "pod-c", Interval: DefaultInterval, Started: time.Now(),
		Log: jsonLog(lb)})
	if err != nil {
		t.Fatal(err)
	}
	return c, lb
}

// stop begins c's own stop (Begin) and does what Run does with it.
func stop(c *Coordinator, reason string) {
	c.Begin(reason, time.Time{})
	c.beginLocal(context.Background(), <-c.begin)
}

// TestPeerStopWithinOneInterval: a stop written at any moment of a
// watching rank's interval is followed at its next look: after its
// first look (Stat, then LIST), and between the first look's Stat and
// LIST (the record is listed), on every store.
func TestPeerStopWithinOneInterval(t *testing.T) {
	eachStore(t, func(t *testing.T, inner storage.Store) {
		ctx := context.Background()
		var n requests
		w, wlog := watcher(t, counted(inner, &n), time.Now())
		s, _ := stopper(t, inner)
		w.tick(ctx)
		w.tick(ctx)
		n.take()
		stop(s, "SIGTERM")
		w.tick(ctx)
		got, ok := peerStopped(w)
		if !ok || got.ID != s.own.ID || got.Reason != "SIGTERM" || got.Host != "pod-c" {
			t.Fatalf("after one interval: peer stop %+v (%v), want rank 2's SIGTERM %s", got, ok, s.own.ID)
		}
		if seen := wlog.records("coord.stop_seen"); len(seen) != 1 {
			t.Errorf("coord.stop_seen records %v", seen)
		}
		want := map[string]int{"stat " + FlagKey: 1, "list " + StopPrefix: 1, "get " + stopKey(s.own.ID): 1}
		if reqs := n.take(); !maps.Equal(reqs, want) {
			t.Errorf("the interval that saw the stop made %v, want %v", reqs, want)
		}
	})
	// The stop's record and flag are written while the watcher's first
	// LIST is under way: the LIST may miss the record, and the flag the
	// watcher remembers is the one from before (its Stat came first), so
	// the next look sees the flag changed.
	eachStore(t, func(t *testing.T, inner storage.Store) {
		ctx := context.Background()
		s, _ := stopper(t, inner)
		var once sync.Once
		st := &mem.FaultStore{Inner: inner, OnList: func(ctx context.Context, prefix string, fn func(storage.ObjectInfo) error) error {
			err := inner.List(ctx, prefix, fn)
			once.Do(func() { stop(s, "SIGTERM") })
			return err
		}}
		w, _ := watcher(t, st, time.Now())
		w.tick(ctx)
		if got, ok := peerStopped(w); ok {
			t.Fatalf("the first LIST, made before the stop, saw %+v", got)
		}
		w.tick(ctx)
		if got, ok := peerStopped(w); !ok || got.ID != s.own.ID {
			t.Fatalf("the next interval: peer stop %+v (%v), want %s", got, ok, s.own.ID)
		}
	})
}

// TestLookDuringStop: a watching rank that looks while a stop is being
// written (between the record's PUT and the flag's, as far as it can
// tell) follows the stop at its next look: the flag is written after
// the record, so the look that sees the flag changed lists the record.
func TestLookDuringStop(t *testing.T) {
	eachStore(t, func(t *testing.T, inner storage.Store) {
		ctx := context.Background()
		var w *Coordinator
		st := &mem.FaultStore{Inner: inner, OnPut: func(ctx context.Context, key string, r io.Reader, size int64, opts storage.PutOptions) (storage.ObjectInfo, error) {
			w.tick(ctx) // before this PUT
			oi, err := inner.Put(ctx, key, r, size, opts)
			w.tick(ctx) // after it
			return oi, err
		}}
		w, _ = watcher(t, inner, time.Now())
		w.tick(ctx)
		s, _ := stopper(t, st)
		stop(s, "SIGTERM")
		if err := s.Settle(ctx); err != nil {
			t.Fatal(err)
		}
		if _, ok := peerStopped(w); !ok {
			w.tick(ctx)
		}
		if got, ok := w.Joined(); !ok || got.ID != s.own.ID {
			t.Fatalf("the look after the stop was written: joined %+v (%v), want %s", got, ok, s.own.ID)
		}
	})
}

// TestFlagWriteFails: the stop flag's write fails once after the record
// is stored: the failure is logged, Settle waits, the next interval
// writes the flag, and the peer follows the stop at its look after that.
func TestFlagWriteFails(t *testing.T) {
	eachStore(t, func(t *testing.T, inner storage.Store) {
		ctx := context.Background()
		var fail sync.Once
		st := &mem.FaultStore{Inner: inner, OnPut: func(ctx context.Context, key string, r io.Reader, size int64, opts storage.PutOptions) (storage.ObjectInfo, error) {
			failed := false
			if key == FlagKey {
				fail.Do(func() { failed = true })
			}
			if failed {
				return storage.ObjectInfo{}, errors.New("503 SlowDown")
			}
			return inner.Put(ctx, key, r, size, opts)
		}}
		w, _ := watcher(t, inner, time.Now())
		w.tick(ctx)
		s, slog := stopper(t, st)
		stop(s, "SIGTERM")
		if n := len(slog.records("coord.stop_written")); n != 1 {
			t.Fatalf("coord.stop_written logged %d times, want once: the record is stored", n)
		}
		if f := slog.records("coord.store_failed"); len(f) != 1 || f[0]["op"] != "write stop flag" {
			t.Errorf("coord.store_failed records %v, want one for the flag", f)
		}
		settle, cancel := context.WithTimeout(ctx, time.Millisecond)
		defer cancel()
		if err := s.Settle(settle); err == nil || !strings.Contains(err.Error(), "stop flag is not stored") {
			t.Errorf("Settle before the flag was written: %v, want an error naming the flag", err)
		}
		s.tick(ctx) // the next interval: the flag is written
		if err := s.Settle(ctx); err != nil {
			t.Fatal(err)
		}
		if r := slog.records("coord.store_recovered"); len(r) != 1 || r[0]["op"] != "write stop flag" {
			t.Errorf("coord.store_recovered records %v", r)
		}
		if n := len(slog.records("coord.stop_written")); n != 1 {
			t.Errorf("coord.stop_written logged %d times, want once (the record is not written again)", n)
		}
		w.tick(ctx)
		if got, ok := peerStopped(w); !ok || got.ID != s.own.ID {
			t.Fatalf("the look after the flag was written: peer stop %+v (%v), want %s", got, ok, s.own.ID)
		}
	})
}

// TestEarlierRunFlag: the flag an earlier run's stop left does not stop a
// new run, nor make it list again; an earlier run's pod that writes the
// flag during this run (its record is older than this run) costs one
// LIST and stops nothing; this run's stop is then followed at the next
// look.
func TestEarlierRunFlag(t *testing.T) {
	eachStore(t, func(t *testing.T, inner storage.Store) {
		ctx := context.Background()
		started := time.Now()
		announce(t, inner, Stop{Rank: 2, Reason: "SIGTERM of an earlier run", Written: started.Add(-time.Minute)})
		var n requests
		w, _ := watcher(t, counted(inner, &n), started)
		for range 10 {
			w.tick(ctx)
		}
		if got, ok := peerStopped(w); ok {
			t.Fatalf("stopped by %+v", got)
		}
		if reqs := n.take(); reqs["list "+StopPrefix] != 1 || reqs["stat "+FlagKey] != 10 || len(reqs) != 2 {
			t.Errorf("10 intervals with an earlier run's flag made %v, want one LIST (the first look) and 10 HEADs", reqs)
		}
		announce(t, inner, Stop{Rank: 0, Reason: "SIGTERM of an earlier run's last pod", Written: started.Add(-DefaultClockSkew - time.Millisecond)})
		for range 3 {
			w.tick(ctx)
		}
		if got, ok := peerStopped(w); ok {
			t.Fatalf("stopped by %+v", got)
		}
		if reqs := n.take(); reqs["list "+StopPrefix] != 1 || reqs["stat "+FlagKey] != 3 || len(reqs) != 2 {
			t.Errorf("3 intervals after an earlier run's pod wrote the flag made %v, want one LIST and 3 HEADs", reqs)
		}
		s := announce(t, inner, Stop{Rank: 0, Reason: "SIGTERM", Written: time.Now()})
		w.tick(ctx)
		if got, ok := peerStopped(w); !ok || got.ID != s.ID {
			t.Fatalf("peer stop %+v (%v), want this run's %s", got, ok, s.ID)
		}
	})
}

// TestFlagStatFails: while the flag cannot be read, each look lists the
// records, as before the flag, and the failure is logged once; a stop
// is followed meanwhile.
func TestFlagStatFails(t *testing.T) {
	noLeaks(t)
	ctx := context.Background()
	inner := mem.New()
	var n requests
	st := &mem.FaultStore{Inner: counted(inner, &n), OnStat: func(ctx context.Context, key string) (storage.ObjectInfo, error) {
		n.add("stat", key)
		return storage.ObjectInfo{}, errors.New("connection reset")
	}}
	w, wlog := watcher(t, st, time.Now())
	for range 3 {
		w.tick(ctx)
	}
	if reqs := n.take(); reqs["list "+StopPrefix] != 3 || reqs["stat "+FlagKey] != 3 {
		t.Errorf("3 intervals with the flag unreadable made %v, want a HEAD and a LIST each", reqs)
	}
	if f := wlog.records("coord.store_failed"); len(f) != 1 || f[0]["op"] != "stat stop flag" {
		t.Errorf("coord.store_failed records %v, want one for the flag", f)
	}
	s, err := Write(ctx, inner, Stop{Rank: 0, Reason: "SIGTERM", Written: time.Now()}) // no flag: its write failed too
	if err != nil {
		t.Fatal(err)
	}
	w.tick(ctx)
	if got, ok := peerStopped(w); !ok || got.ID != s.ID {
		t.Fatalf("peer stop %+v (%v), want %s", got, ok, s.ID)
	}
}

// TestRecordWithoutFlag: a record whose flag was never written (its
// writer was killed between the two) is still followed, at the listing
// made every relistAfter, and not before.
func TestRecordWithoutFlag(t *testing.T) {
	noLeaks(t)
	ctx := context.Background()
	inner := mem.New()
	w, _ := watcher(t, inner, time.Now())
	w.tick(ctx)
	s, err := Write(ctx, inner, Stop{Rank: 0, Reason: "SIGTERM", Written: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	looks := int(relistAfter / DefaultInterval)
	for i := 1; i < looks; i++ {
		w.tick(ctx)
		if got, ok := peerStopped(w); ok {
			t.Fatalf("look %d: followed %+v before relistAfter without a flag change", i, got)
		}
	}
	w.tick(ctx)
	if got, ok := peerStopped(w); !ok || got.ID != s.ID {
		t.Fatalf("look %d (relistAfter): peer stop %+v (%v), want %s", looks, got, ok, s.ID)
	}
}

// TestFlagChangesWithEveryStop: two stops of the same size flagged within
// the same second leave flags that a watching rank tells apart (by the
// SHA-256 the backend keeps, or the time), on every store; the same
// flag read twice is the same.
func TestFlagChangesWithEveryStop(t *testing.T) {
	eachStore(t, func(t *testing.T, st storage.Store) {
		ctx := context.Background()
		now := time.Now().Truncate(time.Second)
		var states []flagState
		for i, s := range []Stop{{Rank: 1, Reason: "SIGTERM", Written: now}, {Rank: 2, Reason: "SIGTERM", Written: now}} {
			if err := Flag(ctx, st, s); err != nil {
				t.Fatal(err)
			}
			f, err := statFlag(ctx, st)
			if err != nil || !f.present {
				t.Fatalf("flag %d: %+v, %v", i, f, err)
			}
			again, err := statFlag(ctx, st)
			if err != nil || !again.equal(f) {
				t.Fatalf("flag %d read twice: %+v, then %+v (%v)", i, f, again, err)
			}
			states = append(states, f)
		}
		if states[0].size != states[1].size {
			t.Fatalf("sizes %d and %d: the test wants flags of one size", states[0].size, states[1].size)
		}
		if states[0].equal(states[1]) {
			t.Errorf("two different stops' flags look the same: %+v", states[0])
		}
		t.Logf("flags: %+v, %+v", states[0], states[1])
	})
}
