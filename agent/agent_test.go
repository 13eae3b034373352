package agent

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/lifeboat-project/lifeboat/checkpoint"
	"github.com/lifeboat-project/lifeboat/storage"
	"github.com/lifeboat-project/lifeboat/storage/mem"
	"github.com/lifeboat-project/lifeboat/watch"
)

// noWait retries up to 2 times without sleeping.
func noWait(attempt int) (time.Duration, bool) { return 0, attempt <= 2 }

// setup returns an agent over dir and store with a fast interval; settle
// is the watcher's settle time.
func setup(t *testing.T, dir string, s storage.Store, settle, interval time.Duration) *Agent {
	t.Helper()
	w, err := watch.New(watch.Config{Dir: dir, Settle: settle})
	if err != nil {
		t.Fatal(err)
	}
	a, err := New(Config{Dir: dir, Watcher: w, WorldSize: 1, Interval: interval,
		Uploader: &checkpoint.Uploader{Store: storage.Retry(s, storage.RetryPolicy{Backoff: noWait}), ChunkSize: 64 << 10}})
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func writeFile(t *testing.T, path string, size int, seed byte) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	b := make([]byte, size)
	for i := range b {
		b[i] = seed + byte(i*7)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// flushKey marks the context of a test's Flush: a FaultStore can then tell
// the final flush's requests from those of the background uploads.
type flushKey struct{}

func flushContext() context.Context { return context.WithValue(context.Background(), flushKey{}, true) }

func isFlush(ctx context.Context) bool { return ctx.Value(flushKey{}) != nil }

// holdBackground blocks a request of the background uploads while on is
// set, until its context ends (the final flush cancels an upload whose
// checkpoint changed since), and says on blocked that one is held.
func holdBackground(ctx context.Context, on *atomic.Bool, blocked chan<- struct{}) error {
	if !on.Load() || isFlush(ctx) {
		return nil
	}
	select {
	case blocked <- struct{}{}:
	default:
	}
	<-ctx.Done()
	return ctx.Err()
}

// waitHeld waits until a background upload is held by holdBackground.
func waitHeld(t *testing.T, blocked <-chan struct{}) {
	t.Helper()
	select {
	case <-blocked:
	case <-time.After(30 * time.Second):
		t.Fatal("no background upload started")
	}
}

// run starts a.Run and returns a stop function that waits for it.
func run(t *testing.T, a *Agent) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { a.Run(ctx); close(done) }()
	return func() { cancel(); <-done }
}

// waitFor polls cond; the limit guards against hangs only.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatalf("timed out waiting for %s", what)
}

func TestBackgroundUploadNewestWins(t *testing.T) {
	defer goleak.VerifyNone(t)
	dir, s := t.TempDir(), mem.New()
	for i, step := range []string{"step-1", "step-2", "step-3"} {
		writeFile(t, filepath.Join(dir, step, "model.bin"), 200<<10, byte(i))
	}
	a := setup(t, dir, s, time.Millisecond, 10*time.Millisecond)
	stop := run(t, a)
	defer stop()
	waitFor(t, "a commit", func() bool { return a.Stats().Commits == 1 })
	st := a.Stats()
	if st.LastStep != 3 || st.Superseded != 2 {
		t.Errorf("stats %+v: want step 3 committed, 2 superseded", st)
	}
	snaps, err := checkpoint.List(context.Background(), s)
	if err != nil || len(snaps) != 1 || snaps[0].Step != 3 {
		t.Errorf("store holds %+v, %v; want only step 3", snaps, err)
	}
	// A new checkpoint during training is uploaded too.
	writeFile(t, filepath.Join(dir, "step-4", "model.bin"), 200<<10, 9)
	waitFor(t, "step 4", func() bool { return a.Stats().LastStep == 4 })
	if latest, _ := checkpoint.Latest(context.Background(), s, 1); latest != 4 {
		t.Errorf("Latest = %d, want 4", latest)
	}
}

// TestFlushCommitsLastCheckpoint: a checkpoint written at SIGTERM (not yet
// settled) is committed by Flush, with its paths inside the directory.
func TestFlushCommitsLastCheckpoint(t *testing.T) {
	defer goleak.VerifyNone(t)
	dir, s := t.TempDir(), mem.New()
	a := setup(t, dir, s, time.Hour, time.Hour)
	stop := run(t, a)
	defer stop()
	writeFile(t, filepath.Join(dir, "backup", "latest.bin"), 300<<10, 1)
	if err := a.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	res, err := checkpoint.RestoreLatest(context.Background(), s, 0, out, checkpoint.RestoreOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want, _ := os.ReadFile(filepath.Join(dir, "backup", "latest.bin"))
	got, err := os.ReadFile(filepath.Join(out, "backup", "latest.bin"))
	if err != nil || string(got) != string(want) {
		t.Errorf("restored backup/latest.bin differs (%v)", err)
	}
	if res.Step != 0 {
		t.Errorf("counter step %d, want 0 for the first unnumbered checkpoint", res.Step)
	}
	if a.Flush(context.Background()) == nil {
		t.Errorf("a second Flush after the loop ended succeeded")
	}
}

// TestFlushDoesNotListChunks: the final upload after a stop uses what the
// background uploads learnt of the store's chunks instead of listing them
// again, and still stores the new checkpoint whole.
func TestFlushDoesNotListChunks(t *testing.T) {
	defer goleak.VerifyNone(t)
	dir, inner := t.TempDir(), mem.New()
	var lists atomic.Int64
	var hold atomic.Bool
	blocked := make(chan struct{}, 1)
	s := &mem.FaultStore{Inner: inner,
		OnList: func(ctx context.Context, prefix string, fn func(storage.ObjectInfo) error) error {
			if err := holdBackground(ctx, &hold, blocked); err != nil {
				return err
			}
			if strings.HasPrefix(prefix, "chunks/") && isFlush(ctx) {
				lists.Add(1)
			}
			return inner.List(ctx, prefix, fn)
		},
		OnPut: func(ctx context.Context, key string, r io.Reader, size int64, o storage.PutOptions) (storage.ObjectInfo, error) {
			if err := holdBackground(ctx, &hold, blocked); err != nil {
				return storage.ObjectInfo{}, err
			}
			return inner.Put(ctx, key, r, size, o)
		},
	}
	writeFile(t, filepath.Join(dir, "step-1", "model.bin"), 200<<10, 1)
	a := setup(t, dir, s, time.Millisecond, 10*time.Millisecond)
	stop := run(t, a)
	defer stop()
	waitFor(t, "step 1", func() bool { return a.Stats().LastStep == 1 })
	// The background upload of step 2 is held in flight, and step 2 is
	// saved again (as at a stop): the final flush cancels the stale upload
	// and uploads step 2 itself. Without the hold, a background upload
	// could store step 2 before the flush on a busy machine, and its
	// listing was counted as the flush's.
	hold.Store(true)
	writeFile(t, filepath.Join(dir, "step-2", "model.bin"), 200<<10, 2)
	waitHeld(t, blocked)
	writeFile(t, filepath.Join(dir, "step-2", "model.bin"), 210<<10, 3)
	if err := a.Flush(flushContext()); err != nil {
		t.Fatal(err)
	}
	if n := lists.Load(); n != 0 {
		t.Errorf("the final flush listed the store's chunks %d times, want 0", n)
	}
	out := t.TempDir()
	res, err := checkpoint.RestoreLatest(context.Background(), inner, 0, out, checkpoint.RestoreOptions{})
	if err != nil || res.Step != 2 {
		t.Fatalf("RestoreLatest = %+v, %v; want step 2", res, err)
	}
	want, _ := os.ReadFile(filepath.Join(dir, "step-2", "model.bin"))
	if got, err := os.ReadFile(filepath.Join(out, "step-2", "model.bin")); err != nil || string(got) != string(want) {
		t.Errorf("restored step-2/model.bin differs (%v)", err)
	}
}

// TestFlushFailureKeepsPrevious: when the store fails during the final
// upload, Flush says so and the previous commit stays the latest.
func TestFlushFailureKeepsPrevious(t *testing.T) {
	defer goleak.VerifyNone(t)
	dir, inner := t.TempDir(), mem.New()
	var fail atomic.Bool
	s := &mem.FaultStore{Inner: inner, OnPut: func(ctx context.Context, key string, r io.Reader, size int64, o storage.PutOptions) (storage.ObjectInfo, error) {
		if fail.Load() {
			return storage.ObjectInfo{}, errors.New("injected: connection reset")
		}
		return inner.Put(ctx, key, r, size, o)
	}}
	writeFile(t, filepath.Join(dir, "step-10", "model.bin"), 100<<10, 1)
	a := setup(t, dir, s, time.Millisecond, 10*time.Millisecond)
	stop := run(t, a)
	defer stop()
	waitFor(t, "step 10", func() bool { return a.Stats().LastStep == 10 })
	fail.Store(true)
	writeFile(t, filepath.Join(dir, "step-20", "model.bin"), 100<<10, 2)
	err := a.Flush(context.Background())
	if err == nil || !strings.Contains(err.Error(), "step 20") {
		t.Fatalf("Flush = %v, want a failure naming step 20", err)
	}
	if latest, _ := checkpoint.Latest(context.Background(), inner, 1); latest != 10 {
		t.Errorf("Latest = %d after a failed flush, want 10", latest)
	}
}

// TestRestoredIsNotUploadedAgain: the files a restore put back are
// recognised and not read or uploaded again.
func TestRestoredIsNotUploadedAgain(t *testing.T) {
	defer goleak.VerifyNone(t)
	src, s := t.TempDir(), mem.New()
	writeFile(t, filepath.Join(src, "step-5", "model.bin"), 100<<10, 3)
	u := &checkpoint.Uploader{Store: s, ChunkSize: 64 << 10}
	if _, err := u.UploadFiles(context.Background(), src, []string{"step-5/model.bin"}, checkpoint.Target{Step: 5, WorldSize: 1}); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	res, err := checkpoint.RestoreLatest(context.Background(), s, 0, dir, checkpoint.RestoreOptions{})
	if err != nil {
		t.Fatal(err)
	}
	a := setup(t, dir, s, time.Millisecond, 10*time.Millisecond)
	a.Restored(res.Step, manifestPaths(res.Manifest), time.Time{})
	stop := run(t, a)
	if err := a.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	stop()
	if st := a.Stats(); st.Commits != 0 || st.UploadedBytes+st.DedupedBytes != 0 || st.RestoredStep != 5 {
		t.Errorf("stats %+v: the restored checkpoint was handled again", st)
	}
}

func TestReserve(t *testing.T) {
	a, err := New(Config{Watcher: &watch.Watcher{}, Uploader: &checkpoint.Uploader{}, WorldSize: 1, AssumedThroughput: 100e6})
	if err != nil {
		t.Fatal(err)
	}
	a.stats.LastBytes = 400e6
	d, why := a.Reserve()
	if d != 6*time.Second || !strings.Contains(why, "assumed") {
		t.Errorf("Reserve = %s (%s), want 6s = 400 MB / 100 MB/s * 1.25 + 1s, assumed", d, why)
	}
	a.stats.Throughput = 200e6
	if d, why := a.Reserve(); d != 3500*time.Millisecond || !strings.Contains(why, "measured") {
		t.Errorf("Reserve = %s (%s), want 3.5s measured", d, why)
	}
}

func TestNewRejects(t *testing.T) {
	w := &watch.Watcher{}
	u := &checkpoint.Uploader{}
	for _, c := range []Config{{}, {Watcher: w, Uploader: u}, {Watcher: w, Uploader: u, WorldSize: 2, Rank: 2}, {Watcher: w, Uploader: u, WorldSize: 1, Keep: -1}} {
		if _, err := New(c); err == nil {
			t.Errorf("New(%+v) succeeded", c)
		}
	}
}

// TestRestoredInPlaceBackup: a restored backup/latest.bin (a
// checkpoint without a step in its name) is not uploaded again while
// unchanged, and becomes a new revision of the step it follows once the
// trainer overwrites it.
func TestRestoredInPlaceBackup(t *testing.T) {
	defer goleak.VerifyNone(t)
	src, s := t.TempDir(), mem.New()
	writeFile(t, filepath.Join(src, "backup", "latest.bin"), 50<<10, 3)
	u := &checkpoint.Uploader{Store: s, ChunkSize: 64 << 10}
	if _, err := u.UploadFiles(context.Background(), src, []string{"backup/latest.bin"}, checkpoint.Target{Step: 7, WorldSize: 1}); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	res, err := checkpoint.RestoreLatest(context.Background(), s, 0, dir, checkpoint.RestoreOptions{})
	if err != nil {
		t.Fatal(err)
	}
	w, _ := watch.New(watch.Config{Dir: dir, Settle: time.Millisecond})
	w.SetLastStep(res.Step)
	a, _ := New(Config{Dir: dir, Watcher: w, Uploader: u, WorldSize: 1, Interval: 5 * time.Millisecond})
	a.Restored(res.Step, manifestPaths(res.Manifest), time.Time{})
	stop := run(t, a)
	defer stop()
	time.Sleep(100 * time.Millisecond) // several scans: none may upload
	if st := a.Stats(); st.Commits != 0 {
		t.Fatalf("restored backup uploaded again: %+v", st)
	}
	writeFile(t, filepath.Join(dir, "backup", "latest.bin"), 60<<10, 4)
	waitFor(t, "the rewritten backup", func() bool { return a.Stats().Commits == 1 })
	if st := a.Stats(); st.LastStep != 7 {
		t.Errorf("rewritten backup committed as step %d, want 7 (a counter checkpoint follows the newest step)", st.LastStep)
	}
	snaps, err := checkpoint.List(context.Background(), s)
	if err != nil || len(snaps) != 1 || snaps[0].Ranks[0].Revision != 1 {
		t.Errorf("store holds %+v, %v; want step 7 at revision 1", snaps, err)
	}
}

// TestPanicInStoreIsContained: a store client that panics (wrapped with
// storage.Recover, as cmd/lifeboat does) fails uploads; the agent goes on,
// and Flush reports the failure instead of hanging or crashing.
func TestPanicInStoreIsContained(t *testing.T) {
	defer goleak.VerifyNone(t)
	dir := t.TempDir()
	s := storage.Recover(&mem.FaultStore{Inner: mem.New(), OnPut: func(context.Context, string, io.Reader, int64, storage.PutOptions) (storage.ObjectInfo, error) {
		panic("injected bug in a store")
	}})
	writeFile(t, filepath.Join(dir, "step-1", "model.bin"), 10<<10, 1)
	a := setup(t, dir, s, time.Millisecond, 5*time.Millisecond)
	stop := run(t, a)
	defer stop()
	waitFor(t, "a failed upload", func() bool { return a.Stats().Failures >= 1 })
	if st := a.Stats(); !strings.Contains(st.LastUploadError, "panic in the store client") {
		t.Errorf("last error %q, want the panic reported", st.LastUploadError)
	}
	writeFile(t, filepath.Join(dir, "step-2", "model.bin"), 10<<10, 2)
	if err := a.Flush(context.Background()); err == nil {
		t.Errorf("Flush succeeded with a panicking store")
	}
}

func manifestPaths(m *checkpoint.Manifest) []string {
	var out []string
	for _, f := range m.Files {
		out = append(out, f.Path)
	}
	return out
}
