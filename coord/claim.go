package coord

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/lifeboat-project/lifeboat/storage"
)

// ClaimPrefix holds the claims of the ranks: one object per live
// lifeboat, coord/claim/rank-<R>/<run>.json.
const ClaimPrefix = "coord/claim/"

// DefaultStaleBeats is how many intervals a claim may go unrenewed (by
// the store's times) before it is a stopped pod's: a live lifeboat renews
// its claim every second interval.
const DefaultStaleBeats = 5

// ErrRankClaimed says that another live lifeboat claims this rank: no
// more checkpoints of the rank are committed by this one.
var ErrRankClaimed = errors.New("another live pod claims this rank")

// ClaimRecord is one claim's content.
type ClaimRecord struct {
	Run       string    `json:"run"`
	Rank      int       `json:"rank"`
	WorldSize int       `json:"world_size"`
	Host      string    `json:"host,omitempty"`
	Started   time.Time `json:"started"`
	Beat      int64     `json:"beat"` // renewals so far
	// Conflict is the run of the other live lifeboat of this rank, once
	// seen: this one stops.
	Conflict string `json:"conflict,omitempty"`
}

// Twin is another live lifeboat of this rank.
type Twin struct {
	Run, Host string
	Started   time.Time
}

// ClaimConfig says which rank a Claim claims, and how often.
type ClaimConfig struct {
	Store           storage.Store
	Rank, WorldSize int
	Host            string
	// Interval: one request per Interval, a renewal of this lifeboat's
	// claim and a listing of the rank's claims in turn. Positive.
	Interval time.Duration
	// Started is when this lifeboat started; with a random suffix it
	// names the run.
	Started time.Time
	// StaleAfter is how much older than this lifeboat's own claim, by the
	// store's modification times, another claim must be to be a stopped
	// pod's. Default DefaultStaleBeats intervals, at least 2s.
	StaleAfter time.Duration
	// RequestTimeout bounds each request. Default as Config's.
	RequestTimeout time.Duration
	Log            *slog.Logger
}

// other is what this lifeboat knows of another claim of its rank.
type other struct {
	first storage.ObjectInfo // as first listed
	live  bool               // renewed since first listed
	stale bool               // older than StaleAfter: a stopped pod's
}

// Claim is this lifeboat's claim of its rank in the store (the package
// doc, "Claims"). Fence, Release, Twin and Conflict are safe for
// concurrent use; Run owns the requests.
type Claim struct {
	cfg     ClaimConfig
	run     string
	key     string
	release chan struct{}
	once    sync.Once
	done    chan struct{} // closed when Loop returns
	twinC   chan Twin
	ticks   int // Loop's

	mu       sync.Mutex
	changed  chan struct{} // closed and replaced at each change of the state
	others   map[string]*other
	twin     *Twin
	stopping bool
	beat     int64
	warned   warnings
}

// NewClaim checks cfg and names this lifeboat's run.
func NewClaim(cfg ClaimConfig) (*Claim, error) {
	switch {
	case cfg.Store == nil:
		return nil, errors.New("coord: claim: no store")
	case cfg.Interval <= 0:
		return nil, fmt.Errorf("coord: claim: interval %s is not positive", cfg.Interval)
	case cfg.WorldSize < 1 || cfg.Rank < 0 || cfg.Rank >= cfg.WorldSize:
		return nil, fmt.Errorf("coord: claim: rank %d of world size %d", cfg.Rank, cfg.WorldSize)
	case cfg.Started.IsZero():
		return nil, errors.New("coord: claim: no start time")
	}
	if cfg.StaleAfter == 0 {
		// At least 2s: a store that lists whole-second times (S3) must
		// not make a claim renewed a moment ago look a second old.
		cfg.StaleAfter = max(DefaultStaleBeats*cfg.Interval, 2*time.Second)
	}
	if cfg.RequestTimeout == 0 {
		cfg.RequestTimeout = min(max(2*cfg.Interval, 2*time.Second), 30*time.Second)
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	run := cfg.Started.UTC().Format(idTime) + "-" + hex.EncodeToString(b)
	return &Claim{cfg: cfg, run: run, key: claimKey(cfg.Rank, run), release: make(chan struct{}), done: make(chan struct{}), twinC: make(chan Twin, 1),
		changed: make(chan struct{}), others: map[string]*other{}, warned: warnings{}}, nil
}

// claimPrefix holds the claims of rank.
func claimPrefix(rank int) string { return fmt.Sprintf("%srank-%06d/", ClaimPrefix, rank) }

// claimKey is where run claims rank.
func claimKey(rank int, run string) string { return claimPrefix(rank) + run + ".json" }

// Run names this lifeboat's run ("20260102T150405.000000000Z-1a2b3c4d").
func (c *Claim) Run() string { return c.run }

// Start writes the claim and lists the rank's claims once, before
// anything is committed; a failure is logged, and Loop tries again.
func (c *Claim) Start(ctx context.Context) {
	c.renew(ctx)
	c.look(ctx)
	c.cfg.Log.Info("coord.claimed", "rank", c.cfg.Rank, "run", c.run, "host", c.cfg.Host, "key", c.key,
		"effect", "another live pod of this rank found later makes both stop before they mix")
}

// Loop renews the claim and lists the rank's claims, in turn, once per
// Interval, until ctx ends or Release is called; after a Release it
// deletes the claim (unless another live pod claims the rank: the claim
// then stays, for that pod to see, until it is stale).
func (c *Claim) Loop(ctx context.Context) {
	defer close(c.done)
	tick := time.NewTicker(c.cfg.Interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-c.release:
			if _, twin := c.Twin(); twin {
				return
			}
			dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.cfg.RequestTimeout)
			err := c.cfg.Store.Delete(dctx, c.key)
			cancel()
			if err != nil && !errors.Is(err, storage.ErrNotExist) {
				c.cfg.Log.Warn("coord.claim_release_failed", "key", c.key, "err", err,
					"effect", fmt.Sprintf("the claim goes stale instead: a replacement pod of this rank commits after at most %s", c.cfg.StaleAfter))
				return
			}
			c.cfg.Log.Info("coord.claim_released", "rank", c.cfg.Rank, "run", c.run)
			return
		case <-tick.C:
			c.tick(ctx)
		}
	}
}

// tick is one Interval's request: a renewal and a listing in turn.
func (c *Claim) tick(ctx context.Context) {
	if c.ticks%2 == 0 {
		c.renew(ctx)
	} else {
		c.look(ctx)
	}
	c.ticks++
}

// Release says this lifeboat is stopping (a stop signal, a notice, a
// job-wide stop, its exit): its remaining commits are its final upload,
// which a replacement pod may overlap, so Fence no longer waits, and Loop
// deletes the claim. Only the first call counts; it never blocks.
func (c *Claim) Release() {
	c.once.Do(func() {
		c.mu.Lock()
		c.stopping = true
		c.notify()
		c.mu.Unlock()
		close(c.release)
	})
}

// Wait waits until Loop has returned (after a Release: once the claim is
// deleted, or its deletion failed), or ctx ends: lifeboat may exit a
// moment after its stop began, and a replacement pod must not wait for
// the claim to go stale.
func (c *Claim) Wait(ctx context.Context) {
	select {
	case <-c.done:
	case <-ctx.Done():
	}
}

// Twin returns the other live lifeboat of this rank, once seen.
func (c *Claim) Twin() (Twin, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.twin == nil {
		return Twin{}, false
	}
	return *c.twin, true
}

// Conflict delivers the other live lifeboat of this rank, once.
func (c *Claim) Conflict() <-chan Twin { return c.twinC }

// Fence is called before each manifest is written. It returns an error
// wrapping ErrRankClaimed once another live lifeboat claims the rank, and
// nil once this one is stopping or no other claim of the rank is
// undecided; while one is (listed, neither renewed since nor stale), it
// waits, at most StaleAfter plus two intervals for a stopped pod's, or
// until ctx ends.
func (c *Claim) Fence(ctx context.Context) error {
	for {
		c.mu.Lock()
		twin, stopping, wait := c.twin, c.stopping, c.changed
		undecided := 0
		for _, o := range c.others {
			if !o.live && !o.stale {
				undecided++
			}
		}
		c.mu.Unlock()
		switch {
		case twin != nil:
			return fmt.Errorf("coord: rank %d: %w (run %s on %s)", c.cfg.Rank, ErrRankClaimed, twin.Run, twin.Host)
		case stopping || undecided == 0:
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("coord: rank %d: another pod's claim of the rank is not decided yet: %w", c.cfg.Rank, context.Cause(ctx))
		case <-wait:
		}
	}
}

// notify wakes the Fence waiters; c.mu is held.
func (c *Claim) notify() {
	close(c.changed)
	c.changed = make(chan struct{})
}

// renew writes the claim again: a new modification time in the store.
func (c *Claim) renew(ctx context.Context) {
	c.mu.Lock()
	c.beat++
	rec := ClaimRecord{Run: c.run, Rank: c.cfg.Rank, WorldSize: c.cfg.WorldSize, Host: c.cfg.Host, Started: c.cfg.Started, Beat: c.beat}
	if c.twin != nil {
		rec.Conflict = c.twin.Run
	}
	c.mu.Unlock()
	rctx, cancel := context.WithTimeout(ctx, c.cfg.RequestTimeout)
	defer cancel()
	c.failed("renew claim", putJSON(rctx, c.cfg.Store, c.key, rec, false))
}

// look lists the rank's claims and decides about the others: one renewed
// since first listed is a live pod's (a twin), one older than this
// lifeboat's own by more than StaleAfter is a stopped pod's (deleted).
func (c *Claim) look(ctx context.Context) {
	prefix := claimPrefix(c.cfg.Rank)
	var own *storage.ObjectInfo
	listed := map[string]storage.ObjectInfo{}
	rctx, cancel := context.WithTimeout(ctx, c.cfg.RequestTimeout)
	err := c.cfg.Store.List(rctx, prefix, func(oi storage.ObjectInfo) error {
		run, ok := strings.CutSuffix(strings.TrimPrefix(oi.Key, prefix), ".json")
		switch {
		case !ok || strings.Contains(run, "/"):
		case run == c.run:
			own = &oi
		default:
			listed[run] = oi
		}
		return nil
	})
	cancel()
	if c.failed("list claims", err) {
		return
	}
	var twin *Twin
	var stale []string
	c.mu.Lock()
	for run := range c.others {
		if _, ok := listed[run]; !ok {
			delete(c.others, run) // released, or deleted as stale
		}
	}
	for run, oi := range listed {
		o, seen := c.others[run]
		if !seen {
			o = &other{first: oi}
			c.others[run] = o
		}
		if seen && (!oi.ModTime.Equal(o.first.ModTime) || oi.Size != o.first.Size) {
			o.live, o.stale = true, false
			if c.twin == nil && !c.stopping && twin == nil {
				twin = &Twin{Run: run}
			}
		}
		if !o.live && !o.stale && own != nil && own.ModTime.Sub(oi.ModTime) > c.cfg.StaleAfter {
			o.stale = true
			stale = append(stale, run)
		}
	}
	c.notify()
	c.mu.Unlock()
	for _, run := range stale {
		c.cfg.Log.Warn("coord.claim_stale", "rank", c.cfg.Rank, "run", run, "stale_after", c.cfg.StaleAfter.String(),
			"effect", "a pod of this rank that stopped without releasing its claim (SIGKILL, a lost node): ignored and deleted")
		dctx, cancel := context.WithTimeout(ctx, c.cfg.RequestTimeout)
		if err := c.cfg.Store.Delete(dctx, claimKey(c.cfg.Rank, run)); err != nil && !errors.Is(err, storage.ErrNotExist) {
			c.failed("delete stale claim", err)
		}
		cancel()
	}
	if twin != nil {
		c.conflict(ctx, *twin)
	}
}

// conflict records the twin, says so loudly, and renews the claim at
// once with the conflict in it: a twin that listed this claim before
// sees it change and stops too. One that lists it first only now (it
// was already training when this one started) finds it stale once this
// lifeboat has exited, having committed nothing, and goes on alone.
func (c *Claim) conflict(ctx context.Context, t Twin) {
	rctx, cancel := context.WithTimeout(ctx, c.cfg.RequestTimeout)
	var rec ClaimRecord
	if err := getJSON(rctx, c.cfg.Store, claimKey(c.cfg.Rank, t.Run), &rec); err == nil {
		t.Host, t.Started = rec.Host, rec.Started
	}
	cancel()
	c.mu.Lock()
	c.twin = &t
	c.notify()
	c.mu.Unlock()
	c.cfg.Log.Error("coord.rank_claimed", "rank", c.cfg.Rank, "world_size", c.cfg.WorldSize, "run", c.run, "host", c.cfg.Host,
		"other_run", t.Run, "other_host", t.Host, "other_started", t.Started.UTC().Format("2006-01-02T15:04:05.999Z07:00"),
		"effect", "two live pods train as this rank: this one commits nothing more, stops its trainer and exits with code 78; nothing of it is stored over the other's",
		"hint", "give every pod its own rank (--rank, LIFEBOAT_RANK, RANK, JOB_COMPLETION_INDEX): two pods of an Indexed Job, a Deployment or a copied pod share one")
	c.renew(ctx)
	c.twinC <- t // buffered, sent once
}

// failed logs a failed request once per streak, and its recovery.
func (c *Claim) failed(op string, err error) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.warned.failed(c.cfg.Log, op, err)
}
