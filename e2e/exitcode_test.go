package e2e

import (
	"bytes"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
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

// TestExitFinalUploadFailsAfterStop: the same failure, a final upload that
// cannot reach the store after SIGTERM, as README's exit code table says:
// run exits 143 (preempted; the pod is retried from the newest committed
// checkpoint), the sidecar, which has no trainer of its own, 75. Both log
// the failure.
func TestExitFinalUploadFailsAfterStop(t *testing.T) {
	for _, tc := range []struct {
		cmd   string
		code  int
		event string
	}{
		{"run", 143, "supervisor.final_upload_failed"},
		{"sidecar", 75, "sidecar.final_upload_failed"},
	} {
		t.Run(tc.cmd, func(t *testing.T) {
			root := t.TempDir()
			store, dir := filepath.Join(root, "store"), filepath.Join(root, "shared")
			args := []string{tc.cmd, "--store", "file://" + store, "--dir", dir, "--settle", "1h", "--grace", "6s"}
			ready := "sidecar.started"
			if tc.cmd == "run" {
				args = append(args, "--", "sh", "-c", `trap 'exit 0' TERM; while :; do sleep 0.1; done`)
				ready = "supervisor.started"
			}
			p := start(t, "plain", args...)
			waitFor(t, p, func() bool { return strings.Contains(p.stderr.String(), ready) })
			if err := os.MkdirAll(filepath.Join(dir, "step-000042"), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, "step-000042", "model.pdparams"), pickleBytes(bytes.Repeat([]byte("w"), 1<<10)), 0o644); err != nil {
				t.Fatal(err)
			}
			// The store's directory becomes a file: every write to it fails.
			if err := os.RemoveAll(store); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(store, []byte("not a store"), 0o644); err != nil {
				t.Fatal(err)
			}
			p.signal(syscall.SIGTERM)
			if code := p.wait(); code != tc.code {
				t.Fatalf("%s exit %d, want %d; stderr:\n%s", tc.cmd, code, tc.code, p.stderr.String())
			}
			if !strings.Contains(p.stderr.String(), `"msg":"`+tc.event+`"`) {
				t.Errorf("no %s event; stderr:\n%s", tc.event, p.stderr.String())
			}
		})
	}
}
