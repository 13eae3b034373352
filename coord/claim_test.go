package coord

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/lifeboat-project/lifeboat/storage"
	fsstore "github.com/lifeboat-project/lifeboat/storage/fs"
	"github.com/lifeboat-project/lifeboat/storage/mem"
)

// clock is one node's clock, moved by the test.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock(t time.Time) *clock { return &clock{t: t} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// pod is one lifeboat's claim, driven by hand: each tick is one of
// Loop's intervals, in the order the test says, on the pod's own clock.
type pod struct {
	*Claim
	log   *logBuf
	clock *clock
}

// newPod returns a claim of rank (of world size 2) on st, with the
// default interval and staleness window, whose clock starts at a time of
// its own: the nodes' clocks are never compared.
func newPod(t *testing.T, st storage.Store, rank int, host string) *pod {
	t.Helper()
	lb := &logBuf{}
	clk := newClock(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC).Add(time.Duration(len(host)) * time.Hour))
	c, err := NewClaim(ClaimConfig{Store: st, Rank: rank, WorldSize: 2, Host: host, Interval: DefaultInterval, Started: time.Now(),
		Log: slog.New(slog.NewJSONHandler(lb, nil)), Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	return &pod{Claim: c, log: lb, clock: clk}
}

// interval lets one interval pass on p's clock, and runs it.
func (p *pod) interval(ctx context.Context) {
	p.clock.add(p.cfg.Interval)
	p.tick(ctx)
}

// waits reports whether Fence would wait now: it is asked with a context
// that has already ended.
func waits(p *pod) bool {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := p.Fence(ctx)
	return err != nil && !errors.Is(err, ErrRankClaimed)
}

func claimKeys(t *testing.T, st storage.Store) []string {
	t.Helper()
	var keys []string
	if err := st.List(context.Background(), ClaimPrefix, func(oi storage.ObjectInfo) error {
		keys = append(keys, oi.Key)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return keys
}

// puts returns the PUT requests among reqs.
func puts(reqs map[string]int) map[string]int {
	out := map[string]int{}
	for k, n := range reqs {
		if len(k) > 4 && k[:4] == "put " {
			out[k] = n
		}
	}
	return out
}

// TestClaimIdleCostsNothing: a rank whose claim is settled (no other
// claim of its rank) asks the store for nothing beyond the watching
// rank's one HEAD of the flag per interval: its Coordinator and its
// Claim together, driven one interval at a time, make one request per
// interval. A change of the flag (another rank's claim asking) costs the
// claim one listing of its own rank's claims, and no write. A job of one
// rank (no Coordinator) makes the same one HEAD per interval, its Claim's.
func TestClaimIdleCostsNothing(t *testing.T) {
	eachStore(t, func(t *testing.T, inner storage.Store) {
		ctx := context.Background()
		var n requests
		st := counted(inner, &n)
		cl, err := NewClaim(ClaimConfig{Store: st, Rank: 1, WorldSize: 3, Interval: DefaultInterval, Started: time.Now()})
		if err != nil {
			t.Fatal(err)
		}
		cl.Start(ctx)
		w, err := New(Config{Store: st, Rank: 1, WorldSize: 3, Interval: DefaultInterval, Started: time.Now(), Claim: cl})
		if err != nil {
			t.Fatal(err)
		}
		for range 3 { // the first looks of both
			w.tick(ctx)
			cl.tick(ctx)
		}
		n.take()
		const intervals = 20
		for range intervals {
			w.tick(ctx)
			cl.tick(ctx)
		}
		want := map[string]int{"stat " + FlagKey: intervals}
		if got := n.take(); !maps.Equal(got, want) {
			t.Errorf("%d idle intervals of a rank's Coordinator and Claim made %v, want %v (the one HEAD of the flag per interval)", intervals, got, want)
		}
		if err := putJSON(ctx, inner, FlagKey, ClaimNotice{Claim: claimKey(0, "other"), Rank: 0, Beat: 2, Written: time.Now()}, false); err != nil {
			t.Fatal(err)
		}
		w.tick(ctx)
		cl.tick(ctx)
		want = map[string]int{"stat " + FlagKey: 1, "list " + StopPrefix: 1, "list " + claimPrefix(1): 1}
		if got := n.take(); !maps.Equal(got, want) {
			t.Errorf("the interval after another rank's claim flagged made %v, want %v", got, want)
		}
		w.tick(ctx)
		cl.tick(ctx)
		if got := n.take(); !maps.Equal(got, map[string]int{"stat " + FlagKey: 1}) {
			t.Errorf("the interval after that made %v, want one HEAD", got)
		}
	})
	eachStore(t, func(t *testing.T, inner storage.Store) {
		ctx := context.Background()
		var n requests
		cl, err := NewClaim(ClaimConfig{Store: counted(inner, &n), Rank: 0, WorldSize: 1, Interval: DefaultInterval, Started: time.Now()})
		if err != nil {
			t.Fatal(err)
		}
		cl.Start(ctx)
		cl.tick(ctx)
		n.take()
		const intervals = 20
		for range intervals {
			cl.tick(ctx)
		}
		want := map[string]int{"stat " + FlagKey: intervals}
		if got := n.take(); !maps.Equal(got, want) {
			t.Errorf("%d idle intervals of a single rank's Claim made %v, want %v", intervals, got, want)
		}
	})
}

// TestClaimTwinsBothStop: two live pods of rank 1. B starts while A
// trains (A's claim idle, never written since its start); B's claim
// names A's and B flags it; at its next interval A sees the flag change,
// lists B's claim, which names A (a live pod that saw A), and stops, and
// B sees A's answer at its next and stops: Fence fails with
// ErrRankClaimed, and coord.rank_claimed names the other's run and host.
// B commits nothing at any moment.
func TestClaimTwinsBothStop(t *testing.T) {
	eachStore(t, func(t *testing.T, st storage.Store) {
		ctx := context.Background()
		a := newPod(t, st, 1, "pod-a")
		a.Start(ctx)
		for range 3 {
			a.interval(ctx)
		}
		if err := a.Fence(ctx); err != nil {
			t.Fatalf("A alone: Fence = %v", err)
		}
		b := newPod(t, st, 1, "pod-b")
		b.Start(ctx) // B lists A's claim: undecided
		if !waits(b) {
			t.Fatal("B's Fence does not wait while A's claim is undecided")
		}
		b.interval(ctx) // A has not looked yet
		if !waits(b) {
			t.Fatal("B's Fence does not wait while A's claim is undecided")
		}
		a.interval(ctx) // the flag changed: A lists B's claim, which names A
		if err := a.Fence(ctx); !errors.Is(err, ErrRankClaimed) {
			t.Fatalf("A's Fence = %v, want ErrRankClaimed", err)
		}
		if tw, ok := a.Twin(); !ok || tw.Run != b.Run() || tw.Host != "pod-b" {
			t.Errorf("A's Twin = %+v, %v; want B's run %s on pod-b", tw, ok, b.Run())
		}
		// Written by the time Conflict delivers B: a sidecar exits then.
		var rec ClaimRecord
		if err := getJSON(ctx, st, claimKey(1, a.Run()), &rec); err != nil || rec.Conflict != b.Run() {
			t.Errorf("A's claim when A saw B: %+v (%v), want the conflict with B written", rec, err)
		}
		b.interval(ctx) // A answered: B stops too
		err := b.Fence(ctx)
		if !errors.Is(err, ErrRankClaimed) {
			t.Fatalf("B's Fence = %v, want ErrRankClaimed", err)
		}
		if tw, ok := b.Twin(); !ok || tw.Run != a.Run() || tw.Host != "pod-a" {
			t.Errorf("B's Twin = %+v, %v; want A's run %s on pod-a", tw, ok, a.Run())
		}
		for _, p := range []*pod{a, b} {
			select {
			case tw := <-p.Conflict():
				if _, want := p.Twin(); tw.Run == p.Run() || !want {
					t.Errorf("%s's Conflict delivered %+v", p.cfg.Host, tw)
				}
			default:
				t.Errorf("%s's Conflict delivered nothing", p.cfg.Host)
			}
		}
		recs := b.log.records("coord.rank_claimed")
		if len(recs) != 1 || recs[0]["level"] != "ERROR" || recs[0]["other_run"] != a.Run() || recs[0]["other_host"] != "pod-a" ||
			recs[0]["run"] != b.Run() || recs[0]["host"] != "pod-b" {
			t.Errorf("B's coord.rank_claimed = %v", recs)
		}
		if recs := a.log.records("coord.rank_claimed"); len(recs) != 1 || recs[0]["other_run"] != b.Run() {
			t.Errorf("A's coord.rank_claimed = %v", recs)
		}
		// A stop after the conflict does not open the fence, nor delete
		// the claim: the other pod must still see it.
		a.Release()
		a.Loop(ctx)
		if err := a.Fence(ctx); !errors.Is(err, ErrRankClaimed) {
			t.Errorf("A's Fence after Release = %v, want ErrRankClaimed", err)
		}
		if n := len(claimKeys(t, st)); n != 2 {
			t.Errorf("%d claims stored, want both", n)
		}
	})
}

// TestClaimStaleAfterKill: pod A is SIGKILLed (its claim stays, and
// answers nothing); its replacement B flags A's claim and waits
// StaleAfter by its own clock from that flag, then commits: A's claim is
// ignored, deleted and logged (coord.claim_stale). The store's times are
// not used: A's claim was written a moment before B's.
func TestClaimStaleAfterKill(t *testing.T) {
	eachStore(t, func(t *testing.T, st storage.Store) {
		ctx := context.Background()
		a := newPod(t, st, 1, "pod-a")
		a.Start(ctx)
		b := newPod(t, st, 1, "pod-b")
		b.Start(ctx)
		beats := int(b.cfg.StaleAfter / b.cfg.Interval)
		for i := range beats {
			if !waits(b) {
				t.Fatalf("interval %d: B's Fence does not wait while A's claim is undecided", i)
			}
			b.interval(ctx)
		}
		if !waits(b) {
			t.Fatalf("B's Fence does not wait after exactly StaleAfter (%s)", b.cfg.StaleAfter)
		}
		b.interval(ctx)
		if err := b.Fence(ctx); err != nil {
			t.Fatalf("B's Fence with A's claim stale = %v", err)
		}
		if _, ok := b.Twin(); ok {
			t.Error("a stale claim made a twin")
		}
		if recs := b.log.records("coord.claim_stale"); len(recs) != 1 || recs[0]["run"] != a.Run() {
			t.Errorf("coord.claim_stale = %v", recs)
		}
		if keys := claimKeys(t, st); len(keys) != 1 || keys[0] != claimKey(1, b.Run()) {
			t.Errorf("claims stored %v, want B's only", keys)
		}
	})
}

// TestClaimStaleCountsFromTheFlag: the replacement's flag write fails
// at first: the staleness window starts when the flag is stored, not
// when the other claim was listed, so a live pod always had the window
// to answer.
func TestClaimStaleCountsFromTheFlag(t *testing.T) {
	noLeaks(t)
	ctx := context.Background()
	inner := mem.New()
	fail := true
	st := &mem.FaultStore{Inner: inner, OnPut: func(ctx context.Context, key string, r io.Reader, size int64, opts storage.PutOptions) (storage.ObjectInfo, error) {
		if key == FlagKey && fail {
			return storage.ObjectInfo{}, errors.New("503 SlowDown")
		}
		return inner.Put(ctx, key, r, size, opts)
	}}
	a := newPod(t, inner, 1, "pod-a")
	a.Start(ctx)
	b := newPod(t, st, 1, "pod-b")
	b.Start(ctx)
	for range 10 {
		b.interval(ctx)
	}
	if !waits(b) {
		t.Fatal("B's Fence does not wait while its flag was never stored")
	}
	if f := b.log.records("coord.store_failed"); len(f) != 1 || f[0]["op"] != "write claim flag" {
		t.Errorf("coord.store_failed = %v", f)
	}
	fail = false
	b.interval(ctx) // the flag is stored now
	a.interval(ctx) // A, live, answers
	b.interval(ctx)
	if err := b.Fence(ctx); !errors.Is(err, ErrRankClaimed) {
		t.Fatalf("B's Fence = %v, want ErrRankClaimed: A answered within the window from B's flag", err)
	}
}

// TestClaimSlowPodFoundAgain: pod A does not answer B's flag within the
// window (its requests failed, or it was frozen): B takes A's claim for a
// stopped pod's and deletes it. When A looks again, it finds its claim
// gone, writes it again (coord.claim_rewritten) with the flag, and both
// stop.
func TestClaimSlowPodFoundAgain(t *testing.T) {
	eachStore(t, func(t *testing.T, st storage.Store) {
		ctx := context.Background()
		a := newPod(t, st, 1, "pod-a")
		a.Start(ctx)
		a.interval(ctx)
		b := newPod(t, st, 1, "pod-b")
		b.Start(ctx)
		for range int(b.cfg.StaleAfter/b.cfg.Interval) + 1 {
			b.interval(ctx)
		}
		if err := b.Fence(ctx); err != nil {
			t.Fatalf("B's Fence after the window = %v", err)
		}
		a.interval(ctx)
		if recs := a.log.records("coord.claim_rewritten"); len(recs) != 1 {
			t.Errorf("A's coord.claim_rewritten = %v", recs)
		}
		if err := a.Fence(ctx); !errors.Is(err, ErrRankClaimed) {
			t.Fatalf("A's Fence = %v, want ErrRankClaimed", err)
		}
		b.interval(ctx)
		if err := b.Fence(ctx); !errors.Is(err, ErrRankClaimed) {
			t.Fatalf("B's Fence = %v, want ErrRankClaimed", err)
		}
	})
}

// TestClaimReleaseOverlap: a preemption. Pod A is stopping (Release): its
// fence opens at once for its final upload, and a look it makes then
// neither answers nor finds a twin in the replacement's claim, which
// names it; its claim is deleted; the replacement B, which listed A's
// claim while it was still there, commits once it is gone. Neither sees a
// twin.
func TestClaimReleaseOverlap(t *testing.T) {
	eachStore(t, func(t *testing.T, st storage.Store) {
		ctx := context.Background()
		var n requests
		a := newPod(t, counted(st, &n), 1, "pod-a")
		a.Start(ctx)
		a.interval(ctx)
		a.Release()
		if err := a.Fence(ctx); err != nil {
			t.Fatalf("A's Fence while stopping = %v", err)
		}
		b := newPod(t, st, 1, "pod-b")
		b.Start(ctx) // A's claim is still there
		if !waits(b) {
			t.Fatal("B's Fence does not wait while A's claim is undecided")
		}
		n.take()
		a.interval(ctx) // a look while stopping
		if p := puts(n.take()); len(p) != 0 {
			t.Errorf("A, stopping, wrote %v", p)
		}
		if err := a.Fence(ctx); err != nil {
			t.Fatalf("A's Fence while stopping = %v", err)
		}
		a.Loop(ctx) // deletes the claim, and returns
		if recs := a.log.records("coord.claim_released"); len(recs) != 1 {
			t.Errorf("coord.claim_released = %v", recs)
		}
		b.interval(ctx)
		if err := b.Fence(ctx); err != nil {
			t.Fatalf("B's Fence = %v", err)
		}
		for _, p := range []*pod{a, b} {
			if _, ok := p.Twin(); ok {
				t.Errorf("%s saw a twin", p.cfg.Host)
			}
		}
		if keys := claimKeys(t, st); len(keys) != 1 || keys[0] != claimKey(1, b.Run()) {
			t.Errorf("claims stored %v, want B's only", keys)
		}
	})
}

// TestClaimOtherRank: a second live pod of rank 1 flags its claim; the
// pod of rank 0 lists its own rank's claims once at that change, writes
// nothing, and its fence never waits; the pods of rank 1 stop.
func TestClaimOtherRank(t *testing.T) {
	eachStore(t, func(t *testing.T, st storage.Store) {
		ctx := context.Background()
		var n requests
		r0 := newPod(t, counted(st, &n), 0, "pod-0")
		r1 := newPod(t, st, 1, "pod-1")
		r0.Start(ctx)
		r1.Start(ctx)
		r0.interval(ctx)
		r1.interval(ctx)
		twin := newPod(t, st, 1, "pod-1b")
		twin.Start(ctx)
		n.take()
		r0.interval(ctx)
		r1.interval(ctx)
		twin.interval(ctx)
		want := map[string]int{"stat " + FlagKey: 1, "list " + claimPrefix(0): 1}
		if got := n.take(); !maps.Equal(got, want) {
			t.Errorf("rank 0's interval after rank 1's flag made %v, want %v", got, want)
		}
		if err := r0.Fence(ctx); err != nil {
			t.Errorf("rank 0: Fence = %v", err)
		}
		for _, p := range []*pod{r1, twin} {
			if err := p.Fence(ctx); !errors.Is(err, ErrRankClaimed) {
				t.Errorf("%s: Fence = %v, want ErrRankClaimed", p.cfg.Host, err)
			}
		}
	})
}

// TestClaimSharesTheCoordinatorsHead: with a Coordinator, the claim
// answers the flag from the Coordinator's HEAD, and makes none of its
// own; once the Coordinator stops watching (a stop began), the claim
// makes its own again.
func TestClaimSharesTheCoordinatorsHead(t *testing.T) {
	eachStore(t, func(t *testing.T, st storage.Store) {
		ctx := context.Background()
		var n requests
		a := newPod(t, counted(st, &n), 1, "pod-a")
		a.Start(ctx)
		w, err := New(Config{Store: counted(st, &n), Rank: 1, WorldSize: 2, Interval: DefaultInterval, Started: time.Now(), Claim: a.Claim})
		if err != nil {
			t.Fatal(err)
		}
		w.tick(ctx)
		a.interval(ctx)
		b := newPod(t, st, 1, "pod-b")
		b.Start(ctx)
		n.take()
		w.tick(ctx)
		a.interval(ctx)
		if got := n.take(); got["stat "+FlagKey] != 1 {
			t.Errorf("the interval after B's flag made %v, want one HEAD of the flag (the Coordinator's)", got)
		}
		if err := a.Fence(ctx); !errors.Is(err, ErrRankClaimed) {
			t.Fatalf("A's Fence = %v, want ErrRankClaimed", err)
		}
		stop(w, "SIGTERM")
		n.take()
		a.interval(ctx)
		if got := n.take(); got["stat "+FlagKey] != 1 {
			t.Errorf("the claim's interval after the Coordinator's stop made %v, want its own HEAD of the flag", got)
		}
	})
}

// TestCleanupDeletesOldClaims: rank 0's clean-up at start deletes the
// claims of ranks the world size no longer has, not written for a minute
// before it started, and keeps every claim of the job's ranks: an old one
// may be a live pod's, whose claim is written only when asked.
// The store is a directory, whose modification times a test can set.
func TestCleanupDeletesOldClaims(t *testing.T) {
	root := t.TempDir()
	st, err := fsstore.New(root)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	gone, idle, fresh := claimKey(3, "old-run"), claimKey(0, "idle-run"), claimKey(1, "fresh-run")
	for _, k := range []string{gone, idle, fresh} {
		if err := putJSON(ctx, st, k, ClaimRecord{Run: k}, false); err != nil {
			t.Fatal(err)
		}
	}
	past := time.Now().Add(-2 * time.Hour)
	for _, k := range []string{gone, idle} {
		if err := os.Chtimes(filepath.Join(root, filepath.FromSlash(k)), past, past); err != nil {
			t.Fatal(err)
		}
	}
	rs := startRanks(t, st, 2, time.Now(), time.Minute, 0)
	eventually(t, "coord.cleaned logged", func() bool { return len(rs[0].log.records("coord.cleaned")) == 1 })
	if keys, want := claimKeys(t, st), []string{idle, fresh}; !slices.Equal(keys, want) {
		t.Errorf("claims after the clean-up: %v, want %v", keys, want)
	}
}
