package checkpoint

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/lifeboat-project/lifeboat/storage"
)

// A completion record says that a step of one world size was complete, by
// the rules of docs/FORMAT.md, in one listing of its manifests: the rank
// whose commit completed the step reads every rank's manifest, judges the
// step as a full read does, and writes the record beside the step's
// folder, create-only:
//
//	snapshots/<step>-complete-of-<n, 5>-<state>-line-<line|legacy>-at-<ns, 19>[-named].json
//
// Beside the folder, not in it: one listing of snapshots/ one level deep
// (storage.ListDirs) gives every step folder and every record, whatever
// the ranks, and only the folder of the step a reader takes is listed.
//
// The key carries what choosing a step needs: the state (a digest of the
// listing the step was judged in: each rank's highest revision's key,
// size, store time and torn mark), the step's line of work and trusted
// commit time (the rule of newest), and "-named" when the step is its
// ranks' named revisions beneath counter ones. The body names every
// rank's manifest (key, revision, id) for people and tools.
//
// A reader that lists the step's folder and finds a record whose state
// is that listing's own takes the step as complete without reading its
// manifests, and then reads only its own rank's. A record whose state
// differs (a rank committed a newer revision since, a manifest was
// deleted, marked torn or written again) is stale; a step without a
// current record is read in full, as before records. So a record speeds
// the common case and never alone decides that a step is complete: it
// holds only for the very objects that were judged.
const recordPrefix = "complete-of-"

// stepRecord is a listed completion record of a group.
type stepRecord struct {
	info  storage.ObjectInfo
	state string    // the digest of the listing judged (listingState)
	line  string    // the step's line of work
	at    time.Time // the step's trusted commit time
	named bool      // the step is its named revisions beneath counter ones
}

// recordKey is the key of the record of step and worldSize in state.
func recordKey(step int64, worldSize int, state, line string, at time.Time, named bool) string {
	l := line
	if l == LegacyLine {
		l = "legacy"
	}
	k := fmt.Sprintf("%s-%s%05d-%s-line-%s-at-%019d", stepKeys(step), recordPrefix, worldSize, state, l, at.UnixNano())
	if named {
		k += "-named"
	}
	return k + ".json"
}

// parseRecordKey is the inverse of recordKey; ok is false for any other
// key.
func parseRecordKey(key string) (step int64, worldSize int, rec stepRecord, ok bool) {
	rest, found := strings.CutPrefix(key, snapshotsPrefix)
	if !found || len(rest) < 21 || rest[20] != '-' {
		return 0, 0, stepRecord{}, false
	}
	step, err := strconv.ParseInt(rest[:20], 10, 64)
	if err != nil || step < 0 {
		return 0, 0, stepRecord{}, false
	}
	name, found := strings.CutPrefix(rest[21:], recordPrefix)
	if !found {
		return 0, 0, stepRecord{}, false
	}
	name, found = strings.CutSuffix(name, ".json")
	if !found {
		return 0, 0, stepRecord{}, false
	}
	name, rec.named = strings.CutSuffix(name, "-named")
	// NNNNN-<state>-line-<line>-at-<ns>
	f := strings.Split(name, "-")
	if len(f) != 6 || len(f[0]) != 5 || f[2] != "line" || f[4] != "at" || len(f[5]) != 19 {
		return 0, 0, stepRecord{}, false
	}
	worldSize, err = strconv.Atoi(f[0])
	if err != nil || worldSize < 1 || worldSize > MaxWorldSize || len(f[1]) != 16 || !isHex(f[1]) {
		return 0, 0, stepRecord{}, false
	}
	rec.state, rec.line = f[1], f[3]
	if rec.line == "legacy" {
		rec.line = LegacyLine
	} else if rec.line == LegacyLine || CheckLine(rec.line) != nil {
		return 0, 0, stepRecord{}, false
	}
	ns, err := strconv.ParseInt(f[5], 10, 64)
	if err != nil || ns < 0 {
		return 0, 0, stepRecord{}, false
	}
	rec.at = time.Unix(0, ns).UTC()
	if recordKey(step, worldSize, rec.state, rec.line, rec.at, rec.named) != key {
		return 0, 0, stepRecord{}, false
	}
	rec.info.Key = key
	return step, worldSize, rec, true
}

// listingState is the digest of what g's listing holds of its ranks'
// highest revisions: for each rank, its key, size, store time and
// whether it is marked torn. Objects are written create-only, so the same
// state is the same objects, unless one was deleted and written again
// with the same size within the store's time resolution.
func (g *stepGroup) listingState() string {
	h := sha256.New()
	for r := range g.worldSize {
		oi, ok := g.keys[r]
		if !ok {
			fmt.Fprintf(h, "%d -\n", r)
			continue
		}
		_, torn := g.torn[oi.Key]
		fmt.Fprintf(h, "%d %s %d %d %t\n", r, oi.Key, oi.Size, oi.ModTime.UnixNano(), torn)
	}
	return hex.EncodeToString(h.Sum(nil))[:16]
}

// currentRecord returns the record of g that holds for its listing (its
// state is the listing's, g.state), or nil: then g must be read in full.
func (g *stepGroup) currentRecord() *stepRecord {
	if len(g.records) == 0 || !g.allRanks() {
		return nil
	}
	for i := range g.records {
		if rec := &g.records[i]; rec.state == g.state {
			return rec
		}
	}
	return nil
}

// useRecord makes g, as listed, be judged by its current record, if it
// has one: complete, of the record's line and commit time, its manifests
// not read. It reports whether it did.
func (g *stepGroup) useRecord() bool {
	g.rec = g.currentRecord()
	return g.rec != nil
}

// ownManifest reads rank's manifest of g, judged by its record
// (useRecord): its highest revision or, where the step is its ranks'
// named revisions beneath counter ones, its highest named revision that
// decodes, as pairNamed takes it. A data error (the manifest vanished or
// does not decode, no named revision) means the record no longer holds
// for this rank: the caller reads the step in full.
func (g *stepGroup) ownManifest(ctx context.Context, s storage.Store, rank int) (*Manifest, error) {
	top := g.keys[rank]
	m, err := g.readManifest(ctx, s, top.Key)
	if err != nil || !g.rec.named || !m.Counter {
		return m, err
	}
	older := g.older[rank]
	for i := len(older) - 1; i >= 0; i-- {
		m, err := g.readManifest(ctx, s, older[i].info.Key)
		if err != nil && !errors.Is(err, ErrCorrupt) && !errors.Is(err, storage.ErrNotExist) {
			return nil, err
		}
		if err == nil && !m.Counter {
			return m, nil
		}
	}
	return nil, fmt.Errorf("checkpoint: step %d rank %d has no named revision beneath its counter ones, as its record %s says: %w", g.step, rank, g.rec.info.Key, ErrCorrupt)
}

// recordBody is a completion record's JSON: the step, its line and commit
// time, and every rank's manifest as judged.
type recordBody struct {
	Format     int          `json:"format"`
	Step       int64        `json:"step"`
	WorldSize  int          `json:"world_size"`
	Line       string       `json:"line,omitempty"`
	Committed  time.Time    `json:"committed"`
	State      string       `json:"state"`
	PassedOver string       `json:"passed_over,omitempty"`
	Ranks      []recordRank `json:"ranks"`
}

// recordRank names one rank's manifest of a recorded step: the revision a
// restore takes (Key, Revision, ID) and, where that is a named revision
// beneath counter ones, the highest revision listed (Highest).
type recordRank struct {
	Rank     int    `json:"rank"`
	Key      string `json:"key"`
	Revision int    `json:"revision"`
	ID       string `json:"id"`
	Highest  string `json:"highest,omitempty"`
}

// recordStep writes the completion record of t's step and world size
// when the commit of key (t's rank's highest revision) completed it: it
// lists the step; when every rank has a manifest, no current record is
// there, and no rank's highest revision was stored after key, it reads
// every rank's manifest, and writes the record when the step is complete.
// Ranks whose commits land together may each write one (create-only: the
// first stands). A failure is logged, never the commit's: a step without
// a record is read in full.
func (u *Uploader) recordStep(ctx context.Context, t Target, key string, log *slog.Logger) {
	rk, err := writeStepRecord(ctx, u.Store, t, key)
	switch {
	case err != nil && ctx.Err() == nil:
		log.Warn("checkpoint.record_failed", "step", t.Step, "rank", t.Rank, "err", err,
			"effect", "the step has no completion record: a restore reads every rank's manifest of it")
	case rk != "":
		log.Debug("checkpoint.step_recorded", "step", t.Step, "world_size", t.WorldSize, "record", rk)
	}
}

// writeStepRecord is recordStep; it returns the key of the record it wrote
// ("" for none).
func writeStepRecord(ctx context.Context, s storage.Store, t Target, key string) (string, error) {
	groups, err := listSteps(ctx, s, stepKeys(t.Step))
	if err != nil {
		return "", err
	}
	var g *stepGroup
	for _, gg := range groups {
		if gg.worldSize == t.WorldSize {
			g = gg
		}
	}
	if g == nil || !g.allRanks() || g.currentRecord() != nil {
		return "", nil
	}
	own := g.keys[t.Rank]
	if own.Key != key {
		return "", nil // a newer revision of this rank: its writer records
	}
	for _, oi := range g.keys {
		if oi.ModTime.After(own.ModTime) {
			return "", nil // committed after this one: that rank's writer records
		}
	}
	if err := readGroups(ctx, s, []*stepGroup{g}); err != nil {
		return "", err
	}
	return putRecord(ctx, s, g)
}

// listedTop is the key of rank's highest revision as g was listed (before
// pairNamed took a named revision beneath it).
func (g *stepGroup) listedTop(rank int) string {
	if above := g.above[rank]; len(above) > 0 {
		return above[len(above)-1].info.Key
	}
	return g.keys[rank].Key
}

// putRecord writes the completion record of g, listed and read in full
// (readGroups), for its listing's state, when g is complete and has no
// record that holds for that listing; it returns the record's key ("" for
// none written). Another writer's record of the same listing is the same
// key: the first create-only Put stands.
func putRecord(ctx context.Context, s storage.Store, g *stepGroup) (string, error) {
	if g.rec != nil || g.currentRecord() != nil {
		return "", nil
	}
	if v, _ := g.judge(); v != verdictComplete {
		return "", nil
	}
	at := g.committed(time.Now())
	if at.Before(time.Unix(0, 0)) || at.After(time.Unix(0, 1<<62)) {
		return "", nil // a created time a key cannot hold
	}
	body := recordBody{Format: FormatVersion, Step: g.step, WorldSize: g.worldSize, Line: g.line(), Committed: at.UTC(), State: g.state, PassedOver: g.passedOver}
	for r := range g.worldSize {
		rr := recordRank{Rank: r, Key: g.keys[r].Key, Revision: g.revisions[r], ID: g.manifests[r].ID}
		if top := g.listedTop(r); top != rr.Key {
			rr.Highest = top
		}
		body.Ranks = append(body.Ranks, rr)
	}
	b, err := json.Marshal(body)
	if err != nil {
		return "", err
	}
	rk := recordKey(g.step, g.worldSize, g.state, g.line(), at, g.passedOver != "")
	_, err = s.Put(ctx, rk, bytes.NewReader(b), int64(len(b)), storage.PutOptions{IfNotExists: true})
	if errors.Is(err, storage.ErrExists) {
		return "", nil // another rank recorded the same listing
	}
	if err != nil {
		return "", fmt.Errorf("checkpoint: write completion record %s: %w", rk, err)
	}
	return rk, nil
}
