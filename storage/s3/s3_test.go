package s3

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/lifeboat-project/lifeboat/internal/testenv"
	"github.com/lifeboat-project/lifeboat/storage"
	"github.com/lifeboat-project/lifeboat/storage/storagetest"
)

// testBucket holds every test's objects, each test under its own prefix.
const testBucket = "lifeboat-test"

func testConfig(t *testing.T) Config {
	t.Helper()
	m := testenv.RequireMinIO(t)
	return Config{
		Endpoint:     m.Endpoint,
		Bucket:       testBucket,
		Prefix:       "t-" + strings.ToLower(rand.Text()[:12]),
		AccessKey:    m.AccessKey,
		SecretKey:    m.SecretKey,
		CreateBucket: true,
		BucketLookup: LookupPath,
		PartSize:     MinPartSize,
		Parallelism:  3,
	}
}

func newTestStore(t *testing.T, cfg Config) *Store {
	t.Helper()
	s, err := New(context.Background(), cfg)
	if err != nil {
		t.Fatalf("New(%v): %v", cfg, err)
	}
	return s
}

func TestConformance(t *testing.T) {
	testenv.RequireMinIO(t)
	storagetest.Run(t, func(t *testing.T) storage.Store { return newTestStore(t, testConfig(t)) })
}

// TestConformanceDefaults runs the suite with the default part size and
// parallelism, the configuration users get.
func TestConformanceDefaults(t *testing.T) {
	testenv.RequireMinIO(t)
	storagetest.Run(t, func(t *testing.T) storage.Store {
		cfg := testConfig(t)
		cfg.PartSize, cfg.Parallelism = 0, 0
		return newTestStore(t, cfg)
	})
}

// incomplete lists the unfinished multipart uploads under the store's
// prefix. It lists the bucket's and keeps those: MinIO reads a listing's
// prefix as one object's whole key, and lists nothing for the store's.
func incomplete(t *testing.T, s *Store) []string {
	t.Helper()
	var ids []string
	for u := range s.client.ListIncompleteUploads(context.Background(), s.cfg.Bucket, "", true) {
		if u.Err != nil {
			t.Fatalf("ListIncompleteUploads: %v", u.Err)
		}
		if strings.HasPrefix(u.Key, s.prefix) {
			ids = append(ids, u.Key+" "+u.UploadID)
		}
	}
	return ids
}

func TestFailedPutAbortsMultipart(t *testing.T) {
	s := newTestStore(t, testConfig(t))
	b := storagetest.Data(1, 8*MinPartSize)
	for _, size := range []int64{int64(len(b)), -1} {
		// Cancelled half way.
		ctx, cancel := context.WithCancel(context.Background())
		r := &cancelAfter{r: bytes.NewReader(b), after: len(b) / 2, cancel: cancel}
		if _, err := s.Put(ctx, "big", r, size, storage.PutOptions{}); err == nil {
			t.Fatal("cancelled Put succeeded")
		}
		cancel()
		// Wrong checksum, found only at the end.
		_, err := s.Put(context.Background(), "big", bytes.NewReader(b), size, storage.PutOptions{SHA256: strings.Repeat("0", 64)})
		if !errors.Is(err, storage.ErrChecksum) {
			t.Fatalf("Put with wrong SHA256: %v", err)
		}
		// Short reader.
		if size > 0 {
			if _, err := s.Put(context.Background(), "big", bytes.NewReader(b[:len(b)-1]), size, storage.PutOptions{}); err == nil {
				t.Fatal("short Put succeeded")
			}
		}
	}
	if ids := incomplete(t, s); len(ids) != 0 {
		t.Fatalf("failed Puts left unfinished multipart uploads: %q", ids)
	}
	if _, err := s.Stat(context.Background(), "big"); !errors.Is(err, storage.ErrNotExist) {
		t.Fatalf("Stat after failed Puts: %v", err)
	}
}

type cancelAfter struct {
	r      io.Reader
	after  int
	read   int
	cancel context.CancelFunc
}

func (c *cancelAfter) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	if c.read += n; c.read >= c.after {
		c.cancel()
	}
	return n, err
}

// TestServerChecksums checks which checksum the server verifies and keeps
// for a single-PUT object: the caller's CRC32C, else the caller's SHA-256,
// else the CRC32C computed with the SHA-256 in the same pass; and that Stat
// reports the SHA-256 in every case, also for a multipart object whose
// caller gave it.
func TestServerChecksums(t *testing.T) {
	s := newTestStore(t, testConfig(t))
	ctx := context.Background()
	b := storagetest.Data(2, 1000)
	sum := sha256.Sum256(b)
	hexSum := hex.EncodeToString(sum[:])
	crc := crc32.Checksum(b, storage.CRC32CTable)
	crcValue := crc32cCheck(crc).value
	for _, tc := range []struct {
		name     string
		opts     storage.PutOptions
		wantAlgo string
		want     string
	}{
		{"no caller sum", storage.PutOptions{}, "CRC32C", crcValue},
		{"caller SHA-256", storage.PutOptions{SHA256: hexSum}, "SHA256", sha256Check(hexSum).value},
		{"caller SHA-256 and CRC32C", storage.PutOptions{SHA256: hexSum, CRC32C: crc}, "CRC32C", crcValue},
	} {
		t.Run(tc.name, func(t *testing.T) {
			key := "small-" + strings.ReplaceAll(tc.name, " ", "-")
			if _, err := s.Put(ctx, key, bytes.NewReader(b), -1, tc.opts); err != nil {
				t.Fatal(err)
			}
			oi, err := s.client.StatObject(ctx, s.cfg.Bucket, s.prefix+key, minio.StatObjectOptions{Checksum: true})
			if err != nil {
				t.Fatal(err)
			}
			got := map[string]string{"CRC32C": oi.ChecksumCRC32C, "SHA256": oi.ChecksumSHA256}
			if oi.ChecksumAlgorithm != tc.wantAlgo || got[tc.wantAlgo] != tc.want {
				t.Fatalf("server keeps %s %v, want %s %s", oi.ChecksumAlgorithm, got, tc.wantAlgo, tc.want)
			}
			if info, err := s.Stat(ctx, key); err != nil || info.SHA256 != hexSum {
				t.Fatalf("Stat = %+v, %v; want SHA256 %s", info, err, hexSum)
			}
		})
	}
	big := storagetest.Data(3, 2*MinPartSize+1)
	bigSum := sha256.Sum256(big)
	if _, err := s.Put(ctx, "big", bytes.NewReader(big), -1, storage.PutOptions{SHA256: hex.EncodeToString(bigSum[:])}); err != nil {
		t.Fatal(err)
	}
	if info, err := s.Stat(ctx, "big"); err != nil || info.SHA256 != hex.EncodeToString(bigSum[:]) {
		t.Fatalf("Stat(big) = %+v, %v; want SHA256 %x", info, err, bigSum)
	}
}

// TestPutFromMemory covers the single PUT that sends a caller's in-memory
// reader without copying it: from the reader's current offset, exactly size
// bytes, the offset advanced afterwards; a reader with fewer bytes left
// than size fails like any short read and stores nothing.
func TestPutFromMemory(t *testing.T) {
	s := newTestStore(t, testConfig(t))
	ctx := context.Background()
	b := storagetest.Data(4, 3000)
	want := b[1000:2500]
	h := sha256.Sum256(want)
	r := bytes.NewReader(b)
	if _, err := r.Seek(1000, io.SeekStart); err != nil {
		t.Fatal(err)
	}
	info, err := s.Put(ctx, "mem", r, int64(len(want)), storage.PutOptions{SHA256: hex.EncodeToString(h[:])})
	if err != nil || info.Size != int64(len(want)) || info.SHA256 != hex.EncodeToString(h[:]) {
		t.Fatalf("Put = %+v, %v", info, err)
	}
	if r.Len() != 500 {
		t.Errorf("reader has %d bytes left after Put, want 500", r.Len())
	}
	rc, err := s.Get(ctx, "mem", 0, -1)
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(rc)
	rc.Close()
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("Get = %d bytes, %v; want the 1500 bytes from offset 1000", len(got), err)
	}

	short := bytes.NewReader(b[:100])
	hs := sha256.Sum256(b[:100])
	if _, err := s.Put(ctx, "short", short, 200, storage.PutOptions{SHA256: hex.EncodeToString(hs[:])}); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("Put of 100 bytes claimed as 200: %v, want io.ErrUnexpectedEOF", err)
	}
	if _, err := s.Stat(ctx, "short"); !errors.Is(err, storage.ErrNotExist) {
		t.Fatalf("Stat(short) after a failed Put: %v, want ErrNotExist", err)
	}
}

func TestWrongCredentials(t *testing.T) {
	for _, tc := range []struct {
		name     string
		mutate   func(*Config)
		secretOf func(Config) string
	}{
		{"secret", func(c *Config) { c.SecretKey = "wrong-secret-" + rand.Text() }, func(c Config) string { return c.SecretKey }},
		{"access key", func(c *Config) { c.AccessKey = "nobody" + strings.ToLower(rand.Text()[:8]) }, func(c Config) string { return c.SecretKey }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig(t)
			tc.mutate(&cfg)
			_, err := New(context.Background(), cfg)
			if err == nil {
				t.Fatal("New with wrong credentials succeeded")
			}
			msg := err.Error()
			for _, want := range []string{"refused the credentials", cfg.Endpoint, testBucket, "check AccessKey and SecretKey"} {
				if !strings.Contains(msg, want) {
					t.Errorf("error %q does not mention %q", msg, want)
				}
			}
			if strings.Contains(msg, tc.secretOf(cfg)) {
				t.Errorf("error %q contains the secret key", msg)
			}
			if !storage.IsPermanent(err) {
				t.Errorf("error %q is not permanent", msg)
			}
		})
	}
}

func TestMissingBucket(t *testing.T) {
	cfg := testConfig(t)
	cfg.Bucket = "lifeboat-missing-" + strings.ToLower(rand.Text()[:10])
	cfg.CreateBucket = false
	_, err := New(context.Background(), cfg)
	if err == nil {
		t.Fatal("New with a missing bucket succeeded")
	}
	for _, want := range []string{cfg.Bucket, "does not exist", cfg.Endpoint, "create it or set CreateBucket"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
	if !storage.IsPermanent(err) {
		t.Errorf("error %q is not permanent", err)
	}
}

func TestCreateBucket(t *testing.T) {
	cfg := testConfig(t)
	cfg.Bucket = "lifeboat-create-" + strings.ToLower(rand.Text()[:10])
	cfg.CreateBucket = true
	s := newTestStore(t, cfg)
	t.Cleanup(func() {
		ctx := context.Background()
		for oi := range s.client.ListObjectsIter(ctx, cfg.Bucket, minio.ListObjectsOptions{Recursive: true}) {
			s.client.RemoveObject(ctx, cfg.Bucket, oi.Key, minio.RemoveObjectOptions{})
		}
		if err := s.client.RemoveBucket(ctx, cfg.Bucket); err != nil {
			t.Errorf("remove bucket: %v", err)
		}
	})
	ok, err := s.client.BucketExists(context.Background(), cfg.Bucket)
	if err != nil || !ok {
		t.Fatalf("bucket %s after New with CreateBucket: exists %v, %v", cfg.Bucket, ok, err)
	}
	if _, err := s.Put(context.Background(), "k", strings.NewReader("x"), 1, storage.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	// A second store on the now existing bucket works as well.
	newTestStore(t, cfg)
}

// closedPort returns a 127.0.0.1 port that nothing listens on.
func closedPort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

func TestUnreachableEndpoint(t *testing.T) {
	cfg := Config{
		Endpoint:  "http://" + closedPort(t),
		Bucket:    "ckpt",
		AccessKey: "lifeboat",
		SecretKey: "secret-" + rand.Text(),
	}
	_, err := New(context.Background(), cfg)
	if err == nil {
		t.Fatal("New against a closed port succeeded")
	}
	for _, want := range []string{"cannot reach", cfg.Endpoint, "ckpt", "check Endpoint"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
	if strings.Contains(err.Error(), cfg.SecretKey) {
		t.Errorf("error %q contains the secret key", err)
	}
}

// TestTLS checks the messages for an untrusted certificate and that CAFile
// makes it trusted. The TLS server is no S3 server: it answers 404, which
// minio-go reads as a missing bucket.
func TestTLS(t *testing.T) {
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusNotFound)
	}))
	defer srv.Close()
	cfg := Config{Endpoint: srv.URL, Bucket: "ckpt", AccessKey: "lifeboat", SecretKey: "secret-" + rand.Text(), BucketLookup: LookupPath, Region: "us-east-1"}
	_, err := New(context.Background(), cfg)
	if err == nil {
		t.Fatal("New against an untrusted certificate succeeded")
	}
	for _, want := range []string{"not trusted", srv.URL, "set CAFile to the CA that signed it"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
	if strings.Contains(err.Error(), cfg.SecretKey) {
		t.Errorf("error %q contains the secret key", err)
	}

	ca := filepath.Join(t.TempDir(), "ca.pem")
	pemBytes := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	if err := os.WriteFile(ca, pemBytes, 0o644); err != nil {
		t.Fatal(err)
	}
	cfg.CAFile = ca
	_, err = New(context.Background(), cfg)
	if err == nil || !strings.Contains(err.Error(), "does not exist") {
		t.Fatalf("New with the CA file: %v; want the TLS handshake to pass and the bucket to be missing", err)
	}

	// Plain http against the TLS port.
	cfg.CAFile = ""
	cfg.Endpoint = "http://" + srv.Listener.Addr().String()
	if _, err := New(context.Background(), cfg); err == nil {
		t.Fatal("New over http against a TLS port succeeded")
	}
}

func TestSecretsRedacted(t *testing.T) {
	cfg := Config{
		Endpoint:     "http://127.0.0.1:9000",
		Bucket:       "ckpt",
		AccessKey:    "AKIAEXAMPLEACCESS",
		SecretKey:    "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
		SessionToken: "FwoGZXIvYXdzEXAMPLETOKEN",
	}
	var logged bytes.Buffer
	slog.New(slog.NewJSONHandler(&logged, nil)).Info("config", "s3", cfg)
	slog.New(slog.NewTextHandler(&logged, nil)).Info("config", "s3", cfg)
	outputs := []string{cfg.String(), fmt.Sprint(cfg), fmt.Sprintf("%+v", cfg), fmt.Sprintf("%#v", cfg), logged.String()}
	for _, out := range outputs {
		for _, secret := range []string{cfg.AccessKey, cfg.SecretKey, cfg.SessionToken} {
			if strings.Contains(out, secret) {
				t.Errorf("%q contains a credential", out)
			}
		}
		if !strings.Contains(out, "ckpt") {
			t.Errorf("%q does not describe the config", out)
		}
	}
	if m := testenvMinIO(); m != nil {
		c := testConfig(t)
		s := newTestStore(t, c)
		if strings.Contains(s.String(), c.SecretKey) || strings.Contains(s.String(), c.AccessKey) {
			t.Errorf("Store.String() = %q contains a credential", s.String())
		}
		want := "s3://" + testBucket + "/" + c.Prefix + " at " + c.Endpoint
		if s.String() != want {
			t.Errorf("Store.String() = %q, want %q", s.String(), want)
		}
	}
}

// testenvMinIO reports whether a test MinIO is configured, without skipping.
func testenvMinIO() *struct{} {
	if os.Getenv("LIFEBOAT_TEST_S3_ENDPOINT") == "" {
		return nil
	}
	return &struct{}{}
}

// interposer runs fn once after after bytes have been read.
type interposer struct {
	r     io.Reader
	after int
	read  int
	fn    func()
}

func (i *interposer) Read(p []byte) (int, error) {
	n, err := i.r.Read(p)
	i.read += n
	if i.read >= i.after && i.fn != nil {
		i.fn()
		i.fn = nil
	}
	return n, err
}

// TestCreateOnlyCheckedAtComplete makes another writer create the key while
// a create-only multipart upload is under way: the upload must lose.
func TestCreateOnlyCheckedAtComplete(t *testing.T) {
	s := newTestStore(t, testConfig(t))
	ctx := context.Background()
	b := storagetest.Data(4, 4*MinPartSize)
	r := &interposer{r: bytes.NewReader(b), after: 2 * MinPartSize, fn: func() {
		if _, err := s.Put(ctx, "commit", strings.NewReader("other"), 5, storage.PutOptions{}); err != nil {
			t.Errorf("interposed Put: %v", err)
		}
	}}
	_, err := s.Put(ctx, "commit", r, int64(len(b)), storage.PutOptions{IfNotExists: true})
	if !errors.Is(err, storage.ErrExists) {
		t.Fatalf("create-only multipart Put over a key created meanwhile: %v, want ErrExists", err)
	}
	rc, err := s.Get(ctx, "commit", 0, -1)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	if got, _ := io.ReadAll(rc); string(got) != "other" {
		t.Fatalf("object holds %d bytes, want the other writer's", len(got))
	}
	if ids := incomplete(t, s); len(ids) != 0 {
		t.Fatalf("unfinished uploads left: %q", ids)
	}
}

// TestProbeConditionalWrites: the test MinIO server refuses a second
// create-only write and passes the probe; the same server behind an
// endpoint that drops If-None-Match (as a server without conditional
// writes does) accepts it, and the probe says so.
func TestProbeConditionalWrites(t *testing.T) {
	ctx := context.Background()
	cfg := testConfig(t)
	p, err := storage.ProbeConditionalWrites(ctx, newTestStore(t, cfg), time.Now)
	if err != nil || p.Cached {
		t.Fatalf("probe of MinIO: %+v, %v; want a fresh pass", p, err)
	}

	stripper := testenv.NewConditionStripper(t, testenv.RequireMinIO(t))
	cfg = testConfig(t)
	cfg.Endpoint = stripper.URL
	s := newTestStore(t, cfg)
	_, err = storage.ProbeConditionalWrites(ctx, s, time.Now)
	if !errors.Is(err, storage.ErrNoConditionalWrites) || !storage.IsPermanent(err) {
		t.Fatalf("probe behind an endpoint that drops If-None-Match: %v; want a permanent ErrNoConditionalWrites", err)
	}
	if stripper.Stripped.Load() == 0 {
		t.Fatal("no request carried If-None-Match through the stripping endpoint")
	}
}
