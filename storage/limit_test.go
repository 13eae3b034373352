package storage_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"testing"
	"time"

	"github.com/lifeboat-project/lifeboat/storage"
	"github.com/lifeboat-project/lifeboat/storage/mem"
)

// TestLimitPacesPuts: Puts through Limit store every byte, and together
// take at least what the limit allows. Only a lower bound is checked, at
// half the theoretical time: a busy machine makes uploads slower, never
// faster.
func TestLimitPacesPuts(t *testing.T) {
	const limit = 256 << 10 // bytes per second; the first 256 KiB are free
	inner := mem.New()
	s := storage.Limit(inner, limit)
	data := bytes.Repeat([]byte("lifeboat"), 40<<10) // 320 KiB
	ctx := context.Background()
	start := time.Now()
	for _, key := range []string{"a", "b"} {
		if _, err := s.Put(ctx, key, bytes.NewReader(data), int64(len(data)), storage.PutOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	took := time.Since(start)
	// 640 KiB at 256 KiB/s after the first 256 KiB: 1.5 s.
	if least := time.Duration(float64(2*len(data)-limit) / limit * float64(time.Second) / 2); took < least {
		t.Errorf("two Puts of %d bytes at %d B/s took %v, want at least %v", len(data), limit, took, least)
	}
	for _, key := range []string{"a", "b"} {
		rc, err := inner.Get(ctx, key, 0, -1)
		if err != nil {
			t.Fatal(err)
		}
		got, _ := io.ReadAll(rc)
		rc.Close()
		if !bytes.Equal(got, data) {
			t.Errorf("%s: stored %d bytes, want the %d put", key, len(got), len(data))
		}
	}
}

// TestLimitStopsWithContext: a Put waiting for the limit ends with its
// context's error when the context ends, and stores nothing.
func TestLimitStopsWithContext(t *testing.T) {
	inner := mem.New()
	s := storage.Limit(inner, 1<<10)
	ctx, cancel := context.WithCancel(context.Background())
	r := &cancelAfter{r: bytes.NewReader(make([]byte, 64<<10)), n: 2 << 10, cancel: cancel}
	_, err := s.Put(ctx, "k", r, 64<<10, storage.PutOptions{})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Put = %v, want context.Canceled", err)
	}
	if _, err := inner.Stat(context.Background(), "k"); !errors.Is(err, storage.ErrNotExist) {
		t.Errorf("Stat after the cancelled Put = %v, want ErrNotExist", err)
	}
}

// TestLimitZeroIsUnlimited: no limit returns the store itself.
func TestLimitZeroIsUnlimited(t *testing.T) {
	inner := mem.New()
	if s := storage.Limit(inner, 0); s != storage.Store(inner) {
		t.Errorf("Limit(s, 0) = %v, want s itself", s)
	}
}

// cancelAfter reads r and calls cancel once n bytes have been read.
type cancelAfter struct {
	r      io.Reader
	n      int
	read   int
	cancel context.CancelFunc
}

func (c *cancelAfter) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.read += n
	if c.read >= c.n {
		c.cancel()
	}
	return n, err
}
