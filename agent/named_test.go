package agent

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/lifeboat-project/lifeboat/checkpoint"
	"github.com/lifeboat-project/lifeboat/storage/mem"
)

// TestNamedStepNotSupersededByCounter (issue 36 rows 3 and 4): a named
// step and a counter checkpoint (backup/latest.bin) are complete in one
// scan. The named step is committed, never superseded: the counter one
// is dropped when it is that save's copy or older (written before the
// named step), and committed after it, as its revision, when it changed
// later than the settle time after it (a SIGTERM save). On the code
// before, the counter one was taken as the newest, numbered with the
// named step's number, and the named step was never uploaded.
func TestNamedStepNotSupersededByCounter(t *testing.T) {
	defer goleak.VerifyNone(t)
	const settle = time.Second
	for _, tc := range []struct {
		name         string
		counterFirst bool          // backup/ written before step-000200/ (row 4)
		gap          time.Duration // between the two writes
		wantRevs     []bool        // committed revisions of step 200: counter or not
	}{
		{"counter written before the named step", true, 0, []bool{false}},
		{"counter refreshed with the named step", false, 0, []bool{false}},
		{"counter saved after the named step", false, settle + 100*time.Millisecond, []bool{false, true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir, s := t.TempDir(), mem.New()
			counter := func() { writeFile(t, filepath.Join(dir, "backup", "latest.bin"), 1000, 150) }
			named := func() { writeFile(t, filepath.Join(dir, "step-000200", "model.bin"), 1000, 200) }
			if tc.counterFirst {
				counter()
				named()
			} else {
				named()
				time.Sleep(tc.gap)
				counter()
			}
			a := setup(t, dir, s, time.Millisecond, time.Hour)
			a.cfg.Settle = settle
			stop := run(t, a)
			err := a.Flush(context.Background())
			stop()
			if err != nil {
				t.Fatal(err)
			}
			snaps, err := checkpoint.List(context.Background(), s)
			if err != nil || len(snaps) != 1 || snaps[0].Step != 200 {
				t.Fatalf("store holds %+v, %v; want step 200 only", snaps, err)
			}
			if got := snaps[0].Revision + 1; got != len(tc.wantRevs) || snaps[0].Counter != tc.wantRevs[len(tc.wantRevs)-1] {
				t.Errorf("step 200 has %d revisions, the highest counter=%v; want %d, counter=%v", got, snaps[0].Counter, len(tc.wantRevs), tc.wantRevs[len(tc.wantRevs)-1])
			}
		})
	}
}
