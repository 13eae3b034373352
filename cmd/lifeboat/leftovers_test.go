package main

import (
	"bytes"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lifeboat-project/lifeboat/internal/reserved"
)

// tempFiles returns the temporary files of unfinished Puts in the
// directory store at root, with their modification times.
func tempFiles(t *testing.T, root string) map[string]time.Time {
	t.Helper()
	found := map[string]time.Time{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if os.IsNotExist(err) {
				return nil // renamed or removed while walking
			}
			return err
		}
		if d.Type().IsRegular() && strings.HasPrefix(d.Name(), reserved.TempPrefix) {
			if fi, err := d.Info(); err == nil {
				found[path] = fi.ModTime()
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return found
}

// TestPruneRemovesKilledSidecarTempFiles: a sidecar SIGKILLed in the
// middle of an upload to a file:// store (a native sidecar restarted
// after an OOM kill) leaves the temporary files of its unfinished Puts in
// chunks/. A prune inside --min-chunk-age leaves them (they could be a
// live writer's), a prune after it removes them and says how many, so
// nothing of a killed upload outlives the prune window
// (docs/FORMAT.md, "What a prune leaves"). Before prune swept them, no
// prune ever removed them and every kill added more.
func TestPruneRemovesKilledSidecarTempFiles(t *testing.T) {
	root := t.TempDir()
	storeDir, dir := filepath.Join(root, "store"), filepath.Join(root, "shared")
	url := "file://" + storeDir
	if err := os.MkdirAll(filepath.Join(dir, "step-000100"), 0o755); err != nil {
		t.Fatal(err)
	}
	// 48 MiB at 4 MB/s: six chunks, each Put's temporary file growing
	// for seconds.
	if err := os.WriteFile(filepath.Join(dir, "step-000100", "model.pdparams"), pickleBytes(bytes.Repeat([]byte("w"), 48<<20)), 0o644); err != nil {
		t.Fatal(err)
	}
	p := start(t, "plain", "sidecar", "--store", url, "--dir", dir, "--settle", "1s", "--upload-limit", "4MB", "--keep", "0")
	waitFor(t, p, func() bool { return len(tempFiles(t, filepath.Join(storeDir, "chunks"))) > 0 })
	// Stopped, the sidecar renames nothing: the temporary files seen now
	// are those the kill leaves.
	p.signal(syscall.SIGSTOP)
	left := tempFiles(t, storeDir)
	p.signal(syscall.SIGKILL)
	if code := p.wait(); code != 128+int(syscall.SIGKILL) {
		t.Fatalf("sidecar exit %d, want %d (SIGKILL); stderr:\n%s", code, 128+int(syscall.SIGKILL), p.stderr.String())
	}
	if len(left) == 0 {
		t.Fatal("no temporary file in the store after the kill")
	}
	if got := tempFiles(t, storeDir); len(got) != len(left) {
		t.Fatalf("temporary files changed after the kill: %v, then %v", left, got)
	}

	prune := func(age string) string {
		t.Helper()
		out, err := exec.Command(lifeboatBin, "prune", "--store", url, "--keep", "3", "--min-chunk-age", age, "--log-format", "json").CombinedOutput()
		if err != nil {
			t.Fatalf("prune --min-chunk-age %s: %v\n%s", age, err, out)
		}
		return string(out)
	}

	// Inside the window: they could be a live writer's; kept.
	out := prune("1h")
	if got := tempFiles(t, storeDir); len(got) != len(left) {
		t.Fatalf("prune --min-chunk-age 1h removed temporary files younger than 1h: %d left of %d\n%s", len(got), len(left), out)
	}
	if !strings.Contains(out, `"young_leftovers":`+strconv.Itoa(len(left))) {
		t.Errorf("prune inside the window does not say it kept %d leftovers:\n%s", len(left), out)
	}

	// After the window: removed. Wait until the newest is older than
	// 1s by its own time, so the prune below runs after the window.
	var newest time.Time
	for _, mt := range left {
		if mt.After(newest) {
			newest = mt
		}
	}
	time.Sleep(time.Until(newest.Add(1500 * time.Millisecond)))
	out = prune("1s")
	if got := tempFiles(t, storeDir); len(got) != 0 {
		t.Fatalf("prune --min-chunk-age 1s left the temporary files of the killed upload: %v\n%s", got, out)
	}
	if !strings.Contains(out, `"deleted_leftovers":`+strconv.Itoa(len(left))) {
		t.Errorf("prune does not log deleted_leftovers %d:\n%s", len(left), out)
	}
	if !strings.Contains(out, "leftovers of unfinished uploads") {
		t.Errorf("prune does not print what it removed:\n%s", out)
	}
}
