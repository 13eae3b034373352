package main

import (
	"crypto/rand"
	"encoding/hex"
	"io"
	"net"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/lifeboat-project/lifeboat/internal/testenv"
)

// faultProxy is a TCP proxy of the test's own between lifeboat and MinIO.
// Its mode says what a new connection gets: forwarded, reset at once, or
// an HTTP 503; down also drops the connections already open.
type faultProxy struct {
	ln     net.Listener
	target string
	mode   atomic.Value // "forward", "slow" (answers at 16 MiB/s), "reset", "503", "hang" (never answers)
	mu     sync.Mutex
	conns  []net.Conn
	wg     sync.WaitGroup
}

func newFaultProxy(t *testing.T, target string) *faultProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &faultProxy{ln: ln, target: target}
	p.mode.Store("forward")
	p.wg.Go(p.accept)
	t.Cleanup(func() {
		p.ln.Close()
		p.drop()
		p.wg.Wait()
	})
	return p
}

func (p *faultProxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		switch p.mode.Load().(string) {
		case "reset":
			if tc, ok := c.(*net.TCPConn); ok {
				_ = tc.SetLinger(0) // RST, not FIN
			}
			c.Close()
			continue
		case "hang": // accepts and never answers: a black-holed endpoint
			p.mu.Lock()
			p.conns = append(p.conns, c)
			p.mu.Unlock()
			continue
		case "503":
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
		p.mu.Lock()
		p.conns = append(p.conns, c, up)
		p.mu.Unlock()
		p.wg.Go(func() { _, _ = io.Copy(up, c); up.Close() })
		if p.mode.Load().(string) == "slow" {
			p.wg.Go(func() { _, _ = slowCopy(c, up); c.Close() })
		} else {
			p.wg.Go(func() { _, _ = io.Copy(c, up); c.Close() })
		}
	}
}

// slowCopy copies src to dst at about 16 MiB/s: a slow link, so that a
// transfer is still under way when a test acts.
func slowCopy(dst io.Writer, src io.Reader) (int64, error) {
	buf := make([]byte, 64<<10)
	var n int64
	for {
		k, err := src.Read(buf)
		if k > 0 {
			if _, werr := dst.Write(buf[:k]); werr != nil {
				return n, werr
			}
			n += int64(k)
			time.Sleep(time.Duration(k) * time.Second / (16 << 20))
		}
		if err != nil {
			return n, err
		}
	}
}

// set switches the mode; any mode but forward also drops open connections.
func (p *faultProxy) set(mode string) {
	p.mode.Store(mode)
	if mode != "forward" {
		p.drop()
	}
}

// stop closes the listening socket, so that connections are refused as by
// a stopped server; start listens again on the same address.
func (p *faultProxy) stop() {
	p.ln.Close()
	p.drop()
}

func (p *faultProxy) start(t *testing.T) {
	t.Helper()
	ln, err := net.Listen("tcp", p.ln.Addr().String())
	if err != nil {
		t.Fatalf("listen again on %s: %v", p.ln.Addr(), err)
	}
	p.ln = ln
	p.wg.Go(p.accept)
}

func (p *faultProxy) drop() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}

// TestStoreOutage: the store goes away for 60 s in the middle of training
// (20 s refusing connections as a stopped server does, 20 s resetting
// them, 20 s answering 503), then comes back. The trainer keeps training, lifeboat keeps running and logging,
// uploads resume, a later checkpoint is committed, and the preemption at
// the end commits the last one: nothing is lost.
func TestStoreOutage(t *testing.T) {
	m := testenv.RequireMinIO(t)
	u, err := url.Parse(m.Endpoint)
	if err != nil {
		t.Fatal(err)
	}
	proxy := newFaultProxy(t, u.Host)
	b := make([]byte, 5)
	_, _ = rand.Read(b)
	store := "s3://lifeboat-outage-" + hex.EncodeToString(b) + "/job"
	env := []string{"AWS_ENDPOINT_URL=http://" + proxy.ln.Addr().String(), "AWS_ACCESS_KEY_ID=" + m.AccessKey,
		"AWS_SECRET_ACCESS_KEY=" + m.SecretKey, "AWS_REGION=us-east-1", "LIFEBOAT_CREATE_BUCKET=true", "TRAINER_EVERY=50"}
	dir := t.TempDir()
	tr := startTrainer(t, env, "run", "--store", store, "--dir", dir, "--settle", "100ms", "--scan-interval", "100ms",
		"--keep", "0", "--", "python3", "-u", "testdata/trainer.py", "dirs")
	committed := func() int64 { return latestComplete(lsJSON(t, env, store)) }
	if e := tr.next(t); e.Event != "fresh" {
		t.Fatalf("first event %+v", e)
	}
	for committed() < 0 {
		tr.next(t)
	}
	before := committed()

	// The outage: refused for 20 s, reset for 20 s, 503 for 20 s.
	proxy.stop()
	start := time.Now()
	outageEnd := start.Add(60 * time.Second)
	phase := "refused"
	var savedDuring, lastSaved int64
	for time.Now().Before(outageEnd) {
		switch el := time.Since(start); {
		case phase == "refused" && el > 20*time.Second:
			phase = "reset"
			proxy.set("reset")
			proxy.start(t)
		case phase == "reset" && el > 40*time.Second:
			phase = "503"
			proxy.set("503")
		}
		if e := tr.next(t); e.Event == "saved" {
			savedDuring, lastSaved = e.Step, e.Step
		}
		if !tr.alive() {
			t.Fatalf("lifeboat exited during the outage; stderr:\n%s", tail(tr.stderr.String()))
		}
	}
	if savedDuring == 0 {
		t.Fatalf("the trainer saved nothing during the outage: it must keep training")
	}
	proxy.set("forward")
	// Uploads resume: a checkpoint saved after the outage began gets committed.
	for deadline := time.Now().Add(hangLimit * 3); committed() <= before; {
		select {
		case e := <-tr.events:
			if e.Event == "saved" {
				lastSaved = e.Step
			}
		case <-time.After(200 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("no commit after the store came back (latest %d); stderr:\n%s", committed(), tail(tr.stderr.String()))
		}
	}
	tr.signal(syscall.SIGTERM)
	var termStep int64 = -1
	for e := range tr.events {
		switch e.Event {
		case "terminated":
			termStep = e.Step
		case "saved":
			lastSaved = e.Step
		}
	}
	if code := tr.wait(); code != 143 {
		t.Fatalf("exit %d, want 143; stderr:\n%s", code, tail(tr.stderr.String()))
	}
	// The newest checkpoint the trainer saved is the latest: the final flush
	// commits it if the background uploads had not yet.
	if latest := committed(); latest != lastSaved || latest <= before || termStep < latest {
		t.Errorf("latest committed step %d after the preemption; want the trainer's last save %d (> %d, saved during the outage up to %d, TERM at %d)",
			latest, lastSaved, before, savedDuring, termStep)
	}
	s := tr.stderr.String()
	if !strings.Contains(s, `"msg":"checkpoint.upload_failed"`) {
		t.Errorf("no checkpoint.upload_failed in the log during the outage")
	}
}
