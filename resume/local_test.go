package resume

import (
	"bytes"
	"encoding/binary"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lifeboat-project/lifeboat/checkpoint"
	"github.com/lifeboat-project/lifeboat/watch"
)

// pickle is a whole pickle holding data: PROTO 4, BINBYTES8, STOP.
func pickle(data []byte) []byte {
	b := []byte{0x80, 0x04, 0x8e, 0, 0, 0, 0, 0, 0, 0, 0}
	binary.LittleEndian.PutUint64(b[3:], uint64(len(data)))
	return append(append(b, data...), '.')
}

// TestNewerLocal: the newest checkpoint in --dir is resumed instead of
// the store's newest only when it belongs to that line (changed after it
// was committed), is newer by its rule (a higher step when both are
// named), and every file passes a format check. Each case logs which and why.
func TestNewerLocal(t *testing.T) {
	const line = "0123456789abcdef"
	for _, tc := range []struct {
		name      string
		file      string
		content   []byte
		committed time.Duration // the store's newest: committed this long before the local save (negative: after)
		storeStep int64
		want      bool
		event     string
	}{
		{"whole and newer", "step-000200/model.pdparams", pickle([]byte("w")), time.Hour, 100, true, "resume.local_newer"},
		{"torn", "step-000200/model.pdparams", pickle([]byte("w"))[:8], time.Hour, 100, false, "resume.local_torn"},
		{"no check vouches for it", "step-000200/model.ckpt", []byte("cut short?"), time.Hour, 100, false, "resume.local_in_doubt"},
		{"another run's, older than the store's commit", "step-009000/model.pdparams", pickle([]byte("w")), -time.Hour, 500, false, "resume.local_not_newer"},
		{"a step not above the store's", "step-000100/model.pdparams", pickle([]byte("w")), time.Hour, 100, false, "resume.local_not_newer"},
		{"nothing in the store, in doubt", "step-000200/model.ckpt", []byte("x"), 0, -1, true, "resume.local_newer"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			p := filepath.Join(dir, filepath.FromSlash(tc.file))
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, tc.content, 0o644); err != nil {
				t.Fatal(err)
			}
			fi, err := os.Stat(p)
			if err != nil {
				t.Fatal(err)
			}
			var snaps []checkpoint.Snapshot
			if tc.storeStep >= 0 {
				snaps = []checkpoint.Snapshot{{Step: tc.storeStep, WorldSize: 1, Complete: true, Line: line, Committed: fi.ModTime().Add(-tc.committed)}}
			}
			w, err := watch.New(watch.Config{Dir: dir})
			if err != nil {
				t.Fatal(err)
			}
			var logs bytes.Buffer
			l, why, newest := NewerLocal(w, snaps, 1, true, slog.New(slog.NewJSONHandler(&logs, nil)))
			if (l != nil) != tc.want {
				t.Errorf("NewerLocal chose the local checkpoint: %v, want %v\n%s", l != nil, tc.want, logs.String())
			}
			if tc.want && why == "" {
				t.Errorf("no reason for the choice")
			}
			if tc.storeStep >= 0 && (newest == nil || newest.Step != tc.storeStep) {
				t.Errorf("the store's newest: %+v", newest)
			}
			if !strings.Contains(logs.String(), `"msg":"`+tc.event+`"`) {
				t.Errorf("no %s logged:\n%s", tc.event, logs.String())
			}
		})
	}
}
