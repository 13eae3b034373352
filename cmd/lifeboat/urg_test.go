package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestURGFollowsTheRuntime: lifeboat forwards SIGURG only where its Go
// runtime does not preempt goroutines with it. Built as it ships (the
// binary TestMain builds) it does; built without signals.LinkFlag (a plain
// `go build`), or run with GODEBUG=asyncpreemptoff=0, a SIGURG it receives
// could be the runtime's own, and it stays with lifeboat. The child,
// built with the flag and started without GODEBUG, records every SIGURG it
// is sent. URG (23) goes before PWR (30): whenever both are pending, in
// lifeboat or in the child, the lower number is taken first, so a
// forwarded URG is recorded before PWR.
func TestURGFollowsTheRuntime(t *testing.T) {
	plain := filepath.Join(t.TempDir(), "lifeboat-plain-build")
	if out, err := exec.Command("go", "build", "-o", plain, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build without the flag: %v\n%s", err, out)
	}
	for _, tc := range []struct {
		name string
		bin  string
		env  []string
		want string
	}{
		{"shipped", lifeboatBin, nil, "URG PWR TERM"},
		{"built without the flag", plain, nil, "PWR TERM"},
		{"GODEBUG=asyncpreemptoff=0", lifeboatBin, []string{"GODEBUG=asyncpreemptoff=0"}, "PWR TERM"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			defer func(b string) { lifeboatBin = b }(lifeboatBin)
			lifeboatBin = tc.bin
			out := filepath.Join(t.TempDir(), "rec")
			p := startEnv(t, "plain", tc.env, "run", "--", "env", "-u", "GODEBUG", childBin, "record", out, "TERM")
			waitFile(t, p, out+".ready")
			p.signal(syscall.SIGURG)
			p.signal(syscall.SIGPWR)
			// PWR is forwarded in every case; a forwarded URG is in the
			// record before it.
			for deadline := time.Now().Add(hangLimit); !slices.Contains(waitLines(t, out, 1), "PWR"); time.Sleep(5 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatalf("PWR never reached the child")
				}
			}
			p.signal(syscall.SIGTERM)
			if code := p.wait(); code != 143 {
				t.Errorf("exit code %d, want 143; stderr:\n%s", code, p.stderr.String())
			}
			// The child exited on TERM, and lifeboat after it.
			b, err := os.ReadFile(out)
			if got := strings.Join(strings.Fields(string(b)), " "); err != nil || got != tc.want {
				t.Errorf("child received %q, want %q", got, tc.want)
			}
		})
	}
}
