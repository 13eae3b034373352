package checkpoint

import (
	"context"
	"errors"
	"testing"

	"github.com/lifeboat-project/lifeboat/storage"
)

// TestFenceHoldsTheManifest: the Uploader's Fence runs after the chunks
// are stored and before the manifest is written. An error from it (another
// live pod claims the rank) fails the upload with that error and writes no
// manifest; a Fence that lets it pass changes nothing.
func TestFenceHoldsTheManifest(t *testing.T) {
	stores(t, func(t *testing.T, s storage.Store) {
		ctx := context.Background()
		claimed := errors.New("another live pod claims this rank")
		u := newUploader(s, nil)
		calls := 0
		u.Fence = func(context.Context) error { calls++; return claimed }
		dir := t.TempDir()
		writeTree(t, dir, sampleTree(3))
		if _, err := u.Upload(ctx, dir, Target{Step: 7, WorldSize: 1}); !errors.Is(err, claimed) {
			t.Fatalf("Upload with the fence closed = %v, want its error", err)
		}
		if calls != 1 {
			t.Errorf("Fence called %d times, want 1", calls)
		}
		if keys := storedKeys(t, s, snapshotsPrefix); len(keys) != 0 {
			t.Fatalf("manifests written through a closed fence: %v", keys)
		}
		u.Fence = func(context.Context) error { return nil }
		res, err := u.Upload(ctx, dir, Target{Step: 7, WorldSize: 1})
		if err != nil || res.Revision != 0 {
			t.Fatalf("Upload with the fence open = %+v, %v; want revision 0", res, err)
		}
	})
}
