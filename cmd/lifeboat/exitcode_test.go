package main

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestMetricsAddrInUse: a --metrics-addr that is well formed but cannot be
// served (another process listens there) is lifeboat's runtime failure,
// 125, not bad configuration (2): the message names the flag and its
// variable, and the trainer never starts.
func TestMetricsAddrInUse(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	marker := filepath.Join(t.TempDir(), "started")
	p := start(t, "plain", "run", "--metrics-addr", ln.Addr().String(), "--", "touch", marker)
	if code := p.wait(); code != 125 {
		t.Fatalf("exit %d, want 125 (a runtime failure); stderr:\n%s", code, p.stderr.String())
	}
	if s := p.stderr.String(); !strings.Contains(s, "--metrics-addr (LIFEBOAT_METRICS_ADDR)") || !strings.Contains(s, "address already in use") {
		t.Errorf("stderr does not say which address cannot be served and why:\n%s", s)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Error("the trainer was started although metrics could not be served")
	}
}
