package gpu

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
	"golang.org/x/sys/unix"
)

// TestWatchdog: past Paddle's limit plus the margin the watchdog acts by
// policy on the trainer's tree only, from the device's memory when NVML's
// pids are the host's; an episode is logged once, TERM is sent once and
// KILL until the device is under the limit again.
func TestWatchdog(t *testing.T) {
	const trainer, worker = 42, 43
	for _, tc := range []struct {
		policy Policy
		used   []uint64 // MiB on the device at each check
		sent   string
		event  string
		events int
	}{
		{PolicyTerm, []uint64{9000, 9000, 1000, 9000}, "[42:TERM 43:TERM 42:TERM 43:TERM]", "gpu.memory_over", 2},
		{PolicyKill, []uint64{9000, 9000}, "[42:KILL 43:KILL 42:KILL 43:KILL]", "gpu.memory_over", 1},
		{PolicyWarn, []uint64{9000, 9000}, "[]", "gpu.memory_warn", 1},
		{PolicyTerm, []uint64{8500}, "[]", "gpu.memory_warn", 1}, // over Paddle's 8192, within the margin
		{PolicyTerm, []uint64{1000}, "[]", "", 0},
	} {
		t.Run(fmt.Sprintf("%s-%v", tc.policy, tc.used), func(t *testing.T) {
			var logBuf strings.Builder
			var sent []string
			d := &fakeDriver{
				procs: map[string][]Process{"GPU-1": {{PID: 1234567, UsedMemory: 5000 * mb}}}, // a host pid
				mem:   map[string]MemoryInfo{},
			}
			w := NewWatchdog(d, []string{"GPU-1"}, 8192, AutoMarginMiB*mb, tc.policy,
				func() ([]int, error) { return []int{trainer, worker}, nil }, slog.New(slog.NewJSONHandler(&logBuf, nil)))
			w.Kill = func(pid int, sig unix.Signal) error {
				sent = append(sent, fmt.Sprintf("%d:%s", pid, strings.TrimPrefix(unix.SignalName(sig), "SIG")))
				return nil
			}
			for _, u := range tc.used {
				d.mem["GPU-1"] = MemoryInfo{Total: 80 * gib, Used: u * mb}
				w.Check()
			}
			if fmt.Sprint(sent) != tc.sent {
				t.Errorf("signals sent %v, want %s", sent, tc.sent)
			}
			if n := strings.Count(logBuf.String(), `"msg":"`+tc.event+`"`); tc.event != "" && n != tc.events {
				t.Errorf("%d %s lines, want %d:\n%s", n, tc.event, tc.events, logBuf.String())
			}
			if tc.event == "" && logBuf.Len() != 0 {
				t.Errorf("logged under the limit:\n%s", logBuf.String())
			}
		})
	}
}

func TestWatchdogRunStops(t *testing.T) {
	defer goleak.VerifyNone(t)
	d := &fakeDriver{mem: map[string]MemoryInfo{"GPU-1": {Total: 80 * gib}}}
	checks := make(chan struct{}, 10)
	w := NewWatchdog(d, []string{"GPU-1"}, 8192, 0, PolicyKill, func() ([]int, error) {
		checks <- struct{}{}
		return nil, nil
	}, nil)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { w.Run(ctx, time.Millisecond); close(done) }()
	<-checks
	cancel()
	<-done
}
