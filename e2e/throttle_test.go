package e2e

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/lifeboat-project/lifeboat/internal/testenv"
)

// TestThrottledStart: a store that answers each request with 503
// SlowDown twice before it serves it, as S3 throttles a busy prefix, is
// asked again, from the first request on: lifeboat restore and run's
// start resume the committed step. A store that throttles everything
// fails the start (run exits 125) with the server's status, and the
// trainer never starts, fresh or otherwise. On the code before, the first
// 503 (the question about the bucket when the store is opened) failed
// every start: the job could not resume while the prefix was throttled.
func TestThrottledStart(t *testing.T) {
	m := testenv.RequireMinIO(t)
	minio := storeKinds()[1]
	url, env := minio.url(t), minio.env(t)
	saveOne(t, env, url, t.TempDir(), 300, 1000)
	sd := testenv.NewSlowDown(t, m, 2)
	throttled := append(slices.Clone(env), "AWS_ENDPOINT_URL="+sd.URL)

	if code, out := runLifeboat(t, throttled, "restore", "--store", url, "--dir", t.TempDir()); code != 0 || !strings.Contains(out, "restored step 300 ") {
		t.Fatalf("restore through the throttling server: exit %d\n%s\nwant step 300", code, out)
	}
	resumed := filepath.Join(t.TempDir(), "resumed")
	p := startEnv(t, "plain", throttled, "run", "--store", url, "--dir", t.TempDir(), "--", "sh", "-c", `echo "$LIFEBOAT_RESUME_STEP" > `+resumed)
	waitExit(t, p, 0)
	if b, err := os.ReadFile(resumed); err != nil || strings.TrimSpace(string(b)) != "300" {
		t.Errorf("run through the throttling server: the trainer got LIFEBOAT_RESUME_STEP %q (%v), want 300\n%s", b, err, tail(p.stderr.String()))
	}
	if sd.Refused.Load() == 0 {
		t.Error("the server refused nothing")
	}

	sd.SetRefusals(-1)
	started := filepath.Join(t.TempDir(), "started")
	p = startEnv(t, "plain", throttled, "run", "--store", url, "--dir", t.TempDir(), "--", "touch", started)
	waitExit(t, p, 125)
	if log := p.stderr.String(); !strings.Contains(log, "503") || strings.Contains(log, "resume.fresh_start") {
		t.Errorf("run through a server that throttles everything: want its 503 and no fresh start\n%s", tail(log))
	}
	if _, err := os.Stat(started); err == nil {
		t.Error("the trainer started although the store throttled every request")
	}
}
