package checkpoint

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/lifeboat-project/lifeboat/storage"
	"github.com/lifeboat-project/lifeboat/storage/mem"
)

// save is one commit of a TestNewestEveryReader store: ranks (nil: every
// rank) of step of worldSize in line, a counter checkpoint with counter,
// by a pod whose clock is off by skew. The store's clock advances a minute
// before each.
type save struct {
	step      int64
	worldSize int
	line      string
	ranks     []int
	counter   bool
	skew      time.Duration
}

// TestNewestEveryReader: every reader of "the newest complete step" gives
// the same answer for world size 1, 2 and any (0), with the completion
// records the commits wrote and again with them removed: Latest (one
// listing, judged by the records where they hold), Newest over List
// (doctor, --restore never, the store's newest a local checkpoint is
// compared with, a fresh start over progress), NewestByWorldSize (the
// other world sizes a fresh start names) and RestoreLatest (restore and
// resume; with AllRanks for any world size). The stores cover lines of
// work, the legacy line, clocks that disagree with step order, world
// sizes, a newer step missing a rank, counter checkpoints that cannot be
// paired and named revisions beneath counter ones.
func TestNewestEveryReader(t *testing.T) {
	defer verifyNone(t)
	const a, b = "aaaaaaaaaaaaaaaa", "bbbbbbbbbbbbbbbb"
	for _, tc := range []struct {
		name  string
		saves []save
		want  map[int]int64 // by world size (0: any): the newest step, -1 for none
	}{
		{"empty store", nil, map[int]int64{0: -1, 1: -1, 2: -1}},
		{"within a line by step", []save{{step: 300, worldSize: 1, line: a}, {step: 200, worldSize: 1, line: a}, {step: 400, worldSize: 1, line: a, skew: -time.Hour}},
			map[int]int64{0: 400, 1: 400, 2: -1}},
		{"the line committed last", []save{{step: 9000, worldSize: 1, line: a}, {step: 100, worldSize: 1, line: b}},
			map[int]int64{0: 100, 1: 100, 2: -1}},
		{"a future created time is not trusted", []save{{step: 100, worldSize: 1, line: b, skew: time.Hour}, {step: 9000, worldSize: 1, line: a}},
			map[int]int64{0: 9000, 1: 9000, 2: -1}},
		{"the legacy line by commit time", []save{{step: 9000, worldSize: 1}, {step: 100, worldSize: 1}},
			map[int]int64{0: 100, 1: 100, 2: -1}},
		{"world sizes of two lines", []save{{step: 5020, worldSize: 2, line: a}, {step: 5031, worldSize: 2, line: a}, {step: 10, worldSize: 1, line: b}},
			map[int]int64{0: 10, 1: 10, 2: 5031}},
		{"two lines of one world size", []save{{step: 9000, worldSize: 2, line: a}, {step: 100, worldSize: 2, line: b}},
			map[int]int64{0: 100, 1: -1, 2: 100}},
		// A line is ordered by its last commit of any world size, and
		// within it the higher step is the newer.
		{"a line's last commit of another world size", []save{{step: 9000, worldSize: 2, line: a}, {step: 100, worldSize: 2, line: b}, {step: 50, worldSize: 1, line: a}},
			map[int]int64{0: 9000, 1: 50, 2: 9000}},
		{"world sizes of one line", []save{{step: 100, worldSize: 2, line: a}, {step: 200, worldSize: 1, line: a}},
			map[int]int64{0: 200, 1: 200, 2: 100}},
		{"a newer step missing a rank", []save{{step: 100, worldSize: 2, line: a}, {step: 200, worldSize: 2, line: a, ranks: []int{0}}},
			map[int]int64{0: 100, 1: -1, 2: 100}},
		{"counter ranks that cannot be paired", []save{{step: 100, worldSize: 2, line: a}, {step: 200, worldSize: 2, line: a, ranks: []int{0}},
			{step: 200, worldSize: 2, line: a, ranks: []int{1}, counter: true}},
			map[int]int64{0: 100, 1: -1, 2: 100}},
		{"named revisions beneath a counter one", []save{{step: 100, worldSize: 2, line: a}, {step: 200, worldSize: 2, line: a},
			{step: 200, worldSize: 2, line: a, ranks: []int{0}, counter: true}},
			map[int]int64{0: 200, 1: -1, 2: 200}},
		{"a counter checkpoint of one rank", []save{{step: 300, worldSize: 1, line: a}, {step: 300, worldSize: 1, line: a, counter: true}},
			map[int]int64{0: 300, 1: 300, 2: -1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			clock := newFakeClock()
			s := mem.New(mem.WithClock(clock.Now))
			for i, sv := range tc.saves {
				clock.Advance(time.Minute)
				pod := newFakeClock()
				pod.now = clock.Now().Add(sv.skew)
				u := newUploader(s, pod)
				ranks := sv.ranks
				if ranks == nil {
					for r := range sv.worldSize {
						ranks = append(ranks, r)
					}
				}
				for _, r := range ranks {
					uploadTarget(t, u, Target{Step: sv.step, Rank: r, WorldSize: sv.worldSize, Line: sv.line, Counter: sv.counter}, rankTree(r, int64(i)))
				}
			}
			if len(tc.saves) > 0 && len(recordKeys(t, s, snapshotsPrefix)) == 0 {
				t.Fatal("the commits wrote no completion record: the readers that use them are not tested")
			}
			check := func(t *testing.T) {
				for _, ws := range []int{0, 1, 2} {
					for name, read := range readers(t, ctx, s) {
						if got := read(ws); got != tc.want[ws] {
							t.Errorf("world size %d: %s says step %d, want %d", ws, name, got, tc.want[ws])
						}
					}
				}
			}
			t.Run("records", check)
			dropRecords(t, s)
			t.Run("no records", check)
		})
	}
}

// readers returns each reader of the newest complete step of s, as a
// function of the world size (0: any) giving the step, or -1 for none.
func readers(t *testing.T, ctx context.Context, s storage.Store) map[string]func(worldSize int) int64 {
	t.Helper()
	snaps, err := List(ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	return map[string]func(int) int64{
		"Latest": func(ws int) int64 {
			step, err := Latest(ctx, s, ws)
			if errors.Is(err, ErrNoCheckpoint) {
				return -1
			}
			if err != nil {
				t.Fatalf("Latest(%d): %v", ws, err)
			}
			return step
		},
		"Newest": func(ws int) int64 {
			if n := Newest(snaps, ws); n != nil {
				return n.Step
			}
			return -1
		},
		"NewestByWorldSize": func(ws int) int64 {
			newest := int64(-1)
			for _, n := range NewestByWorldSize(snaps) {
				if n != Newest(snaps, n.WorldSize) {
					t.Errorf("NewestByWorldSize gives step %d of world size %d, not Newest's", n.Step, n.WorldSize)
				}
				if n.WorldSize == ws || (ws == 0 && n == Newest(snaps, 0)) {
					newest = n.Step
				}
			}
			return newest
		},
		"RestoreLatest": func(ws int) int64 {
			res, err := RestoreLatest(ctx, s, 0, t.TempDir(), RestoreOptions{WorldSize: ws, AllRanks: ws == 0})
			if errors.Is(err, ErrNoCheckpoint) {
				return -1
			}
			if err != nil {
				t.Fatalf("RestoreLatest(world size %d): %v", ws, err)
			}
			if res.Manifest == nil || (ws != 0 && res.Manifest.WorldSize != ws) {
				t.Errorf("RestoreLatest(world size %d) restored %s", ws, fmt.Sprint(res.Manifest))
			}
			return res.Step
		},
	}
}
