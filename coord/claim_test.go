package coord

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/lifeboat-project/lifeboat/storage"
	fsstore "github.com/lifeboat-project/lifeboat/storage/fs"
)

// pod is one lifeboat's claim, driven by hand: each renew and look is one
// of Loop's intervals, in the order the test says.
type pod struct {
	*Claim
	log *logBuf
}

func newPod(t *testing.T, st storage.Store, rank int, host string, stale time.Duration) *pod {
	t.Helper()
	lb := &logBuf{}
	c, err := NewClaim(ClaimConfig{Store: st, Rank: rank, WorldSize: 2, Host: host, Interval: time.Hour, Started: time.Now(),
		StaleAfter: stale, Log: slog.New(slog.NewJSONHandler(lb, nil))})
	if err != nil {
		t.Fatal(err)
	}
	return &pod{Claim: c, log: lb}
}

// tick lets the store's clock move on, so that a renewal gets a newer
// modification time: some S3 servers (versitygw) keep whole seconds, and
// a renewal within the second of the first listing looks unchanged (a
// running claim then sees it one interval later).
func tick() { time.Sleep(1100 * time.Millisecond) }

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

// TestClaimTwinsBothStop: two live pods of rank 1. B starts while A
// trains; each lists the other's claim, sees it renewed, and stops: Fence
// fails with ErrRankClaimed, and coord.rank_claimed names the other's run
// and host. Until then, neither commits past the other's undecided claim.
func TestClaimTwinsBothStop(t *testing.T) {
	eachStore(t, func(t *testing.T, st storage.Store) {
		ctx := context.Background()
		a := newPod(t, st, 1, "pod-a", time.Hour)
		a.Start(ctx)
		if err := a.Fence(ctx); err != nil {
			t.Fatalf("A alone: Fence = %v", err)
		}
		tick()
		b := newPod(t, st, 1, "pod-b", time.Hour)
		b.Start(ctx) // B lists A's claim: undecided
		if !waits(b) {
			t.Fatal("B's Fence does not wait while A's claim is undecided")
		}
		a.look(ctx) // A lists B's claim: undecided
		if !waits(a) {
			t.Fatal("A's Fence does not wait while B's claim is undecided")
		}
		tick()
		a.renew(ctx) // A is alive
		b.look(ctx)  // B sees it: a twin
		err := b.Fence(ctx)
		if !errors.Is(err, ErrRankClaimed) {
			t.Fatalf("B's Fence = %v, want ErrRankClaimed", err)
		}
		if tw, ok := b.Twin(); !ok || tw.Run != a.Run() || tw.Host != "pod-a" {
			t.Errorf("B's Twin = %+v, %v; want A's run %s on pod-a", tw, ok, a.Run())
		}
		select {
		case tw := <-b.Conflict():
			if tw.Run != a.Run() {
				t.Errorf("B's Conflict delivered %+v", tw)
			}
		default:
			t.Error("B's Conflict delivered nothing")
		}
		recs := b.log.records("coord.rank_claimed")
		if len(recs) != 1 || recs[0]["level"] != "ERROR" || recs[0]["other_run"] != a.Run() || recs[0]["other_host"] != "pod-a" ||
			recs[0]["run"] != b.Run() || recs[0]["host"] != "pod-b" {
			t.Errorf("B's coord.rank_claimed = %v", recs)
		}
		a.look(ctx) // B's claim changed (B renewed it with the conflict): A stops too
		if err := a.Fence(ctx); !errors.Is(err, ErrRankClaimed) {
			t.Fatalf("A's Fence = %v, want ErrRankClaimed", err)
		}
		if tw, _ := a.Twin(); tw.Run != b.Run() {
			t.Errorf("A's Twin = %+v, want B's run %s", tw, b.Run())
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

// TestClaimStaleAfterKill: pod A is SIGKILLed (its claim stays, never
// renewed); its replacement B waits at most StaleAfter (by the store's
// times, against B's own renewals) and then commits: A's claim is
// ignored, deleted and logged (coord.claim_stale).
func TestClaimStaleAfterKill(t *testing.T) {
	eachStore(t, func(t *testing.T, st storage.Store) {
		ctx := context.Background()
		const stale = 2 * time.Second // far above the requests between the two claims
		a := newPod(t, st, 1, "pod-a", stale)
		a.Start(ctx)
		b := newPod(t, st, 1, "pod-b", stale)
		b.Start(ctx)
		if !waits(b) {
			t.Fatal("B's Fence does not wait while A's claim is undecided")
		}
		time.Sleep(2 * stale)
		b.renew(ctx)
		b.look(ctx)
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

// TestClaimReleaseOverlap: a preemption. Pod A is stopping (Release):
// its fence opens at once for its final upload, even with a new claim of
// its rank undecided, and its claim is deleted; the replacement B finds no
// claim but its own and commits at once. Neither sees a twin.
func TestClaimReleaseOverlap(t *testing.T) {
	eachStore(t, func(t *testing.T, st storage.Store) {
		ctx := context.Background()
		a := newPod(t, st, 1, "pod-a", time.Hour)
		a.Start(ctx)
		early := newPod(t, st, 1, "pod-early", time.Hour) // a replacement that started before A's stop was released
		early.Start(ctx)
		a.look(ctx)
		if !waits(a) {
			t.Fatal("A's Fence does not wait while another claim is undecided")
		}
		a.Release()
		if err := a.Fence(ctx); err != nil {
			t.Fatalf("A's Fence while stopping = %v", err)
		}
		a.Loop(ctx) // deletes the claim, and returns
		if recs := a.log.records("coord.claim_released"); len(recs) != 1 {
			t.Errorf("coord.claim_released = %v", recs)
		}
		early.Release()
		early.Loop(ctx)
		b := newPod(t, st, 1, "pod-b", time.Hour)
		b.Start(ctx)
		if err := b.Fence(ctx); err != nil {
			t.Fatalf("B's Fence = %v", err)
		}
		tick()
		b.renew(ctx)
		b.look(ctx)
		for _, p := range []*pod{a, b, early} {
			if _, ok := p.Twin(); ok {
				t.Errorf("%s saw a twin", p.cfg.Host)
			}
		}
		if keys := claimKeys(t, st); len(keys) != 1 || keys[0] != claimKey(1, b.Run()) {
			t.Errorf("claims stored %v, want B's only", keys)
		}
	})
}

// TestClaimOtherRank: a live claim of another rank is no twin, and never
// holds the fence.
func TestClaimOtherRank(t *testing.T) {
	eachStore(t, func(t *testing.T, st storage.Store) {
		ctx := context.Background()
		r0 := newPod(t, st, 0, "pod-0", time.Hour)
		r1 := newPod(t, st, 1, "pod-1", time.Hour)
		r0.Start(ctx)
		r1.Start(ctx)
		tick()
		r0.renew(ctx)
		r1.renew(ctx)
		r0.look(ctx)
		r1.look(ctx)
		for _, p := range []*pod{r0, r1} {
			if err := p.Fence(ctx); err != nil {
				t.Errorf("%s: Fence = %v", p.cfg.Host, err)
			}
		}
	})
}

// TestCleanupDeletesOldClaims: rank 0's clean-up at start deletes the
// claims not renewed for a minute before it started (pods of an earlier
// run that never released theirs, of any rank), and keeps a fresh one.
// The store is a directory, whose modification times a test can set.
func TestCleanupDeletesOldClaims(t *testing.T) {
	root := t.TempDir()
	st, err := fsstore.New(root)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	old, fresh := claimKey(3, "old-run"), claimKey(1, "fresh-run")
	for _, k := range []string{old, fresh} {
		if err := putJSON(ctx, st, k, ClaimRecord{Run: k}, false); err != nil {
			t.Fatal(err)
		}
	}
	past := time.Now().Add(-2 * time.Minute)
	if err := os.Chtimes(filepath.Join(root, filepath.FromSlash(old)), past, past); err != nil {
		t.Fatal(err)
	}
	rs := startRanks(t, st, 2, time.Now(), time.Minute, 0)
	eventually(t, "coord.cleaned logged", func() bool { return len(rs[0].log.records("coord.cleaned")) == 1 })
	if keys := claimKeys(t, st); !slices.Equal(keys, []string{fresh}) {
		t.Errorf("claims after the clean-up: %v, want %v", keys, fresh)
	}
}
