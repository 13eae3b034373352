package memory

import (
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestWatcherCloseReadsTheCounterOnce: a kill counted after the last
// poll (here: after the watcher started, with no event file and no
// second poll before close) is still said at close. A trainer whose
// worker is OOM-killed and that exits within the poll interval must not
// leave the kill unreported; CI saw exactly that (memory.oom_kill
// missing from a run whose trainer reported 16 workers killed).
func TestWatcherCloseReadsTheCounterOnce(t *testing.T) {
	path := filepath.Join(t.TempDir(), "memory.events")
	if err := os.WriteFile(path, []byte(eventsFile(2)), 0o644); err != nil {
		t.Fatal(err)
	}
	var logBuf strings.Builder
	w, err := startWatcher(path, "oom_kill", nil, 1<<20, slog.New(slog.NewJSONHandler(&logBuf, nil)))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(eventsFile(5)), 0o644); err != nil {
		t.Fatal(err)
	}
	w.close()
	if n := strings.Count(logBuf.String(), `"msg":"memory.oom_kill"`); n != 1 {
		t.Fatalf("%d memory.oom_kill lines after 3 kills counted before close, want 1:\n%s", n, logBuf.String())
	}
	if !strings.Contains(logBuf.String(), `"kills":3`) {
		t.Errorf("the line does not count the 3 kills since watching began:\n%s", logBuf.String())
	}
	// A second look finds nothing new: no line repeats.
	w2, err := startWatcher(path, "oom_kill", nil, 1<<20, slog.New(slog.NewJSONHandler(&logBuf, nil)))
	if err != nil {
		t.Fatal(err)
	}
	w2.close()
	if n := strings.Count(logBuf.String(), `"msg":"memory.oom_kill"`); n != 1 {
		t.Errorf("close said a kill that was counted before watching began:\n%s", logBuf.String())
	}
}
