package checkpoint

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/lifeboat-project/lifeboat/storage"
)

// maxCommitTries bounds how often a commit lists the revisions again after
// another writer created the revision it was about to create.
const maxCommitTries = 8

// committed is the outcome of a commit.
type committed struct {
	key      string
	manifest *Manifest // the manifest at key
	already  bool      // another upload had committed the same files
	late     bool      // another writer committed key after this upload began: nothing written
	at       time.Time // with late: when key was stored
}

// commit writes m, create-only, as the next revision of its step and rank:
// revision 0 when the step and rank have none, one more than the highest
// otherwise. When the highest revision holds the same files, that one
// stands and nothing is written; files equal to a lower revision's only
// are committed as the next revision. When another writer creates the
// revision first, commit lists again and takes the next number.
func (u *Uploader) commit(ctx context.Context, m *Manifest) (committed, error) {
	prefix := rankPrefix(m.target())
	differ := map[string]bool{} // revisions read and found to hold other files
	for range maxCommitTries {
		revs, err := listRevisions(ctx, u.Store, prefix)
		if err != nil {
			return committed{}, err
		}
		next := 0
		if len(revs) > 0 {
			next = revs[len(revs)-1].revision + 1
		}
		// Only the highest revision (the rank's snapshot) makes the same
		// files already committed: files equal to an older revision's are
		// the trainer going back to them (a rollback after a divergence),
		// and must become the newest again. A highest revision of this
		// upload's own id is its own Put, retried after the answer was
		// lost.
		if len(revs) > 0 && !differ[revs[len(revs)-1].info.Key] {
			key := revs[len(revs)-1].info.Key
			old, err := readManifest(ctx, u.Store, key)
			switch {
			case errors.Is(err, storage.ErrNotExist) || errors.Is(err, ErrCorrupt):
				// Pruned since the listing, or unreadable: not these files.
			case err != nil:
				return committed{}, err
			case old.ID == m.ID || slices.EqualFunc(old.Files, m.Files, equalFile) &&
				old.Generation == m.Generation && old.Counter == m.Counter && old.Line == m.Line:
				return committed{key: key, manifest: old, already: old.ID != m.ID}, nil
			case old.Line == m.Line && lateAfter(revs[len(revs)-1].info, old).After(m.Created.Add(ClockAllowance)):
				// Committed by another writer of this rank while this
				// upload ran (one uploader commits one upload at a
				// time): a replacement pod's newer work. This upload's
				// files must not become the newest.
				return committed{key: key, manifest: old, late: true, at: lateAfter(revs[len(revs)-1].info, old)}, nil
			}
			differ[key] = true
		}
		if next > MaxRevision {
			return committed{}, fmt.Errorf("checkpoint: commit step %d rank %d: it has %d revisions already, the most there can be", m.Step, m.Rank, MaxRevision+1)
		}
		m.Revision = next
		data, err := m.Encode()
		if err != nil {
			return committed{}, err
		}
		key := manifestKey(m.target(), next)
		if u.Fence != nil {
			if err := u.Fence(ctx); err != nil {
				return committed{}, fmt.Errorf("checkpoint: commit %s: %w", key, err)
			}
		}
		_, err = u.Store.Put(ctx, key, bytes.NewReader(data), int64(len(data)), storage.PutOptions{IfNotExists: true})
		if errors.Is(err, storage.ErrExists) {
			continue // another writer took this revision: list again
		}
		if err != nil {
			return committed{}, fmt.Errorf("checkpoint: commit %s: %w", key, err)
		}
		return committed{key: key, manifest: m}, nil
	}
	return committed{}, fmt.Errorf("checkpoint: commit step %d rank %d: other writers took the next revision %d times in a row; upload again", m.Step, m.Rank, maxCommitTries)
}

// lateAfter is when the revision old, listed as oi, was stored: the
// store's time of it, or its created time where the store keeps none.
func lateAfter(oi storage.ObjectInfo, old *Manifest) time.Time {
	if !oi.ModTime.IsZero() {
		return oi.ModTime
	}
	return old.Created
}

// listRevisions lists the manifest keys under prefix (a rankPrefix), by
// ascending revision.
func listRevisions(ctx context.Context, s storage.Store, prefix string) ([]revisionKey, error) {
	var revs []revisionKey
	err := s.List(ctx, prefix, func(oi storage.ObjectInfo) error {
		if _, rev, ok := parseManifestKey(oi.Key); ok {
			revs = append(revs, revisionKey{rev, oi})
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("checkpoint: list %s in %s: %w", prefix, s, err)
	}
	slices.SortFunc(revs, func(a, b revisionKey) int { return cmp.Compare(a.revision, b.revision) })
	return revs, nil
}
