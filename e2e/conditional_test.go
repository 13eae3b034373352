package e2e

import (
	"crypto/rand"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lifeboat-project/lifeboat/internal/testenv"
	"github.com/lifeboat-project/lifeboat/storage"
)

// TestConditionalWritesProbed: before anything is committed, run and
// sidecar check that an S3 store refuses a second create-only write. The
// test MinIO server does, once per store (the second start reads the
// record); behind an endpoint that drops If-None-Match (a server without
// conditional writes) run exits 125 naming the missing feature and the
// flag, and the trainer never starts; --s3-unsafe-no-conditional-writes
// runs anyway with a WARN; doctor reports the probe.
func TestConditionalWritesProbed(t *testing.T) {
	m := testenv.RequireMinIO(t)
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	url := "s3://lifeboat-cond-" + hex.EncodeToString(b) + "/job"
	env := func(endpoint string) []string {
		return []string{"AWS_ENDPOINT_URL=" + endpoint, "AWS_ACCESS_KEY_ID=" + m.AccessKey,
			"AWS_SECRET_ACCESS_KEY=" + m.SecretKey, "AWS_REGION=us-east-1", "LIFEBOAT_CREATE_BUCKET=true", "LIFEBOAT_S3_BUCKET_LOOKUP=path"}
	}
	marker := filepath.Join(t.TempDir(), "trainer-ran")
	trainer := []string{"--", "sh", "-c", `touch "$0"`, marker}
	runArgs := func(dir string, extra ...string) []string {
		return append(append([]string{"run", "--store", url, "--dir", dir}, extra...), trainer...)
	}

	code, _, errOut := lbRun(t, env(m.Endpoint), runArgs(t.TempDir())...)
	if code != 0 || !strings.Contains(errOut, `"msg":"store.conditional_writes"`) || !strings.Contains(errOut, `"cached":false`) {
		t.Fatalf("first run on MinIO: exit %d, want 0 and a fresh probe:\n%s", code, errOut)
	}
	code, _, errOut = lbRun(t, env(m.Endpoint), runArgs(t.TempDir())...)
	if code != 0 || !strings.Contains(errOut, `"cached":true`) {
		t.Fatalf("second run on MinIO: exit %d, want 0 and the first probe's record:\n%s", code, errOut)
	}
	if s := openStore(t, env(m.Endpoint), url); len(storeObjects(t, s)) != 1 {
		t.Errorf("the probes left %v in the store, want only %s", storeObjects(t, s), storage.ProbeRecordKey)
	}

	stripper := testenv.NewConditionStripper(t, m)
	url = "s3://lifeboat-cond-" + hex.EncodeToString(b) + "/other" // no record here
	_ = os.Remove(marker)
	code, _, errOut = lbRun(t, env(stripper.URL), runArgs(t.TempDir())...)
	if code != 125 || !strings.Contains(errOut, "If-None-Match") || !strings.Contains(errOut, "--s3-unsafe-no-conditional-writes") {
		t.Fatalf("run on a store without conditional writes: exit %d, want 125 naming the feature and the flag:\n%s", code, errOut)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Error("the trainer ran on a store that was refused")
	}
	code, _, errOut = lbRun(t, env(stripper.URL), runArgs(t.TempDir(), "--s3-unsafe-no-conditional-writes")...)
	if code != 0 || !strings.Contains(errOut, `"msg":"store.conditional_writes_unsafe"`) {
		t.Fatalf("run with --s3-unsafe-no-conditional-writes: exit %d, want 0 and a WARN:\n%s", code, errOut)
	}
	if want := "then unset --s3-unsafe-no-conditional-writes (LIFEBOAT_S3_UNSAFE_NO_CONDITIONAL_WRITES)"; !strings.Contains(errOut, want) {
		t.Errorf("the WARN's hint does not say %q:\n%s", want, errOut)
	}
	if _, err := os.Stat(marker); err != nil {
		t.Error("the trainer did not run with --s3-unsafe-no-conditional-writes")
	}
	code, out, _ := lbRun(t, env(stripper.URL), "doctor", "--store", url)
	if code != 1 || !strings.Contains(out, "conditional writes: NOT enforced") {
		t.Errorf("doctor on a store without conditional writes: exit %d, want 1 and the probe's verdict:\n%s", code, out)
	}
	code, out, _ = lbRun(t, env(m.Endpoint), "doctor", "--store", url)
	if !strings.Contains(out, "conditional writes: enforced") {
		t.Errorf("doctor on MinIO: exit %d, want the probe passed:\n%s", code, out)
	}
}
