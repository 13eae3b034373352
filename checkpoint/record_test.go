package checkpoint

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lifeboat-project/lifeboat/storage"
	"github.com/lifeboat-project/lifeboat/storage/mem"
)

// requestCounter counts what a restore asks of the store for choosing a
// step and reading its manifests: LIST pages (1,000 keys a page, at least
// one a listing, as S3 pages them) and GETs of manifests and records.
// Chunk GETs are the snapshot's own bytes and not counted.
type requestCounter struct {
	storage.Store
	mu           sync.Mutex
	pages, gets  int
	recordsGets  int
	manifestGets int
}

func (c *requestCounter) List(ctx context.Context, prefix string, fn func(storage.ObjectInfo) error) error {
	n := 0
	err := c.Store.List(ctx, prefix, func(oi storage.ObjectInfo) error {
		n++
		return fn(oi)
	})
	c.mu.Lock()
	c.pages += max(1, (n+999)/1000)
	c.mu.Unlock()
	return err
}

// ListDirs counts a listing one level deep by its entries (objects and
// folders), as S3 pages it.
func (c *requestCounter) ListDirs(ctx context.Context, prefix string, fn func(storage.ObjectInfo) error) error {
	n := 0
	err := storage.ListDirs(ctx, c.Store, prefix, func(oi storage.ObjectInfo) error {
		n++
		return fn(oi)
	})
	c.mu.Lock()
	c.pages += max(1, (n+999)/1000)
	c.mu.Unlock()
	return err
}

func (c *requestCounter) Get(ctx context.Context, key string, offset, length int64) (io.ReadCloser, error) {
	if strings.HasPrefix(key, snapshotsPrefix) {
		c.mu.Lock()
		c.gets++
		c.mu.Unlock()
	}
	return c.Store.Get(ctx, key, offset, length)
}

func (c *requestCounter) snapGets() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.gets
}

func (c *requestCounter) requests() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.pages + c.gets
}

// hideRecords is the store as a lifeboat without completion records sees
// it: listings leave records out. What a restore takes from it is what it
// took before records.
type hideRecords struct{ storage.Store }

func (h hideRecords) List(ctx context.Context, prefix string, fn func(storage.ObjectInfo) error) error {
	return h.Store.List(ctx, prefix, func(oi storage.ObjectInfo) error {
		if _, _, _, ok := parseRecordKey(oi.Key); ok {
			return nil
		}
		return fn(oi)
	})
}

// commitSteps commits steps 1..steps of n ranks, every rank through its
// own Uploader, the ranks of a step at once.
func commitSteps(t *testing.T, s storage.Store, n, steps int) {
	t.Helper()
	ups := make([]*Uploader, n)
	for r := range ups {
		ups[r] = newUploader(s, nil)
	}
	for step := int64(1); step <= int64(steps); step++ {
		dirs := make([]string, n)
		for r := range n {
			dirs[r] = t.TempDir()
			writeTree(t, dirs[r], rankTree(r, step))
		}
		errs := make([]error, n)
		var wg sync.WaitGroup
		for r := range n {
			wg.Go(func() {
				_, errs[r] = ups[r].Upload(context.Background(), dirs[r], Target{Step: step, Rank: r, WorldSize: n})
			})
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			t.Fatal(err)
		}
	}
}

// restoreEveryRank runs every rank's RestoreLatest, each through its own
// counter, and returns the results and the requests of each rank.
func restoreEveryRank(t *testing.T, s storage.Store, n int) ([]*RestoreResult, []int) {
	t.Helper()
	res := make([]*RestoreResult, n)
	reqs := make([]int, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		wg.Go(func() {
			c := &requestCounter{Store: s}
			res[r], errs[r] = RestoreLatest(context.Background(), c, r, t.TempDir(), RestoreOptions{WorldSize: n, Workers: 2, SkipFormatCheck: true})
			reqs[r] = c.requests()
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	return res, reqs
}

// TestRestoreRequestsPerRank: a job's restore at 64 ranks x 3 steps costs
// each rank at most 3 requests (LIST pages and GETs of manifests and
// records; here a listing of snapshots/ one level deep, one of the newest
// step's folder and its own manifest), whatever the ranks: the
// step's completion record stands for the other ranks' manifests. Without
// records (a store written before them) each rank reads every rank's
// manifest of every step, as before, and restores the same. On the code
// before records every rank made 1 + 64 x 3 requests.
func TestRestoreRequestsPerRank(t *testing.T) {
	defer verifyNone(t)
	const n, steps = 64, 3
	s := mem.New()
	commitSteps(t, s, n, steps)
	if got := recordKeys(t, s, snapshotsPrefix); len(got) != steps {
		t.Fatalf("records %v, want one per step", got)
	}

	res, reqs := restoreEveryRank(t, s, n)
	for r := range n {
		if res[r].Step != steps || reqs[r] > 3 {
			t.Errorf("rank %d restored step %d with %d requests; want step %d in at most 3", r, res[r].Step, reqs[r], steps)
		}
	}
	c := &requestCounter{Store: s}
	if step, err := Latest(context.Background(), c, n); err != nil || step != steps || c.gets != 0 || c.pages != 2 {
		t.Errorf("Latest = %d, %v with %d pages and %d GETs; want step %d, 2 pages, no GET", step, err, c.pages, c.gets, steps)
	}

	// As a reader without records sees the store (a restore that reads
	// a step in full writes its record, which it would see next time).
	old, oldReqs := restoreEveryRank(t, hideRecords{s}, n)
	for r := range n {
		if old[r].Step != res[r].Step || old[r].Manifest.ID != res[r].Manifest.ID {
			t.Errorf("rank %d without records restored step %d (%s), with records step %d (%s)", r, old[r].Step, old[r].Manifest.ID, res[r].Step, res[r].Manifest.ID)
		}
		if oldReqs[r] < n*steps {
			t.Errorf("rank %d without records made %d requests; want every rank's manifest of every step read (%d)", r, oldReqs[r], n*steps)
		}
	}
	t.Logf("requests per rank: %d with records, %d without", slices.Max(reqs), slices.Max(oldReqs))
}

// thousandRanks stores steps 1..steps of n ranks, each rank's manifest
// naming one shared chunk, and each step's completion record, written by
// the commit of its last rank as an Uploader's would be.
func thousandRanks(t *testing.T, s storage.Store, n, steps int) {
	t.Helper()
	ctx := context.Background()
	data := []byte("the one chunk of every rank")
	h := sha256.Sum256(data)
	sum := hex.EncodeToString(h[:])
	putBytes(t, s, chunkKey(sum), data)
	for step := int64(1); step <= int64(steps); step++ {
		var last string
		for r := range n {
			m := &Manifest{Format: FormatVersion, ID: newID(), Step: step, Rank: r, WorldSize: n, Created: fixedTime.Add(time.Duration(step) * time.Minute),
				Files: []File{{Path: "state.bin", Size: int64(len(data)), Mode: 0o644, Chunks: []Chunk{{SHA256: sum, Size: int64(len(data))}}}}}
			b, err := m.Encode()
			if err != nil {
				t.Fatal(err)
			}
			last = manifestKey(m.target(), 0)
			putBytes(t, s, last, b)
		}
		if rk, err := writeStepRecord(ctx, s, Target{Step: step, Rank: n - 1, WorldSize: n}, last); err != nil || rk == "" {
			t.Fatalf("record of step %d: %q, %v", step, rk, err)
		}
	}
}

// TestLatestRequestsAtThousandRanks: at 1,000 ranks x 3 steps, Latest
// costs 2 LIST pages (snapshots/ one level deep: the step folders and
// the records beside them; then the newest step's folder, whose listing
// its record holds for) and no GET, and a rank's restore one GET more,
// its own manifest: 3 requests. Without records every manifest is read.
// On the code before (the records inside the step folders, found by
// listing every manifest) Latest took 4 pages and a restore 5 requests.
func TestLatestRequestsAtThousandRanks(t *testing.T) {
	defer verifyNone(t)
	const n, steps = 1000, 3
	s := mem.New()
	thousandRanks(t, s, n, steps)
	ctx := context.Background()
	c := &requestCounter{Store: s}
	if step, err := Latest(ctx, c, n); err != nil || step != steps || c.pages > 3 || c.gets > 2 {
		t.Errorf("Latest = %d, %v with %d LIST pages and %d GETs; want step %d with at most 3 pages and 2 GETs", step, err, c.pages, c.gets, steps)
	} else if c.pages != 2 || c.gets != 0 {
		t.Errorf("Latest took %d LIST pages and %d GETs; want 2 and none", c.pages, c.gets)
	}
	for _, r := range []int{0, 500, n - 1} {
		c := &requestCounter{Store: s}
		res, err := RestoreLatest(ctx, c, r, t.TempDir(), RestoreOptions{WorldSize: n, Workers: 2, SkipFormatCheck: true})
		if err != nil || res.Step != steps || c.requests() > 3 {
			t.Errorf("rank %d: RestoreLatest = %+v, %v with %d requests; want step %d in at most 3", r, res, err, c.requests(), steps)
		}
	}
	c = &requestCounter{Store: hideRecords{s}}
	if step, err := Latest(ctx, c, n); err != nil || step != steps || c.gets != n*steps {
		t.Errorf("without records: Latest = %d, %v with %d GETs; want step %d, every manifest read (%d)", step, err, c.gets, steps, n*steps)
	}
}

// sameRestore checks that rank's RestoreLatest from s takes what it takes
// with the records hidden (the code before records): the same step,
// revision and manifest, the same fallbacks, or an error alike.
func sameRestore(t *testing.T, s storage.Store, rank, n int) *RestoreResult {
	t.Helper()
	ctx := context.Background()
	opts := RestoreOptions{WorldSize: n, SkipFormatCheck: true}
	got, err := RestoreLatest(ctx, s, rank, t.TempDir(), opts)
	want, wantErr := RestoreLatest(ctx, hideRecords{s}, rank, t.TempDir(), opts)
	if (err == nil) != (wantErr == nil) {
		t.Fatalf("rank %d: RestoreLatest = %v; without records %v", rank, err, wantErr)
	}
	if err != nil {
		return nil
	}
	steps := func(fbs []Fallback) []int64 {
		var out []int64
		for _, f := range fbs {
			out = append(out, f.Step)
		}
		return out
	}
	if got.Step != want.Step || got.Revision != want.Revision || got.Manifest.ID != want.Manifest.ID || got.Line != want.Line ||
		!slices.Equal(steps(got.Fallbacks), steps(want.Fallbacks)) {
		t.Errorf("rank %d: restored step %d rev %d (%s), fallbacks %v; without records step %d rev %d (%s), fallbacks %v", rank,
			got.Step, got.Revision, got.Manifest.ID, steps(got.Fallbacks), want.Step, want.Revision, want.Manifest.ID, steps(want.Fallbacks))
	}
	return got
}

// rawRevision stores, without an Uploader (so that no record is written
// for it), revision rev of t's manifest, holding tr's files as stored by
// an earlier upload res, with what change says.
func rawRevision(t *testing.T, s storage.Store, res *UploadResult, rev int, change func(m *Manifest)) {
	t.Helper()
	m := *res.Manifest
	m.ID, m.Revision = newID(), rev
	if change != nil {
		change(&m)
	}
	b, err := m.Encode()
	if err != nil {
		t.Fatal(err)
	}
	putBytes(t, s, manifestKey(m.target(), rev), b)
}

// TestRecordFallbacks: wherever a step's record does not hold for what
// is stored, a restore reads the step in full and takes exactly what it
// took before records: a store without records, a rank's revision
// committed after the record (named, or a counter one that the ranks
// cannot pair), a manifest the record names deleted, or written again, a
// revision marked torn after the record, a record whose state is no
// listing's, with a body that is not JSON, a record left without its
// manifests, a manifest that no longer reads.
func TestRecordFallbacks(t *testing.T) {
	defer verifyNone(t)
	const n = 4
	cases := []struct {
		name   string
		change func(t *testing.T, s *mem.Store, step2 []*UploadResult)
		ranks  []int // the ranks whose restore is compared (default: all)
		want   int64 // the step restored by rank 0
	}{
		{"no records", func(t *testing.T, s *mem.Store, _ []*UploadResult) { dropRecords(t, s) }, nil, 2},
		{"a newer named revision", func(t *testing.T, s *mem.Store, up []*UploadResult) {
			rawRevision(t, s, up[1], 1, nil)
		}, nil, 2},
		{"a newer counter revision", func(t *testing.T, s *mem.Store, up []*UploadResult) {
			rawRevision(t, s, up[1], 1, func(m *Manifest) { m.Counter = true })
		}, nil, 2},
		{"a manifest gone", func(t *testing.T, s *mem.Store, up []*UploadResult) {
			if err := s.Delete(context.Background(), up[2].Key); err != nil {
				t.Fatal(err)
			}
		}, nil, 1},
		{"a manifest written again", func(t *testing.T, s *mem.Store, up []*UploadResult) {
			if err := s.Delete(context.Background(), up[2].Key); err != nil {
				t.Fatal(err)
			}
			rawRevision(t, s, up[2], 0, func(m *Manifest) { m.Counter = true })
		}, nil, 1},
		{"a revision marked torn", func(t *testing.T, s *mem.Store, up []*UploadResult) {
			if err := MarkTorn(context.Background(), s, up[3].Manifest.target(), 0, "test"); err != nil {
				t.Fatal(err)
			}
		}, nil, 1},
		{"a record of another state, not JSON", func(t *testing.T, s *mem.Store, up []*UploadResult) {
			dropRecords(t, s)
			putBytes(t, s, recordKey(2, n, "0123456789abcdef", LegacyLine, up[0].Manifest.Created, false), []byte("garbage"))
		}, nil, 2},
		{"a record without its manifests", func(t *testing.T, s *mem.Store, up []*UploadResult) {
			for _, u := range up {
				if err := s.Delete(context.Background(), u.Key); err != nil {
					t.Fatal(err)
				}
			}
		}, nil, 1},
		{"a manifest that no longer reads", func(t *testing.T, s *mem.Store, up []*UploadResult) {
			// Written again in place with its size and time kept, as a
			// store's fault might: the record's state still holds.
			oi, err := s.Stat(context.Background(), up[0].Key)
			if err != nil {
				t.Fatal(err)
			}
			b := bytes.Repeat([]byte{'x'}, int(oi.Size))
			s.Set(up[0].Key, b) // keeps its time
		}, []int{0}, 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := mem.New()
			commitSteps(t, s, n, 1)
			var step2 []*UploadResult
			for r := range n {
				step2 = append(step2, uploadTarget(t, newUploader(s, nil), Target{Step: 2, Rank: r, WorldSize: n}, rankTree(r, 2)))
			}
			if got := recordKeys(t, s, stepKeys(2)); len(got) != 1 {
				t.Fatalf("step 2 has records %v; want one", got)
			}
			tc.change(t, s, step2)
			ranks := tc.ranks
			if ranks == nil {
				ranks = []int{0, 1, 2, 3}
			}
			for _, r := range ranks {
				res := sameRestore(t, s, r, n)
				if r == 0 && (res == nil || res.Step != tc.want) {
					t.Errorf("rank 0 restored %+v; want step %d", res, tc.want)
				}
			}
		})
	}
}

// hideKey is a store whose listings leave out one key: a listing made
// before that object was visible.
type hideKey struct {
	storage.Store
	key string
}

func (h hideKey) List(ctx context.Context, prefix string, fn func(storage.ObjectInfo) error) error {
	return h.Store.List(ctx, prefix, func(oi storage.ObjectInfo) error {
		if oi.Key == h.key {
			return nil
		}
		return fn(oi)
	})
}

// TestRecordWrittenByRestore: when the rank whose commit completed a step
// listed it before another rank's manifest was visible (on a store whose
// times do not give the order objects appear in, a rank stored with an
// earlier time can appear later), no commit writes the record; the first
// restore reads the step in full and writes it, and the next restore
// reads its own manifest only. Failed before: the step stayed without a
// record, read in full at every restore.
func TestRecordWrittenByRestore(t *testing.T) {
	defer verifyNone(t)
	s := mem.New()
	first := uploadTarget(t, newUploader(s, nil), Target{Step: 1, Rank: 0, WorldSize: 2}, rankTree(0, 1))
	uploadTarget(t, newUploader(hideKey{s, first.Key}, nil), Target{Step: 1, Rank: 1, WorldSize: 2}, rankTree(1, 1))
	if got := recordKeys(t, s, snapshotsPrefix); len(got) != 0 {
		t.Fatalf("records %v after the commits; want none", got)
	}
	c := &requestCounter{Store: s}
	if res, err := RestoreLatest(context.Background(), c, 0, t.TempDir(), RestoreOptions{WorldSize: 2, SkipFormatCheck: true}); err != nil || res.Step != 1 {
		t.Fatalf("RestoreLatest = %+v, %v", res, err)
	}
	if got := recordKeys(t, s, snapshotsPrefix); len(got) != 1 {
		t.Fatalf("records %v after a restore; want the step's", got)
	}
	c = &requestCounter{Store: s}
	if res, err := RestoreLatest(context.Background(), c, 1, t.TempDir(), RestoreOptions{WorldSize: 2, SkipFormatCheck: true}); err != nil || res.Step != 1 || c.snapGets() != 1 {
		t.Errorf("next RestoreLatest = %+v, %v with %d GETs of manifests; want step 1 and its own manifest only", res, err, c.snapGets())
	}
	sameRestore(t, s, 1, 2)
}

// TestRecordStoreFailure: a store that fails reading the one manifest a
// recorded step's restore reads fails the restore as a store failure: no
// fallback to an older step, no fresh start.
func TestRecordStoreFailure(t *testing.T) {
	defer verifyNone(t)
	inner := mem.New()
	commitSteps(t, inner, 2, 2)
	own := manifestKey(Target{Step: 2, Rank: 1, WorldSize: 2}, 0)
	slow := errors.New("503 SlowDown")
	s := &mem.FaultStore{Inner: inner, OnGet: func(ctx context.Context, key string, offset, length int64) (io.ReadCloser, error) {
		if key == own {
			return nil, slow
		}
		return inner.Get(ctx, key, offset, length)
	}}
	res, err := RestoreLatest(context.Background(), s, 1, t.TempDir(), RestoreOptions{WorldSize: 2})
	if !errors.Is(err, slow) || errors.Is(err, ErrNoCheckpoint) || res != nil {
		t.Fatalf("RestoreLatest = %+v, %v; want the store's failure", res, err)
	}
}

// TestRecordWrittenByLastCommit: the rank whose commit completes a step
// writes its record, naming every rank's manifest; the earlier ranks
// write none; a rank's later revision gets a record of its own, and the
// first one no longer holds.
func TestRecordWrittenByLastCommit(t *testing.T) {
	defer verifyNone(t)
	s := mem.New()
	var ups []*UploadResult
	for r := range 3 {
		ups = append(ups, uploadTarget(t, newUploader(s, nil), Target{Step: 7, Rank: r, WorldSize: 3}, rankTree(r, 7)))
		if got := recordKeys(t, s, snapshotsPrefix); len(got) != r/2 {
			t.Fatalf("after rank %d's commit: records %v", r, got)
		}
	}
	keys := recordKeys(t, s, snapshotsPrefix)
	var body recordBody
	if err := json.Unmarshal(getBytes(t, s, keys[0]), &body); err != nil {
		t.Fatal(err)
	}
	if body.Step != 7 || body.WorldSize != 3 || len(body.Ranks) != 3 {
		t.Fatalf("record %+v", body)
	}
	for r, rr := range body.Ranks {
		if rr.Rank != r || rr.Key != ups[r].Key || rr.Revision != 0 || rr.ID != ups[r].Manifest.ID {
			t.Errorf("record names %+v for rank %d; want %s, revision 0, id %s", rr, r, ups[r].Key, ups[r].Manifest.ID)
		}
	}
	uploadTarget(t, newUploader(s, nil), Target{Step: 7, Rank: 1, WorldSize: 3}, rankTree(1, 8))
	if got := recordKeys(t, s, snapshotsPrefix); len(got) != 2 {
		t.Fatalf("after rank 1's revision: records %v; want a second one", got)
	}
	res := sameRestore(t, s, 1, 3)
	if res.Revision != 1 {
		t.Errorf("rank 1 restored revision %d; want 1", res.Revision)
	}
	pr, err := Prune(context.Background(), s, PruneOptions{Keep: 1})
	if err != nil || pr.DeletedRecords != 1 {
		t.Fatalf("Prune = %+v, %v; want the record that no longer holds deleted", pr, err)
	}
	if got := recordKeys(t, s, snapshotsPrefix); len(got) != 1 || got[0] == keys[0] {
		t.Errorf("records after prune %v; want the second one only", got)
	}
}

// TestPruneDeletesRecords: prune deletes a step's records with it, after
// its manifests, and records whose step has no manifests left; the kept
// steps keep theirs.
func TestPruneDeletesRecords(t *testing.T) {
	defer verifyNone(t)
	inner := mem.New()
	commitSteps(t, inner, 2, 4)
	orphan := recordKey(9, 2, "0123456789abcdef", LegacyLine, fixedTime, false)
	putBytes(t, inner, orphan, []byte("{}"))
	var order []string
	s := &mem.FaultStore{Inner: inner, OnDelete: func(ctx context.Context, key string) error {
		order = append(order, key)
		return inner.Delete(ctx, key)
	}}
	res, err := Prune(context.Background(), s, PruneOptions{Keep: 2})
	if err != nil || !slices.Equal(res.DeletedSteps, []int64{1, 2}) || res.DeletedRecords != 3 {
		t.Fatalf("Prune = %+v, %v; want steps 1 and 2 and three records deleted", res, err)
	}
	left := recordKeys(t, inner, snapshotsPrefix)
	if len(left) != 2 || !strings.HasPrefix(left[0], stepKeys(3)) || !strings.HasPrefix(left[1], stepKeys(4)) {
		t.Errorf("records left %v; want those of steps 3 and 4", left)
	}
	for _, step := range []int64{1, 2} {
		last := -1
		for i, k := range order {
			if _, _, ok := parseManifestKey(k); ok && strings.HasPrefix(k, stepPrefix(step)) {
				last = i
			}
		}
		for i, k := range order {
			if _, _, _, ok := parseRecordKey(k); ok && strings.HasPrefix(k, stepKeys(step)) && i < last {
				t.Errorf("step %d's record %s was deleted before its manifest %s", step, k, order[last])
			}
		}
	}
}

// TestRecordKeyRoundTrip: record keys parse back to what made them, and
// other keys under a step are not records.
func TestRecordKeyRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		line  string
		named bool
	}{{LegacyLine, false}, {"0123456789abcdef", true}} {
		k := recordKey(12, 1024, "00112233445566ff", tc.line, fixedTime, tc.named)
		step, n, rec, ok := parseRecordKey(k)
		if !ok || step != 12 || n != 1024 || rec.state != "00112233445566ff" || rec.line != tc.line || !rec.at.Equal(fixedTime) || rec.named != tc.named {
			t.Errorf("parseRecordKey(%s) = %d %d %+v %v", k, step, n, rec, ok)
		}
	}
	for _, k := range []string{
		"snapshots/00000000000000000012/rank-00000-of-00001.json",
		"snapshots/00000000000000000012/complete-of-00001-00112233445566ff-line-legacy-at-0000000000000000000.json", // inside the folder
		"snapshots/00000000000000000012-complete-of-00000-00112233445566ff-line-legacy-at-0000000000000000000.json",
		"snapshots/00000000000000000012-complete-of-00001-00112233445566FF-line-legacy-at-0000000000000000000.json",
		"snapshots/00000000000000000012-complete-of-00001-00112233445566ff-line-LEGACY-at-0000000000000000000.json",
		"snapshots/00000000000000000012-complete-of-00001-00112233445566ff-line-legacy-at-000000000000000000.json",
		"snapshots/00000000000000000012-complete-of-00001-00112233445566ff-line-legacy-at-0000000000000000000-x.json",
	} {
		if _, _, _, ok := parseRecordKey(k); ok {
			t.Errorf("parseRecordKey(%s) accepted it", k)
		}
	}
}

// fixedTime is a commit time for records made by hand.
var fixedTime = time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC)

// TestRecordOnEveryStore: on every backend (MinIO's listings give the
// store's times a writer and a reader must agree on), the ranks' commits,
// together, and a first restore leave one record per step that holds for
// a later listing, and every rank's restore then reads its own manifest
// only and takes what a full read takes.
func TestRecordOnEveryStore(t *testing.T) {
	defer verifyNone(t)
	allStores(t, func(t *testing.T, s storage.Store) {
		const n, steps = 8, 3
		// The ranks of a step commit together. On a store whose object
		// times are not the order in which objects appear (fs: a file's
		// time is its last write, before the rename that shows it; an S3
		// server's may be its PUT's start) the rank that lists last can
		// see a later time than its own and leave the record to a rank
		// that listed too early; the first restore that reads such a
		// step in full writes its record.
		commitSteps(t, s, n, steps)
		if _, err := RestoreLatest(context.Background(), s, 0, t.TempDir(), RestoreOptions{WorldSize: n, SkipFormatCheck: true}); err != nil {
			t.Fatal(err)
		}
		if got := recordKeys(t, s, snapshotsPrefix); len(got) != steps {
			t.Fatalf("records %v, want one per step", got)
		}
		_, reqs := restoreEveryRank(t, s, n)
		for r := range n {
			if reqs[r] > 3 {
				t.Errorf("rank %d made %d requests; want the listing of the steps, of the newest step's folder and its own manifest", r, reqs[r])
			}
			sameRestore(t, s, r, n)
		}
	})
}
