package e2e

import (
	"bytes"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lifeboat-project/lifeboat/internal/testenv"
)

// TestRestoreDiskFull: restoring into a directory whose file system is too
// small for every checkpoint does not wedge the start (a failed init
// container would fail every retry the same way): it says why at WARN,
// starts fresh, leaves the files already there untouched and no partial
// checkpoint or temporary directory behind.
func TestRestoreDiskFull(t *testing.T) {
	testenv.RequireRoot(t)
	root := t.TempDir()
	url := "file://" + filepath.Join(root, "store")
	src := filepath.Join(root, "src")
	p := start(t, "plain", "sidecar", "--store", url, "--dir", src, "--settle", "1h")
	waitFor(t, p, func() bool { return strings.Contains(p.stderr.String(), "sidecar.started") })
	if err := os.MkdirAll(filepath.Join(src, "step-9"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(src, "step-9", "model.pdparams"), pickleBytes(bytes.Repeat([]byte("0123456789abcdef"), 1<<20)), 0o644); err != nil {
		t.Fatal(err)
	}
	p.signal(syscall.SIGTERM)
	if code := p.wait(); code != 0 {
		t.Fatalf("sidecar exit %d", code)
	}

	small := filepath.Join(root, "small")
	if err := os.MkdirAll(small, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mount("tmpfs", small, "tmpfs", 0, "size=4m"); err != nil {
		testenv.Skip(t, "cannot mount a small tmpfs: "+err.Error())
	}
	t.Cleanup(func() { _ = syscall.Unmount(small, 0) })
	keep := filepath.Join(small, "notes.txt")
	if err := os.WriteFile(keep, []byte("the user's own file"), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(lifeboatBin, "restore", "--store", url, "--dir", small)
	out, _ := cmd.CombinedOutput()
	if code := cmd.ProcessState.ExitCode(); code != 0 || !strings.Contains(string(out), `"level":"WARN","msg":"resume.fresh_start"`) ||
		!strings.Contains(string(out), "no space left on device") || !strings.Contains(string(out), "make --dir's volume larger") {
		t.Errorf("restore into a full disk: exit %d, output %q; want a fresh start with a WARN naming the full disk", code, out)
	}
	if b, err := os.ReadFile(keep); err != nil || string(b) != "the user's own file" {
		t.Errorf("the user's file was touched: %q, %v", b, err)
	}
	ents, _ := os.ReadDir(small)
	for _, e := range ents {
		if e.Name() != "notes.txt" {
			t.Errorf("restore left %s behind in the full directory", e.Name())
		}
	}
}

// TestWrongCredentials: a store that refuses the credentials is a clear
// error that says what to check, never shows the secret, and starts
// nothing.
func TestWrongCredentials(t *testing.T) {
	m := testenv.RequireMinIO(t)
	marker := filepath.Join(t.TempDir(), "ran")
	for _, args := range [][]string{
		{"ls", "--store", "s3://lifeboat-creds-test/x"},
		{"run", "--store", "s3://lifeboat-creds-test/x", "--dir", t.TempDir(), "--", "touch", marker},
	} {
		cmd := exec.Command(lifeboatBin, args...)
		cmd.Env = append(os.Environ(), "AWS_ENDPOINT_URL="+m.Endpoint, "AWS_ACCESS_KEY_ID="+m.AccessKey,
			"AWS_SECRET_ACCESS_KEY=wrong-secret-lifeboat-xyz", "AWS_REGION=us-east-1")
		out, _ := cmd.CombinedOutput()
		if cmd.ProcessState.ExitCode() == 0 || !strings.Contains(strings.ToLower(string(out)), "credentials") {
			t.Errorf("%v with a wrong secret: exit %d, %q; want an error about the credentials", args[0], cmd.ProcessState.ExitCode(), out)
		}
		if strings.Contains(string(out), "wrong-secret-lifeboat-xyz") {
			t.Errorf("%v: the secret appears in the output", args[0])
		}
	}
	if _, err := os.Stat(marker); err == nil {
		t.Errorf("the trainer started with a store that refused the credentials")
	}
}

// TestSecretsNeverLeak runs a whole cycle against MinIO (upload, metrics,
// preemption, restore, ls, verify) and looks for the access key and the
// secret key in every log line, error, metric and the termination message.
func TestSecretsNeverLeak(t *testing.T) {
	m := testenv.RequireMinIO(t)
	env := []string{"AWS_ENDPOINT_URL=" + m.Endpoint, "AWS_ACCESS_KEY_ID=" + m.AccessKey,
		"AWS_SECRET_ACCESS_KEY=" + m.SecretKey, "AWS_REGION=us-east-1", "LIFEBOAT_CREATE_BUCKET=true"}
	store := "s3://lifeboat-secrets-test/job"
	root := t.TempDir()
	tlog := filepath.Join(root, "termination-log")
	tr := startTrainer(t, env, "run", "--store", store, "--dir", filepath.Join(root, "pod"), "--settle", "100ms",
		"--scan-interval", "50ms", "--metrics-addr", "127.0.0.1:0", "--termination-log", tlog, "--log-level", "debug",
		"--", "python3", "-u", "testdata/trainer.py", "dirs")
	addr := listenAddr(t, tr.lb)
	for saved := 0; saved < 2; {
		if tr.next(t).Event == "saved" {
			saved++
		}
	}
	var metrics string
	for deadline := time.Now().Add(hangLimit); scrape(t, addr, "lifeboat_checkpoint_last_step") <= 0; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no commit seen in the metrics")
		}
	}
	if resp, err := http.Get("http://" + addr + "/metrics"); err == nil {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		metrics = string(b)
	}
	tr.signal(syscall.SIGTERM)
	tr.wait()
	outputs := map[string]string{"run's log": tr.stderr.String(), "metrics": metrics}
	b, _ := os.ReadFile(tlog)
	outputs["termination log"] = string(b)
	for _, args := range [][]string{
		{"restore", "--store", store, "--dir", filepath.Join(root, "restored")},
		{"ls", "--json", "--store", store},
		{"verify", "--store", store, "latest"},
		{"doctor", "--json", "--store", store},
		{"ls", "--store", "s3://lifeboat-secrets-missing-bucket/x"},
	} {
		cmd := exec.Command(lifeboatBin, args...)
		cmd.Env = append(os.Environ(), env[:4]...)
		out, _ := cmd.CombinedOutput()
		outputs[strings.Join(args[:1], " ")+" "+args[len(args)-1]] = string(out)
	}
	for name, out := range outputs {
		if out == "" {
			t.Errorf("%s is empty: nothing was checked", name)
		}
		for _, secret := range []string{m.AccessKey, m.SecretKey} {
			if strings.Contains(out, secret) {
				t.Errorf("a credential appears in %s", name)
			}
		}
	}
}
