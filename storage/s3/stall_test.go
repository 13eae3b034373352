package s3

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lifeboat-project/lifeboat/storage"
)

// stallProxy forwards TCP to target until stall is set; from then on it
// holds every connection open and moves no byte, as a hung server or a
// dead route does.
type stallProxy struct {
	ln     net.Listener
	target string
	stall  atomic.Bool
	wg     sync.WaitGroup
	mu     sync.Mutex
	conns  []net.Conn
}

func newStallProxy(t *testing.T, target string) *stallProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &stallProxy{ln: ln, target: target}
	p.wg.Go(p.accept)
	t.Cleanup(p.close)
	return p
}

func (p *stallProxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		up, err := net.Dial("tcp", p.target)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, c, up)
		p.mu.Unlock()
		p.wg.Go(func() { p.pipe(up, c) })
		p.wg.Go(func() { p.pipe(c, up) })
	}
}

// pipe copies src to dst in small steps, and stops moving bytes (without
// closing anything) once the proxy stalls.
func (p *stallProxy) pipe(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		for p.stall.Load() {
			time.Sleep(10 * time.Millisecond)
			if p.isClosed() {
				return
			}
		}
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func (p *stallProxy) isClosed() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.conns == nil
}

func (p *stallProxy) close() {
	p.ln.Close()
	p.mu.Lock()
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
	p.mu.Unlock()
	p.wg.Wait()
}

// TestStallIsDetected: when the server stops answering mid-way, a Put
// fails within the stall timeout (plus minio-go's retries) instead of
// hanging forever; the proxy's hang guard is the only clock in the test.
func TestStallIsDetected(t *testing.T) {
	cfg := testConfig(t)
	u, err := url.Parse(cfg.Endpoint)
	if err != nil {
		t.Fatal(err)
	}
	proxy := newStallProxy(t, u.Host)
	cfg.Endpoint = "http://" + proxy.ln.Addr().String()
	cfg.StallTimeout = 300 * time.Millisecond
	s := newTestStore(t, cfg)
	ctx := context.Background()
	if _, err := s.Put(ctx, "before", bytes.NewReader([]byte("ok")), 2, storage.PutOptions{}); err != nil {
		t.Fatalf("Put through the healthy proxy: %v", err)
	}
	proxy.stall.Store(true)
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
