package e2e

import (
	"crypto/rand"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// piecesTrainer writes step-000100/model.bin in four pieces of 100 KB,
// closing the file after each (as a trainer that writes a big state
// piece by piece, with pauses longer than --settle between them); before
// each piece after the first it waits for the file go/N that the test
// writes once the piece before was committed. It exits 0 on SIGTERM.
const piecesTrainer = `
import os, signal, sys, time
d, go = os.path.join(os.environ["LIFEBOAT_DIR"], "step-000100"), sys.argv[1]
signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
os.makedirs(d)
with open(sys.argv[2], "rb") as f:
    data = f.read()
for i in range(4):
    if i > 0:
        t0 = time.time()
        while not os.path.exists(os.path.join(go, str(i))):
            if time.time() - t0 > 120:
                sys.exit(1)
            time.sleep(0.02)
    with open(os.path.join(d, "model.bin"), "ab") as f:
        f.write(data[i * 102400:(i + 1) * 102400])
while True:
    time.sleep(1)
`

// TestTornCommitMarked: a file written in pieces with
// pauses longer than --settle is committed after each piece, as revision
// 0, 1, 2 and 3 of step 100. Each time the file has grown over what was
// committed, lifeboat proves that revision torn: it logs
// checkpoint.torn_commit once with the hint, marks it in the store (so
// no reader restores it) and counts it; the last revision, the whole
// file, is what a restore gives. On the code before, each partial size
// was committed silently. The same with the trainer beside a sidecar.
func TestTornCommitMarked(t *testing.T) {
	for _, kind := range []string{"run", "sidecar"} {
		t.Run(kind, func(t *testing.T) { testTornCommitMarked(t, kind) })
	}
}

func testTornCommitMarked(t *testing.T, kind string) {
	root := t.TempDir()
	storeDir := filepath.Join(root, "store")
	url := "file://" + storeDir
	dir, goDir := filepath.Join(root, "ckpt"), filepath.Join(root, "go")
	for _, d := range []string{dir, goDir} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	data := make([]byte, 4*102400)
	rand.Read(data)
	src := filepath.Join(root, "data")
	if err := os.WriteFile(src, data, 0o644); err != nil {
		t.Fatal(err)
	}
	flags := []string{"--store", url, "--dir", dir, "--settle", "300ms", "--scan-interval", "100ms", "--log-format", "json", "--metrics-addr", "127.0.0.1:0"}
	var p *lb
	var trainer *exec.Cmd
	if kind == "run" {
		p = start(t, "plain", append(append([]string{"run"}, flags...), "--", "python3", "-c", piecesTrainer, goDir, src)...)
	} else {
		// The trainer in a container of its own, beside the sidecar.
		trainer = exec.Command("python3", "-c", piecesTrainer, goDir, src)
		trainer.Env = append(os.Environ(), "LIFEBOAT_DIR="+dir)
		if err := trainer.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = trainer.Process.Kill(); _ = trainer.Wait() })
		p = start(t, "plain", append([]string{"sidecar", "--grace", "10s"}, flags...)...)
	}
	for i := 1; i <= 4; i++ {
		waitFor(t, p, func() bool { return len(logLines(p.stderr.String(), "checkpoint.committed")) >= i })
		if i < 4 {
			release(t, goDir, i)
		}
	}
	// The metrics are fed from the agent's figures once a second.
	addr := listenAddr(t, p)
	counted := scrape(t, addr, "lifeboat_commits_torn_total")
	for deadline := time.Now().Add(hangLimit); counted != 3 && time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		counted = scrape(t, addr, "lifeboat_commits_torn_total")
	}
	if counted != 3 {
		t.Errorf("lifeboat_commits_torn_total = %v, want 3 (-1e9: not exported)", counted)
	}
	if trainer != nil {
		_ = trainer.Process.Signal(syscall.SIGTERM)
		_ = trainer.Wait()
	}
	p.signal(syscall.SIGTERM)
	if kind == "run" {
		waitExit(t, p, 143)
	} else {
		waitExit(t, p, 0)
	}
	torn := logLines(p.stderr.String(), "checkpoint.torn_commit")
	if len(torn) != 3 {
		t.Fatalf("%d checkpoint.torn_commit lines, want 3 (revisions 0, 1, 2):\n%s", len(torn), p.stderr.String())
	}
	for i, l := range torn {
		if l["revision"] != float64(i) || l["step"] != 100.0 || l["path"] != "step-000100/model.bin" ||
			l["committed_bytes"] != float64((i+1)*102400) || l["bytes"] != float64((i+2)*102400) || !strings.Contains(fmt.Sprint(l["hint"]), "--settle") {
			t.Errorf("torn_commit %d: %v", i, l)
		}
	}
	marks, _ := filepath.Glob(filepath.Join(storeDir, "snapshots", "*", "*.torn"))
	if len(marks) != 3 {
		t.Errorf("torn marks in the store: %v, want revisions 0, 1 and 2", marks)
	}
	out := filepath.Join(root, "restored")
	if code, text := runLifeboat(t, nil, "restore", "--store", url, "--dir", out); code != 0 {
		t.Fatalf("restore: exit %d\n%s", code, text)
	}
	if b, err := os.ReadFile(filepath.Join(out, "step-000100", "model.bin")); err != nil || string(b) != string(data) {
		t.Errorf("restored model.bin: %d bytes (%v), want the whole %d", len(b), err, len(data))
	}
}
