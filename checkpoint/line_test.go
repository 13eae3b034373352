package checkpoint

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lifeboat-project/lifeboat/storage/mem"
)

// TestFutureCreatedNotTrusted (issue row 6): one pod's clock runs an hour
// ahead and commits step 400; its replacement, with the right clock,
// commits 500, 600 and 700. Latest, RestoreLatest and Prune take 700 as
// the newest and keep it, in the legacy line (ordered by commit time) as
// in a line of work (ordered by step), and the future time is logged. On
// the code before, the three ordered by created alone: the next pod
// resumed 400 and its prune deleted 700.
func TestFutureCreatedNotTrusted(t *testing.T) {
	defer verifyNone(t)
	for _, line := range []string{LegacyLine, "0123456789abcdef"} {
		t.Run(ShortLine(line), func(t *testing.T) {
			ctx := context.Background()
			clock := newFakeClock()
			s := mem.New(mem.WithClock(clock.Now)) // the store's clock is right
			ahead := newFakeClock()
			ahead.now = clock.Now().Add(time.Hour)
			uploadTarget(t, newUploader(s, ahead), Target{Step: 400, WorldSize: 1, Line: line}, rankTree(0, 400))
			u := newUploader(s, clock)
			for _, step := range []int64{500, 600, 700} {
				clock.Advance(time.Minute)
				uploadTarget(t, u, Target{Step: step, WorldSize: 1, Line: line}, rankTree(0, step))
			}
			if step, err := Latest(ctx, s, 1); err != nil || step != 700 {
				t.Errorf("Latest = %d, %v; want 700", step, err)
			}
			// The steps' records carry their trusted commit times; read
			// in full, the manifests tell the same, and the future
			// created time is logged.
			dropRecords(t, s)
			if step, err := Latest(ctx, s, 1); err != nil || step != 700 {
				t.Errorf("Latest without records = %d, %v; want 700", step, err)
			}
			var logs bytes.Buffer
			log := slog.New(slog.NewJSONHandler(&logs, nil))
			out := t.TempDir()
			if res, err := RestoreLatest(ctx, s, 0, out, RestoreOptions{WorldSize: 1, Log: log}); err != nil || res.Step != 700 {
				t.Fatalf("RestoreLatest = %+v, %v; want step 700", res, err)
			}
			if !strings.Contains(logs.String(), `"msg":"checkpoint.future_created"`) {
				t.Errorf("no checkpoint.future_created logged:\n%s", logs.String())
			}
			res, err := Prune(ctx, s, PruneOptions{Keep: 3, Clock: clock.Now})
			if err != nil || !slices.Equal(res.Kept, []int64{700, 600, 500}) || !slices.Equal(res.DeletedSteps, []int64{400}) {
				t.Errorf("Prune = %+v, %v; want 700, 600, 500 kept and 400 deleted", res, err)
			}
		})
	}
}

// TestWithinALineByStep: within a line of work, the higher step is the
// newer whatever the times say; lines are ordered by when they were last
// committed. A run of line A commits 100, 200; a fresh run of line B
// commits 10 and 20 after them; then a pod of line A with a clock behind
// commits 300. A is the line committed last and 300 its newest.
func TestWithinALineByStep(t *testing.T) {
	defer verifyNone(t)
	ctx := context.Background()
	clock := newFakeClock()
	s := mem.New(mem.WithClock(clock.Now))
	u := newUploader(s, clock)
	const a, b = "aaaaaaaaaaaaaaaa", "bbbbbbbbbbbbbbbb"
	for _, st := range []Target{{Step: 100, Line: a}, {Step: 200, Line: a}, {Step: 10, Line: b}, {Step: 20, Line: b}} {
		st.WorldSize = 1
		clock.Advance(time.Minute)
		uploadTarget(t, u, st, rankTree(0, st.Step))
	}
	if step, err := Latest(ctx, s, 1); err != nil || step != 20 {
		t.Errorf("Latest = %d, %v; want 20 (line B, committed last)", step, err)
	}
	clock.Advance(time.Minute)
	behind := newFakeClock()
	behind.now = clock.Now().Add(-time.Hour)
	uploadTarget(t, newUploader(s, behind), Target{Step: 300, WorldSize: 1, Line: a}, rankTree(0, 300))
	// 300's created is an hour old, but its line's newest commit time is
	// 200's, still before B's: B stays first. Within A, 300 is first.
	snaps, err := List(ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	if n := Newest(snaps, 1); n == nil || n.Step != 20 || n.Line != b {
		t.Errorf("Newest = %+v; want step 20 of line B", n)
	}
	clock.Advance(time.Minute)
	uploadTarget(t, u, Target{Step: 400, WorldSize: 1, Line: a}, rankTree(0, 400))
	if step, err := Latest(ctx, s, 1); err != nil || step != 400 {
		t.Errorf("Latest = %d, %v; want 400", step, err)
	}
	res, err := Prune(ctx, s, PruneOptions{Keep: 2, Clock: clock.Now, DryRun: true})
	if err != nil || !slices.Equal(res.Kept, []int64{400, 300}) {
		t.Errorf("Prune kept %v, %v; want 400 and 300", res.Kept, err)
	}
	if !slices.Equal(res.DeletedLines[a], []int64{100, 200}) || !slices.Equal(res.DeletedLines[b], []int64{10, 20}) {
		t.Errorf("Prune deletes from lines %v; want A's 100, 200 and B's 10, 20", res.DeletedLines)
	}
}

// TestLinePruneKeepsOtherLines (issue rows 1, 2 and 5): the store holds a
// job's line A: step 100 of world size 2, and steps 4000 and 5000 of
// world size 1, where 5000 did not fit the new pod's volume. The new pod
// fell back past 5000, restored 4000 and continued line A; another
// started fresh (line B, world size 1). Each prunes with Keep 1 after
// every commit. Line A's pod never deletes 5000 (it could not restore
// it) nor the 2-rank step; line B's deletes nothing of line A. Each keeps
// its own newest.
func TestLinePruneKeepsOtherLines(t *testing.T) {
	defer verifyNone(t)
	ctx := context.Background()
	clock := newFakeClock()
	s := mem.New(mem.WithClock(clock.Now))
	u := newUploader(s, clock)
	const a = "aaaaaaaaaaaaaaaa"
	for rank := range 2 {
		uploadTarget(t, u, Target{Step: 100, Rank: rank, WorldSize: 2, Line: a}, rankTree(rank, 100))
	}
	for _, step := range []int64{4000, 5000} {
		clock.Advance(time.Minute)
		uploadTarget(t, u, Target{Step: step, WorldSize: 1, Line: a}, rankTree(0, step))
	}
	scopeA := Continue(&RestoreResult{Step: 4000, Line: a, Manifest: &Manifest{WorldSize: 1},
		Fallbacks: []Fallback{{Step: 5000, WorldSize: 1, Line: a, Err: ErrTooBig}}}, 1)
	if scopeA.Line != a {
		t.Fatalf("a run that restored line A continues line %q", scopeA.Line)
	}
	scopeB := Continue(nil, 1)
	if scopeB.Line == a || CheckLine(scopeB.Line) != nil || scopeB.Line == LegacyLine {
		t.Fatalf("a fresh start's line is %q", scopeB.Line)
	}
	for i, step := range []int64{4010, 4020, 4030} {
		clock.Advance(time.Minute)
		uploadTarget(t, u, Target{Step: step, WorldSize: 1, Line: a}, rankTree(0, step))
		res, err := Prune(ctx, s, PruneOptions{Keep: 1, Clock: clock.Now, Line: &scopeA})
		if err != nil || !slices.Equal(res.Kept, []int64{step}) {
			t.Fatalf("line A's prune after %d: %+v, %v; want %d kept", step, res, err, step)
		}
		clock.Advance(time.Minute)
		stepB := int64(10 * (i + 1))
		uploadTarget(t, u, Target{Step: stepB, WorldSize: 1, Line: scopeB.Line}, rankTree(0, stepB))
		res, err = Prune(ctx, s, PruneOptions{Keep: 1, Clock: clock.Now, Line: &scopeB})
		if err != nil || !slices.Equal(res.Kept, []int64{stepB}) {
			t.Fatalf("line B's prune after %d: %+v, %v; want %d kept", stepB, res, err, stepB)
		}
		for l := range res.DeletedLines {
			if l != scopeB.Line {
				t.Errorf("line B's prune deleted from line %q: %v", ShortLine(l), res.DeletedLines)
			}
		}
	}
	snaps, err := List(ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	var have []string
	for _, sn := range snaps {
		l := "B"
		if sn.Line == a {
			l = "A"
		}
		have = append(have, fmt.Sprintf("%s:%d/%d", l, sn.Step, sn.WorldSize))
	}
	want := []string{"A:100/2", "A:4030/1", "A:5000/1", "B:30/1"}
	slices.Sort(have)
	slices.Sort(want)
	if !slices.Equal(have, want) {
		t.Errorf("store holds %v, want %v", have, want)
	}
}

// TestLinePruneSupersedesLegacy: a run restored step 300 of a store
// written before lines (legacy manifests) and committed 310, 320, 330 in
// its new line; with Keep 3 its prune deletes the legacy steps up to 300,
// which its line continued, and never the legacy step 400 above it.
func TestLinePruneSupersedesLegacy(t *testing.T) {
	defer verifyNone(t)
	ctx := context.Background()
	clock := newFakeClock()
	s := mem.New(mem.WithClock(clock.Now))
	u := newUploader(s, clock)
	for _, step := range []int64{100, 200, 300, 400} {
		clock.Advance(time.Minute)
		uploadTarget(t, u, Target{Step: step, WorldSize: 1}, rankTree(0, step))
	}
	sc := Continue(&RestoreResult{Step: 300, Line: LegacyLine, Manifest: &Manifest{WorldSize: 1}}, 1)
	if sc.Line == LegacyLine || sc.From == nil || sc.From.Step != 300 {
		t.Fatalf("scope after restoring a legacy step: %+v", sc)
	}
	for _, step := range []int64{310, 320, 330} {
		clock.Advance(time.Minute)
		uploadTarget(t, u, Target{Step: step, WorldSize: 1, Line: sc.Line}, rankTree(0, step))
		if _, err := Prune(ctx, s, PruneOptions{Keep: 3, Clock: clock.Now, Line: &sc}); err != nil {
			t.Fatal(err)
		}
	}
	snaps, err := List(ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	all, _ := stepsOf(snaps, 1)
	if !slices.Equal(all, []int64{310, 320, 330, 400}) {
		t.Errorf("store holds steps %v, want 310, 320, 330 and legacy 400", all)
	}
}

// TestLinePruneDuringRestore: a pod restores line A's newest step while a
// pod of line B (a fresh start beside it) commits and prunes with Keep 1,
// at the moment the restore has read the manifest and fetches its first
// chunk. The prune deletes nothing of line A (on the code before, the
// newer line B's prune deleted A's step, and its chunks once old enough),
// and the restore completes.
func TestLinePruneDuringRestore(t *testing.T) {
	defer verifyNone(t)
	ctx := context.Background()
	clock := newFakeClock()
	inner := mem.New(mem.WithClock(clock.Now))
	u := newUploader(inner, clock)
	const a = "aaaaaaaaaaaaaaaa"
	want := sampleTree(5)
	uploadTarget(t, u, Target{Step: 500, WorldSize: 1, Line: a}, want)
	clock.Advance(7 * time.Hour) // A's chunks are older than the window
	scopeB := Continue(nil, 1)
	bDir := t.TempDir()
	writeTree(t, bDir, rankTree(0, 10))
	var pruned *PruneResult
	var once sync.Once // the chunks are fetched by several workers at once
	f := &mem.FaultStore{Inner: inner}
	f.OnGet = func(ctx context.Context, key string, offset, length int64) (io.ReadCloser, error) {
		if strings.HasPrefix(key, "chunks/") {
			once.Do(func() {
				// Not uploadTarget: t.Fatal must not run on a worker.
				if _, err := u.Upload(ctx, bDir, Target{Step: 10, WorldSize: 1, Line: scopeB.Line}); err != nil {
					t.Errorf("line B's upload: %v", err)
				}
				var err error
				if pruned, err = Prune(ctx, inner, PruneOptions{Keep: 1, Clock: clock.Now, Line: &scopeB}); err != nil {
					t.Errorf("Prune: %v", err)
				}
			})
		}
		return inner.Get(ctx, key, offset, length)
	}
	dir := t.TempDir()
	res, err := RestoreLatest(ctx, retried(f), 0, dir, RestoreOptions{WorldSize: 1})
	if err != nil || res.Step != 500 || res.Line != a {
		t.Fatalf("RestoreLatest = %+v, %v; want line A's step 500", res, err)
	}
	checkTree(t, dir, want)
	if pruned == nil || len(pruned.DeletedSteps) != 0 || pruned.DeletedChunks != 0 {
		t.Errorf("line B's prune during the restore: %+v; want nothing deleted", pruned)
	}
}

// TestLateCommitNotNewest: two pods of one job overlap.
// The preempted pod A began its final upload of step 50 at T; its
// replacement B restored 40 and committed 45 and 50 (T+5m, T+10m). A's
// upload commits afterwards: it is not stored as a revision over B's
// (checkpoint.late_commit), the newest stays B's step 50, and B's prune
// with Keep 1 keeps it. On the code before, A's files became revision 1
// of step 50, the newest, and B's work was gone.
func TestLateCommitNotNewest(t *testing.T) {
	defer verifyNone(t)
	ctx := context.Background()
	clock := newFakeClock()
	s := mem.New(mem.WithClock(clock.Now))
	const line = "0123456789abcdef"
	b := newUploader(s, clock)
	uploadTarget(t, b, Target{Step: 40, WorldSize: 1, Line: line}, rankTree(0, 40))
	clock.Advance(time.Hour)
	startA := newFakeClock()
	startA.now = clock.Now() // A's upload starts now, and its clock agrees
	aDir := t.TempDir()
	writeTree(t, aDir, tree{"shard-0.bin": []byte("pod A's step 50")})
	clock.Advance(5 * time.Minute)
	uploadTarget(t, b, Target{Step: 45, WorldSize: 1, Line: line}, rankTree(0, 45))
	clock.Advance(5 * time.Minute)
	bTree := tree{"shard-0.bin": []byte("pod B's step 50")}
	uploadTarget(t, b, Target{Step: 50, WorldSize: 1, Line: line}, bTree)
	clock.Advance(time.Minute)
	var logs bytes.Buffer
	a := newUploader(s, startA)
	a.Log = slog.New(slog.NewJSONHandler(&logs, nil))
	res, err := a.Upload(ctx, aDir, Target{Step: 50, WorldSize: 1, Line: line})
	if err != nil || !res.Late || res.Revision != 0 {
		t.Fatalf("pod A's late upload = %+v, %v; want Late, B's revision 0 standing", res, err)
	}
	if !strings.Contains(logs.String(), `"msg":"checkpoint.late_commit"`) {
		t.Errorf("no checkpoint.late_commit logged:\n%s", logs.String())
	}
	out := t.TempDir()
	if r, err := RestoreLatest(ctx, s, 0, out, RestoreOptions{WorldSize: 1}); err != nil || r.Step != 50 || r.Revision != 0 {
		t.Fatalf("RestoreLatest = %+v, %v; want B's step 50", r, err)
	}
	checkTree(t, out, bTree)
	sc := LineScope{Line: line, WorldSize: 1}
	if pr, err := Prune(ctx, s, PruneOptions{Keep: 1, Clock: clock.Now, Line: &sc}); err != nil || !slices.Equal(pr.Kept, []int64{50}) {
		t.Errorf("B's prune = %+v, %v; want step 50 kept", pr, err)
	}
}
