package e2e

// Files a checkpoint directory may hold that a naive uploader chokes on: a
// name that is not UTF-8 (or holds a backslash), stored and restored byte
// for byte; and a file lifeboat may not read, which keeps its checkpoint
// from being committed, said once, counted, and tried again once the file
// changes.

import (
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lifeboat-project/lifeboat/internal/testenv"
)

// treeBytes maps every regular file under dir, by its raw slash path, to
// its bytes.
func treeBytes(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() || strings.HasPrefix(d.Name(), ".lifeboat-") {
			return err
		}
		b, err := os.ReadFile(p)
		rel, _ := filepath.Rel(dir, p)
		out[filepath.ToSlash(rel)] = string(b)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// writeTreeBytes writes files (raw slash path -> bytes) under dir.
func writeTreeBytes(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for p, b := range files {
		abs := filepath.Join(dir, filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(abs), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(abs, []byte(b), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// TestOddNamesStoredFaithfully: a checkpoint whose file names are not
// UTF-8, or hold a backslash, is committed (it was refused forever before:
// "file path is not valid UTF-8"), and a restore into an empty directory
// gives back every name and every byte exactly; verify passes.
func TestOddNamesStoredFaithfully(t *testing.T) {
	for _, sk := range storeKinds() {
		t.Run(sk.name, func(t *testing.T) {
			url, env := sk.url(t), sk.env(t)
			openStore(t, env, url) // creates the bucket, empties it at the end
			src := filepath.Join(t.TempDir(), "ckpt")
			files := map[string]string{
				"step-1/model.bin":             strings.Repeat("m", 3000),
				"step-1/bad\xffname.bin":       "latin-1 name",
				"step-1/caf\xe9/state.bin":     "a directory named in latin-1",
				"step-1/back\\slash.bin":       "a backslash",
				"step-1/\xc3\xa9t\xc3\xa9.bin": "valid UTF-8",
			}
			writeTreeBytes(t, src, files)
			p := startEnv(t, "plain", env, "sidecar", "--store", url, "--dir", src, "--settle", "200ms", "--scan-interval", "100ms")
			waitFor(t, p, func() bool { return strings.Contains(p.stderr.String(), `"msg":"checkpoint.committed"`) })
			p.signal(syscall.SIGTERM)
			if code := p.wait(); code != 0 {
				t.Fatalf("sidecar exit %d; stderr:\n%s", code, p.stderr.String())
			}
			if strings.Contains(p.stderr.String(), "checkpoint.upload_failed") || strings.Contains(p.stderr.String(), "checkpoint.upload_refused") {
				t.Errorf("an upload failed:\n%s", p.stderr.String())
			}
			dst := filepath.Join(t.TempDir(), "restored")
			if code, out, errOut := lbRun(t, env, "restore", "--store", url, "--dir", dst); code != 0 {
				t.Fatalf("restore: exit %d\n%s\n%s", code, out, errOut)
			}
			got := treeBytes(t, dst)
			for p, b := range files {
				if got[p] != b {
					t.Errorf("restored %q: %q, want %q", p, got[p], b)
				}
			}
			if len(got) != len(files) {
				t.Errorf("restored %d files, want %d: %q", len(got), len(files), got)
			}
			if code, out, errOut := lbRun(t, env, "verify", "--store", url); code != 0 {
				t.Errorf("verify: exit %d\n%s\n%s", code, out, errOut)
			}
		})
	}
}

// nobodyDir returns a fresh directory that user nobody owns, on a path it
// can reach, for a lifeboat started as nobody (start's "nobody" mode):
// without root, setpriv or the user, the test skips (fails in CI).
func nobodyDir(t *testing.T) string {
	t.Helper()
	testenv.RequireRoot(t)
	if _, err := exec.LookPath("setpriv"); err != nil {
		testenv.Skip(t, "setpriv (util-linux) is not installed")
	}
	u, err := user.Lookup("nobody")
	if err != nil {
		testenv.Skip(t, "no user nobody: "+err.Error())
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	dir := t.TempDir()
	for d := dir; d != "/" && d != os.TempDir(); d = filepath.Dir(d) {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chown(dir, uid, gid); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestUnreadableFileKeepsItsCheckpoint: lifeboat running as another user
// than the one that wrote a file it may not read (mode 000) does not commit
// that checkpoint without it (a trainer resumed from it would miss a file
// it saved); it says so once, in one WARN naming the file, counts it in
// lifeboat_checkpoints_interrupted_total, and does not try again on every
// scan. Once the file is made readable the checkpoint is committed whole.
func TestUnreadableFileKeepsItsCheckpoint(t *testing.T) {
	root := nobodyDir(t)
	src, store := filepath.Join(root, "ckpt"), filepath.Join(root, "store")
	files := map[string]string{"step-1/model.bin": "weights", "step-1/secret.bin": "the optimizer"}
	writeTreeBytes(t, src, files)
	secret := filepath.Join(src, "step-1", "secret.bin")
	if err := os.Chmod(secret, 0); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("chown", "-R", "nobody:nogroup", root).CombinedOutput(); err != nil {
		t.Fatalf("chown: %v %s", err, out)
	}
	p := start(t, "nobody", "sidecar", "--store", "file://"+store, "--dir", src, "--settle", "200ms", "--scan-interval", "100ms",
		"--metrics-addr", "127.0.0.1:0")
	addr := listenAddr(t, p)
	waitFor(t, p, func() bool { return strings.Contains(p.stderr.String(), "secret.bin") })
	time.Sleep(2 * time.Second) // 20 scans: none may try again or say it again
	log := p.stderr.String()
	var said []string
	for _, line := range strings.Split(log, "\n") {
		if strings.Contains(line, "secret.bin") {
			said = append(said, line)
		}
	}
	if len(said) != 1 || !strings.Contains(said[0], `"level":"WARN"`) || !strings.Contains(said[0], "may not read") {
		t.Errorf("the unreadable file was reported %d times, want once at WARN saying lifeboat may not read it:\n%s", len(said), strings.Join(said, "\n"))
	}
	if n := strings.Count(log, "checkpoint.upload_started"); n != 1 {
		t.Errorf("the checkpoint was tried %d times while nothing changed, want once", n)
	}
	// The metric follows the uploader's figures once a second: wait for
	// it to move rather than count on the sleep above.
	waitFor(t, p, func() bool { return scrape(t, addr, "lifeboat_checkpoints_interrupted_total") >= 1 })
	if v := scrape(t, addr, "lifeboat_checkpoints_interrupted_total"); v != 1 {
		t.Errorf("lifeboat_checkpoints_interrupted_total = %v, want 1", v)
	}
	if ents, _ := os.ReadDir(filepath.Join(store, "snapshots")); len(ents) != 0 {
		t.Fatalf("a checkpoint was committed without the file lifeboat may not read")
	}

	if err := os.Chmod(secret, 0o644); err != nil {
		t.Fatal(err)
	}
	waitFor(t, p, func() bool { return strings.Contains(p.stderr.String(), `"msg":"checkpoint.committed"`) })
	p.signal(syscall.SIGTERM)
	if code := p.wait(); code != 0 {
		t.Fatalf("sidecar exit %d; stderr:\n%s", code, p.stderr.String())
	}
	dst := filepath.Join(t.TempDir(), "restored")
	if code, out, errOut := lbRun(t, nil, "restore", "--store", "file://"+store, "--dir", dst); code != 0 {
		t.Fatalf("restore: exit %d\n%s\n%s", code, out, errOut)
	}
	if got := treeBytes(t, dst); fmt.Sprint(got) != fmt.Sprint(files) {
		t.Errorf("restored %q, want %q", got, files)
	}
}

// TestUnreadableDirWithholdsOnlyItsCheckpoint: a directory lifeboat may not
// list (a root-owned lost+found at the volume's root, a subdirectory of
// mode 000 in the newest checkpoint) used to fail every scan, so no
// checkpoint was ever stored. Now the checkpoint holding it is withheld
// (said once per directory, at WARN), the others are stored, and once the
// directory can be listed its checkpoint is stored whole.
func TestUnreadableDirWithholdsOnlyItsCheckpoint(t *testing.T) {
	root := nobodyDir(t)
	src, store := filepath.Join(root, "ckpt"), filepath.Join(root, "store")
	files := map[string]string{"step-1/model.bin": "weights 1", "step-2/model.bin": "weights 2", "step-2/opt/state.bin": "optimizer 2"}
	writeTreeBytes(t, src, files)
	if out, err := exec.Command("chown", "-R", "nobody:nogroup", root).CombinedOutput(); err != nil {
		t.Fatalf("chown: %v %s", err, out)
	}
	lost := filepath.Join(src, "lost+found")
	if err := os.Mkdir(lost, 0o700); err != nil { // root's, as mkfs leaves it
		t.Fatal(err)
	}
	opt := filepath.Join(src, "step-2", "opt")
	if err := os.Chmod(opt, 0); err != nil {
		t.Fatal(err)
	}
	p := start(t, "nobody", "sidecar", "--store", "file://"+store, "--dir", src, "--settle", "200ms", "--scan-interval", "100ms")
	waitFor(t, p, func() bool { return strings.Contains(p.stderr.String(), `"msg":"checkpoint.committed"`) })
	time.Sleep(time.Second) // 10 scans
	log := p.stderr.String()
	if !strings.Contains(log, `"msg":"checkpoint.committed","id":"dir:step-1"`) {
		t.Errorf("step 1 was not the one committed:\n%s", log)
	}
	for _, dir := range []string{`"path":"lost+found"`, `"path":"step-2/opt"`} {
		if n := strings.Count(log, dir); n != 1 {
			t.Errorf("%s was reported %d times, want once:\n%s", dir, n, log)
		}
	}
	if strings.Contains(log, "checkpoint.scan_failed") {
		t.Errorf("a scan failed:\n%s", log)
	}
	if err := os.Chmod(opt, 0o755); err != nil {
		t.Fatal(err)
	}
	waitFor(t, p, func() bool {
		return strings.Contains(p.stderr.String(), `"msg":"checkpoint.committed","id":"dir:step-2"`)
	})
	p.signal(syscall.SIGTERM)
	if code := p.wait(); code != 0 {
		t.Fatalf("sidecar exit %d; stderr:\n%s", code, p.stderr.String())
	}
	dst := filepath.Join(t.TempDir(), "restored")
	if code, out, errOut := lbRun(t, nil, "restore", "--store", "file://"+store, "--dir", dst); code != 0 {
		t.Fatalf("restore: exit %d\n%s\n%s", code, out, errOut)
	}
	if got := treeBytes(t, dst); got["step-2/opt/state.bin"] != "optimizer 2" || got["step-2/model.bin"] != "weights 2" {
		t.Errorf("restored %q, want step 2 whole", got)
	}
}
