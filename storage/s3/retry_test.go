package s3

import (
	"bytes"
	"context"
	"io"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lifeboat-project/lifeboat/internal/testenv"
	"github.com/lifeboat-project/lifeboat/storage"
	"github.com/lifeboat-project/lifeboat/storage/storagetest"
)

// proxiedConfig is the test MinIO server's config with its endpoint
// behind a fault proxy.
func proxiedConfig(t *testing.T) (Config, *testenv.FaultProxy) {
	t.Helper()
	cfg := testConfig(t)
	u, err := url.Parse(cfg.Endpoint)
	if err != nil {
		t.Fatal(err)
	}
	proxy := testenv.NewFaultProxy(t, u.Host)
	cfg.Endpoint = proxy.URL()
	return cfg, proxy
}

// proxiedStore is a store on the test MinIO server behind a fault proxy,
// with minio-go's own retries off, as it is used inside storage.Retry.
func proxiedStore(t *testing.T) (*Store, *testenv.FaultProxy) {
	t.Helper()
	cfg, proxy := proxiedConfig(t)
	cfg.RequestAttempts = 1
	return newTestStore(t, cfg), proxy
}

// retryLog records the retries of a storage.Retry and, at the first, lets
// the proxy forward again.
type retryLog struct {
	mu     sync.Mutex
	ops    []string
	healed func()
}

func (l *retryLog) policy() storage.RetryPolicy {
	return storage.RetryPolicy{
		Backoff: func(attempt int) (time.Duration, bool) { return 10 * time.Millisecond, attempt <= 5 },
		OnRetry: func(e storage.RetryEvent) {
			l.mu.Lock()
			defer l.mu.Unlock()
			l.ops = append(l.ops, e.Op)
			if l.healed != nil {
				l.healed()
			}
		},
	}
}

func (l *retryLog) seen() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.ops)
}

// TestRetryOverResets: with minio-go's retries off, a connection reset
// fails a call of the bare store, and storage.Retry makes each call again
// and succeeds: Put (one PUT and multipart), Get, Stat, List and Delete.
func TestRetryOverResets(t *testing.T) {
	s, proxy := proxiedStore(t)
	log := &retryLog{healed: func() { proxy.Set(testenv.Forward) }}
	rs := storage.Retry(s, log.policy())
	ctx := context.Background()
	large := storagetest.Data(7, 2*MinPartSize+100)

	proxy.Set(testenv.Reset)
	before := proxy.Accepted()
	if _, err := s.Stat(ctx, "nothing"); err == nil || storage.IsPermanent(err) {
		t.Fatalf("bare Stat through resets = %v, want a transient error", err)
	}
	if n := proxy.Accepted() - before; n != 1 {
		t.Errorf("bare Stat through resets tried %d connections, want 1: minio-go's own retries are not off", n)
	}
	for _, tc := range []struct {
		op   string
		call func() error
	}{
		{"put", func() error {
			_, err := rs.Put(ctx, "small", strings.NewReader("hello"), 5, storage.PutOptions{})
			return err
		}},
		{"put", func() error {
			_, err := rs.Put(ctx, "large", bytes.NewReader(large), int64(len(large)), storage.PutOptions{})
			return err
		}},
		{"get", func() error {
			rc, err := rs.Get(ctx, "large", 0, -1)
			if err != nil {
				return err
			}
			defer rc.Close()
			got, err := io.ReadAll(rc)
			if err == nil && !bytes.Equal(got, large) {
				t.Errorf("Get read %d bytes that differ from the %d put", len(got), len(large))
			}
			return err
		}},
		{"stat", func() error {
			info, err := rs.Stat(ctx, "small")
			if err == nil && info.Size != 5 {
				t.Errorf("Stat size %d, want 5", info.Size)
			}
			return err
		}},
		{"list", func() error {
			var keys []string
			err := rs.List(ctx, "", func(oi storage.ObjectInfo) error {
				keys = append(keys, oi.Key)
				return nil
			})
			if err == nil && !slices.Equal(keys, []string{"large", "small"}) {
				t.Errorf("List = %q, want large and small once each", keys)
			}
			return err
		}},
		{"delete", func() error { return rs.Delete(ctx, "small") }},
	} {
		before := len(log.seen())
		proxy.Set(testenv.Reset)
		if err := tc.call(); err != nil {
			t.Fatalf("%s through a reset: %v", tc.op, err)
		}
		if got := log.seen()[before:]; len(got) == 0 || got[0] != tc.op {
			t.Errorf("%s: retries %q, want the %s retried", tc.op, got, tc.op)
		}
	}
}

// TestRetryResumesCutBody: connections that die in the middle of a Get's
// body fail the bare store's read; through storage.Retry the read goes on
// from the byte where it stopped, and the caller gets the object whole.
func TestRetryResumesCutBody(t *testing.T) {
	s, proxy := proxiedStore(t)
	ctx := context.Background()
	data := storagetest.Data(9, 3<<20)
	if _, err := s.Put(ctx, "obj", bytes.NewReader(data), int64(len(data)), storage.PutOptions{}); err != nil {
		t.Fatal(err)
	}

	proxy.CutNext(1, 1<<20)
	rc, err := s.Get(ctx, "obj", 0, -1)
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(rc)
	rc.Close()
	if err == nil {
		t.Fatalf("bare Get read %d bytes through a cut connection without an error", len(got))
	}

	for _, tc := range []struct {
		name        string
		off, length int64
	}{{"whole", 0, -1}, {"range", 100, 2<<20 + 5}} {
		t.Run(tc.name, func(t *testing.T) {
			log := &retryLog{}
			proxy.CutNext(2, 1<<20)
			rc, err := storage.Retry(s, log.policy()).Get(ctx, "obj", tc.off, tc.length)
			if err != nil {
				t.Fatal(err)
			}
			got, err := io.ReadAll(rc)
			rc.Close()
			end := int64(len(data))
			if tc.length >= 0 {
				end = tc.off + tc.length
			}
			if err != nil || !bytes.Equal(got, data[tc.off:end]) {
				t.Fatalf("read %d bytes (%v), want the %d of the range, equal", len(got), err, end-tc.off)
			}
			if ops := log.seen(); !slices.Contains(ops, "read") {
				t.Errorf("retries %q, want the body's reads resumed", ops)
			}
		})
	}
}
