package checkpoint

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sync/errgroup"

	"github.com/lifeboat-project/lifeboat/storage"
)

// Subset selects which chunks Verify downloads and hashes: part n of t of
// them (like restic's --read-data-subset n/t): a chunk belongs to part
// (first 8 bytes of its hash, big-endian) mod t + 1. The zero Subset,
// ReadNone, selects nothing; ReadAll, Subset{1, 1}, selects every chunk.
type Subset struct{ N, T uint64 }

// The read-data levels at either end.
var (
	ReadNone = Subset{}     // chunks are Stat-ed only: present, of the right size
	ReadAll  = Subset{1, 1} // every chunk is downloaded and hashed
)

// ParseSubset parses a read-data level: "all" (ReadAll), "none"
// (ReadNone), or "n/t" with 1 <= n <= t.
func ParseSubset(s string) (Subset, error) {
	switch s {
	case "all":
		return ReadAll, nil
	case "none":
		return ReadNone, nil
	}
	ns, ts, ok := strings.Cut(s, "/")
	n, err1 := strconv.ParseUint(ns, 10, 64)
	t, err2 := strconv.ParseUint(ts, 10, 64)
	if !ok || err1 != nil || err2 != nil || n < 1 || t < 1 || n > t {
		return Subset{}, fmt.Errorf("checkpoint: read-data subset %q is not all, none, or n/t with 1 <= n <= t (for example 1/5)", s)
	}
	return Subset{n, t}, nil
}

// Contains reports whether the chunk with hex hash sum is in the subset.
func (s Subset) Contains(sum string) bool {
	if s.T == 0 {
		return false
	}
	b, err := hex.DecodeString(sum[:16])
	if err != nil {
		return false
	}
	return binary.BigEndian.Uint64(b)%s.T == s.N-1
}

// String is the level as ParseSubset reads it: all, none or n/t.
func (s Subset) String() string {
	switch {
	case s.T == 0:
		return "none"
	case s.T == 1:
		return "all"
	}
	return fmt.Sprintf("%d/%d", s.N, s.T)
}

// ProblemKind classifies what Verify found wrong.
type ProblemKind string

// Problem kinds.
const (
	MissingManifest ProblemKind = "missing-manifest" // a rank has no manifest at the step
	BadManifest     ProblemKind = "bad-manifest"     // a manifest does not decode or is invalid
	MissingChunk    ProblemKind = "missing-chunk"
	TruncatedChunk  ProblemKind = "wrong-size-chunk" // stored size differs from the manifest's
	CorruptChunk    ProblemKind = "corrupt-chunk"    // content does not hash to its name
)

// Problem is one thing wrong with a snapshot.
type Problem struct {
	Kind   ProblemKind
	Key    string // the manifest or chunk key
	Detail string
}

func (p Problem) String() string { return fmt.Sprintf("%s %s: %s", p.Kind, p.Key, p.Detail) }

// VerifyOptions tune Verify. Zero fields take defaults.
type VerifyOptions struct {
	WorldSize int // 0: the world size of the manifests found at the step
	// ReadData are the chunks to download and hash; the rest are only
	// Stat-ed. The zero value is ReadNone: pass ReadAll to read everything.
	ReadData Subset
	Workers  int // parallel chunk checks, default DefaultDownloadWorkers
}

// withDefaults fills in the workers when the caller left them zero.
func (o VerifyOptions) withDefaults() VerifyOptions {
	if o.Workers <= 0 {
		o.Workers = DefaultDownloadWorkers
	}
	return o
}

// VerifiedRank is the revision of one rank that Verify checked: the one a
// restore of the step takes for that rank.
type VerifiedRank struct {
	Rank     int
	Key      string // its manifest key
	Revision int
	Counter  bool // a counter checkpoint's manifest (false when it did not decode)
}

// VerifyReport is what Verify found. OK reports a restorable snapshot.
type VerifyReport struct {
	Step      int64
	WorldSize int
	Revision  int // the highest revision of the ranks' manifests checked
	// Ranks lists, by rank, the revision checked of each rank that has a
	// manifest: the one a restore of the step takes (its highest, or,
	// with PassedOver, its highest named one).
	Ranks []VerifiedRank
	// PassedOver, when set, says why the ranks' highest revisions could
	// not be paired: a restore takes each rank's highest named revision
	// instead (docs/FORMAT.md, "Named revisions beneath counter ones"),
	// and those are what was checked; the counter revisions above them
	// were not.
	PassedOver string
	ReadData   Subset // the chunks whose content was to be checked
	// Check is how the chunks read were checked: always CheckSHA256,
	// their content address, whatever the store keeps with them (and the
	// CRC32C their manifests record, as CheckSHA256 does).
	Check      Check
	Manifests  int // manifests that decoded
	Chunks     int // distinct chunks referenced
	ChunksRead int // chunks downloaded and hashed
	BytesRead  int64
	Problems   []Problem
}

// OK reports whether no problem was found.
func (r *VerifyReport) OK() bool { return len(r.Problems) == 0 }

// Verify checks the snapshot of step as a restore of it would take it:
// each rank's highest revision, or, where the ranks' highest revisions
// cannot be paired (counter checkpoints) and their highest named ones can,
// those (VerifyReport.Ranks and PassedOver say which were checked). Every
// rank has a manifest that decodes (a revision marked torn does not),
// every distinct chunk is stored with the size the manifests say (and the
// SHA-256 the store reports, where it reports one), and the chunks in
// opts.ReadData are downloaded and hash to their names. It does not run
// the format checks of package format; a restore does. Problems are
// reported in the report; the error is for failures to check (store
// unreachable, ctx).
func Verify(ctx context.Context, s storage.Store, step int64, opts VerifyOptions) (*VerifyReport, error) {
	opts = opts.withDefaults()
	groups, err := listSteps(ctx, s, stepPrefix(step))
	if err != nil {
		return nil, err
	}
	rep := &VerifyReport{Step: step, WorldSize: opts.WorldSize, ReadData: opts.ReadData, Check: CheckSHA256}
	if rep.WorldSize == 0 {
		g, err := oneGroup(groups, 0, fmt.Sprintf("step %d", step), s)
		if err != nil {
			return nil, fmt.Errorf("checkpoint: verify: %w", err)
		}
		rep.WorldSize = g.worldSize
	}
	g := &stepGroup{step: step, worldSize: rep.WorldSize, keys: map[int]storage.ObjectInfo{}, revisions: map[int]int{}}
	if i := slices.IndexFunc(groups, func(g *stepGroup) bool { return g.worldSize == rep.WorldSize }); i >= 0 {
		g = groups[i]
	}
	// The revisions a restore takes: readGroups pairs the ranks' named
	// revisions beneath counter ones, as every reader does.
	if err := readGroups(ctx, s, []*stepGroup{g}); err != nil {
		return nil, fmt.Errorf("checkpoint: verify step %d: read manifests in %s: %w", step, s, err)
	}
	rep.Revision, rep.PassedOver = g.revision(), g.passedOver
	chunks, order, err := verifyManifests(ctx, s, g, rep)
	if err != nil {
		return nil, fmt.Errorf("checkpoint: verify step %d: %w", step, err)
	}
	if err := verifyChunks(ctx, s, chunks, order, opts, rep); err != nil {
		return nil, fmt.Errorf("checkpoint: verify step %d: %w", step, err)
	}
	slices.SortFunc(rep.Problems, func(a, b Problem) int { return strings.Compare(a.Key, b.Key) })
	return rep, nil
}

// verifyManifests reports in rep the revision checked of each rank of g,
// whose manifests readGroups read, and its missing and bad manifests (one
// that records another CRC32C for a chunk than an earlier entry does is
// bad). It returns each distinct chunk the manifests name, by SHA-256,
// with the CRC32C one of them records, and the chunks in the order first
// named; its error is a failure to check (the store's, ctx's) while
// reading a manifest again.
func verifyManifests(ctx context.Context, s storage.Store, g *stepGroup, rep *VerifyReport) (chunks map[string]Chunk, order []string, err error) {
	chunks = map[string]Chunk{}
	for r := range rep.WorldSize {
		oi, ok := g.keys[r]
		if !ok {
			rep.Problems = append(rep.Problems, Problem{MissingManifest, manifestKey(Target{Step: rep.Step, Rank: r, WorldSize: rep.WorldSize}, 0), fmt.Sprintf("rank %d of %d has no manifest", r, rep.WorldSize)})
			continue
		}
		info := g.manifests[r]
		rep.Ranks = append(rep.Ranks, VerifiedRank{Rank: r, Key: oi.Key, Revision: g.revisions[r], Counter: info != nil && info.Counter})
		if info == nil {
			rep.Problems = append(rep.Problems, Problem{BadManifest, oi.Key, g.errs[r].Error()})
			continue
		}
		m, err := g.full(ctx, s, r)
		switch {
		case errors.Is(err, ErrCorrupt) || errors.Is(err, storage.ErrNotExist):
			rep.Problems = append(rep.Problems, Problem{BadManifest, oi.Key, err.Error()})
			continue
		case err != nil:
			return nil, nil, err
		}
		rep.Manifests++
		disagrees := ""
		for _, f := range m.Files {
			for _, c := range f.Chunks {
				had, ok := chunks[c.SHA256]
				switch {
				case !ok:
					order = append(order, c.SHA256)
				case c.CRC32C == "" || had.CRC32C == c.CRC32C:
					continue
				case had.CRC32C != "":
					disagrees = cmp.Or(disagrees, fmt.Sprintf("it records CRC32C %s for chunk %s, where an earlier entry (of this rank or a lower one) records %s", c.CRC32C, chunkKey(c.SHA256), had.CRC32C))
					continue
				}
				chunks[c.SHA256] = c
			}
		}
		if disagrees != "" {
			rep.Problems = append(rep.Problems, Problem{BadManifest, oi.Key, disagrees})
		}
	}
	rep.Chunks = len(order)
	return chunks, order, nil
}

// verifyChunks checks the chunks in order (checkChunk), up to opts.Workers
// at once, and reports what it found in rep.
func verifyChunks(ctx context.Context, s storage.Store, chunks map[string]Chunk, order []string, opts VerifyOptions, rep *VerifyReport) error {
	var mu sync.Mutex
	workers := opts.Workers
	scratch := newScratchPool(workers)
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(workers)
	for _, sum := range order {
		if gctx.Err() != nil {
			break
		}
		g.Go(func() error {
			buf := scratch.get()
			defer scratch.put(buf)
			p, read, err := checkChunk(gctx, s, chunks[sum], opts.ReadData, buf)
			if err != nil {
				return err
			}
			mu.Lock()
			defer mu.Unlock()
			if p != nil {
				rep.Problems = append(rep.Problems, *p)
			}
			if read {
				rep.ChunksRead++
				rep.BytesRead += chunks[sum].Size
			}
			return nil
		})
	}
	return waitCause(ctx, gctx, g)
}

// checkChunk Stats chunk c and, when it is in readData, downloads it and
// checks its SHA-256 and the CRC32C its manifests record; read reports
// whether it did.
func checkChunk(ctx context.Context, s storage.Store, c Chunk, readData Subset, scratch []byte) (p *Problem, read bool, err error) {
	sum, size := c.SHA256, c.Size
	key := chunkKey(sum)
	oi, err := s.Stat(ctx, key)
	switch {
	case errors.Is(err, storage.ErrNotExist):
		return &Problem{MissingChunk, key, "not in the store"}, false, nil
	case err != nil:
		return nil, false, err
	case oi.Size != size:
		return &Problem{TruncatedChunk, key, fmt.Sprintf("%d bytes stored, manifest says %d", oi.Size, size)}, false, nil
	case oi.SHA256 != "" && oi.SHA256 != sum:
		return &Problem{CorruptChunk, key, "the store reports sha256 " + oi.SHA256}, false, nil
	case !readData.Contains(sum):
		return nil, false, nil
	}
	_, err = fetchChunk(ctx, s, c, nil, 0, scratch, CheckSHA256) // VerifyReport.Check
	switch {
	case errors.Is(err, ErrCorrupt):
		return &Problem{CorruptChunk, key, err.Error()}, true, nil
	case err != nil:
		return nil, false, err
	}
	return nil, true, nil
}

// hashOf returns the hex SHA-256 of b.
func hashOf(b []byte) string {
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}
