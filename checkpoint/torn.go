package checkpoint

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/lifeboat-project/lifeboat/storage"
)

// ErrTorn marks a revision that its writer found torn after committing
// it: a file it holds grew afterwards, so it was committed while the
// trainer was still writing (MarkTorn). Such a revision is never
// restored; it wraps ErrCorrupt, so readers fall back past it as past any
// snapshot whose data is bad.
var ErrTorn = fmt.Errorf("%w: the revision was committed while a file of it was still being written", ErrCorrupt)

// tornSuffix ends the key of a revision's torn mark, beside its manifest:
// snapshots/<step>/rank-R-of-N[-rev-K].torn. Readers of an older format
// ignore it.
const tornSuffix = ".torn"

// tornKey is where the torn mark of t's revision is stored.
func tornKey(t Target, revision int) string {
	return strings.TrimSuffix(manifestKey(t, revision), ".json") + tornSuffix
}

// parseTornKey returns the manifest key a torn mark's key names; ok is
// false for any other key.
func parseTornKey(key string) (manifest string, ok bool) {
	base, found := strings.CutSuffix(key, tornSuffix)
	if !found {
		return "", false
	}
	manifest = base + ".json"
	if _, _, ok := parseManifestKey(manifest); !ok {
		return "", false
	}
	return manifest, true
}

// tornMark is the body of a torn mark.
type tornMark struct {
	Why    string    `json:"why"`
	Marked time.Time `json:"marked"`
}

// MarkTorn records that revision of t, committed by this writer, is torn:
// why says what proved it (a file that grew after the commit). From then
// on every reader treats that revision as corrupt (ErrTorn): a restore
// falls back past its step unless a higher revision replaces it, ls shows
// it, and prune counts it toward no Keep. Marking twice is harmless.
func MarkTorn(ctx context.Context, s storage.Store, t Target, revision int, why string) error {
	b, err := json.Marshal(tornMark{Why: why, Marked: time.Now().UTC()})
	if err != nil {
		return err
	}
	_, err = s.Put(ctx, tornKey(t, revision), bytes.NewReader(b), int64(len(b)), storage.PutOptions{IfNotExists: true})
	if err != nil && !errors.Is(err, storage.ErrExists) {
		return fmt.Errorf("checkpoint: mark revision %d of step %d rank %d torn: %w", revision, t.Step, t.Rank, err)
	}
	return nil
}
