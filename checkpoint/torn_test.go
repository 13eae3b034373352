package checkpoint

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/lifeboat-project/lifeboat/storage"
)

// TestTornRevisionNeverRestored: step 10's revision 1 is marked torn by
// its writer (a file of it grew after the commit). Readers treat it as
// corrupt: ls shows why, Latest and RestoreLatest fall back to step 5,
// Restore of step 10 refuses it, and prune keeps no Keep for it. Once
// revision 2 (the whole save) is committed, step 10 is restorable again.
// A prune that deletes step 10 deletes its torn mark too.
func TestTornRevisionNeverRestored(t *testing.T) {
	defer verifyNone(t)
	stores(t, func(t *testing.T, s storage.Store) {
		ctx := context.Background()
		u := newUploader(s, nil)
		uploadTarget(t, u, Target{Step: 5, WorldSize: 1}, rankTree(0, 5))
		piece := tree{"model.bin": []byte("the first half")}
		uploadTarget(t, u, Target{Step: 10, WorldSize: 1}, tree{"model.bin": []byte("the first")})
		if res := uploadTarget(t, u, Target{Step: 10, WorldSize: 1}, piece); res.Revision != 1 {
			t.Fatalf("second piece committed as revision %d, want 1", res.Revision)
		}
		target := Target{Step: 10, WorldSize: 1}
		for range 2 { // twice: harmless
			if err := MarkTorn(ctx, s, target, 1, "model.bin grew"); err != nil {
				t.Fatal(err)
			}
		}
		sn := snapshotOf(t, s, 10, 1)
		if sn.Complete || sn.Restorable() || len(sn.Ranks) != 1 || !errors.Is(sn.Ranks[0].Err, ErrTorn) {
			t.Errorf("List: step 10 %+v; want not restorable, rank 0 torn", sn)
		}
		if step, err := Latest(ctx, s, 1); err != nil || step != 5 {
			t.Errorf("Latest = %d, %v; want 5", step, err)
		}
		res, err := RestoreLatest(ctx, s, 0, t.TempDir(), RestoreOptions{WorldSize: 1})
		if err != nil || res.Step != 5 || len(res.Fallbacks) != 1 || !errors.Is(res.Fallbacks[0].Err, ErrTorn) {
			t.Errorf("RestoreLatest = %+v, %v; want step 5 after falling back past the torn step 10", res, err)
		}
		if _, err := Restore(ctx, s, 10, 0, t.TempDir(), RestoreOptions{WorldSize: 1}); !errors.Is(err, ErrTorn) {
			t.Errorf("Restore of step 10 = %v, want ErrTorn", err)
		}
		if rep, err := Verify(ctx, s, 10, VerifyOptions{ReadData: ReadAll}); err != nil || len(rep.Problems) != 1 || rep.Problems[0].Kind != BadManifest || !strings.Contains(rep.Problems[0].Detail, "still being written") {
			t.Errorf("Verify of step 10 = %+v, %v; want the torn revision a bad manifest, as a restore refuses it", rep, err)
		}
		pr, err := Prune(ctx, s, PruneOptions{Keep: 1, DryRun: true})
		if err != nil || len(pr.Kept) != 1 || pr.Kept[0] != 5 {
			t.Errorf("prune keeps %+v, %v; want step 5 (the torn step counts toward no Keep)", pr, err)
		}

		whole := tree{"model.bin": []byte("the first half and the rest")}
		if res := uploadTarget(t, u, target, whole); res.Revision != 2 {
			t.Fatalf("the whole save committed as revision %d, want 2", res.Revision)
		}
		out := t.TempDir()
		if res, err := RestoreLatest(ctx, s, 0, out, RestoreOptions{WorldSize: 1}); err != nil || res.Step != 10 || res.Revision != 2 {
			t.Fatalf("RestoreLatest after the whole save = %+v, %v; want step 10 revision 2", res, err)
		}
		checkTree(t, out, whole)

		uploadTarget(t, u, Target{Step: 20, WorldSize: 1}, rankTree(0, 20))
		later := func() time.Time { return time.Now().Add(2 * DefaultSafetyWindow) }
		if _, err := Prune(ctx, s, PruneOptions{Keep: 1, Clock: later}); err != nil {
			t.Fatal(err)
		}
		var left []string
		_ = s.List(ctx, snapshotsPrefix, func(oi storage.ObjectInfo) error {
			if strings.HasSuffix(oi.Key, tornSuffix) || !strings.HasPrefix(oi.Key, stepKeys(20)) {
				left = append(left, oi.Key)
			}
			return nil
		})
		if len(left) != 0 {
			t.Errorf("after the prune the store still holds %v; want step 20 only, no torn mark", left)
		}
	})
}
