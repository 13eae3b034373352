package checkpoint

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/lifeboat-project/lifeboat/storage"
	"github.com/lifeboat-project/lifeboat/storage/mem"
)

// TestSplitSaveIsRevised: the trainer writes the model of step 100, which
// is committed, then the optimizer into the same step. The second upload
// commits revision 1 of the step, which Latest, List, Restore, Verify and
// RestoreLatest then take as the step's snapshot.
func TestSplitSaveIsRevised(t *testing.T) {
	defer verifyNone(t)
	allStores(t, func(t *testing.T, s storage.Store) {
		ctx := context.Background()
		var logs bytes.Buffer
		u := newUploader(s, nil)
		u.Log = slog.New(slog.NewJSONHandler(&logs, nil))
		full := sampleTree(11)
		part := tree{"model.pdparams": full["model.pdparams"]}
		dir := t.TempDir()
		writeTree(t, dir, part)
		target := Target{Step: 100, WorldSize: 1}
		first, err := u.Upload(ctx, dir, target)
		if err != nil {
			t.Fatal(err)
		}
		writeTree(t, dir, full)
		second, err := u.Upload(ctx, dir, target)
		if err != nil {
			t.Fatalf("upload of the whole step after its first part: %v", err)
		}
		if first.Revision != 0 || second.Revision != 1 || second.AlreadyCommitted ||
			second.Key != "snapshots/00000000000000000100/rank-00000-of-00001-rev-00001.json" || second.Manifest.Revision != 1 {
			t.Errorf("revisions %d then %d (key %s, already %v); want 0 then 1", first.Revision, second.Revision, second.Key, second.AlreadyCommitted)
		}
		if n := countEvents(t, &logs, "checkpoint.revised", map[string]any{"step": 100.0, "rank": 0.0, "revision": 1.0,
			"reason": "the step's files changed after it was committed"}); n != 1 {
			t.Errorf("%d checkpoint.revised lines, want 1:\n%s", n, logs.String())
		}

		if step, err := Latest(ctx, s, 1); err != nil || step != 100 {
			t.Errorf("Latest = %d, %v; want 100", step, err)
		}
		snaps, err := List(ctx, s)
		if err != nil || len(snaps) != 1 || snaps[0].Revision != 1 || snaps[0].Ranks[0].Revision != 1 ||
			snaps[0].Ranks[0].ID != second.Manifest.ID || snaps[0].Bytes != second.Bytes || !snaps[0].Complete {
			t.Errorf("List = %+v, %v; want step 100 at revision 1", snaps, err)
		}
		out := t.TempDir()
		rr, err := Restore(ctx, s, 100, 0, out, RestoreOptions{})
		if err != nil || rr.Revision != 1 {
			t.Fatalf("Restore = %+v, %v; want revision 1", rr, err)
		}
		checkTree(t, out, full)
		out = t.TempDir()
		if rr, err := RestoreLatest(ctx, s, 0, out, RestoreOptions{}); err != nil || rr.Step != 100 || rr.Revision != 1 {
			t.Fatalf("RestoreLatest = %+v, %v", rr, err)
		}
		checkTree(t, out, full)
		rep, err := Verify(ctx, s, 100, VerifyOptions{ReadData: Subset{1, 1}})
		if err != nil || !rep.OK() || rep.Revision != 1 || rep.Chunks != second.Chunks {
			t.Errorf("Verify = %+v, %v; want revision 1 with its %d chunks", rep, err, second.Chunks)
		}
	})
}

// countEvents counts the JSON log lines with msg event whose attributes
// include want.
func countEvents(t *testing.T, logs *bytes.Buffer, event string, want map[string]any) int {
	t.Helper()
	n := 0
	for line := range strings.Lines(logs.String()) {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		if rec["msg"] != event {
			continue
		}
		ok := true
		for k, v := range want {
			if got, _ := json.Marshal(rec[k]); string(got) != string(must(json.Marshal(v))) {
				t.Errorf("%s: %s = %s, want %v", event, k, got, v)
				ok = false
			}
		}
		if ok {
			n++
		}
	}
	return n
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// TestCommitRevisions commits a sequence of snapshots to one step and rank
// and checks the revision each gets, and what the step restores to.
func TestCommitRevisions(t *testing.T) {
	a, b, c := sampleTree(21), sampleTree(22), sampleTree(23)
	type commit struct {
		tr       tree
		counter  bool
		rev      int
		already  bool
		restores tree // what RestoreLatest gives after this commit
	}
	tests := []struct {
		name    string
		commits []commit
	}{
		{"identical re-commit is already committed", []commit{
			{a, false, 0, false, a},
			{a, false, 0, true, a},
		}},
		{"each change is the next revision", []commit{
			{a, false, 0, false, a},
			{b, false, 1, false, b},
			{c, false, 2, false, c},
		}},
		{"the files of an older revision saved again are the next revision", []commit{
			{a, false, 0, false, a},
			{b, false, 1, false, b},
			{a, false, 2, false, a}, // the trainer rolled back to a
			{a, false, 2, true, a},
		}},
		{"counter snapshot after the named step", []commit{
			{a, false, 0, false, a},
			{b, true, 1, false, b},
			{b, true, 1, true, b},
		}},
		{"counter snapshot of a step not named yet", []commit{
			{b, true, 0, false, b},
			{a, false, 1, false, a},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			stores(t, func(t *testing.T, s storage.Store) {
				defer verifyNone(t)
				ctx := context.Background()
				for i, c := range tt.commits {
					dir := t.TempDir()
					writeTree(t, dir, c.tr)
					res, err := newUploader(s, nil).Upload(ctx, dir, Target{Step: 7, WorldSize: 1, Counter: c.counter})
					if err != nil {
						t.Fatalf("commit %d: %v", i, err)
					}
					if res.Revision != c.rev || res.AlreadyCommitted != c.already || res.Manifest.Revision != c.rev {
						t.Errorf("commit %d: revision %d already %v; want %d %v", i, res.Revision, res.AlreadyCommitted, c.rev, c.already)
					}
					if !c.already && res.Manifest.Counter != c.counter {
						t.Errorf("commit %d: manifest counter %v, want %v", i, res.Manifest.Counter, c.counter)
					}
					out := t.TempDir()
					if _, err := RestoreLatest(ctx, s, 0, out, RestoreOptions{}); err != nil {
						t.Fatalf("commit %d: RestoreLatest: %v", i, err)
					}
					checkTree(t, out, c.restores)
				}
				snaps, err := List(ctx, s)
				if err != nil || len(snaps) != 1 {
					t.Fatalf("List = %+v, %v", snaps, err)
				}
				last := slices.MaxFunc(tt.commits, func(x, y commit) int { return x.rev - y.rev })
				if snaps[0].Revision != last.rev || snaps[0].Counter != last.counter {
					t.Errorf("List: revision %d counter %v, want %d %v", snaps[0].Revision, snaps[0].Counter, last.rev, last.counter)
				}
			})
		})
	}
}

// TestCommitRaces: another writer creates the revision this upload was
// about to create, and a commit whose Put succeeded but whose answer was
// lost is retried; each ends with the right revision and nothing lost.
func TestCommitRaces(t *testing.T) {
	defer verifyNone(t)
	ctx := context.Background()
	a, b, c := sampleTree(31), sampleTree(32), sampleTree(33)

	t.Run("another writer takes the revision", func(t *testing.T) {
		inner := mem.New()
		upload(t, newUploader(inner, nil), 3, 0, 1, a)
		var raced atomic.Bool
		f := &mem.FaultStore{Inner: inner}
		f.OnPut = func(ctx context.Context, key string, r io.Reader, size int64, opts storage.PutOptions) (storage.ObjectInfo, error) {
			if strings.HasSuffix(key, "-rev-00001.json") && raced.CompareAndSwap(false, true) {
				upload(t, newUploader(inner, nil), 3, 0, 1, b) // the other writer's revision 1
			}
			return inner.Put(ctx, key, r, size, opts)
		}
		res := upload(t, newUploader(f, nil), 3, 0, 1, c)
		if !raced.Load() || res.Revision != 2 || res.AlreadyCommitted {
			t.Errorf("raced %v: revision %d already %v; want 2", raced.Load(), res.Revision, res.AlreadyCommitted)
		}
		if keys := storedKeys(t, inner, snapshotsPrefix); len(keys) != 3 {
			t.Errorf("manifests %v, want revisions 0, 1 and 2", keys)
		}
		out := t.TempDir()
		if _, err := Restore(ctx, inner, 3, 0, out, RestoreOptions{}); err != nil {
			t.Fatal(err)
		}
		checkTree(t, out, c)
	})

	t.Run("a lost answer is this upload's commit", func(t *testing.T) {
		inner := mem.New()
		var lost atomic.Bool
		f := &mem.FaultStore{Inner: inner}
		f.OnPut = func(ctx context.Context, key string, r io.Reader, size int64, opts storage.PutOptions) (storage.ObjectInfo, error) {
			oi, err := inner.Put(ctx, key, r, size, opts)
			if err == nil && strings.HasPrefix(key, snapshotsPrefix) && lost.CompareAndSwap(false, true) {
				return storage.ObjectInfo{}, errors.New("connection reset by peer")
			}
			return oi, err
		}
		res := upload(t, newUploader(f, nil), 3, 0, 1, a)
		if !lost.Load() || res.Revision != 0 || res.AlreadyCommitted {
			t.Errorf("lost %v: revision %d already %v; want revision 0, committed by this upload", lost.Load(), res.Revision, res.AlreadyCommitted)
		}
		if keys := storedKeys(t, inner, snapshotsPrefix); len(keys) != 1 {
			t.Errorf("manifests %v, want one", keys)
		}
	})
}

// TestRevisionsOfRanks: each rank's snapshot of a step is its highest
// revision; ranks need not have the same number of revisions for the step
// to be complete.
func TestRevisionsOfRanks(t *testing.T) {
	defer verifyNone(t)
	ctx := context.Background()
	s := mem.New()
	u := newUploader(s, nil)
	r0a, r0b, r1 := sampleTree(41), sampleTree(42), sampleTree(43)
	upload(t, u, 5, 0, 2, r0a)
	if _, err := Latest(ctx, s, 2); !errors.Is(err, ErrNoCheckpoint) {
		t.Errorf("Latest with rank 1 missing = %v, want ErrNoCheckpoint", err)
	}
	upload(t, u, 5, 0, 2, r0b)
	upload(t, u, 5, 1, 2, r1)
	if step, err := Latest(ctx, s, 2); err != nil || step != 5 {
		t.Errorf("Latest = %d, %v; want 5", step, err)
	}
	for rank, want := range []tree{r0b, r1} {
		out := t.TempDir()
		res, err := RestoreLatest(ctx, s, rank, out, RestoreOptions{})
		if err != nil || res.Revision != 1-rank {
			t.Fatalf("RestoreLatest rank %d = %+v, %v", rank, res, err)
		}
		checkTree(t, out, want)
	}
	snaps, err := List(ctx, s)
	if err != nil || len(snaps) != 1 || snaps[0].Revision != 1 || snaps[0].Ranks[0].Revision != 1 || snaps[0].Ranks[1].Revision != 0 {
		t.Errorf("List = %+v, %v", snaps, err)
	}
}

// TestManifestRevisionMatchesKey: a manifest stored under another
// revision's key than its own is corrupt.
func TestManifestRevisionMatchesKey(t *testing.T) {
	defer verifyNone(t)
	ctx := context.Background()
	s := mem.New()
	u := newUploader(s, nil)
	upload(t, u, 1, 0, 1, sampleTree(1))
	upload(t, u, 2, 0, 1, sampleTree(2))
	res := upload(t, u, 2, 0, 1, sampleTree(3)) // revision 1
	putBytes(t, s, manifestKey(Target{Step: 2, WorldSize: 1}, 2), getBytes(t, s, res.Key))
	out := t.TempDir()
	rr, err := RestoreLatest(ctx, s, 0, out, RestoreOptions{})
	if err != nil || rr.Step != 1 || len(rr.Fallbacks) != 1 || !errors.Is(rr.Fallbacks[0].Err, ErrCorrupt) ||
		!strings.Contains(rr.Fallbacks[0].Err.Error(), "revision 1") {
		t.Errorf("RestoreLatest = %+v, %v; want step 1 after step 2's revision 2 is found corrupt", rr, err)
	}
}

// TestGenerationIsPartOfARevision: the same files saved in another job-wide
// save generation, or once named and once as a counter checkpoint, are a
// new revision: what pairs the ranks is recorded, not taken from the older
// manifest.
func TestGenerationIsPartOfARevision(t *testing.T) {
	defer verifyNone(t)
	ctx := context.Background()
	s := mem.New()
	dir := t.TempDir()
	writeTree(t, dir, sampleTree(31))
	for i, tc := range []struct {
		target  Target
		rev     int
		already bool
	}{
		{Target{Step: 7, WorldSize: 1}, 0, false},
		{Target{Step: 7, WorldSize: 1, Generation: "g1"}, 1, false},
		{Target{Step: 7, WorldSize: 1, Generation: "g1"}, 1, true},
		{Target{Step: 7, WorldSize: 1, Generation: "g1", Counter: true}, 2, false},
	} {
		res, err := newUploader(s, nil).Upload(ctx, dir, tc.target)
		if err != nil {
			t.Fatalf("commit %d: %v", i, err)
		}
		if res.Revision != tc.rev || res.AlreadyCommitted != tc.already || res.Manifest.Generation != tc.target.Generation {
			t.Errorf("commit %d: revision %d already %v generation %q; want %d %v %q", i, res.Revision, res.AlreadyCommitted,
				res.Manifest.Generation, tc.rev, tc.already, tc.target.Generation)
		}
	}
}
