package checkpoint

import (
	"cmp"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/lifeboat-project/lifeboat/storage"
)

// ErrNoCheckpoint: the store holds no complete checkpoint (that could be
// restored). A trainer then starts from scratch.
var ErrNoCheckpoint = errors.New("no complete checkpoint")

// RankInfo describes one rank's manifest of a step: its highest revision.
type RankInfo struct {
	Rank     int
	Key      string
	Revision int       // the revision of the manifest at Key
	Counter  bool      // the manifest is a counter checkpoint's (Target.Counter)
	ID       string    // the manifest's id; empty when Err is set
	Created  time.Time // from the manifest; the object's ModTime when Err is set
	Bytes    int64
	Files    int
	Err      error // the manifest could not be read or is invalid
}

// Snapshot describes one step of a job of WorldSize ranks: for each rank,
// its highest revision.
type Snapshot struct {
	Step      int64
	WorldSize int
	Ranks     []RankInfo // the manifests present, by rank
	// Complete is true when every rank 0..WorldSize-1 has a manifest that
	// decodes. (Latest only checks that the manifests exist.)
	Complete bool
	Created  time.Time // newest Created of the ranks
	Bytes    int64     // file bytes of all ranks
	Revision int       // highest revision of the ranks
	Counter  bool      // a rank's manifest is a counter checkpoint's
	// ChunksChecked: the chunks were listed (ListChecked), and
	// MissingChunks and WrongSizeChunks count, over the ranks' manifests,
	// the distinct chunks the store lacks or holds with another size than
	// a manifest says. List leaves all three zero.
	ChunksChecked   bool
	MissingChunks   int
	WrongSizeChunks int
}

// Restorable reports whether nothing found makes the snapshot impossible
// to restore: it is complete and, when its chunks were checked, none is
// missing or of the wrong size. (Whether the chunks' content is right,
// Verify with ReadData tells; whether it fits a volume, the restore.)
func (sn *Snapshot) Restorable() bool {
	return sn.Complete && sn.MissingChunks == 0 && sn.WrongSizeChunks == 0
}

// revisionKey is one revision's manifest key, as listed.
type revisionKey struct {
	revision int
	info     storage.ObjectInfo
}

// stepGroup is the manifest keys of one step for one world size.
type stepGroup struct {
	step      int64
	worldSize int
	keys      map[int]storage.ObjectInfo // by rank: its highest revision
	revisions map[int]int                // by rank: the revision in keys
	older     map[int][]revisionKey      // by rank: lower revisions, ascending
}

func (g *stepGroup) complete() bool { return len(g.keys) == g.worldSize }

// revision is the highest revision of the group's ranks.
func (g *stepGroup) revision() int {
	rev := 0
	for _, r := range g.revisions {
		rev = max(rev, r)
	}
	return rev
}

// add records a listed manifest key of the group's step and world size.
func (g *stepGroup) add(rank, revision int, oi storage.ObjectInfo) {
	cur, ok := g.keys[rank]
	switch {
	case !ok:
		g.keys[rank], g.revisions[rank] = oi, revision
	case revision > g.revisions[rank]:
		g.older[rank] = append(g.older[rank], revisionKey{g.revisions[rank], cur})
		g.keys[rank], g.revisions[rank] = oi, revision
	default:
		g.older[rank] = append(g.older[rank], revisionKey{revision, oi})
	}
}

// listSteps groups the manifest keys by (step, world size), in ascending
// order of step and then world size, each rank with its highest revision.
// Keys that are not manifest keys are ignored.
func listSteps(ctx context.Context, s storage.Store, prefix string, backoff Backoff) ([]*stepGroup, error) {
	var groups []*stepGroup
	err := retry(ctx, backoff, func() error {
		groups = nil
		byKey := make(map[[2]int64]*stepGroup)
		return s.List(ctx, prefix, func(oi storage.ObjectInfo) error {
			step, rank, n, rev, ok := parseManifestKey(oi.Key)
			if !ok {
				return nil
			}
			g := byKey[[2]int64{step, int64(n)}]
			if g == nil {
				g = &stepGroup{step: step, worldSize: n, keys: make(map[int]storage.ObjectInfo),
					revisions: make(map[int]int), older: make(map[int][]revisionKey)}
				byKey[[2]int64{step, int64(n)}] = g
				groups = append(groups, g)
			}
			g.add(rank, rev, oi)
			return nil
		})
	})
	if err != nil {
		return nil, fmt.Errorf("checkpoint: list %s in %s: %w", prefix, s, err)
	}
	for _, g := range groups {
		for _, older := range g.older {
			slices.SortFunc(older, func(a, b revisionKey) int { return cmp.Compare(a.revision, b.revision) })
		}
	}
	slices.SortFunc(groups, func(a, b *stepGroup) int {
		return cmp.Or(cmp.Compare(a.step, b.step), cmp.Compare(a.worldSize, b.worldSize))
	})
	return groups, nil
}

// completeSteps returns the steps whose ranks all have a manifest, newest
// first. worldSize 0 accepts any world size.
func completeSteps(ctx context.Context, s storage.Store, worldSize int, backoff Backoff) ([]*stepGroup, error) {
	groups, err := listSteps(ctx, s, snapshotsPrefix, backoff)
	if err != nil {
		return nil, err
	}
	var out []*stepGroup
	for _, g := range slices.Backward(groups) {
		if g.complete() && (worldSize == 0 || g.worldSize == worldSize) {
			out = append(out, g)
		}
	}
	return out, nil
}

// Latest returns the newest step for which every rank 0..worldSize-1 has a
// manifest (worldSize 0: any world size), or an error wrapping
// ErrNoCheckpoint. It reads keys only; Restore checks the contents.
func Latest(ctx context.Context, s storage.Store, worldSize int) (int64, error) {
	steps, err := completeSteps(ctx, s, worldSize, DefaultBackoff())
	if err != nil {
		return 0, err
	}
	if len(steps) == 0 {
		return 0, fmt.Errorf("checkpoint: latest in %s for world size %d: %w", s, worldSize, ErrNoCheckpoint)
	}
	return steps[0].step, nil
}

// List describes every step in the store, oldest first, reading each
// rank's highest revision (for lifeboat ls). A manifest that cannot be
// decoded is reported in its RankInfo.Err, not as List's error. It reads
// the manifests only; ListChecked also checks the chunks.
func List(ctx context.Context, s storage.Store) ([]Snapshot, error) {
	return list(ctx, s, false)
}

// ListChecked is List that also lists every chunk in the store once and
// counts, for each step, the chunks its manifests name that are missing or
// stored with another size (Snapshot.MissingChunks, WrongSizeChunks). It
// costs one listing of chunks/ more than List, and memory for each chunk's
// size.
func ListChecked(ctx context.Context, s storage.Store) ([]Snapshot, error) {
	return list(ctx, s, true)
}

func list(ctx context.Context, s storage.Store, checkChunks bool) ([]Snapshot, error) {
	backoff := DefaultBackoff()
	groups, err := listSteps(ctx, s, snapshotsPrefix, backoff)
	if err != nil {
		return nil, err
	}
	var stored chunkSizes
	if checkChunks {
		if stored, err = listChunks(ctx, s, backoff); err != nil {
			return nil, err
		}
	}
	out := make([]Snapshot, 0, len(groups))
	for _, g := range groups {
		snap := Snapshot{Step: g.step, WorldSize: g.worldSize, ChunksChecked: checkChunks}
		valid := 0
		var manifests []*Manifest
		for r := range g.worldSize {
			oi, ok := g.keys[r]
			if !ok {
				continue
			}
			ri := RankInfo{Rank: r, Key: oi.Key, Revision: g.revisions[r], Created: oi.ModTime}
			m, err := readManifest(ctx, s, oi.Key, backoff)
			switch {
			case errors.Is(err, ErrCorrupt) || errors.Is(err, storage.ErrNotExist):
				ri.Err = err
			case err != nil:
				return nil, err
			default:
				valid++
				manifests = append(manifests, m)
				ri.ID, ri.Created, ri.Bytes, ri.Files, ri.Counter = m.ID, m.Created, m.Bytes(), len(m.Files), m.Counter
			}
			snap.Revision = max(snap.Revision, ri.Revision)
			snap.Counter = snap.Counter || ri.Counter
			snap.Ranks = append(snap.Ranks, ri)
			snap.Bytes += ri.Bytes
			if ri.Created.After(snap.Created) {
				snap.Created = ri.Created
			}
		}
		snap.Complete = valid == g.worldSize
		if checkChunks {
			snap.MissingChunks, snap.WrongSizeChunks = stored.check(manifests)
		}
		out = append(out, snap)
	}
	return out, nil
}

// chunkSizes maps each stored chunk's SHA-256 to its stored size.
type chunkSizes map[[32]byte]int64

// listChunks lists chunks/ once.
func listChunks(ctx context.Context, s storage.Store, backoff Backoff) (chunkSizes, error) {
	var sizes chunkSizes
	err := retry(ctx, backoff, func() error {
		sizes = chunkSizes{}
		return s.List(ctx, chunksPrefix, func(oi storage.ObjectInfo) error {
			if sum, ok := parseChunkKey(oi.Key); ok {
				sizes[sumKey(sum)] = oi.Size
			}
			return nil
		})
	})
	if err != nil {
		return nil, fmt.Errorf("checkpoint: list %s in %s: %w", chunksPrefix, s, err)
	}
	return sizes, nil
}

// check counts the distinct chunks of ms that are not stored, and those
// stored with another size than a manifest says.
func (c chunkSizes) check(ms []*Manifest) (missing, wrongSize int) {
	seen := map[[32]byte]bool{}
	for _, m := range ms {
		for _, f := range m.Files {
			for _, ch := range f.Chunks {
				k := sumKey(ch.SHA256)
				if seen[k] {
					continue
				}
				seen[k] = true
				switch size, ok := c[k]; {
				case !ok:
					missing++
				case size != ch.Size:
					wrongSize++
				}
			}
		}
	}
	return missing, wrongSize
}

// sumKey is the 32 bytes of a hex SHA-256 that isHexSHA256 accepted.
func sumKey(sum string) [32]byte {
	var k [32]byte
	_, _ = hex.Decode(k[:], []byte(sum))
	return k
}

// readManifest gets, decodes and validates the manifest at key, and checks
// that it names the step, rank, world size and revision its key does. Invalid data
// wraps ErrCorrupt; a missing key wraps storage.ErrNotExist.
func readManifest(ctx context.Context, s storage.Store, key string, backoff Backoff) (*Manifest, error) {
	var data []byte
	err := retry(ctx, backoff, func() error {
		rc, err := s.Get(ctx, key, 0, -1)
		if err != nil {
			return err
		}
		defer rc.Close()
		data, err = io.ReadAll(io.LimitReader(rc, MaxManifestSize+1))
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("checkpoint: read manifest %s: %w", key, err)
	}
	m, err := DecodeManifest(data)
	if err != nil {
		return nil, fmt.Errorf("checkpoint: read manifest %s: %w", key, err)
	}
	if step, rank, n, rev, ok := parseManifestKey(key); !ok || m.Step != step || m.Rank != rank || m.WorldSize != n || m.Revision != rev {
		return nil, fmt.Errorf("checkpoint: read manifest %s: it says step %d rank %d of %d revision %d: %w", key, m.Step, m.Rank, m.WorldSize, m.Revision, ErrCorrupt)
	}
	return m, nil
}
