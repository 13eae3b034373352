package checkpoint

import (
	"slices"
	"strings"
	"testing"
)

func TestManifestKeyOrder(t *testing.T) {
	var keys []string
	for _, step := range []int64{9, 10, 100, 1, 1 << 40} {
		for _, rank := range []int{10, 2} {
			for _, rev := range []int{0, 10, 2} {
				keys = append(keys, manifestKey(Target{Step: step, Rank: rank, WorldSize: 16}, rev))
			}
		}
	}
	slices.Sort(keys) // what List yields
	var got [][3]int64
	for _, k := range keys {
		tg, rev, ok := parseManifestKey(k)
		if !ok || tg.WorldSize != 16 {
			t.Fatalf("parseManifestKey(%q) = %v, %d", k, ok, tg.WorldSize)
		}
		got = append(got, [3]int64{tg.Step, int64(tg.Rank), int64(rev)})
	}
	// Revisions 1.. ascend; revision 0 sorts after them ('-' < '.').
	var want [][3]int64
	for _, step := range []int64{1, 9, 10, 100, 1 << 40} {
		for _, rank := range []int64{2, 10} {
			want = append(want, [3]int64{step, rank, 2}, [3]int64{step, rank, 10}, [3]int64{step, rank, 0})
		}
	}
	if !slices.Equal(got, want) {
		t.Errorf("lexical order gives %v, want %v", got, want)
	}
}

func TestParseManifestKey(t *testing.T) {
	tests := []struct {
		key  string
		ok   bool
		step int64
		rank int
		n    int
		rev  int
	}{
		{"snapshots/00000000000000000100/rank-00003-of-00008.json", true, 100, 3, 8, 0},
		{"snapshots/00000000000000000000/rank-00000-of-00001.json", true, 0, 0, 1, 0},
		{"snapshots/00000000000000000100/rank-00003-of-00008-rev-00001.json", true, 100, 3, 8, 1},
		{"snapshots/00000000000000000100/rank-00003-of-00008-rev-99999.json", true, 100, 3, 8, 99999},
		{"snapshots/00000000000000000100/rank-00003-of-00008-rev-00000.json", false, 0, 0, 0, 0},
		{"snapshots/00000000000000000100/rank-00003-of-00008-rev-0001.json", false, 0, 0, 0, 0},
		{"snapshots/00000000000000000100/rank-00003-of-00008-rev-+0001.json", false, 0, 0, 0, 0},
		{"snapshots/00000000000000000100/rank-00003-of-00008-rev-00001.json.tmp", false, 0, 0, 0, 0},
		{"snapshots/00000000000000000100/rank-00003-of-00008-ver-00001.json", false, 0, 0, 0, 0},
		{"snapshots/00000000000000000100/rank-00003-of-00008-rev-00001", false, 0, 0, 0, 0},
		{"snapshots/00000000000000000100/rank-00008-of-00008.json", false, 0, 0, 0, 0},
		{"snapshots/00000000000000000100/rank-00000-of-00000.json", false, 0, 0, 0, 0},
		{"snapshots/100/rank-00000-of-00001.json", false, 0, 0, 0, 0},
		{"snapshots/0000000000000000010a/rank-00000-of-00001.json", false, 0, 0, 0, 0},
		{"snapshots/-0000000000000000001/rank-00000-of-00001.json", false, 0, 0, 0, 0},
		{"snapshots/00000000000000000100/rank-0000-of-000001.json", false, 0, 0, 0, 0},
		{"snapshots/00000000000000000100/rank-00000-of-00001.json.tmp", false, 0, 0, 0, 0},
		{"snapshots/00000000000000000100/rank-+0000-of-00001.json", false, 0, 0, 0, 0},
		{"snapshots/00000000000000000100/rank-00000-of-00001", false, 0, 0, 0, 0},
		{"chunks/ab/ab", false, 0, 0, 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.key, func(t *testing.T) {
			tg, rev, ok := parseManifestKey(tt.key)
			if ok != tt.ok || ok && (tg != Target{Step: tt.step, Rank: tt.rank, WorldSize: tt.n} || rev != tt.rev) {
				t.Errorf("= %+v %d %v, want %d %d %d %d %v", tg, rev, ok, tt.step, tt.rank, tt.n, tt.rev, tt.ok)
			}
			if ok && manifestKey(tg, rev) != tt.key {
				t.Errorf("manifestKey gives %q back", manifestKey(tg, rev))
			}
		})
	}
}

func TestParseChunkKey(t *testing.T) {
	sum := strings.Repeat("ab", 32)
	tests := []struct {
		key string
		ok  bool
	}{
		{chunkKey(sum), true},
		{"chunks/cd/" + sum, false},
		{"chunks/ab/" + sum[:63], false},
		{"chunks/AB/" + strings.ToUpper(sum), false},
		{"chunks/ab/" + sum + ".tmp", false},
	}
	for _, tt := range tests {
		if _, ok := parseChunkKey(tt.key); ok != tt.ok {
			t.Errorf("parseChunkKey(%q) = %v, want %v", tt.key, ok, tt.ok)
		}
	}
}

func TestParseSubset(t *testing.T) {
	tests := []struct {
		in   string
		want Subset
		ok   bool
	}{
		{"1/5", Subset{1, 5}, true},
		{"5/5", Subset{5, 5}, true},
		{"all", Subset{1, 1}, true},
		{"0/5", Subset{}, false},
		{"6/5", Subset{}, false},
		{"1/0", Subset{}, false},
		{"1", Subset{}, false},
		{"a/b", Subset{}, false},
		{"-1/5", Subset{}, false},
		{"10%", Subset{}, false},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParseSubset(tt.in)
			if (err == nil) != tt.ok || got != tt.want {
				t.Errorf("ParseSubset = %v, %v; want %v ok %v", got, err, tt.want, tt.ok)
			}
		})
	}
}

// TestSubsetPartitions: the parts 1/t..t/t cover every chunk exactly once.
func TestSubsetPartitions(t *testing.T) {
	const parts = 5
	counts := make([]int, parts)
	for i := range 1000 {
		sum := hashOf([]byte{byte(i), byte(i >> 8)})
		in := 0
		for n := uint64(1); n <= parts; n++ {
			if (Subset{n, parts}).Contains(sum) {
				in++
				counts[n-1]++
			}
		}
		if in != 1 {
			t.Fatalf("chunk %s is in %d parts", sum, in)
		}
	}
	for n, c := range counts {
		if c < 100 {
			t.Errorf("part %d/%d holds %d of 1000 chunks", n+1, parts, c)
		}
	}
	if (Subset{}).Contains(hashOf(nil)) {
		t.Error("the zero Subset selects a chunk")
	}
}
