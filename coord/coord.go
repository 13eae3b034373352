package coord

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lifeboat-project/lifeboat/storage"
)

// DefaultInterval is how often the store is asked whether a stop began
// (a HEAD of the stop flag; see FlagKey).
const DefaultInterval = 2 * time.Second

// DefaultClockSkew is how far the nodes' clocks may disagree: a stop
// record written up to this long before a lifeboat started (by the
// writer's clock and this lifeboat's) still stops it. It is far above what
// NTP leaves, and far below the time a stopped container takes to be
// restarted.
const DefaultClockSkew = 250 * time.Millisecond

// keepEarlier is how long before rank 0's start a record must have been
// written for rank 0 to delete it.
const keepEarlier = time.Minute

// Config says which rank this lifeboat is and how it watches.
type Config struct {
	Store           storage.Store
	Rank, WorldSize int
	Host            string // the pod's name, for the record
	// Interval is the period of the one HEAD of the stop flag that
	// watches for stops (and, during a stop, of the step agreement's
	// requests). Positive.
	Interval time.Duration
	// Started is when this lifeboat started (before the store was opened
	// and the checkpoint restored).
	Started time.Time
	// ClockSkew: see DefaultClockSkew. Zero means the default.
	ClockSkew time.Duration
	// Dir is the trainer's checkpoint directory, which holds StopFile and
	// StepRequestFile; empty for none.
	Dir string
	// StepWait bounds the wait for every rank's step, from the start of
	// this rank's stop (see the package doc). Default 10s.
	StepWait time.Duration
	// RequestTimeout bounds each store request. Default twice Interval,
	// at least 2s and at most 30s.
	RequestTimeout time.Duration
	// FilePoll is how often StepRequestFile is read during a stop.
	// Default 50ms.
	FilePoll time.Duration
	Log      *slog.Logger
	Now      func() time.Time // default time.Now
	// Claim is this rank's claim, if any (NewClaim): while this
	// Coordinator watches, each of its looks at the flag is passed on to
	// it, so that one HEAD per Interval serves both, and the Claim makes
	// none of its own.
	Claim *Claim
}

// Validate reports what is wrong with c.
func (c *Config) Validate() error {
	switch {
	case c.Store == nil:
		return errors.New("coord: no store")
	case c.Interval <= 0:
		return fmt.Errorf("coord: interval %s is not positive", c.Interval)
	case c.WorldSize < 1 || c.Rank < 0 || c.Rank >= c.WorldSize:
		return fmt.Errorf("coord: rank %d of world size %d", c.Rank, c.WorldSize)
	case c.Started.IsZero():
		return errors.New("coord: no start time")
	}
	return nil
}

func (c *Config) setDefaults() {
	if c.ClockSkew == 0 {
		c.ClockSkew = DefaultClockSkew
	}
	if c.StepWait == 0 {
		c.StepWait = 10 * time.Second
	}
	if c.RequestTimeout == 0 {
		c.RequestTimeout = min(max(2*c.Interval, 2*time.Second), 30*time.Second)
	}
	if c.FilePoll == 0 {
		c.FilePoll = 50 * time.Millisecond
	}
	if c.Log == nil {
		c.Log = slog.New(slog.DiscardHandler)
	}
	if c.Now == nil {
		c.Now = time.Now
	}
}

type phase int

const (
	watching phase = iota // no stop yet
	stopping              // this rank is stopping; the step is not agreed
	agreed                // the step is agreed (or no trainer asked and nothing is left to do)
)

// local is a stop that began on this rank.
type local struct {
	reason   string
	deadline time.Time
	at       time.Time
}

// Coordinator writes this rank's stop record and watches for the other
// ranks'. Begin, Peer and Joined are safe for concurrent use; Run owns the
// rest.
type Coordinator struct {
	cfg   Config
	begin chan local
	check chan chan struct{}
	once  sync.Once
	peer  chan Stop

	mu           sync.Mutex
	joined       *Stop
	begun        atomic.Bool   // Begin was called
	recordStored atomic.Bool   // this rank's record is stored (Settle's error says which part is missing)
	stored       chan struct{} // closed when Begin's record and the flag are stored, or not needed

	// Run's own.
	phase      phase
	since      time.Time // when this rank's stop began
	own        Stop      // this rank's record; ID empty if none
	ownStored  bool
	job        Stop // the job-wide stop: the lowest record known
	req        int64
	hasReq     bool
	published  string    // the report key stored
	ownFlagged bool      // the stop flag names own
	flag       flagState // the stop flag when the records were last listed
	listed     bool      // the records were listed at least once
	unlisted   int       // looks since the records were last listed
	warned     warnings
	future     map[string]bool // records stamped in the future when first seen: never followed
}

// New checks cfg and removes the files an earlier run left in cfg.Dir
// (the trainer must not take an old stop for a new one).
func New(cfg Config) (*Coordinator, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.setDefaults()
	if cfg.Dir != "" {
		if err := removeStale(cfg.Dir); err != nil {
			return nil, fmt.Errorf("coord: remove an earlier run's stop files: %w", err)
		}
	}
	if cfg.Claim != nil {
		cfg.Claim.share(true)
	}
	return &Coordinator{cfg: cfg, begin: make(chan local, 1), check: make(chan chan struct{}), peer: make(chan Stop, 1), stored: make(chan struct{}), warned: warnings{}, future: map[string]bool{}}, nil
}

// Begin says a stop began on this rank (a signal, a cloud notice, the
// maximum runtime), why, and when its grace budget ends. Only the first
// call counts; it never blocks. A stop this rank began because it saw
// another rank's record is not written again.
func (c *Coordinator) Begin(reason string, deadline time.Time) {
	c.once.Do(func() {
		c.begun.Store(true)
		c.begin <- local{reason: reason, deadline: deadline, at: c.cfg.Now()}
	})
}

// Check looks at the store now, between the Interval's looks, for
// another rank's stop, and follows one it finds as a look at the Interval
// would (Peer delivers it). It returns the job-wide stop this lifeboat
// takes part in, as Joined does, once the look is done or ctx has ended.
// A trainer whose collective failed because a peer left has usually
// failed before this rank's next look.
func (c *Coordinator) Check(ctx context.Context) (Stop, bool) {
	reply := make(chan struct{})
	select {
	case c.check <- reply:
		select {
		case <-reply:
		case <-ctx.Done():
		}
	case <-ctx.Done():
	}
	return c.Joined()
}

// Peer delivers the other rank's stop that this rank must follow; at
// most one.
func (c *Coordinator) Peer() <-chan Stop { return c.peer }

// Joined returns the job-wide stop this lifeboat took part in (its own
// record, or the one it followed), and whether there was one.
func (c *Coordinator) Joined() (Stop, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.joined == nil {
		return Stop{}, false
	}
	return *c.joined, true
}

// Settle waits until the stop record of a stop that began on this rank
// and then the stop flag are stored, or ctx ends: lifeboat may exit a
// moment after its stop began (a trainer that dies at SIGTERM, nothing
// left to upload), and the other ranks must still see the record, which
// they list when the flag changes. It returns at once when no stop began
// here, or this rank followed another's.
func (c *Coordinator) Settle(ctx context.Context) error {
	if !c.begun.Load() {
		return nil
	}
	select {
	case <-c.stored:
		return nil
	case <-ctx.Done():
		if !c.recordStored.Load() {
			return fmt.Errorf("coord: this rank's stop record is not stored: %w", context.Cause(ctx))
		}
		return fmt.Errorf("coord: this rank's stop flag is not stored (its record is: the other ranks see it when they next list the records, within %s, or when their trainer fails): %w", relistAfter, context.Cause(ctx))
	}
}

func (c *Coordinator) setJoined(s Stop) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.joined = &s
}

// Run watches and writes until ctx ends. Rank 0 first deletes an earlier
// run's records, beside the watching.
func (c *Coordinator) Run(ctx context.Context) {
	var wg sync.WaitGroup
	defer wg.Wait()
	defer c.unshare()
	if c.cfg.Rank == 0 {
		wg.Go(func() { c.cleanup(ctx) })
	}
	tick := time.NewTicker(c.cfg.Interval)
	defer tick.Stop()
	poll := time.NewTicker(c.cfg.FilePoll)
	poll.Stop()
	defer poll.Stop()
	var polling <-chan time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case l := <-c.begin:
			c.beginLocal(ctx, l)
		case <-tick.C:
			c.tick(ctx)
		case reply := <-c.check:
			if c.phase == watching {
				c.watch(ctx, true)
			}
			close(reply)
		case <-polling:
			c.readRequest(ctx)
		}
		switch {
		case c.phase == stopping && c.cfg.Dir != "" && polling == nil:
			poll.Reset(c.cfg.FilePoll)
			polling = poll.C
			c.readRequest(ctx)
		case c.phase == agreed && polling != nil:
			poll.Stop()
			polling = nil
		}
	}
}

// unshare hands the looks at the flag back to the Claim: this
// Coordinator no longer watches.
func (c *Coordinator) unshare() {
	if c.cfg.Claim != nil {
		c.cfg.Claim.share(false)
	}
}

func (c *Coordinator) tick(ctx context.Context) {
	if c.phase == watching {
		c.watch(ctx, false)
		return
	}
	if c.own.ID != "" && !c.ownFlagged {
		c.writeOwn(ctx)
	}
	if c.phase == stopping && c.hasReq {
		c.agree(ctx)
	}
}

// valid returns the ids that count for this lifeboat, oldest first: see
// the package doc. A record stamped later than now by more than the
// clock skew is an earlier run's, from a node whose clock was ahead: it
// is logged once and never counts, not even once real time has passed
// its stamp.
func (c *Coordinator) valid(ids []string) []string {
	now := c.cfg.Now()
	var out []string
	for _, id := range ids {
		ok, ahead := c.counts(id, c.own.ID, now)
		if !ok || c.future[id] {
			continue
		}
		if ahead > c.cfg.ClockSkew {
			c.future[id] = true
			_, rank, _ := parseStopID(id)
			c.cfg.Log.Warn("coord.stop_from_future", "stop_id", id, "from_rank", rank, "ahead", ahead.Round(time.Millisecond).String(),
				"effect", "ignored: an earlier run's record from a node whose clock was ahead; rank 0 deletes it when it starts")
			continue
		}
		out = append(out, id)
	}
	return out
}

// counts reports whether the stop record id counts for this lifeboat by
// its name (the package doc): written no earlier than the clock skew
// before this lifeboat started, and not by this rank unless it is own,
// this lifeboat's record; and how far its stamp is ahead of now (more
// than the skew: an earlier run's, from a node whose clock was ahead).
func (c *Coordinator) counts(id, own string, now time.Time) (ok bool, ahead time.Duration) {
	t, rank, parsed := parseStopID(id)
	if !parsed || t.Before(c.cfg.Started.Add(-c.cfg.ClockSkew)) || rank == c.cfg.Rank && id != own {
		return false, 0
	}
	return true, t.Sub(now)
}

// watch is one look for another rank's stop: a Stat of the stop flag
// and, when the flag changed (or look says so otherwise), a listing of
// the records. force lists whatever the flag says (Check).
func (c *Coordinator) watch(ctx context.Context, force bool) {
	list, f, known := c.look(ctx, force)
	if !list {
		return
	}
	ids, err := c.listStops(ctx)
	if err != nil {
		return // the flag is not remembered: the next look lists again
	}
	c.listed, c.unlisted = true, 0
	if known {
		c.flag = f
	}
	valid := c.valid(ids)
	if len(valid) == 0 {
		return
	}
	s := c.readStop(ctx, valid[0])
	now := c.cfg.Now()
	c.phase, c.since, c.job = stopping, now, s
	c.unshare()
	c.setJoined(s)
	c.cfg.Log.Warn("coord.stop_seen", "stop_id", s.ID, "from_rank", s.Rank, "host", s.Host, "reason", s.Reason,
		"age", now.Sub(s.Written).Round(time.Millisecond).String(),
		"effect", "stopping as on preemption: the trainer gets the notice signal and this rank's own grace")
	c.writeStopFile(nil)
	c.peer <- s // buffered, and sent once
}

// readStop reads the record id, or makes one from its name when it
// cannot be read.
func (c *Coordinator) readStop(ctx context.Context, id string) Stop {
	rctx, cancel := context.WithTimeout(ctx, c.cfg.RequestTimeout)
	defer cancel()
	s, err := read(rctx, c.cfg.Store, id)
	if c.failed("read stop", err) || s.ID != id {
		t, rank, _ := parseStopID(id)
		return Stop{ID: id, Rank: rank, Written: t, Reason: "unknown (the stop record could not be read)"}
	}
	return s
}

func (c *Coordinator) listStops(ctx context.Context) ([]string, error) {
	rctx, cancel := context.WithTimeout(ctx, c.cfg.RequestTimeout)
	defer cancel()
	ids, err := listStops(rctx, c.cfg.Store)
	if c.failed("list stops", err) {
		return nil, err
	}
	return ids, nil
}

// beginLocal starts this rank's own stop: the stop file, then the record.
func (c *Coordinator) beginLocal(ctx context.Context, l local) {
	if c.phase != watching {
		close(c.stored) // following another rank's stop already: nothing to store
		return
	}
	c.phase, c.since = stopping, l.at
	c.unshare()
	c.own = Stop{ID: StopID(l.at, c.cfg.Rank), Rank: c.cfg.Rank, Host: c.cfg.Host, Reason: l.reason, Written: l.at, Deadline: l.deadline}
	c.job = c.own
	c.setJoined(c.own)
	c.writeStopFile(nil)
	c.writeOwn(ctx)
}

// writeOwn stores this rank's stop record, then the stop flag that makes
// the watching ranks list the records; what failed is tried again at the
// next Interval. The flag comes second: a rank that sees it changed
// lists a record that is already there.
func (c *Coordinator) writeOwn(ctx context.Context) {
	rctx, cancel := context.WithTimeout(ctx, c.cfg.RequestTimeout)
	defer cancel()
	if !c.ownStored {
		_, err := Write(rctx, c.cfg.Store, c.own)
		if errors.Is(err, storage.ErrExists) {
			err = nil // an earlier try stored it and its answer was lost
		}
		if c.failed("write stop", err) {
			return
		}
		c.ownStored = true
		c.recordStored.Store(true)
		args := []any{"stop_id", c.own.ID, "rank", c.own.Rank, "host", c.own.Host, "reason", c.own.Reason}
		if !c.own.Deadline.IsZero() {
			// One time format in every log line: RFC 3339, UTC, milliseconds.
			args = append(args, "deadline", c.own.Deadline.UTC().Format("2006-01-02T15:04:05.999Z07:00"))
		}
		c.cfg.Log.Info("coord.stop_written", append(args, "effect", "every other rank stops too")...)
	}
	if c.failed("write stop flag", Flag(rctx, c.cfg.Store, c.own)) {
		return
	}
	c.ownFlagged = true
	close(c.stored)
}

// readRequest reads the trainer's step request and, when it is new,
// works on the agreement at once.
func (c *Coordinator) readRequest(ctx context.Context) {
	if c.phase != stopping {
		return
	}
	r, ok, err := readRequest(c.cfg.Dir)
	if err != nil {
		if !c.warned["step request"] {
			c.warned["step request"] = true
			c.cfg.Log.Warn("coord.bad_step_request", "err", err, "effect", "ignored until it holds a step")
		}
		return
	}
	if !ok || c.hasReq && r.Step == c.req {
		return
	}
	c.req, c.hasReq = r.Step, true
	c.cfg.Log.Info("coord.stop_step_asked", "step", r.Step, "stop_id", c.job.ID)
	c.agree(ctx)
}

// agree publishes the trainer's step under the job-wide stop and decides
// the step every rank saves when it can: see the package doc.
func (c *Coordinator) agree(ctx context.Context) {
	if ids, err := c.listStops(ctx); err == nil {
		if v := c.valid(ids); len(v) > 0 && v[0] < c.job.ID {
			c.job = c.readStop(ctx, v[0]) // a lower record: another rank stopped first
			c.writeStopFile(nil)
		}
	}
	id := c.job.ID
	rctx, cancel := context.WithTimeout(ctx, c.cfg.RequestTimeout)
	defer cancel()
	if key := reportKey(id, c.cfg.Rank, c.req); key != c.published {
		err := putJSON(rctx, c.cfg.Store, key, StepRequest{Step: c.req}, false)
		if !c.failed("publish step", err) {
			c.published = key
		}
	}
	waited := c.cfg.Now().Sub(c.since)
	alone := Agreed{Step: c.req + 1, Rank: c.cfg.Rank, Reported: 1, WorldSize: c.cfg.WorldSize, How: "alone: the store did not answer"}
	st, err := listSteps(rctx, c.cfg.Store, id)
	if c.failed("list steps", err) {
		if waited >= 2*c.cfg.StepWait {
			c.finish(alone, id)
		}
		return
	}
	if st.agreed {
		var a Agreed
		if err := getJSON(rctx, c.cfg.Store, agreedKey(id), &a); !c.failed("read agreed step", err) {
			c.finish(a, id)
		} else if waited >= 2*c.cfg.StepWait {
			c.finish(alone, id)
		}
		return
	}
	st.reports[c.cfg.Rank] = max(st.reports[c.cfg.Rank], c.req)
	n, hi := 0, int64(0)
	for rank, step := range st.reports {
		if rank < c.cfg.WorldSize {
			n++
			hi = max(hi, step)
		}
	}
	a := Agreed{Rank: c.cfg.Rank, Reported: n, WorldSize: c.cfg.WorldSize}
	switch {
	case n >= c.cfg.WorldSize:
		a.Step, a.How = hi, "every rank asked"
	case waited >= c.cfg.StepWait:
		a.Step, a.How = hi+1, "not every rank asked in time"
	default:
		return
	}
	err = putJSON(rctx, c.cfg.Store, agreedKey(id), a, true)
	if errors.Is(err, storage.ErrExists) {
		err = getJSON(rctx, c.cfg.Store, agreedKey(id), &a)
	}
	if !c.failed("write agreed step", err) {
		c.finish(a, id)
	} else if waited >= 2*c.cfg.StepWait {
		alone.Step = a.Step
		c.finish(alone, id)
	}
}

// finish tells the trainer the step.
func (c *Coordinator) finish(a Agreed, id string) {
	c.phase = agreed
	args := []any{"step", a.Step, "stop_id", id, "reported", a.Reported, "world_size", a.WorldSize, "how", a.How, "decided_by", a.Rank}
	if a.How == "alone: the store did not answer" {
		c.cfg.Log.Warn("coord.stop_step_alone", append(args, "effect", "the other ranks may save another step; one that is not saved by every rank is not complete")...)
	} else {
		c.cfg.Log.Info("coord.stop_step_agreed", args...)
	}
	c.writeStopFile(&a.Step)
}

// writeStopFile tells the trainer about the stop, and the step once
// agreed.
func (c *Coordinator) writeStopFile(step *int64) {
	if c.cfg.Dir == "" {
		return
	}
	s := c.job
	info := StopInfo{ID: s.ID, FromRank: s.Rank, Host: s.Host, Reason: s.Reason, Written: s.Written, Deadline: s.Deadline, Step: step}
	if err := writeFile(c.cfg.Dir, StopFile, info); err != nil && !c.warned["stop file"] {
		c.warned["stop file"] = true
		c.cfg.Log.Warn("coord.stop_file_failed", "err", err, "effect", "lifeboat.stop_requested() and stop_step() in the trainer do not see the stop")
	}
}

// failed logs a failed store request once per streak, and its recovery.
// It reports whether err is set.
func (c *Coordinator) failed(op string, err error) bool {
	return c.warned.failed(c.cfg.Log, op, err)
}

// cleanup deletes the records and steps of earlier runs: those written
// more than keepEarlier before this lifeboat started, and those stamped
// later than now by more than the clock skew (by a node whose clock was
// ahead); and the claims of ranks beyond the world size last written
// more than keepEarlier before it started.
func (c *Coordinator) cleanup(ctx context.Context) {
	cut := c.cfg.Started.Add(-keepEarlier)
	future := c.cfg.Now().Add(c.cfg.ClockSkew)
	var keys []string
	for _, prefix := range []string{StopPrefix, StepsPrefix} {
		lctx, cancel := context.WithTimeout(ctx, c.cfg.RequestTimeout)
		err := c.cfg.Store.List(lctx, prefix, func(oi storage.ObjectInfo) error {
			id, _, _ := strings.Cut(strings.TrimPrefix(oi.Key, prefix), "/")
			id = strings.TrimSuffix(id, ".json")
			if t, _, ok := parseStopID(id); ok && (t.Before(cut) || t.After(future)) {
				keys = append(keys, oi.Key)
			}
			return nil
		})
		cancel()
		if err != nil {
			c.cfg.Log.Warn("coord.cleanup_failed", "prefix", prefix, "err", err, "effect", "an earlier run's stop records stay; they never stop this run")
			return
		}
	}
	// Claims (claim.go) of ranks the world size no longer has, not
	// written for keepEarlier before this start, by the store's times:
	// pods of an earlier, larger run that never released theirs. A
	// claim of a rank this job has is never deleted here: a live pod
	// writes its claim only when asked, so an old one may be a live
	// pod's; a stopped pod's is deleted by the next pod of its rank,
	// once it did not answer that pod's flag.
	lctx, cancel := context.WithTimeout(ctx, c.cfg.RequestTimeout)
	err := c.cfg.Store.List(lctx, ClaimPrefix, func(oi storage.ObjectInfo) error {
		if r, ok := claimRank(oi.Key); ok && r >= c.cfg.WorldSize && !oi.ModTime.IsZero() && oi.ModTime.Before(cut) {
			keys = append(keys, oi.Key)
		}
		return nil
	})
	cancel()
	if err != nil {
		c.cfg.Log.Warn("coord.cleanup_failed", "prefix", ClaimPrefix, "err", err, "effect", "an earlier run's claims stay; a stale claim never stops this run")
	}
	deleted := 0
	for _, k := range keys {
		dctx, cancel := context.WithTimeout(ctx, c.cfg.RequestTimeout)
		err := c.cfg.Store.Delete(dctx, k)
		cancel()
		if err != nil {
			c.cfg.Log.Warn("coord.cleanup_failed", "key", k, "err", err, "effect", "an earlier run's stop records stay; they never stop this run")
			return
		}
		deleted++
	}
	if deleted > 0 {
		c.cfg.Log.Info("coord.cleaned", "deleted", deleted, "written_before", cut.Format(time.RFC3339), "written_after", future.Format(time.RFC3339))
	}
}
