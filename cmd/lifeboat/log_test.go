package main

import (
	"os"
	"testing"

	"golang.org/x/sys/unix"
)

// TestSigpipeLogOutput: in-process, where nothing has subscribed to SIGPIPE
// (Go then kills a process whose write to stderr fails with EPIPE), lifeboat's
// log lines to a stderr whose reader is gone are dropped: no error, no
// death, and no write after the first that failed.
func TestSigpipeLogOutput(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	r.Close()
	defer w.Close()
	saved, err := unix.Dup(2)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Dup3(int(w.Fd()), 2, 0); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = unix.Dup3(saved, 2, 0)
		_ = unix.Close(saved)
	}()
	log, err := newLogger(os.Stderr, "info", "auto")
	if err != nil {
		t.Fatal(err)
	}
	log.Info("lifeboat.test", "line", 1)
	log.Info("lifeboat.test", "line", 2)
	out := newLogOutput(os.Stderr)
	line := []byte("{}\n")
	for i := 0; i < 2; i++ {
		if n, err := out.Write(line); n != len(line) || err != nil {
			t.Errorf("write %d to a stderr without a reader = %d, %v; want %d, nil", i, n, err, len(line))
		}
	}
	if !out.gone {
		t.Errorf("the log output did not notice that its reader is gone")
	}
}
