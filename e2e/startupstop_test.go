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

// TestStopDuringRestoreStopsTheJob: rank 0 of a 2-rank job is SIGTERMed
// while it restores its checkpoint over a slow link; rank 1 restored and
// trains. Rank 0 exits 143 and writes a stop record that says so, and rank
// 1 stops as on preemption (143) instead of training on, or waiting in a
// collective for rank 0 until its timeout.
func TestStopDuringRestoreStopsTheJob(t *testing.T) {
	m := testenv.RequireMinIO(t)
	b := make([]byte, 5)
	_, _ = rand.Read(b)
	store := "s3://lifeboat-startup-stop-" + hex.EncodeToString(b) + "/job"
	direct := []string{"AWS_ENDPOINT_URL=" + m.Endpoint, "AWS_ACCESS_KEY_ID=" + m.AccessKey,
		"AWS_SECRET_ACCESS_KEY=" + m.SecretKey, "AWS_REGION=us-east-1", "LIFEBOAT_CREATE_BUCKET=true"}
	// Step 7 of both ranks, rank 0's large enough to restore slowly.
	for r, size := range []int{96 << 20, 1 << 20} {
		src := t.TempDir()
		rank := []string{"--rank", "0", "--world-size", "2"}
		rank[1] = string(rune('0' + r))
		sc := startEnv(t, "plain", direct, append([]string{"sidecar", "--store", store, "--dir", src, "--settle", "1h"}, rank...)...)
		waitFor(t, sc, func() bool { return strings.Contains(sc.stderr.String(), "sidecar.started") })
		writeRandomFile(t, filepath.Join(src, "step-7", "model.bin"), size)
		sc.signal(syscall.SIGTERM)
		if code := sc.wait(); code != 0 {
			t.Fatalf("sidecar of rank %d exited %d; stderr:\n%s", r, code, tail(sc.stderr.String()))
		}
	}
	if got := latestComplete(lsJSON(t, direct, store)); got != 7 {
		t.Fatalf("latest complete step %d, want 7", got)
	}

	dir1 := t.TempDir()
	rank1 := startEnv(t, "plain", direct, "run", "--store", store, "--dir", dir1, "--rank", "1", "--world-size", "2",
		"--coord-interval", "100ms", "--log-format", "json", "--termination-log", filepath.Join(t.TempDir(), "termination-log"),
		"--", "sh", "-c", `trap 'exit 0' TERM; touch "$LIFEBOAT_DIR/ready"; while kill -0 $PPID; do sleep 0.05; done`)
	waitFile(t, rank1, filepath.Join(dir1, "ready"))

	u, _ := url.Parse(m.Endpoint)
	proxy := testenv.NewFaultProxy(t, u.Host)
	proxy.Set(testenv.Slow)
	slow := append([]string{}, direct...)
	slow[0] = "AWS_ENDPOINT_URL=" + proxy.URL()
	dir0 := t.TempDir()
	rank0 := startEnv(t, "plain", slow, "run", "--store", store, "--dir", dir0, "--rank", "0", "--world-size", "2",
		"--coord-interval", "100ms", "--log-format", "json", "--termination-log", filepath.Join(t.TempDir(), "termination-log"),
		"--", "touch", filepath.Join(dir0, "started"))
	waitFor(t, rank0, func() bool {
		ents, _ := os.ReadDir(dir0)
		for _, e := range ents {
			if strings.HasPrefix(e.Name(), ".lifeboat-restore-") {
				return true // the restore is under way
			}
		}
		return false
	})
	rank0.signal(syscall.SIGTERM)
	if code := rank0.wait(); code != 143 {
		t.Errorf("rank 0 exited %d, want 143; stderr:\n%s", code, tail(rank0.stderr.String()))
	}
	if code := rank1.wait(); code != 143 {
		t.Errorf("rank 1 exited %d, want 143; stderr:\n%s", code, tail(rank1.stderr.String()))
	}
	if log := rank1.stderr.String(); !strings.Contains(log, `"reason":"SIGTERM during start-up (store open and restore)"`) {
		t.Errorf("rank 1 does not name rank 0's stop during start-up:\n%s", tail(log))
	}
}
