package testenv

import (
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// FaultMode says what a FaultProxy does with the connections it gets.
type FaultMode string

// The modes of a FaultProxy. Each applies to connections accepted from
// then on; Set also drops the connections already open for every mode but
// Forward and Stall.
const (
	// Forward passes bytes both ways, as if the proxy were not there.
	Forward FaultMode = "forward"
	// Slow forwards, answering at about 16 MiB/s: a slow link, so that a
	// transfer is still under way when a test acts.
	Slow FaultMode = "slow"
	// Reset accepts and resets the connection at once (RST, not FIN).
	Reset FaultMode = "reset"
	// Unavailable reads the request and answers HTTP 503.
	Unavailable FaultMode = "503"
	// Hang accepts and never answers: a black-holed endpoint.
	Hang FaultMode = "hang"
	// Stall holds every connection, new and already open, and moves no
	// byte either way, without closing anything: a hung server or a dead
	// route.
	Stall FaultMode = "stall"
)

// FaultProxy is a TCP proxy between a client under test and a real server
// (MinIO) that makes the network fail on the test's command: see FaultMode,
// CutNext, Stop and Drop.
type FaultProxy struct {
	target string
	mode   atomic.Value // FaultMode
	cut    atomic.Int64 // connections still to cut (CutNext)
	cutAt  atomic.Int64 // bytes after which they are cut
	count  atomic.Int64 // connections accepted
	mu     sync.Mutex
	ln     net.Listener
	conns  []net.Conn
	wg     sync.WaitGroup
}

// NewFaultProxy starts a proxy to target (host:port) on 127.0.0.1 in mode
// Forward. It stops when the test ends.
func NewFaultProxy(t testing.TB, target string) *FaultProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &FaultProxy{ln: ln, target: target}
	p.mode.Store(Forward)
	p.wg.Go(func() { p.accept(ln) })
	t.Cleanup(func() {
		p.mu.Lock()
		p.ln.Close()
		p.mu.Unlock()
		p.mode.Store(Forward) // releases stalled pipes
		p.Drop()
		p.wg.Wait()
	})
	return p
}

// Addr is the proxy's host:port.
func (p *FaultProxy) Addr() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.ln.Addr().String()
}

// URL is the proxy's address as an http:// endpoint.
func (p *FaultProxy) URL() string { return "http://" + p.Addr() }

// Set switches the mode (see FaultMode).
func (p *FaultProxy) Set(mode FaultMode) {
	p.mode.Store(mode)
	if mode != Forward && mode != Stall {
		p.Drop()
	}
}

// CutNext makes the next n connections fail after the server has sent
// afterBytes bytes on each: the proxy then resets both sides, as a link
// that dies in the middle of a response does. The connections open now
// are dropped, so that the client's next request opens a new one.
func (p *FaultProxy) CutNext(n int, afterBytes int64) {
	p.cutAt.Store(afterBytes)
	p.cut.Store(int64(n))
	p.Drop()
}

// Stop closes the listening socket, so that connections are refused as by
// a stopped server, and drops the open ones; Start listens again on the
// same address.
func (p *FaultProxy) Stop() {
	p.mu.Lock()
	p.ln.Close()
	p.mu.Unlock()
	p.Drop()
}

// Start listens again after Stop.
func (p *FaultProxy) Start(t testing.TB) {
	t.Helper()
	ln, err := net.Listen("tcp", p.Addr())
	if err != nil {
		t.Fatalf("listen again on %s: %v", p.Addr(), err)
	}
	p.mu.Lock()
	p.ln = ln
	p.mu.Unlock()
	p.wg.Go(func() { p.accept(ln) })
}

// Accepted is the number of connections accepted so far.
func (p *FaultProxy) Accepted() int64 { return p.count.Load() }

// Drop closes every connection open now.
func (p *FaultProxy) Drop() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}

func (p *FaultProxy) track(cs ...net.Conn) {
	p.mu.Lock()
	p.conns = append(p.conns, cs...)
	p.mu.Unlock()
}

func (p *FaultProxy) accept(ln net.Listener) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		p.count.Add(1)
		switch p.mode.Load().(FaultMode) {
		case Reset:
			reset(c)
			continue
		case Hang:
			p.track(c)
			continue
		case Unavailable:
			p.wg.Go(func() {
				defer c.Close()
				_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
				buf := make([]byte, 4096)
				_, _ = c.Read(buf)
				_, _ = io.WriteString(c, "HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nConnection: close\r\nRetry-After: 1\r\n\r\n")
			})
			continue
		}
		up, err := net.Dial("tcp", p.target)
		if err != nil {
			c.Close()
			continue
		}
		p.track(c, up)
		limit := int64(-1)
		if p.cut.Add(-1) >= 0 {
			limit = p.cutAt.Load()
		}
		slow := p.mode.Load().(FaultMode) == Slow
		p.wg.Go(func() { p.pipe(up, c, -1, false); up.Close() })
		p.wg.Go(func() {
			if p.pipe(c, up, limit, slow) {
				reset(c)
				reset(up)
			}
			c.Close()
		})
	}
}

// pipe copies src to dst until either fails, holding the bytes while the
// proxy stalls, at about 16 MiB/s when slow. With limit >= 0 it stops
// after limit bytes and reports true, for the caller to cut both sides.
func (p *FaultProxy) pipe(dst, src net.Conn, limit int64, slow bool) (cut bool) {
	buf := make([]byte, 32<<10)
	var n int64
	for {
		want := len(buf)
		if limit >= 0 {
			if n >= limit {
				return true
			}
			want = int(min(int64(want), limit-n))
		}
		k, err := src.Read(buf[:want])
		for p.mode.Load().(FaultMode) == Stall {
			time.Sleep(10 * time.Millisecond)
			if p.closed(src) {
				return false
			}
		}
		if k > 0 {
			if _, werr := dst.Write(buf[:k]); werr != nil {
				return false
			}
			n += int64(k)
			if slow {
				time.Sleep(time.Duration(k) * time.Second / (16 << 20))
			}
		}
		if err != nil {
			return false
		}
	}
}

// closed reports whether c was dropped (or the proxy closed).
func (p *FaultProxy) closed(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, o := range p.conns {
		if o == c {
			return false
		}
	}
	return true
}

// reset closes c with an RST instead of a FIN.
func reset(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	c.Close()
}
