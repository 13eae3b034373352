package storage_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lifeboat-project/lifeboat/storage"
	"github.com/lifeboat-project/lifeboat/storage/mem"
)

var errFlaky = errors.New("connection reset by peer")

// noWait retries n times without sleeping.
func noWait(n int) storage.Backoff {
	return func(attempt int) (time.Duration, bool) { return 0, attempt <= n }
}

// retryCounter records the RetryEvents of a policy.
type retryCounter struct{ events []storage.RetryEvent }

func (c *retryCounter) policy(n int) storage.RetryPolicy {
	return storage.RetryPolicy{Backoff: noWait(n), OnRetry: func(e storage.RetryEvent) { c.events = append(c.events, e) }}
}

func (c *retryCounter) ops() []string {
	var out []string
	for _, e := range c.events {
		out = append(out, fmt.Sprintf("%s %s #%d", e.Op, e.Key, e.Attempt))
	}
	return out
}

// TestRetryTransient: each call that fails twice with a transient error
// succeeds on its third try, and each retry is reported to OnRetry.
func TestRetryTransient(t *testing.T) {
	ctx := context.Background()
	inner := mem.New()
	if _, err := inner.Put(ctx, "a/x", strings.NewReader("hello"), 5, storage.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	fails := map[string]int{}
	flaky := func(op string) error {
		if fails[op] < 2 {
			fails[op]++
			return fmt.Errorf("%s: %w", op, errFlaky)
		}
		return nil
	}
	fs := &mem.FaultStore{Inner: inner,
		OnPut: func(ctx context.Context, key string, r io.Reader, size int64, opts storage.PutOptions) (storage.ObjectInfo, error) {
			if err := flaky("put"); err != nil {
				_, _ = io.CopyN(io.Discard, r, 3) // a failed try reads part of the body
				return storage.ObjectInfo{}, err
			}
			return inner.Put(ctx, key, r, size, opts)
		},
		OnGet: func(ctx context.Context, key string, off, n int64) (io.ReadCloser, error) {
			if err := flaky("get"); err != nil {
				return nil, err
			}
			return inner.Get(ctx, key, off, n)
		},
		OnStat: func(ctx context.Context, key string) (storage.ObjectInfo, error) {
			if err := flaky("stat"); err != nil {
				return storage.ObjectInfo{}, err
			}
			return inner.Stat(ctx, key)
		},
		OnDelete: func(ctx context.Context, key string) error {
			if err := flaky("delete"); err != nil {
				return err
			}
			return inner.Delete(ctx, key)
		},
	}
	var c retryCounter
	s := storage.Retry(fs, c.policy(2))
	body := bytes.NewReader([]byte("0123456789"))
	if _, err := s.Put(ctx, "a/y", body, 10, storage.PutOptions{}); err != nil {
		t.Fatalf("Put: %v", err)
	}
	if got := read(t, s, "a/y", 0, -1); got != "0123456789" {
		t.Errorf("stored %q after a retried Put, want the whole body from its start", got)
	}
	if _, err := s.Stat(ctx, "a/x"); err != nil {
		t.Errorf("Stat: %v", err)
	}
	if err := s.Delete(ctx, "a/x"); err != nil {
		t.Errorf("Delete: %v", err)
	}
	want := []string{"put a/y #1", "put a/y #2", "get a/y #1", "get a/y #2", "stat a/x #1", "stat a/x #2", "delete a/x #1", "delete a/x #2"}
	if !slices.Equal(c.ops(), want) {
		t.Errorf("retries %q, want %q", c.ops(), want)
	}
	if s.String() != fs.String() {
		t.Errorf("String %q, want the inner store's %q", s.String(), fs.String())
	}
}

// TestRetryGivesUp: a call that keeps failing is tried once plus as many
// times as Backoff allows, and returns its last error.
func TestRetryGivesUp(t *testing.T) {
	var calls int
	fs := &mem.FaultStore{Inner: mem.New(), OnStat: func(context.Context, string) (storage.ObjectInfo, error) {
		calls++
		return storage.ObjectInfo{}, fmt.Errorf("try %d: %w", calls, errFlaky)
	}}
	_, err := storage.Retry(fs, storage.RetryPolicy{Backoff: noWait(3)}).Stat(context.Background(), "k")
	if calls != 4 || err == nil || !strings.Contains(err.Error(), "try 4") {
		t.Errorf("Stat made %d calls and returned %v; want 4 calls and the last error", calls, err)
	}
}

// TestRetryNotPermanent: permanent errors (the sentinels, Permanent) and
// the end of the call's context are never retried.
func TestRetryNotPermanent(t *testing.T) {
	ctx := context.Background()
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	for _, tt := range []struct {
		name string
		ctx  context.Context
		err  error
	}{
		{"not exist", ctx, fmt.Errorf("s3: stat k: %w", storage.ErrNotExist)},
		{"checksum", ctx, fmt.Errorf("put: %w", storage.ErrChecksum)},
		{"exists", ctx, storage.ErrExists},
		{"invalid key", ctx, storage.ErrInvalidKey},
		{"permanent", ctx, storage.Permanent(errors.New("access denied"))},
		{"cancelled below", ctx, fmt.Errorf("s3: stat k: %w", context.Canceled)},
		{"context done", cancelled, errFlaky},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var calls int
			fs := &mem.FaultStore{Inner: mem.New(), OnStat: func(context.Context, string) (storage.ObjectInfo, error) {
				calls++
				return storage.ObjectInfo{}, tt.err
			}}
			var c retryCounter
			_, err := storage.Retry(fs, c.policy(5)).Stat(tt.ctx, "k")
			if calls != 1 || !errors.Is(err, tt.err) || len(c.events) != 0 {
				t.Errorf("%d calls, %d retries, error %v; want 1 call, no retry and %v", calls, len(c.events), err, tt.err)
			}
		})
	}
}

// TestRetryWaitEndsWithContext: a context that ends during the wait
// between two tries ends the call with its last error, without waiting
// out the backoff (an hour here).
func TestRetryWaitEndsWithContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	var calls int
	fs := &mem.FaultStore{Inner: mem.New(), OnDelete: func(context.Context, string) error {
		calls++
		return errFlaky
	}}
	s := storage.Retry(fs, storage.RetryPolicy{
		Backoff: func(int) (time.Duration, bool) { return time.Hour, true },
		OnRetry: func(storage.RetryEvent) { cancel() },
	})
	if err := s.Delete(ctx, "k"); !errors.Is(err, errFlaky) || calls != 1 {
		t.Errorf("Delete = %v after %d calls, want the first failure and no second call", err, calls)
	}
}

// TestRetryPutUnseekable: a body that cannot seek back is sent again only
// when the failed try read none of it.
func TestRetryPutUnseekable(t *testing.T) {
	ctx := context.Background()
	for _, tt := range []struct {
		name      string
		readFirst int64
		wantCalls int
	}{
		{"nothing read", 0, 2},
		{"part read", 3, 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			inner := mem.New()
			var calls int
			fs := &mem.FaultStore{Inner: inner, OnPut: func(ctx context.Context, key string, r io.Reader, size int64, opts storage.PutOptions) (storage.ObjectInfo, error) {
				calls++
				if calls == 1 {
					_, _ = io.CopyN(io.Discard, r, tt.readFirst)
					return storage.ObjectInfo{}, errFlaky
				}
				return inner.Put(ctx, key, r, size, opts)
			}}
			body := io.MultiReader(strings.NewReader("0123456789")) // no Seek
			_, err := storage.Retry(fs, storage.RetryPolicy{Backoff: noWait(3)}).Put(ctx, "k", body, 10, storage.PutOptions{})
			if calls != tt.wantCalls || (tt.wantCalls == 2) != (err == nil) {
				t.Errorf("%d calls, error %v; want %d calls", calls, err, tt.wantCalls)
			}
		})
	}
}

// TestRetryListDeduplicates: a listing that fails part way is listed
// again, and fn sees each key once, in order.
func TestRetryListDeduplicates(t *testing.T) {
	ctx := context.Background()
	inner := mem.New()
	keys := []string{"p/a", "p/b", "p/c", "p/d", "p/e"}
	for _, k := range keys {
		if _, err := inner.Put(ctx, k, strings.NewReader(k), int64(len(k)), storage.PutOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// Try 1 fails after two keys, try 2 after one more without progress
	// past them (it fails at the third again), try 3 after four, try 4
	// lists all.
	failAfter := []int{2, 2, 4, -1}
	var tries int
	fs := &mem.FaultStore{Inner: inner, OnList: func(ctx context.Context, prefix string, fn func(storage.ObjectInfo) error) error {
		limit := failAfter[tries]
		tries++
		n := 0
		return inner.List(ctx, prefix, func(oi storage.ObjectInfo) error {
			if n == limit {
				return errFlaky
			}
			n++
			return fn(oi)
		})
	}}
	var c retryCounter
	var got []string
	err := storage.Retry(fs, c.policy(2)).List(ctx, "p/", func(oi storage.ObjectInfo) error {
		got = append(got, oi.Key)
		return nil
	})
	if err != nil || !slices.Equal(got, keys) {
		t.Fatalf("List = %v, keys %q; want %q once each", err, got, keys)
	}
	// Attempts count from 1 again after a try that delivered more keys.
	if want := []string{"list p/ #1", "list p/ #2", "list p/ #1"}; !slices.Equal(c.ops(), want) {
		t.Errorf("retries %q, want %q", c.ops(), want)
	}
}

// TestRetryListCallbackError: an error of fn ends the listing at once and
// is not retried, even when it looks transient.
func TestRetryListCallbackError(t *testing.T) {
	ctx := context.Background()
	inner := mem.New()
	for _, k := range []string{"a", "b", "c"} {
		if _, err := inner.Put(ctx, k, strings.NewReader(k), 1, storage.PutOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	var tries int
	fs := &mem.FaultStore{Inner: inner, OnList: func(ctx context.Context, prefix string, fn func(storage.ObjectInfo) error) error {
		tries++
		return inner.List(ctx, prefix, fn)
	}}
	var got []string
	err := storage.Retry(fs, storage.RetryPolicy{Backoff: noWait(5)}).List(ctx, "", func(oi storage.ObjectInfo) error {
		got = append(got, oi.Key)
		if oi.Key == "b" {
			return errFlaky
		}
		return nil
	})
	if !errors.Is(err, errFlaky) || tries != 1 || !slices.Equal(got, []string{"a", "b"}) {
		t.Errorf("List = %v after %d tries, saw %q; want fn's error after 1 try, a and b", err, tries, got)
	}
}

// cutBody fails with errFlaky after n bytes.
type cutBody struct {
	r io.Reader
	n int
}

func (b *cutBody) Read(p []byte) (int, error) {
	if b.n <= 0 {
		return 0, errFlaky
	}
	p = p[:min(len(p), b.n)]
	n, err := b.r.Read(p)
	b.n -= n
	return n, err
}

func (b *cutBody) Close() error { return nil }

// TestRetryGetResumes: a body whose reads fail part way is resumed where
// it stopped, for a whole object and for a range, and the caller reads
// every byte once, in order. Re-opens ask for the bytes still owed.
func TestRetryGetResumes(t *testing.T) {
	ctx := context.Background()
	data := []byte("abcdefghijklmnopqrstuvwxyz0123456789")
	for _, tt := range []struct {
		name        string
		off, length int64
	}{
		{"whole", 0, -1},
		{"to the end", 5, -1},
		{"range", 3, 20},
	} {
		t.Run(tt.name, func(t *testing.T) {
			inner := mem.New()
			if _, err := inner.Put(ctx, "k", bytes.NewReader(data), int64(len(data)), storage.PutOptions{}); err != nil {
				t.Fatal(err)
			}
			var opens []string
			fs := &mem.FaultStore{Inner: inner, OnGet: func(ctx context.Context, key string, off, n int64) (io.ReadCloser, error) {
				opens = append(opens, fmt.Sprintf("%d+%d", off, n))
				rc, err := inner.Get(ctx, key, off, n)
				if err != nil || len(opens) > 3 {
					return rc, err
				}
				return &cutBody{r: rc, n: 4}, nil // each of the first three opens gives 4 bytes
			}}
			var c retryCounter
			rc, err := storage.Retry(fs, c.policy(1)).Get(ctx, "k", tt.off, tt.length)
			if err != nil {
				t.Fatal(err)
			}
			got, err := io.ReadAll(rc)
			rc.Close()
			end := int64(len(data))
			if tt.length >= 0 {
				end = tt.off + tt.length
			}
			if err != nil || string(got) != string(data[tt.off:end]) {
				t.Fatalf("read %q, %v; want %q", got, err, data[tt.off:end])
			}
			want := []string{fmt.Sprintf("%d+%d", tt.off, tt.length)}
			for i := int64(1); i <= 3; i++ {
				want = append(want, fmt.Sprintf("%d+%d", tt.off+4*i, end-tt.off-4*i))
			}
			if !slices.Equal(opens, want) {
				t.Errorf("opened %q, want %q", opens, want)
			}
			if len(c.events) != 3 || c.events[0].Op != "read" || c.events[2].Attempt != 1 {
				t.Errorf("retries %q; want three reads, each the first since progress", c.ops())
			}
		})
	}
}

// TestRetryGetChanged: a resumed read whose object shrank below the bytes
// still owed, or changed between two re-opens, fails for good instead of
// mixing objects; a body that ends early is retried like a failed read.
func TestRetryGetChanged(t *testing.T) {
	ctx := context.Background()
	for _, tt := range []struct {
		name    string
		replace func(inner storage.Store, opens int)
		want    string
	}{
		{"shrank", func(inner storage.Store, opens int) {
			if opens == 1 {
				_, _ = inner.Put(ctx, "k", strings.NewReader("short"), 5, storage.PutOptions{})
			}
		}, "fewer than"},
		{"replaced between re-opens", func(inner storage.Store, opens int) {
			if opens == 2 {
				_, _ = inner.Put(ctx, "k", strings.NewReader(strings.Repeat("y", 64)), 64, storage.PutOptions{})
			}
		}, "changed while it was read"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			inner := mem.New()
			if _, err := inner.Put(ctx, "k", strings.NewReader(strings.Repeat("x", 32)), 32, storage.PutOptions{}); err != nil {
				t.Fatal(err)
			}
			var opens int
			fs := &mem.FaultStore{Inner: inner, OnGet: func(ctx context.Context, key string, off, n int64) (io.ReadCloser, error) {
				opens++
				rc, err := inner.Get(ctx, key, off, n)
				if err != nil {
					return nil, err
				}
				tt.replace(inner, opens)
				return &cutBody{r: rc, n: 8}, nil
			}}
			rc, err := storage.Retry(fs, storage.RetryPolicy{Backoff: noWait(5)}).Get(ctx, "k", 0, -1)
			if err != nil {
				t.Fatal(err)
			}
			_, err = io.ReadAll(rc)
			rc.Close()
			if err == nil || !strings.Contains(err.Error(), tt.want) || !storage.IsPermanent(err) {
				t.Errorf("read = %v, want a permanent error saying %q", err, tt.want)
			}
		})
	}

	// A body that ends before the range it owes is resumed.
	inner := mem.New()
	data := strings.Repeat("z", 40)
	if _, err := inner.Put(ctx, "k", strings.NewReader(data), 40, storage.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	var opens int
	fs := &mem.FaultStore{Inner: inner, OnGet: func(ctx context.Context, key string, off, n int64) (io.ReadCloser, error) {
		opens++
		rc, err := inner.Get(ctx, key, off, n)
		if err != nil || opens > 1 {
			return rc, err
		}
		return io.NopCloser(io.LimitReader(rc, 10)), nil // a clean EOF after 10 of 30
	}}
	rc, err := storage.Retry(fs, storage.RetryPolicy{Backoff: noWait(5)}).Get(ctx, "k", 5, 30)
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(rc)
	rc.Close()
	if err != nil || string(got) != data[5:35] || opens != 2 {
		t.Errorf("read %d bytes, %v, after %d opens; want 30 bytes after 2", len(got), err, opens)
	}
}

// TestRetryConcurrent: the wrapper is safe for concurrent calls (run with
// -race).
func TestRetryConcurrent(t *testing.T) {
	ctx := context.Background()
	inner := mem.New()
	var n atomic.Int64
	fs := &mem.FaultStore{Inner: inner, OnPut: func(ctx context.Context, key string, r io.Reader, size int64, opts storage.PutOptions) (storage.ObjectInfo, error) {
		if n.Add(1)%2 == 1 {
			return storage.ObjectInfo{}, errFlaky
		}
		return inner.Put(ctx, key, r, size, opts)
	}}
	var retries atomic.Int64
	s := storage.Retry(fs, storage.RetryPolicy{Backoff: noWait(10), OnRetry: func(storage.RetryEvent) { retries.Add(1) }})
	errs := make(chan error, 16)
	for i := range 16 {
		go func() {
			k := fmt.Sprintf("k%d", i)
			_, err := s.Put(ctx, k, strings.NewReader(k), int64(len(k)), storage.PutOptions{})
			errs <- err
		}()
	}
	for range 16 {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
	if retries.Load() == 0 {
		t.Error("no retry reported")
	}
}

// TestExponentialBackoff: waits grow from base, stay within max, and stop
// after the retries allowed.
func TestExponentialBackoff(t *testing.T) {
	b := storage.ExponentialBackoff(100*time.Millisecond, time.Second, 6)
	for attempt := 1; attempt <= 6; attempt++ {
		d, ok := b(attempt)
		ceiling := min(100*time.Millisecond<<(attempt-1), time.Second)
		if !ok || d <= 0 || d > ceiling {
			t.Errorf("attempt %d: %v, %v; want a wait in (0, %v]", attempt, d, ok, ceiling)
		}
	}
	if _, ok := b(7); ok {
		t.Error("attempt 7 of 6 retries allowed")
	}
	if _, ok := storage.DefaultBackoff()(8); !ok {
		t.Error("DefaultBackoff allows fewer than 8 retries")
	}
}

func read(t *testing.T, s storage.Store, key string, off, n int64) string {
	t.Helper()
	rc, err := s.Get(context.Background(), key, off, n)
	if err != nil {
		t.Fatalf("Get %s: %v", key, err)
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		t.Fatalf("read %s: %v", key, err)
	}
	return string(b)
}
