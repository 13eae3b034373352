package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// counterRefresher saves a named step and refreshes backup/latest with the
// same bytes at each save, as PaddleClas's epoch_N and latest (and the
// README's own counter example) do, then waits for SIGTERM.
const counterRefresher = `import os, pickle, signal, sys, time
root = os.environ["LIFEBOAT_DIR"]
signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
state = pickle.dumps({"step": 100, "weights": bytes(range(256)) * 400}, protocol=4)
for d, name in (("step-000100", "model.pdparams"), ("backup", "latest.pdparams")):
    os.makedirs(os.path.join(root, d), exist_ok=True)
    with open(os.path.join(root, d, name), "wb") as f:
        f.write(state)
    time.sleep(0.05)
open(os.path.join(root, ".saved"), "w").close()
while True:
    time.sleep(0.05)
`

// TestCounterCopyKeepsRanksPairable: two ranks whose
// trainers save step-000100 and refresh backup/latest with the same
// bytes. Step 100 is committed as a named step by both ranks and is
// complete; the copy is not committed. On the code before, the counter
// checkpoint superseded the named step on each rank, counter revisions of
// two ranks never pair, and no step of the run was ever complete.
func TestCounterCopyKeepsRanksPairable(t *testing.T) {
	root := t.TempDir()
	url := "file://" + filepath.Join(root, "store")
	trainer := filepath.Join(root, "trainer.py")
	if err := os.WriteFile(trainer, []byte(counterRefresher), 0o644); err != nil {
		t.Fatal(err)
	}
	var cmds []*exec.Cmd
	var dirs []string
	for rank := range 2 {
		dir := filepath.Join(root, "pod-"+strconv.Itoa(rank))
		dirs = append(dirs, dir)
		cmd := exec.Command(lifeboatBin, "run", "--store", url, "--dir", dir, "--rank", strconv.Itoa(rank), "--world-size", "2",
			"--settle", "300ms", "--coord-interval", "0", "--", "python3", trainer)
		cmd.Stderr = &syncBuffer{}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		cmds = append(cmds, cmd)
	}
	for _, dir := range dirs {
		for deadline := time.Now().Add(hangLimit); ; time.Sleep(20 * time.Millisecond) {
			if _, err := os.Stat(filepath.Join(dir, ".saved")); err == nil {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the trainer in %s never saved", dir)
			}
		}
	}
	for _, cmd := range cmds {
		_ = cmd.Process.Signal(syscall.SIGTERM)
	}
	for i, cmd := range cmds {
		_ = cmd.Wait()
		if code := cmd.ProcessState.ExitCode(); code != 143 {
			t.Errorf("rank %d exit %d, want 143:\n%s", i, code, cmd.Stderr)
		}
	}
	entries := lsJSON(t, nil, url)
	if got := latestComplete(entries); got != 100 {
		t.Fatalf("newest complete step %d, want 100: %+v\nrank 0:\n%s", got, entries, cmds[0].Stderr)
	}
	for _, e := range entries {
		if e.Counter || e.Revision != 0 {
			t.Errorf("step %d revision %d counter=%v: the copy was committed", e.Step, e.Revision, e.Counter)
		}
	}
}
