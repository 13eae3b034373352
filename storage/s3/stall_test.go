package s3

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/lifeboat-project/lifeboat/internal/testenv"
	"github.com/lifeboat-project/lifeboat/storage"
)

// TestStallIsDetected: when the server stops answering mid-way, a Put
// fails within the stall timeout (plus minio-go's retries) instead of
// hanging forever; the proxy's hang guard is the only clock in the test.
func TestStallIsDetected(t *testing.T) {
	cfg, proxy := proxiedConfig(t)
	cfg.StallTimeout = 300 * time.Millisecond
	s := newTestStore(t, cfg)
	ctx := context.Background()
	if _, err := s.Put(ctx, "before", bytes.NewReader([]byte("ok")), 2, storage.PutOptions{}); err != nil {
		t.Fatalf("Put through the healthy proxy: %v", err)
	}
	proxy.Set(testenv.Stall)
	done := make(chan error, 1)
	go func() {
		data := bytes.Repeat([]byte("x"), 8<<20)
		_, err := s.Put(ctx, "during-stall", bytes.NewReader(data), int64(len(data)), storage.PutOptions{})
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("Put succeeded through a stalled connection")
		}
		var ne net.Error
		if !errors.As(err, &ne) && !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Logf("Put failed with %v (not a net.Error, but it failed rather than hung)", err)
		}
	case <-time.After(5 * time.Minute):
		t.Fatal("Put hung on a stalled connection")
	}
}
