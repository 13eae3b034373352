package agent

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/lifeboat-project/lifeboat/storage/mem"
)

// TestTornOnlyWhenTheCommitIsAPrefix: a committed file that grows with
// the committed bytes at its start proves the commit torn (counted once);
// one rewritten whole with other, longer content (the next save of a
// counter checkpoint) does not.
func TestTornOnlyWhenTheCommitIsAPrefix(t *testing.T) {
	defer goleak.VerifyNone(t)
	for _, tc := range []struct {
		name string
		grow func(t *testing.T, path string)
		torn int
	}{
		{"appended", func(t *testing.T, path string) {
			f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := f.Write(make([]byte, 70000)); err != nil {
				t.Fatal(err)
			}
			f.Close()
		}, 1},
		{"rewritten longer", func(t *testing.T, path string) { writeFile(t, path, 200000, 9) }, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir, s := t.TempDir(), mem.New()
			path := filepath.Join(dir, "backup", "latest.bin")
			writeFile(t, path, 150000, 1) // more than two 64 KiB chunks
			a := setup(t, dir, s, time.Millisecond, 5*time.Millisecond)
			stop := run(t, a)
			waitFor(t, "the first commit", func() bool { return a.Stats().Commits == 1 })
			time.Sleep(20 * time.Millisecond) // a later modification time
			tc.grow(t, path)
			waitFor(t, "the second commit", func() bool { return a.Stats().Commits == 2 })
			err := a.Flush(context.Background())
			stop()
			if err != nil {
				t.Fatal(err)
			}
			if got := a.Stats().Torn; got != tc.torn {
				t.Errorf("torn commits %d, want %d", got, tc.torn)
			}
		})
	}
}
