package e2e

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
// is sent. PWR, sent after lifeboat has decided about the URG (and, where
// it forwards it, after the child has recorded it), shows that every
// signal but URG still goes through. Two signals sent back to back to a
// process of several threads may be taken by two threads at once and
// reach its handlers in either order, so the test never sends the second
// before the first has arrived.
func TestURGFollowsTheRuntime(t *testing.T) {
	plain := filepath.Join(t.TempDir(), "lifeboat-plain-build")
	if out, err := exec.Command("go", "build", "-o", plain, lifeboatPkg).CombinedOutput(); err != nil {
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
			p := startEnv(t, "plain", tc.env, "run", "--log-level", "debug", "--", "env", "-u", "GODEBUG", childBin, "record", out, "TERM")
			waitFile(t, p, out+".ready")
			p.signal(syscall.SIGURG)
			if forwarded := urgDecided(t, p); forwarded {
				waitLines(t, out, 1)
			}
			p.signal(syscall.SIGPWR)
			// PWR is forwarded in every case.
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

// urgDecided waits until lifeboat has logged what it did with a SIGURG
// (forwarded it, or kept it as its runtime's) and reports whether it
// forwarded it.
func urgDecided(t *testing.T, p *lb) bool {
	t.Helper()
	for deadline := time.Now().Add(hangLimit); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		for _, r := range logRecords(p.stderr.String()) {
			switch {
			case r["msg"] == "signal.forwarded" && r["received"] == "URG":
				return true
			case r["msg"] == "signal.urg_not_forwarded":
				return false
			}
		}
		if !p.alive() {
			t.Fatalf("lifeboat exited (%d) before it took the SIGURG; stderr:\n%s", p.code, p.stderr.String())
		}
	}
	t.Fatalf("lifeboat never said what it did with the SIGURG; stderr:\n%s", p.stderr.String())
	return false
}
