package e2e

import (
	"crypto/rand"
	"encoding/hex"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/lifeboat-project/lifeboat/internal/testenv"
)

// stopDuringStartup asserts what a stop during lifeboat's start-up must
// give: the preemption exit code, the log line a user greps for, the
// termination log, no trainer started and nothing of a restore left in dir.
func stopDuringStartup(t *testing.T, p *lb, termLog, dir, started string) {
	t.Helper()
	if code := p.wait(); code != 143 {
		t.Errorf("exit %d, want 143 (a preemption, which the Job retries); stderr:\n%s", code, tail(p.stderr.String()))
	}
	if !strings.Contains(p.stderr.String(), `"msg":"lifeboat.stopped_during_startup"`) {
		t.Errorf("no lifeboat.stopped_during_startup line; stderr:\n%s", tail(p.stderr.String()))
	}
	if termLog != "" {
		b, err := os.ReadFile(termLog)
		if err != nil || !strings.Contains(string(b), "stopped by SIGTERM during start-up") {
			t.Errorf("termination log %q, %v; want the start-up stop", b, err)
		}
	}
	if started != "" {
		if _, err := os.Stat(started); err == nil {
			t.Errorf("the trainer was started after the stop")
		}
	}
	if dir != "" {
		ents, _ := os.ReadDir(dir)
		for _, e := range ents {
			if strings.HasPrefix(e.Name(), ".lifeboat-restore-") {
				t.Errorf("the interrupted restore left %s in --dir", e.Name())
			}
		}
	}
}

// TestStopWhileOpeningTheStore: SIGTERM while lifeboat waits for a store
// that does not answer. Uncaught, the signal would kill lifeboat with Go's
// default (exit 2 as PID 1, nothing logged), which the shipped Job maps to
// a failed Job.
func TestStopWhileOpeningTheStore(t *testing.T) {
	m := testenv.RequireMinIO(t)
	for _, mode := range modes {
		t.Run(mode, func(t *testing.T) {
			u, _ := url.Parse(m.Endpoint)
			proxy := testenv.NewFaultProxy(t, u.Host)
			proxy.Set(testenv.Hang)
			root := t.TempDir()
			termLog := filepath.Join(root, "termination-log")
			started := filepath.Join(root, "started")
			env := []string{"AWS_ENDPOINT_URL=" + proxy.URL(), "AWS_ACCESS_KEY_ID=" + m.AccessKey,
				"AWS_SECRET_ACCESS_KEY=" + m.SecretKey, "AWS_REGION=us-east-1"}
			p := startEnv(t, mode, env, "run", "--store", "s3://lifeboat-startup/job", "--dir", filepath.Join(root, "ckpt"),
				"--termination-log", termLog, "--", "touch", started)
			waitFor(t, p, func() bool { return proxy.Accepted() > 0 }) // lifeboat is waiting for the store
			p.signal(syscall.SIGTERM)
			stopDuringStartup(t, p, termLog, "", started)
		})
	}
	// The sidecar and the init container's restore likewise.
	for _, cmd := range []string{"sidecar", "restore"} {
		t.Run(cmd, func(t *testing.T) {
			u, _ := url.Parse(m.Endpoint)
			proxy := testenv.NewFaultProxy(t, u.Host)
			proxy.Set(testenv.Hang)
			env := []string{"AWS_ENDPOINT_URL=" + proxy.URL(), "AWS_ACCESS_KEY_ID=" + m.AccessKey,
				"AWS_SECRET_ACCESS_KEY=" + m.SecretKey, "AWS_REGION=us-east-1"}
			p := startEnv(t, "plain", env, cmd, "--store", "s3://lifeboat-startup/job", "--dir", filepath.Join(t.TempDir(), "ckpt"))
			waitFor(t, p, func() bool { return proxy.Accepted() > 0 })
			p.signal(syscall.SIGTERM)
			stopDuringStartup(t, p, "", "", "")
		})
	}
}

// TestStopWhileRestoring: SIGTERM in the middle of restoring a checkpoint
// over a slow link. The restore is cancelled, its preallocated files are
// removed, and lifeboat exits as a preemption, instead of being killed by
// the signal with a full-size .lifeboat-restore-* left behind.
func TestStopWhileRestoring(t *testing.T) {
	m := testenv.RequireMinIO(t)
	b := make([]byte, 5)
	_, _ = rand.Read(b)
	store := "s3://lifeboat-restore-stop-" + hex.EncodeToString(b) + "/job"
	direct := []string{"AWS_ENDPOINT_URL=" + m.Endpoint, "AWS_ACCESS_KEY_ID=" + m.AccessKey,
		"AWS_SECRET_ACCESS_KEY=" + m.SecretKey, "AWS_REGION=us-east-1", "LIFEBOAT_CREATE_BUCKET=true"}
	src := t.TempDir()
	sc := startEnv(t, "plain", direct, "sidecar", "--store", store, "--dir", src, "--settle", "1h")
	waitFor(t, sc, func() bool { return strings.Contains(sc.stderr.String(), "sidecar.started") })
	writeRandomFile(t, filepath.Join(src, "step-7", "model.bin"), 96<<20)
	sc.signal(syscall.SIGTERM)
	if code := sc.wait(); code != 0 || latestComplete(lsJSON(t, direct, store)) != 7 {
		t.Fatalf("sidecar exit %d; stderr:\n%s", code, tail(sc.stderr.String()))
	}

	for _, mode := range modes {
		t.Run(mode, func(t *testing.T) {
			u, _ := url.Parse(m.Endpoint)
			proxy := testenv.NewFaultProxy(t, u.Host)
			proxy.Set(testenv.Slow)
			root := t.TempDir()
			dir := filepath.Join(root, "ckpt")
			termLog := filepath.Join(root, "termination-log")
			started := filepath.Join(root, "started")
			env := append([]string{}, direct...)
			env[0] = "AWS_ENDPOINT_URL=" + proxy.URL()
			p := startEnv(t, mode, env, "run", "--store", store, "--dir", dir,
				"--termination-log", termLog, "--", "touch", started)
			waitFor(t, p, func() bool {
				ents, _ := os.ReadDir(dir)
				for _, e := range ents {
					if strings.HasPrefix(e.Name(), ".lifeboat-restore-") {
						return true // the restore is under way
					}
				}
				return false
			})
			p.signal(syscall.SIGTERM)
			stopDuringStartup(t, p, termLog, dir, started)
		})
	}
	t.Run("restore", func(t *testing.T) {
		u, _ := url.Parse(m.Endpoint)
		proxy := testenv.NewFaultProxy(t, u.Host)
		proxy.Set(testenv.Slow)
		dir := filepath.Join(t.TempDir(), "ckpt")
		env := append([]string{}, direct...)
		env[0] = "AWS_ENDPOINT_URL=" + proxy.URL()
		p := startEnv(t, "plain", env, "restore", "--store", store, "--dir", dir)
		waitFor(t, p, func() bool {
			ents, _ := os.ReadDir(dir)
			for _, e := range ents {
				if strings.HasPrefix(e.Name(), ".lifeboat-restore-") {
					return true
				}
			}
			return false
		})
		p.signal(syscall.SIGTERM)
		stopDuringStartup(t, p, "", dir, "")
	})
}

// writeRandomFile writes size random bytes to path, creating its directory.
func writeRandomFile(t *testing.T, path string, size int) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	b := make([]byte, size)
	_, _ = rand.Read(b)
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}
