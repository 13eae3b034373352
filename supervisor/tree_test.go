package supervisor

import (
	"os"
	"testing"
)

// TestParent reads a parent from a fake /proc and from the real one; a
// process that is not there has none.
func TestParent(t *testing.T) {
	root := writeProc(t, map[int]string{1: "0 S", 10: "1 S", 11: "10 Z"})
	for _, tc := range []struct {
		pid, want int
		ok        bool
	}{
		{10, 1, true},
		{11, 10, true},
		{1, 0, true},
		{99, 0, false},
	} {
		if got, ok := Parent(root, tc.pid); got != tc.want || ok != tc.ok {
			t.Errorf("Parent(%d) = %d, %v; want %d, %v", tc.pid, got, ok, tc.want, tc.ok)
		}
	}
	if got, ok := Parent("/proc", os.Getpid()); !ok || got != os.Getppid() {
		t.Errorf("Parent of this process in /proc = %d, %v; want %d", got, ok, os.Getppid())
	}
}
