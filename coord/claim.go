package coord

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lifeboat-project/lifeboat/setting"
	"github.com/lifeboat-project/lifeboat/storage"
)

// ClaimPrefix holds the claims of the ranks: one object per live
// lifeboat, coord/claim/rank-<R>/<run>.json.
const ClaimPrefix = "coord/claim/"

// DefaultStaleBeats is how many intervals another claim of the rank has,
// by this lifeboat's clock, to answer this lifeboat's flag before it is a
// stopped pod's: a live lifeboat answers within two.
const DefaultStaleBeats = 5

// claimRelistAfter is how long a Claim goes without listing its rank's
// claims while the flag has not changed: a claim written without a
// notice (by a lifeboat from before notices) is still found within it.
// It costs a job of 1,000 ranks 48,000 LISTs ($0.24 on S3) a day.
const claimRelistAfter = 30 * time.Minute

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
	Beat      int64     `json:"beat"` // writes of the claim so far
	// Seen names the runs of the rank's other claims this lifeboat had
	// listed when it wrote this one: each of them learns from it that
	// this lifeboat is live.
	Seen []string `json:"seen,omitempty"`
	// Conflict is the run of the other live lifeboat of this rank, once
	// seen: this one stops.
	Conflict string `json:"conflict,omitempty"`
}

// ClaimNotice is what a Claim writes to the flag (FlagKey) after it
// wrote its claim for the rank's other claims to answer: every watching
// rank sees the flag change, and a live claim of that rank answers.
type ClaimNotice struct {
	Claim   string    `json:"claim"` // the claim's key
	Rank    int       `json:"rank"`
	Beat    int64     `json:"beat"`
	Written time.Time `json:"written"` // by the writer's clock
}

// Twin is another live lifeboat of this rank.
type Twin struct {
	Run, Host string
	Started   time.Time
}

// ClaimConfig says which rank a Claim claims, and how often it looks.
type ClaimConfig struct {
	Store           storage.Store
	Rank, WorldSize int
	Host            string
	// Interval: the period of the one HEAD of the flag (FlagKey), made by
	// this rank's Coordinator (Config.Claim) or, without one, by the
	// Claim; and of the listings of the rank's claims while another is
	// undecided. Positive.
	Interval time.Duration
	// Started is when this lifeboat started; with a random suffix it
	// names the run.
	Started time.Time
	// StaleAfter is how long, by this lifeboat's clock (Now), another
	// claim of the rank may go without answering this lifeboat's flag
	// before it is a stopped pod's. Default DefaultStaleBeats intervals,
	// at least 2s.
	StaleAfter time.Duration
	// RequestTimeout bounds each request. Default as Config's.
	RequestTimeout time.Duration
	Log            *slog.Logger
	Now            func() time.Time // default time.Now
}

// other is what this lifeboat knows of another claim of its rank.
type other struct {
	first storage.ObjectInfo // as first listed
	live  bool               // changed since first listed, or names this lifeboat: a twin
	stale bool               // did not answer this lifeboat's flag within StaleAfter: a stopped pod's
	asked time.Time          // when this lifeboat's flag after it first listed this claim was stored; zero: not yet
}

// Claim is this lifeboat's claim of its rank in the store (the package
// doc, "Claims"). Fence, Release, Twin and Conflict are safe for
// concurrent use; Start, then Loop, own the requests.
type Claim struct {
	cfg     ClaimConfig
	run     string
	key     string
	release chan struct{}
	once    sync.Once
	done    chan struct{} // closed when Loop returns
	twinC   chan Twin
	shared  atomic.Bool   // a Coordinator passes on its looks at the flag (flagSeen)
	fed     chan struct{} // a look at the flag was passed on

	mu       sync.Mutex
	changed  chan struct{} // closed and replaced at each change of the state
	others   map[string]*other
	twin     *Twin
	stopping bool
	beat     int64
	warned   warnings
	feed     *flagSeen // the latest look passed on, not yet taken

	// Start's and Loop's own.
	written   bool      // the claim is stored (as far as this lifeboat knows)
	write     bool      // the claim must be written (again): to answer, or it is gone
	notice    bool      // the flag must be written after the claim
	listed    bool      // the rank's claims were listed at least once
	unlisted  int       // intervals since the last listing
	flag      flagState // the flag before the last listing of the claims
	flagKnown bool
}

// flagSeen is one look at the flag: its state, and whether it is known
// (the HEAD answered).
type flagSeen struct {
	state flagState
	known bool
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
		cfg.StaleAfter = max(DefaultStaleBeats*cfg.Interval, 2*time.Second)
	}
	if cfg.RequestTimeout == 0 {
		cfg.RequestTimeout = min(max(2*cfg.Interval, 2*time.Second), 30*time.Second)
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	run := cfg.Started.UTC().Format(idTime) + "-" + hex.EncodeToString(b)
	return &Claim{cfg: cfg, run: run, key: claimKey(cfg.Rank, run), release: make(chan struct{}), done: make(chan struct{}), twinC: make(chan Twin, 1),
		fed: make(chan struct{}, 1), changed: make(chan struct{}), others: map[string]*other{}, warned: warnings{}, write: true}, nil
}

// claimPrefix holds the claims of rank.
func claimPrefix(rank int) string { return fmt.Sprintf("%srank-%06d/", ClaimPrefix, rank) }

// claimKey is where run claims rank.
func claimKey(rank int, run string) string { return claimPrefix(rank) + run + ".json" }

// claimRank returns the rank a key under ClaimPrefix claims.
func claimRank(key string) (int, bool) {
	dir, _, ok := strings.Cut(strings.TrimPrefix(key, ClaimPrefix), "/")
	var rank int
	if _, err := fmt.Sscanf(dir, "rank-%d", &rank); !ok || err != nil || rank < 0 {
		return 0, false
	}
	return rank, true
}

// Run names this lifeboat's run ("20260102T150405.000000000Z-1a2b3c4d").
func (c *Claim) Run() string { return c.run }

// Start writes the claim and lists the rank's claims once, before
// anything is committed: another claim found is asked, through the flag,
// to answer. A failure is logged, and Loop tries again.
func (c *Claim) Start(ctx context.Context) {
	c.flush(ctx)
	c.look(ctx)
	c.cfg.Log.Info("coord.claimed", "rank", c.cfg.Rank, "run", c.run, "host", c.cfg.Host, "key", c.key,
		"effect", "another live pod of this rank found later makes both stop before they mix")
}

// share says that a Coordinator passes on its looks at the flag: the
// Claim makes no HEAD of its own while on is set.
func (c *Claim) share(on bool) { c.shared.Store(on) }

// flagSeen passes on a look at the flag (the Coordinator's); it never
// blocks.
func (c *Claim) flagSeen(f flagState, known bool) {
	c.mu.Lock()
	c.feed = &flagSeen{state: f, known: known}
	c.mu.Unlock()
	select {
	case c.fed <- struct{}{}:
	default:
	}
}

// Loop answers the flag's changes and, while another claim of the rank
// is undecided, lists the rank's claims once per Interval, until ctx
// ends or Release is called; after a Release it deletes the claim
// (unless another live pod claims the rank: the claim then stays, for
// that pod to see).
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
					"effect", fmt.Sprintf("the claim stays: a replacement pod of this rank asks it to answer and commits after at most %s", c.cfg.StaleAfter))
				return
			}
			c.cfg.Log.Info("coord.claim_released", "rank", c.cfg.Rank, "run", c.run)
			return
		case <-c.fed:
			c.step(ctx, false)
		case <-tick.C:
			c.tick(ctx)
		}
	}
}

// tick is one Interval of the claim: a HEAD of the flag when no
// Coordinator passes its looks on, a listing of the rank's claims when
// the flag changed, when another claim is undecided or a write is due,
// and every claimRelistAfter; nothing more while all is settled.
func (c *Claim) tick(ctx context.Context) { c.step(ctx, true) }

// step takes the look at the flag passed on, if any, or makes its own at
// an interval, and lists the rank's claims when something may have
// changed.
func (c *Claim) step(ctx context.Context, interval bool) {
	c.mu.Lock()
	seen := c.feed
	c.feed = nil
	c.mu.Unlock()
	if seen == nil && interval && !c.shared.Load() {
		rctx, cancel := context.WithTimeout(ctx, c.cfg.RequestTimeout)
		f, err := statFlag(rctx, c.cfg.Store)
		cancel()
		if ctx.Err() != nil {
			return
		}
		seen = &flagSeen{state: f, known: !c.failed("stat stop flag", err)}
	}
	if interval {
		c.unlisted++
	}
	changed := seen != nil && (!seen.known || !c.flagKnown || !seen.state.equal(c.flag))
	due := time.Duration(c.unlisted)*c.cfg.Interval >= claimRelistAfter
	if !changed && !(interval && (c.busy() || due)) {
		return
	}
	if c.look(ctx) && seen != nil && seen.known {
		c.flag, c.flagKnown = seen.state, true
	}
}

// busy reports whether the claim has more to do than watch the flag: a
// write that failed, a first listing that did not happen, another claim
// undecided.
func (c *Claim) busy() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.write || c.notice || !c.listed {
		return true
	}
	for _, o := range c.others {
		if !o.live && !o.stale {
			return true
		}
	}
	return false
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
// undecided; while one is (listed, neither a live pod's nor stale), it
// waits, for a stopped pod's at most StaleAfter plus two intervals after
// this lifeboat's flag is stored, or until ctx ends.
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

// flush writes what is due: the claim (naming the rank's other claims
// this lifeboat knows), then the flag, so that a rank that sees the flag
// change lists a claim already written. Once the flag is stored, every
// claim it asks has StaleAfter, by this lifeboat's clock, to answer. A
// failed write is tried again at the next interval.
func (c *Claim) flush(ctx context.Context) {
	c.mu.Lock()
	if c.stopping {
		c.write, c.notice = false, false
	}
	write, notice := c.write, c.notice
	rec := ClaimRecord{Run: c.run, Rank: c.cfg.Rank, WorldSize: c.cfg.WorldSize, Host: c.cfg.Host, Started: c.cfg.Started, Beat: c.beat + 1}
	for run := range c.others {
		rec.Seen = append(rec.Seen, run)
	}
	slices.Sort(rec.Seen)
	if c.twin != nil {
		rec.Conflict = c.twin.Run
	}
	c.mu.Unlock()
	if !write && !notice {
		return
	}
	rctx, cancel := context.WithTimeout(ctx, c.cfg.RequestTimeout)
	defer cancel()
	if write {
		if c.failed("write claim", putJSON(rctx, c.cfg.Store, c.key, rec, false)) {
			return
		}
		c.mu.Lock()
		c.beat, c.write, c.written = rec.Beat, false, true
		c.mu.Unlock()
	}
	if !notice {
		return
	}
	n := ClaimNotice{Claim: c.key, Rank: c.cfg.Rank, Beat: rec.Beat, Written: c.cfg.Now()}
	if c.failed("write claim flag", putJSON(rctx, c.cfg.Store, FlagKey, n, false)) {
		return
	}
	asked := c.cfg.Now()
	c.mu.Lock()
	c.notice = false
	for _, o := range c.others {
		if o.asked.IsZero() {
			o.asked = asked
		}
	}
	c.mu.Unlock()
}

// look lists the rank's claims and decides about the others: one changed
// since first listed, or that names this lifeboat, is a live pod's (a
// twin); one that did not answer this lifeboat's flag within StaleAfter
// is a stopped pod's (deleted). A claim first listed now is answered: this
// lifeboat's claim is written again naming it, then the flag. It reports
// whether the listing succeeded.
func (c *Claim) look(ctx context.Context) bool {
	prefix := claimPrefix(c.cfg.Rank)
	own := false
	listed := map[string]storage.ObjectInfo{}
	at := c.cfg.Now() // before the listing: what it shows unanswered was unanswered then
	rctx, cancel := context.WithTimeout(ctx, c.cfg.RequestTimeout)
	err := c.cfg.Store.List(rctx, prefix, func(oi storage.ObjectInfo) error {
		run, ok := strings.CutSuffix(strings.TrimPrefix(oi.Key, prefix), ".json")
		switch {
		case !ok || strings.Contains(run, "/"):
		case run == c.run:
			own = true
		default:
			listed[run] = oi
		}
		return nil
	})
	cancel()
	if c.failed("list claims", err) {
		return false
	}
	var fresh, check []string
	c.mu.Lock()
	c.listed, c.unlisted = true, 0
	for run := range c.others {
		if _, ok := listed[run]; !ok {
			delete(c.others, run) // released, or deleted as stale
		}
	}
	var twin *Twin
	for run, oi := range listed {
		o, seen := c.others[run]
		switch {
		case !seen:
			c.others[run] = &other{first: oi}
			fresh = append(fresh, run)
			check = append(check, run)
		case o.live:
		case !oi.ModTime.Equal(o.first.ModTime) || oi.Size != o.first.Size:
			o.live, o.stale = true, false
			if twin == nil {
				twin = &Twin{Run: run}
			}
		default:
			check = append(check, run)
		}
	}
	lost := c.written && !own && !c.stopping
	c.mu.Unlock()
	// A claim not known to be live is read: one that names this lifeboat
	// was written after it listed this one's claim.
	var unread []string
	for _, run := range check {
		var rec ClaimRecord
		gctx, cancel := context.WithTimeout(ctx, c.cfg.RequestTimeout)
		err := getJSON(gctx, c.cfg.Store, claimKey(c.cfg.Rank, run), &rec)
		cancel()
		if errors.Is(err, storage.ErrNotExist) {
			continue // released since the listing
		}
		if c.failed("read claim", err) {
			unread = append(unread, run)
			continue
		}
		if rec.Conflict == c.run || slices.Contains(rec.Seen, c.run) {
			c.mu.Lock()
			if o := c.others[run]; o != nil {
				o.live, o.stale = true, false
			}
			c.mu.Unlock()
			if twin == nil {
				twin = &Twin{Run: run, Host: rec.Host, Started: rec.Started}
			}
		}
	}
	var stale []string
	c.mu.Lock()
	if twin != nil && (c.twin != nil || c.stopping) {
		twin = nil
	}
	for run, o := range c.others {
		if !o.live && !o.stale && !o.asked.IsZero() && at.Sub(o.asked) > c.cfg.StaleAfter && !slices.Contains(unread, run) {
			o.stale = true
			stale = append(stale, run)
		}
	}
	if lost {
		c.write = true
	}
	if len(fresh) > 0 && !c.stopping {
		c.write = true // the answer: this claim, naming them
	}
	if c.write && len(c.others) > 0 {
		c.notice = true
	}
	c.notify()
	c.mu.Unlock()
	if lost {
		c.cfg.Log.Warn("coord.claim_rewritten", "rank", c.cfg.Rank, "run", c.run, "key", c.key,
			"effect", "this lifeboat's claim was gone (another pod of this rank took it for a stopped pod's, or a clean-up deleted it): written again, with the flag, so that the other pod asks again")
	}
	for _, run := range stale {
		c.cfg.Log.Warn("coord.claim_stale", "rank", c.cfg.Rank, "run", run, "stale_after", c.cfg.StaleAfter.String(),
			"effect", "a pod of this rank that stopped without releasing its claim (SIGKILL, a lost node) did not answer this lifeboat's flag: ignored and deleted")
		dctx, cancel := context.WithTimeout(ctx, c.cfg.RequestTimeout)
		if err := c.cfg.Store.Delete(dctx, claimKey(c.cfg.Rank, run)); err != nil && !errors.Is(err, storage.ErrNotExist) {
			c.failed("delete stale claim", err)
		}
		cancel()
	}
	if twin != nil {
		c.conflict(ctx, *twin)
	}
	c.flush(ctx)
	return true
}

// conflict records the twin, says so loudly, and writes the claim with
// the conflict in it, then the flag, so that the twin stops too, before
// Conflict delivers the twin.
func (c *Claim) conflict(ctx context.Context, t Twin) {
	if t.Host == "" && t.Started.IsZero() {
		rctx, cancel := context.WithTimeout(ctx, c.cfg.RequestTimeout)
		var rec ClaimRecord
		if err := getJSON(rctx, c.cfg.Store, claimKey(c.cfg.Rank, t.Run), &rec); err == nil {
			t.Host, t.Started = rec.Host, rec.Started
		}
		cancel()
	}
	c.mu.Lock()
	c.twin = &t
	c.write = true
	c.notice = true
	c.notify()
	c.mu.Unlock()
	c.cfg.Log.Error("coord.rank_claimed", "rank", c.cfg.Rank, "world_size", c.cfg.WorldSize, "run", c.run, "host", c.cfg.Host,
		"other_run", t.Run, "other_host", t.Host, "other_started", t.Started.UTC().Format("2006-01-02T15:04:05.999Z07:00"),
		"effect", "two live pods train as this rank: this one commits nothing more, stops its trainer and exits with code 78; nothing of it is stored over the other's",
		"hint", setting.Textf("give every pod its own rank (%s): two pods of an Indexed Job, a Deployment or a copied pod share one", setting.Rank))
	// Written before Conflict delivers the twin: a sidecar exits at once
	// then, and the twin must still see this claim change.
	c.flush(ctx)
	c.twinC <- t // buffered, sent once
}

// failed logs a failed request once per streak, and its recovery.
func (c *Claim) failed(op string, err error) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.warned.failed(c.cfg.Log, op, err)
}
