package e2e

import (
	"context"
	"io"
	"net"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
)

// TestStoreCommandsStopOnSignal: ls, verify and prune against an endpoint
// that never answers (with timeouts far longer than the test) end at a
// SIGINT (Ctrl-C) or a SIGTERM, with 128 plus the signal and a line that
// names it. Every signal is caught from lifeboat's first moment, so on the
// code before they ignored both and ran until their own timeouts.
func TestStoreCommandsStopOnSignal(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan struct{}, 16)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted <- struct{}{}
			go func() { _, _ = io.Copy(io.Discard, c) }()
		}
	}()
	env := []string{"AWS_ACCESS_KEY_ID=AKIDLIFEBOATTEST", "AWS_SECRET_ACCESS_KEY=lifeboat-test-secret",
		"AWS_ENDPOINT_URL=http://" + ln.Addr().String(), "LIFEBOAT_S3_CONNECT_TIMEOUT=1h", "LIFEBOAT_S3_RESPONSE_TIMEOUT=1h"}
	for _, tc := range []struct {
		args []string
		sig  syscall.Signal
		want int
	}{
		{[]string{"ls", "--store", "s3://ckpt/job"}, syscall.SIGINT, 130},
		{[]string{"verify", "--store", "s3://ckpt/job", "latest"}, syscall.SIGTERM, 143},
		{[]string{"prune", "--store", "s3://ckpt/job", "--keep", "1"}, syscall.SIGTERM, 143},
	} {
		t.Run(tc.args[0], func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), hangLimit)
			defer cancel()
			cmd := exec.CommandContext(ctx, lifeboatBin, tc.args...)
			cmd.Env = append(os.Environ(), env...)
			cmd.Dir = t.TempDir()
			out := &syncBuffer{}
			cmd.Stdout, cmd.Stderr = out, out
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			select {
			case <-accepted: // lifeboat is up and waiting for the store
			case <-ctx.Done():
				t.Fatalf("lifeboat %s never reached the endpoint: %s", tc.args[0], out.String())
			}
			_ = cmd.Process.Signal(tc.sig)
			_ = cmd.Wait()
			if ctx.Err() != nil {
				t.Fatalf("lifeboat %s ignored %v and ran for %v: %s", tc.args[0], tc.sig, hangLimit, out.String())
			}
			if code := cmd.ProcessState.ExitCode(); code != tc.want || !strings.Contains(out.String(), "lifeboat: stopped by SIG") {
				t.Errorf("lifeboat %s after %v: exit %d, want %d, and a line naming the signal:\n%s", tc.args[0], tc.sig, code, tc.want, out.String())
			}
			for range len(accepted) {
				<-accepted
			}
		})
	}
}
