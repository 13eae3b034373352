package s3

import (
	"bytes"
	"context"
	"errors"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/lifeboat-project/lifeboat/storage"
	"github.com/lifeboat-project/lifeboat/storage/storagetest"
)

// openUpload initiates a multipart upload of key in st and stores one
// part, as a process killed in the middle of a large Put leaves one.
func openUpload(t *testing.T, st *Store, key string) string {
	t.Helper()
	ctx := context.Background()
	id, err := st.core.NewMultipartUpload(ctx, st.cfg.Bucket, st.prefix+key, minio.PutObjectOptions{})
	if err != nil {
		t.Fatalf("NewMultipartUpload(%s): %v", key, err)
	}
	part := storagetest.Data(3, MinPartSize)
	if _, err := st.core.PutObjectPart(ctx, st.cfg.Bucket, st.prefix+key, id, 1, bytes.NewReader(part), int64(len(part)), minio.PutObjectPartOptions{}); err != nil {
		t.Fatalf("PutObjectPart(%s): %v", key, err)
	}
	return id
}

// swept returns the names Sweep offers under prefix, accepting each when
// remove is set.
func swept(t *testing.T, st *Store, prefix string, remove bool) []storage.Leftover {
	t.Helper()
	var got []storage.Leftover
	err := st.Sweep(context.Background(), prefix, func(l storage.Leftover) (bool, error) {
		got = append(got, l)
		return remove, nil
	})
	if err != nil {
		t.Fatalf("Sweep(%q): %v", prefix, err)
	}
	return got
}

func names(ls []storage.Leftover) []string {
	var out []string
	for _, l := range ls {
		out = append(out, l.Name)
	}
	slices.Sort(out)
	return out
}

// TestSweepAbortsOpenUploads: Sweep offers the open multipart uploads of
// keys under its prefix in this store's prefix only (not another store's
// in the same bucket), dated by their initiation, and aborts those
// accepted, by upload ID: the parts are gone, the others stay.
func TestSweepAbortsOpenUploads(t *testing.T) {
	s := newTestStore(t, testConfig(t))
	other := newTestStore(t, testConfig(t))
	before := time.Now().Add(-time.Minute) // the server's clock may differ a little
	chunk := openUpload(t, s, "chunks/aa/aabb")
	snap := openUpload(t, s, "snapshots/00000000000000000001/rank-00000-of-00001.json")
	theirs := openUpload(t, other, "chunks/aa/aabb")

	got := swept(t, s, "chunks/", false)
	if want := []string{"chunks/aa/aabb (upload " + chunk + ")"}; !slices.Equal(names(got), want) {
		t.Fatalf("Sweep(chunks/) offered %q, want %q", names(got), want)
	}
	if l := got[0]; l.Size != -1 || l.ModTime.Before(before) || l.ModTime.After(time.Now().Add(time.Minute)) {
		t.Errorf("leftover %+v: want size -1 and the upload's initiation", l)
	}
	if again := swept(t, s, "chunks/", true); len(again) != 1 {
		t.Fatalf("declined upload not offered again: %q", names(again))
	}
	if again := swept(t, s, "chunks/", true); len(again) != 0 {
		t.Fatalf("accepted upload still open: %q", names(again))
	}
	_, err := s.core.ListObjectParts(context.Background(), s.cfg.Bucket, s.prefix+"chunks/aa/aabb", chunk, 0, 0)
	var resp minio.ErrorResponse
	if !errors.As(err, &resp) || resp.Code != minio.NoSuchUpload {
		t.Errorf("ListObjectParts of the swept upload = %v, want NoSuchUpload", err)
	}
	if got := names(swept(t, s, "snapshots/", false)); len(got) != 1 || !strings.Contains(got[0], snap) {
		t.Errorf("Sweep(snapshots/) offered %q, want the upload %s", got, snap)
	}
	if got := names(swept(t, other, "", false)); len(got) != 1 || !strings.Contains(got[0], theirs) {
		t.Errorf("the other store's upload: Sweep offered %q, want %s", got, theirs)
	}
	swept(t, s, "", true)
	swept(t, other, "", true)
}

// gateReader hands out its first n bytes, then blocks until release is
// closed, then hands out the rest.
type gateReader struct {
	r       io.Reader
	n       int
	reached chan struct{}
	release chan struct{}
}

func (g *gateReader) Read(p []byte) (int, error) {
	if g.n == 0 && g.reached != nil {
		close(g.reached)
		g.reached = nil
		<-g.release
	}
	if g.n > 0 && len(p) > g.n {
		p = p[:g.n]
	}
	n, err := g.r.Read(p)
	g.n -= n
	return n, err
}

// TestSweepLivePutFails: aborting the upload of a Put in progress (a
// prune whose window is shorter than the uploaders') makes that Put fail,
// and nothing appears under its key.
func TestSweepLivePutFails(t *testing.T) {
	s := newTestStore(t, testConfig(t))
	b := storagetest.Data(4, 2*MinPartSize+100)
	r := &gateReader{r: bytes.NewReader(b), n: MinPartSize + 10, reached: make(chan struct{}), release: make(chan struct{})}
	reached := r.reached
	done := make(chan error, 1)
	go func() {
		_, err := s.Put(context.Background(), "chunks/cc/ccdd", r, int64(len(b)), storage.PutOptions{})
		done <- err
	}()
	<-reached // the upload is initiated: its first part is read
	var got []storage.Leftover
	for len(got) == 0 {
		got = swept(t, s, "chunks/", true)
	}
	close(r.release)
	if err := <-done; err == nil {
		t.Fatal("a Put whose upload was aborted succeeded")
	}
	if _, err := s.Stat(context.Background(), "chunks/cc/ccdd"); !errors.Is(err, storage.ErrNotExist) {
		t.Errorf("Stat after the aborted Put = %v, want ErrNotExist", err)
	}
}
