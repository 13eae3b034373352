package coord

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lifeboat-project/lifeboat/internal/reserved"
)

// TestFilesBeneathDir: what the trainer (or anything sharing the volume)
// plants in --dir never makes lifeboat read or write outside it. A step
// request that is a link to a file outside is refused without reading it
// (on the code before, its content was read as root and quoted in the
// error, which is logged); a stop file that is a link is replaced, never
// followed; removeStale removes links, not their targets.
func TestFilesBeneathDir(t *testing.T) {
	dir, outside := t.TempDir(), t.TempDir()
	secret := filepath.Join(outside, "secret")
	if err := os.WriteFile(secret, []byte("root-only-token-42"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(secret, filepath.Join(dir, StepRequestFile)); err != nil {
		t.Fatal(err)
	}
	_, ok, err := readRequest(dir)
	if ok || err == nil {
		t.Fatalf("a step request that is a link was taken: ok=%v err=%v", ok, err)
	}
	if strings.Contains(err.Error(), "root-only-token-42") {
		t.Errorf("the error quotes the link's target: %v", err)
	}

	target := filepath.Join(outside, "target")
	if err := os.WriteFile(target, []byte("unchanged"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, filepath.Join(dir, StopFile)); err != nil {
		t.Fatal(err)
	}
	if err := writeFile(dir, StopFile, StopInfo{ID: "s1", Reason: "test"}); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(target); string(b) != "unchanged" {
		t.Errorf("the stop file's link was followed: its target now holds %q", b)
	}
	if fi, err := os.Lstat(filepath.Join(dir, StopFile)); err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm() != 0o644 {
		t.Errorf("stop file %v, %v: want a regular file, mode 0644", fi, err)
	}

	if err := os.Symlink(target, filepath.Join(dir, reserved.CoordTempPrefix+"left")); err != nil {
		t.Fatal(err)
	}
	if err := removeStale(dir); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(target); err != nil || string(b) != "unchanged" {
		t.Errorf("removeStale touched a link's target: %q, %v", b, err)
	}
	left, _ := os.ReadDir(dir)
	if len(left) != 0 {
		t.Errorf("removeStale left %v", left)
	}
}
