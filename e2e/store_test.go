package e2e

import (
	"crypto/rand"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestUploadLimitFileStore: --upload-limit paces uploads to a file://
// store as it does to S3. A trainer saves 4 MB and exits; with a limit of
// 1 MB/s, lifeboat cannot have stored them in less than about 3 s (the
// first MiB is free). Only a lower bound, half the theoretical 4 s, is
// checked: a busy machine makes an upload slower, never faster. Without
// the limit the same run takes well under a second; before the limit
// applied to every store, --upload-limit was silently ignored here.
func TestUploadLimitFileStore(t *testing.T) {
	const size, limit = 4_000_000, 1_000_000
	dir := t.TempDir()
	src := filepath.Join(t.TempDir(), "model.bin")
	data := make([]byte, size)
	_, _ = rand.Read(data)
	if err := os.WriteFile(src, data, 0o644); err != nil {
		t.Fatal(err)
	}
	url := "file://" + filepath.Join(t.TempDir(), "store")
	start := time.Now()
	p := startEnv(t, "plain", nil, "run", "--store", url, "--dir", dir, "--upload-limit", "1MB", "--",
		"sh", "-c", `mkdir -p "$1/step-000100" && cp "$2" "$1/step-000100/model.bin"`, "sh", dir, src)
	if code := p.wait(); code != 0 {
		t.Fatalf("exit %d; stderr:\n%s", code, tail(p.stderr.String()))
	}
	took := time.Since(start)
	if got := latestComplete(lsJSON(t, nil, url)); got != 100 {
		t.Fatalf("latest complete step %d, want 100; stderr:\n%s", got, tail(p.stderr.String()))
	}
	if least := time.Duration(float64(size) / limit * float64(time.Second) / 2); took < least {
		t.Errorf("%d bytes went to a file:// store with --upload-limit 1MB in %v, want at least %v: the limit was not applied", size, took, least)
	}
}

// TestStoreUnknownScheme: a store URL whose scheme no backend knows is a
// usage error (exit 2) that names the forms of the schemes known.
func TestStoreUnknownScheme(t *testing.T) {
	for _, args := range [][]string{
		{"ls", "--store", "gs://ckpt/job"},
		{"run", "--store", "gs://ckpt/job", "--dir", t.TempDir(), "--", "true"},
	} {
		code, _, stderr := lbRun(t, nil, args...)
		if code != 2 {
			t.Errorf("lifeboat %s: exit %d, want 2; stderr %q", strings.Join(args, " "), code, stderr)
		}
		for _, want := range []string{`unknown scheme "gs"`, "s3://bucket/prefix", "file:///abs/path", "--store (LIFEBOAT_STORE)"} {
			if !strings.Contains(stderr, want) {
				t.Errorf("lifeboat %s: stderr %q does not say %q", strings.Join(args, " "), stderr, want)
			}
		}
	}
}
