package checkpoint

import (
	"context"
	"errors"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lifeboat-project/lifeboat/storage"
	"github.com/lifeboat-project/lifeboat/storage/mem"
)

var (
	errFlaky  = errors.New("connection reset by peer")
	errAccess = errors.New("access denied")
)

// attempts counts calls per key.
type attempts struct {
	mu sync.Mutex
	n  map[string]int
}

func (a *attempts) add(key string) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.n == nil {
		a.n = map[string]int{}
	}
	a.n[key]++
	return a.n[key]
}

func TestUploadFaults(t *testing.T) {
	tests := []struct {
		name string
		// fail returns the error the attempt'th Put of key fails with, or nil.
		fail       func(key string, attempt int) error
		wantErr    error // nil: the upload succeeds; else errors.Is(err, wantErr)
		maxAttempt int   // most Puts of one key allowed
	}{
		{"transient errors are retried", func(key string, attempt int) error {
			if attempt <= 2 {
				return errFlaky
			}
			return nil
		}, nil, 3},
		{"transient errors past the retries fail", func(key string, attempt int) error {
			if strings.HasPrefix(key, chunksPrefix) {
				return errFlaky
			}
			return nil
		}, errFlaky, 4},
		{"permanent errors are not retried", func(key string, attempt int) error {
			if strings.HasPrefix(key, chunksPrefix) {
				return storage.Permanent(errAccess)
			}
			return nil
		}, errAccess, 1},
		{"one bad chunk stops the manifest", func(key string, attempt int) error {
			if strings.HasPrefix(key, chunksPrefix+"0") || strings.HasPrefix(key, chunksPrefix+"8") {
				return storage.ErrChecksum
			}
			return nil
		}, storage.ErrChecksum, 1},
		{"manifest write failing", func(key string, attempt int) error {
			if strings.HasPrefix(key, snapshotsPrefix) {
				return storage.Permanent(errAccess)
			}
			return nil
		}, errAccess, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			defer verifyNone(t)
			inner := mem.New()
			var tries attempts
			f := &mem.FaultStore{Inner: inner}
			f.OnPut = func(ctx context.Context, key string, r io.Reader, size int64, opts storage.PutOptions) (storage.ObjectInfo, error) {
				if err := tt.fail(key, tries.add(key)); err != nil {
					return storage.ObjectInfo{}, err
				}
				return inner.Put(ctx, key, r, size, opts)
			}
			dir := t.TempDir()
			writeTree(t, dir, sampleTree(7))
			_, err := newUploader(f, nil).Upload(context.Background(), dir, Target{Step: 1, WorldSize: 1})
			manifests := storedKeys(t, inner, snapshotsPrefix)
			switch {
			case tt.wantErr == nil && err != nil:
				t.Fatalf("Upload = %v, want success", err)
			case tt.wantErr == nil && len(manifests) != 1:
				t.Errorf("manifests %v, want one", manifests)
			case tt.wantErr != nil && !errors.Is(err, tt.wantErr):
				t.Fatalf("Upload = %v, want %v", err, tt.wantErr)
			case tt.wantErr != nil && len(manifests) != 0:
				t.Errorf("a failed upload wrote manifests %v", manifests)
			}
			for key, n := range tries.n {
				if n > tt.maxAttempt {
					t.Errorf("%s: %d Puts, want at most %d", key, n, tt.maxAttempt)
				}
			}
		})
	}
}

func TestUploadCancelled(t *testing.T) {
	defer verifyNone(t)
	inner := mem.New()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var once sync.Once
	f := &mem.FaultStore{Inner: inner}
	f.OnPut = func(c context.Context, key string, r io.Reader, size int64, opts storage.PutOptions) (storage.ObjectInfo, error) {
		once.Do(cancel) // the job is preempted during the first Put
		return inner.Put(c, key, r, size, opts)
	}
	dir := t.TempDir()
	writeTree(t, dir, sampleTree(8))
	// A backoff that would retry forever: only cancellation can stop it.
	forever := storage.RetryPolicy{Backoff: func(int) (time.Duration, bool) { return 0, true }}
	u := &Uploader{Store: storage.Retry(f, forever), ChunkSize: testChunk}
	if _, err := u.Upload(ctx, dir, Target{Step: 1, WorldSize: 1}); !errors.Is(err, context.Canceled) {
		t.Errorf("Upload = %v, want context.Canceled", err)
	}
	if m := storedKeys(t, inner, snapshotsPrefix); len(m) != 0 {
		t.Errorf("a cancelled upload wrote %v", m)
	}
}

// cutShort passes on the first 10 bytes of rc, then ends with err, as a
// connection closed in the middle of a response does.
func cutShort(rc io.ReadCloser, err error) io.ReadCloser {
	left := 10
	return readerFunc(func(p []byte) (int, error) {
		if left == 0 {
			return 0, err
		}
		n, rerr := rc.Read(p[:min(len(p), left)])
		left -= n
		return n, rerr
	})
}

// firstChunkGetCut is a Get whose first reading of each chunk is cut
// short with end (cutShort); later attempts read the whole chunk.
func firstChunkGetCut(end error) func(inner storage.Store, ctx context.Context, key string, offset, length int64, attempt int) (io.ReadCloser, error) {
	return func(inner storage.Store, ctx context.Context, key string, offset, length int64, attempt int) (io.ReadCloser, error) {
		rc, err := inner.Get(ctx, key, offset, length)
		if err == nil && attempt == 1 && strings.HasPrefix(key, chunksPrefix) {
			return cutShort(rc, end), nil
		}
		return rc, err
	}
}

func TestRestoreFaults(t *testing.T) {
	flakyReader := func(rc io.ReadCloser) io.ReadCloser {
		first := true
		return readerFunc(func(p []byte) (int, error) {
			if first {
				first = false
				return rc.Read(p[:min(len(p), 10)])
			}
			return 0, errFlaky
		})
	}
	tests := []struct {
		name     string
		get      func(inner storage.Store, ctx context.Context, key string, offset, length int64, attempt int) (io.ReadCloser, error)
		wantStep int64 // 0: RestoreLatest fails
	}{
		{"transient get errors are retried", func(inner storage.Store, ctx context.Context, key string, offset, length int64, attempt int) (io.ReadCloser, error) {
			if attempt == 1 {
				return nil, errFlaky
			}
			return inner.Get(ctx, key, offset, length)
		}, 2},
		{"errors while reading are retried", func(inner storage.Store, ctx context.Context, key string, offset, length int64, attempt int) (io.ReadCloser, error) {
			rc, err := inner.Get(ctx, key, offset, length)
			if err == nil && attempt == 1 {
				return flakyReader(rc), nil
			}
			return rc, err
		}, 2},
		{"a transfer cut short is retried, not taken for a short chunk", firstChunkGetCut(io.ErrUnexpectedEOF), 2},
		{"a transfer that ends early without an error is retried", firstChunkGetCut(io.EOF), 2},
		{"an unreachable store does not fall back", func(inner storage.Store, ctx context.Context, key string, offset, length int64, attempt int) (io.ReadCloser, error) {
			if strings.HasPrefix(key, chunksPrefix) {
				return nil, errFlaky
			}
			return inner.Get(ctx, key, offset, length)
		}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			defer verifyNone(t)
			inner := mem.New()
			u := newUploader(inner, nil)
			upload(t, u, 1, 0, 1, sampleTree(1))
			want := sampleTree(2)
			upload(t, u, 2, 0, 1, want)
			var tries attempts
			f := &mem.FaultStore{Inner: inner}
			f.OnGet = func(ctx context.Context, key string, offset, length int64) (io.ReadCloser, error) {
				return tt.get(inner, ctx, key, offset, length, tries.add(key))
			}
			dir := t.TempDir()
			res, err := RestoreLatest(context.Background(), retried(f), 0, dir, RestoreOptions{})
			if tt.wantStep == 0 {
				if err == nil || errors.Is(err, ErrCorrupt) || !errors.Is(err, errFlaky) {
					t.Errorf("RestoreLatest = %v, want the store's error without fallback", err)
				}
				checkTree(t, dir, tree{})
				return
			}
			if err != nil || res.Step != tt.wantStep || len(res.Fallbacks) != 0 {
				t.Fatalf("RestoreLatest = %+v, %v; want step %d", res, err, tt.wantStep)
			}
			checkTree(t, dir, want)
		})
	}
}
