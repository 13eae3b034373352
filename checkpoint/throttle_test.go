package checkpoint

import (
	"context"
	cryptorand "crypto/rand"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lifeboat-project/lifeboat/internal/testenv"
	"github.com/lifeboat-project/lifeboat/storage"
	"github.com/lifeboat-project/lifeboat/storage/s3"
)

// TestThrottledJobRestore: S3 throttles a busy prefix with 503 SlowDown.
// A 32-rank job restores through a server that refuses every request
// twice before it serves it (the listings, every rank's manifests, each
// rank's chunks, and opening the store): every rank resumes the same
// newest committed step, each with its own files, and none reads the
// throttling as no checkpoint. A server that refuses every request fails
// the restore with the server's answer, never ErrNoCheckpoint or
// ErrNothingRestorable (a fresh start); a prune through it deletes
// nothing, and a prune through the twice-refusing one keeps the newest
// step whole.
func TestThrottledJobRestore(t *testing.T) {
	m := testenv.RequireMinIO(t)
	ctx := context.Background()
	const ranks = 32
	prefix := "throttle-" + strings.ToLower(cryptorand.Text()[:12])
	retries := storage.RetryPolicy{Backoff: storage.ExponentialBackoff(time.Millisecond, 20*time.Millisecond, 8)}
	open := func(t *testing.T, endpoint string) (storage.Store, error) {
		var s storage.Store
		err := retries.Do(ctx, "open", endpoint, func() (err error) {
			s, err = s3.New(ctx, s3.Config{Endpoint: endpoint, Bucket: "lifeboat-test", Prefix: prefix, AccessKey: m.AccessKey, SecretKey: m.SecretKey,
				CreateBucket: true, BucketLookup: s3.LookupPath, RequestAttempts: 1})
			return err
		})
		if err != nil {
			return nil, err
		}
		return storage.Retry(s, retries), nil
	}
	direct, err := open(t, m.Endpoint)
	if err != nil {
		t.Fatal(err)
	}
	files := func(step int64, rank int) tree {
		seed := uint64(step)*1000 + uint64(rank)
		return tree{"model.pdparams": pickleOf(randomBytes(seed, 3*testChunk+7)), "meta.json": []byte(`{"rank":` + strings.Repeat("1", rank%3+1) + `}`)}
	}
	u := newUploader(direct, nil)
	for _, step := range []int64{1, 2} {
		for r := range ranks {
			upload(t, u, step, r, ranks, files(step, r))
		}
	}

	sd := testenv.NewSlowDown(t, m, 2)
	throttled, err := open(t, sd.URL) // for the prunes below
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	dirs, results, errs := make([]string, ranks), make([]*RestoreResult, ranks), make([]error, ranks)
	for r := range ranks {
		dirs[r] = t.TempDir()
		wg.Go(func() {
			s, err := open(t, sd.URL)
			if err != nil {
				errs[r] = err
				return
			}
			results[r], errs[r] = RestoreLatest(ctx, s, r, dirs[r], RestoreOptions{WorldSize: ranks})
		})
	}
	wg.Wait()
	for r := range ranks {
		if errs[r] != nil {
			t.Fatalf("rank %d: %v", r, errs[r])
		}
		if res := results[r]; res.Step != 2 || len(res.Fallbacks) != 0 {
			t.Fatalf("rank %d restored step %d with fallbacks %v, want step 2", r, res.Step, res.Fallbacks)
		}
		checkTree(t, dirs[r], files(2, r))
	}
	if n := sd.Refused.Load(); n < 2*ranks {
		t.Errorf("the server refused %d requests; want each rank's own at least", n)
	}

	sd.SetRefusals(-1)
	s, err := open(t, sd.URL)
	if err == nil {
		_, err = RestoreLatest(ctx, s, 0, t.TempDir(), RestoreOptions{WorldSize: ranks})
	}
	if err == nil || errors.Is(err, ErrNoCheckpoint) || errors.Is(err, ErrNothingRestorable) || !strings.Contains(err.Error(), "503") {
		t.Errorf("restore through a server that throttles everything: %v; want its 503, not a fresh start", err)
	}
	if _, err := Prune(ctx, throttled, PruneOptions{Keep: 1}); err == nil {
		t.Error("prune through a server that throttles everything succeeded")
	}
	if got := storedKeys(t, direct, snapshotsPrefix); len(got) != 2*ranks {
		t.Errorf("the store holds %d manifests after the throttled prune, want all %d", len(got), 2*ranks)
	}

	sd.SetRefusals(4) // two more for each request seen twice already
	if _, err := Prune(ctx, throttled, PruneOptions{Keep: 1}); err != nil {
		t.Fatalf("prune through the throttling server: %v", err)
	}
	if step, err := Latest(ctx, direct, ranks); err != nil || step != 2 {
		t.Errorf("after the throttled prune the latest step is %d (%v), want 2", step, err)
	}
}
