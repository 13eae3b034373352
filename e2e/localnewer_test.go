package e2e

import (
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// pickleBytes wraps data in a whole pickle, as paddle.save writes one:
// PROTO 4, BINBYTES8, STOP.
func pickleBytes(data []byte) []byte {
	b := []byte{0x80, 0x04, 0x8e, 0, 0, 0, 0, 0, 0, 0, 0}
	binary.LittleEndian.PutUint64(b[3:], uint64(len(data)))
	return append(append(b, data...), '.')
}

// TestNewerLocalCheckpointKept: --dir is a volume that outlives the pod.
// The store's newest checkpoint is backup/latest.pdparams; a newer one,
// whole, was saved into the volume afterwards and never uploaded (the
// upload failed at the last preemption). The next start keeps it (never
// restores the older one over it), resumes from it, and uploads it.
// Without the rule the store's older file would silently replace it.
func TestNewerLocalCheckpointKept(t *testing.T) {
	for _, sk := range storeKinds() {
		t.Run(sk.name, func(t *testing.T) {
			url, env := sk.url(t), sk.env(t)
			dir := t.TempDir()
			model := filepath.Join(dir, "backup", "latest.pdparams")
			older := make([]byte, 1<<20)
			_, _ = rand.Read(older)
			sc := startEnv(t, "plain", env, "sidecar", "--store", url, "--dir", dir, "--settle", "1h")
			waitFor(t, sc, func() bool { return strings.Contains(sc.stderr.String(), "sidecar.started") })
			if err := os.MkdirAll(filepath.Dir(model), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(model, pickleBytes(older), 0o644); err != nil {
				t.Fatal(err)
			}
			sc.signal(syscall.SIGTERM)
			if code := sc.wait(); code != 0 || latestComplete(lsJSON(t, env, url)) < 0 {
				t.Fatalf("sidecar exit %d; stderr:\n%s", code, tail(sc.stderr.String()))
			}

			newer := pickleBytes([]byte("the newer model, never uploaded"))
			if err := os.WriteFile(model, newer, 0o644); err != nil {
				t.Fatal(err)
			}
			seen := filepath.Join(t.TempDir(), "seen")
			p := startEnv(t, "plain", env, "run", "--store", url, "--dir", dir, "--",
				"sh", "-c", `echo "$LIFEBOAT_RESUME_DIR" > "$0"`, seen)
			if code := p.wait(); code != 0 {
				t.Fatalf("exit %d; stderr:\n%s", code, tail(p.stderr.String()))
			}
			if b, _ := os.ReadFile(model); !bytes.Equal(b, newer) {
				t.Errorf("the newer local checkpoint was overwritten by the store's older one")
			}
			if b, _ := os.ReadFile(seen); strings.TrimSpace(string(b)) != filepath.Join(dir, "backup") {
				t.Errorf("the trainer was told LIFEBOAT_RESUME_DIR=%q, want the kept backup/", b)
			}
			if !strings.Contains(p.stderr.String(), `"msg":"resume.local_newer"`) {
				t.Errorf("no resume.local_newer line; stderr:\n%s", tail(p.stderr.String()))
			}
			// It was uploaded: a restore elsewhere gets the newer file.
			other := t.TempDir()
			cmd := exec.Command(lifeboatBin, "restore", "--store", url, "--dir", other)
			cmd.Env = append(os.Environ(), env...)
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("restore: %v\n%s", err, out)
			}
			if b, _ := os.ReadFile(filepath.Join(other, "backup", "latest.pdparams")); !bytes.Equal(b, newer) {
				t.Errorf("the store's newest checkpoint is not the kept local one")
			}
		})
	}
}
