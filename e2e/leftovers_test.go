package e2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"io/fs"
	neturl "net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/lifeboat-project/lifeboat/internal/reserved"
	"github.com/lifeboat-project/lifeboat/internal/testenv"
)

// tempFiles returns the temporary files of unfinished Puts in the
// directory store at root, with their modification times.
func tempFiles(t *testing.T, root string) map[string]time.Time {
	t.Helper()
	found := map[string]time.Time{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if os.IsNotExist(err) {
				return nil // renamed or removed while walking
			}
			return err
		}
		if d.Type().IsRegular() && strings.HasPrefix(d.Name(), reserved.TempPrefix) {
			if fi, err := d.Info(); err == nil {
				found[path] = fi.ModTime()
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return found
}

// TestPruneRemovesKilledSidecarTempFiles: a sidecar SIGKILLed in the
// middle of an upload to a file:// store (a native sidecar restarted
// after an OOM kill) leaves the temporary files of its unfinished Puts in
// chunks/. A prune inside --min-chunk-age leaves them (they could be a
// live writer's), a prune after it removes them and says how many, so
// nothing of a killed upload outlives the prune window
// (docs/FORMAT.md, "What a prune leaves"). Before prune swept them, no
// prune ever removed them and every kill added more.
func TestPruneRemovesKilledSidecarTempFiles(t *testing.T) {
	root := t.TempDir()
	storeDir, dir := filepath.Join(root, "store"), filepath.Join(root, "shared")
	url := "file://" + storeDir
	if err := os.MkdirAll(filepath.Join(dir, "step-000100"), 0o755); err != nil {
		t.Fatal(err)
	}
	// 48 MiB at 4 MB/s: six chunks, each Put's temporary file growing
	// for seconds.
	if err := os.WriteFile(filepath.Join(dir, "step-000100", "model.pdparams"), pickleBytes(bytes.Repeat([]byte("w"), 48<<20)), 0o644); err != nil {
		t.Fatal(err)
	}
	p := start(t, "plain", "sidecar", "--store", url, "--dir", dir, "--settle", "1s", "--upload-limit", "4MB", "--keep", "0")
	// Stopped, the sidecar renames nothing: the temporary files seen now
	// are those the kill leaves. Should it have renamed the one seen
	// before it stopped, it goes on until the next.
	var left map[string]time.Time
	for len(left) == 0 {
		waitFor(t, p, func() bool { return len(tempFiles(t, filepath.Join(storeDir, "chunks"))) > 0 })
		p.signal(syscall.SIGSTOP)
		if left = tempFiles(t, storeDir); len(left) == 0 {
			p.signal(syscall.SIGCONT)
		}
	}
	p.signal(syscall.SIGKILL)
	if code := p.wait(); code != 128+int(syscall.SIGKILL) {
		t.Fatalf("sidecar exit %d, want %d (SIGKILL); stderr:\n%s", code, 128+int(syscall.SIGKILL), p.stderr.String())
	}
	if got := tempFiles(t, storeDir); len(got) != len(left) {
		t.Fatalf("temporary files changed after the kill: %v, then %v", left, got)
	}

	prune := func(age string) string {
		t.Helper()
		out, err := exec.Command(lifeboatBin, "prune", "--store", url, "--keep", "3", "--min-chunk-age", age, "--log-format", "json").CombinedOutput()
		if err != nil {
			t.Fatalf("prune --min-chunk-age %s: %v\n%s", age, err, out)
		}
		return string(out)
	}

	// Inside the window: they could be a live writer's; kept.
	out := prune("1h")
	if got := tempFiles(t, storeDir); len(got) != len(left) {
		t.Fatalf("prune --min-chunk-age 1h removed temporary files younger than 1h: %d left of %d\n%s", len(got), len(left), out)
	}
	if !strings.Contains(out, `"young_leftovers":`+strconv.Itoa(len(left))) {
		t.Errorf("prune inside the window does not say it kept %d leftovers:\n%s", len(left), out)
	}

	// After the window: removed. Wait until the newest is older than
	// 1s by its own time, so the prune below runs after the window.
	var newest time.Time
	for _, mt := range left {
		if mt.After(newest) {
			newest = mt
		}
	}
	time.Sleep(time.Until(newest.Add(1500 * time.Millisecond)))
	out = prune("1s")
	if got := tempFiles(t, storeDir); len(got) != 0 {
		t.Fatalf("prune --min-chunk-age 1s left the temporary files of the killed upload: %v\n%s", got, out)
	}
	if !strings.Contains(out, `"deleted_leftovers":`+strconv.Itoa(len(left))) {
		t.Errorf("prune does not log deleted_leftovers %d:\n%s", len(left), out)
	}
	if !strings.Contains(out, "leftovers of unfinished uploads") {
		t.Errorf("prune does not print what it removed:\n%s", out)
	}
}

// TestPruneAbortsKilledMultipartUpload: a process killed in the middle of
// a multipart upload leaves it open on S3, which keeps and bills its
// parts. lifeboat prune leaves such an upload under its store's prefix
// while it is younger than --min-chunk-age (a live Put may still complete
// it), aborts it after, and never touches an upload under another prefix
// of the bucket. The upload is made here through minio-go's core API, as
// a killed Put leaves it: a sidecar's chunks (8 MiB) fit in one PUT of the
// default 32 MiB part size, so a sidecar opens no multipart upload.
// Before prune swept uploads, it stayed open.
func TestPruneAbortsKilledMultipartUpload(t *testing.T) {
	m := testenv.RequireMinIO(t)
	ctx := context.Background()
	u, err := neturl.Parse(m.Endpoint)
	if err != nil {
		t.Fatal(err)
	}
	client, err := minio.New(u.Host, &minio.Options{Creds: credentials.NewStaticV4(m.AccessKey, m.SecretKey, ""), Region: "us-east-1"})
	if err != nil {
		t.Fatal(err)
	}
	core := minio.Core{Client: client}
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	bucket := "lifeboat-e2e-" + hex.EncodeToString(b)
	if err := client.MakeBucket(ctx, bucket, minio.MakeBucketOptions{Region: "us-east-1"}); err != nil {
		t.Fatal(err)
	}
	url := "s3://" + bucket + "/job"
	env := append(os.Environ(), "AWS_ENDPOINT_URL="+m.Endpoint, "AWS_ACCESS_KEY_ID="+m.AccessKey,
		"AWS_SECRET_ACCESS_KEY="+m.SecretKey, "AWS_REGION=us-east-1")
	part := bytes.Repeat([]byte("p"), 5<<20)
	open := func(key string) string {
		t.Helper()
		id, err := core.NewMultipartUpload(ctx, bucket, key, minio.PutObjectOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := core.PutObjectPart(ctx, bucket, key, id, 1, bytes.NewReader(part), int64(len(part)), minio.PutObjectPartOptions{}); err != nil {
			t.Fatal(err)
		}
		return id
	}
	openUploads := func() []string {
		t.Helper()
		var ids []string
		for up := range client.ListIncompleteUploads(ctx, bucket, "", true) {
			if up.Err != nil {
				t.Fatal(up.Err)
			}
			ids = append(ids, up.Key+" "+up.UploadID)
		}
		slices.Sort(ids)
		return ids
	}
	ours := "job/chunks/ab/" + strings.Repeat("ab", 32)
	theirs := "other/chunks/ab/" + strings.Repeat("ab", 32)
	ourID, theirID := open(ours), open(theirs)
	opened := time.Now()
	both := []string{ours + " " + ourID, theirs + " " + theirID}
	slices.Sort(both)

	prune := func(age string) string {
		t.Helper()
		cmd := exec.Command(lifeboatBin, "prune", "--store", url, "--keep", "3", "--min-chunk-age", age, "--log-format", "json")
		cmd.Env = env
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("prune --min-chunk-age %s: %v\n%s", age, err, out)
		}
		return string(out)
	}
	out := prune("1h")
	if got := openUploads(); !slices.Equal(got, both) {
		t.Fatalf("after prune --min-chunk-age 1h, open uploads %q, want %q (ours is younger than 1h)\n%s", got, both, out)
	}
	if !strings.Contains(out, `"young_leftovers":1`) {
		t.Errorf("prune inside the window does not say it kept the upload:\n%s", out)
	}

	// After the window, by the test's clock; the server stamped the
	// upload before NewMultipartUpload returned.
	time.Sleep(time.Until(opened.Add(1500 * time.Millisecond)))
	out = prune("1s")
	if got, want := openUploads(), []string{theirs + " " + theirID}; !slices.Equal(got, want) {
		t.Fatalf("after prune --min-chunk-age 1s, open uploads %q, want only the other prefix's %q\n%s", got, want, out)
	}
	if !strings.Contains(out, `"deleted_leftovers":1`) {
		t.Errorf("prune does not log the aborted upload:\n%s", out)
	}
	if err := core.AbortMultipartUpload(ctx, bucket, theirs, theirID); err != nil {
		t.Error(err)
	}
}
