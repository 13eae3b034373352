package checkpoint

import (
	"context"
	"errors"
	"path"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/lifeboat-project/lifeboat/format"
	"github.com/lifeboat-project/lifeboat/storage/mem"
)

// TestRestoreFeedsFormatChecks: a restore's streamed format checks
// (pickles, JSON) are fed by the download pass, with any number of
// workers: each such file's every byte goes through its check once, the
// file is never read again for it, and a torn one is still refused
// (ErrCorrupt, format.ErrTorn) with the directory left as it was. Files
// of other formats are checked by their headers and tails as before.
func TestRestoreFeedsFormatChecks(t *testing.T) {
	big := pickleOf(randomBytes(61, 9*testChunk+5))
	whole := tree{
		"model.pdparams": big,
		"opt.pdopt":      pickleOf(randomBytes(62, 3*testChunk)),
		"tiny.pkl":       pickleOf([]byte("x")),
		"meta.json":      []byte(`{"step": 3, "loss": NaN}`),
		"model.pt":       zipOf(t, randomBytes(63, 2*testChunk)),
		"notes.txt":      []byte("free text"),
	}
	garbled := append([]byte(nil), big...)
	garbled[len(garbled)-1] = 'x' // no STOP at the end
	for _, tc := range []struct {
		name string
		tr   tree
		bad  string // the torn file; "" for a whole snapshot
	}{
		{"whole", whole, ""},
		{"pickle cut in its last chunk", tree{"model.pdparams": big[:len(big)-3], "tiny.pkl": whole["tiny.pkl"]}, "model.pdparams"},
		{"pickle cut at a chunk boundary", tree{"model.pdparams": big[:5*testChunk]}, "model.pdparams"},
		{"pickle without its STOP", tree{"model.pdparams": garbled}, "model.pdparams"},
		{"JSON cut short", tree{"meta.json": []byte(`{"step": 3, "lo`)}, "meta.json"},
	} {
		for _, workers := range []int{1, 3, 16} {
			t.Run(tc.name+"/"+string(rune('0'+workers%10))+"workers", func(t *testing.T) {
				defer verifyNone(t)
				s := mem.New()
				u := newUploader(s, nil)
				u.SkipFormatCheck = true
				upload(t, u, 1, 0, 1, tc.tr)
				var (
					mu    sync.Mutex
					reads []string
					fed   atomic.Int64
				)
				beforeCheckRead = func(rel string) {
					mu.Lock()
					reads = append(reads, path.Base(rel))
					mu.Unlock()
				}
				afterFeed = func(live, back, skipped int64) { fed.Add(live + back + skipped) }
				defer func() { beforeCheckRead, afterFeed = nil, nil }()
				dir := t.TempDir()
				writeTree(t, dir, tree{"user.txt": []byte("mine")})
				_, err := Restore(context.Background(), s, 1, 0, dir, RestoreOptions{Workers: workers})
				var streamed int64
				for p, b := range tc.tr {
					if strings.HasSuffix(p, ".json") || strings.HasSuffix(p, ".pdparams") || strings.HasSuffix(p, ".pdopt") || strings.HasSuffix(p, ".pkl") {
						streamed += int64(len(b))
						for _, r := range reads {
							if r == p {
								t.Errorf("%s was read again after the download", p)
							}
						}
					}
				}
				if tc.bad == "" {
					if err != nil {
						t.Fatal(err)
					}
					want := tc.tr
					want = tree{"user.txt": []byte("mine")}
					for p, b := range tc.tr {
						want[p] = b
					}
					checkTree(t, dir, want)
				} else {
					if !errors.Is(err, ErrCorrupt) || !errors.Is(err, format.ErrTorn) || !strings.Contains(err.Error(), tc.bad) {
						t.Fatalf("Restore = %v; want ErrCorrupt and format.ErrTorn naming %s", err, tc.bad)
					}
					checkTree(t, dir, tree{"user.txt": []byte("mine")})
				}
				if fed.Load() != streamed {
					t.Errorf("the streamed checks were fed %d bytes, want %d (every byte of the pickles and JSON, once)", fed.Load(), streamed)
				}
			})
		}
	}
}
