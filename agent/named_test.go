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

// TestNamedStepNotSupersededByCounter: a named
// step and a counter checkpoint (backup/latest.bin) are complete at once.
// The named step is committed, never superseded. The counter one is
// dropped when it was written before the named step (row 4) or is that
// save's copy, byte for byte, whether it completes in the same scan or a
// later one (row 3: a trainer that refreshes backup/latest at each
// numbered save); with other content written after the named step (a
// SIGTERM save a few steps later, even within --settle) it is committed
// after it, as its revision. On the code before, the counter one was
// taken as the newest, numbered with the named step's number, and the
// named step was never uploaded; a copy completing later was committed as
// a revision.
func TestNamedStepNotSupersededByCounter(t *testing.T) {
	defer goleak.VerifyNone(t)
	// Between two writes whose order matters: longer than any file system
	// timestamp granularity, so the later write has the later time.
	const apart = 50 * time.Millisecond
	for _, tc := range []struct {
		name      string
		write     func(t *testing.T, named, counter func())
		seed      byte   // the counter's content: 200 is the named step's
		laterScan bool   // the named step is committed before the counter appears
		wantRevs  []bool // committed revisions of step 200: counter or not
	}{
		{"counter written before the named step", func(t *testing.T, named, counter func()) {
			counter()
			time.Sleep(apart)
			named()
		}, 150, false, []bool{false}},
		{"counter refreshed with the named step, same content", func(t *testing.T, named, counter func()) {
			named()
			time.Sleep(apart)
			counter()
		}, 200, false, []bool{false}},
		{"counter saved after the named step, newer content", func(t *testing.T, named, counter func()) {
			named()
			time.Sleep(apart)
			counter()
		}, 203, false, []bool{false, true}},
		{"copy completing in a later scan", nil, 200, true, []bool{false}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir, s := t.TempDir(), mem.New()
			counter := func() { writeFile(t, filepath.Join(dir, "backup", "latest.bin"), 1000, tc.seed) }
			named := func() { writeFile(t, filepath.Join(dir, "step-000200", "model.bin"), 1000, 200) }
			a := setup(t, dir, s, time.Millisecond, 5*time.Millisecond)
			if tc.laterScan {
				named()
			} else {
				tc.write(t, named, counter)
			}
			stop := run(t, a)
			if tc.laterScan {
				waitFor(t, "step 200 committed", func() bool { return a.Stats().Commits == 1 })
				time.Sleep(apart)
				counter()
			}
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
