package main

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// newLogger returns lifeboat's logger: stderr only, JSON unless stderr is a
// terminal (or format says otherwise). level is debug, info, warn or error.
// An error a library logs names flags and variables, not the library's
// settings (logValue).
// Lines go through a logOutput: when stderr's reader goes away, logging
// stops and lifeboat goes on.
func newLogger(w io.Writer, level, format string) (*slog.Logger, error) {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("--log-level (LIFEBOAT_LOG_LEVEL) is %q; use debug, info, warn or error", level)
	}
	out := newLogOutput(w)
	opts := &slog.HandlerOptions{Level: lv, ReplaceAttr: logValue}
	switch strings.ToLower(format) {
	case "", "auto":
		if out.f != nil && isTerminal(out.f) {
			return slog.New(slog.NewTextHandler(out, opts)), nil
		}
		return slog.New(slog.NewJSONHandler(out, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(out, opts)), nil
	case "text":
		return slog.New(slog.NewTextHandler(out, opts)), nil
	}
	return nil, fmt.Errorf("--log-format (LIFEBOAT_LOG_FORMAT) is %q; use auto, json or text", format)
}

func isTerminal(f *os.File) bool {
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

// logOutput is where lifeboat's log lines go (stderr). A write that fails
// with EPIPE means the reader went away (a log shipper died, `lifeboat run
// ... 2>&1 | head -1` exited): from then on lines are dropped without a
// write, and no write ever fails or stops lifeboat. The trainer's own
// stdout and stderr are untouched.
//
// A file is written with write(2) directly: os.File.Write raises SIGPIPE
// when a write to stderr fails with EPIPE, which kills a process that has
// not subscribed to SIGPIPE. The SIGPIPE the kernel itself sends for the
// failed write is ignored by Go's runtime unless subscribed to, and never
// forwarded to the trainer (see package signals).
type logOutput struct {
	w io.Writer
	f *os.File // w when it is a file, else nil

	mu   sync.Mutex
	gone bool // a write failed with EPIPE
}

// newLogOutput wraps w; a w that is already a logOutput is returned as is.
func newLogOutput(w io.Writer) *logOutput {
	if o, ok := w.(*logOutput); ok {
		return o
	}
	f, _ := w.(*os.File)
	return &logOutput{w: w, f: f}
}

func (o *logOutput) Write(p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.gone {
		return len(p), nil
	}
	var err error
	if o.f != nil {
		err = writeFile(o.f, p)
	} else {
		_, err = o.w.Write(p)
	}
	switch {
	case errors.Is(err, unix.EPIPE):
		o.gone = true
	case err != nil:
		return 0, err
	}
	return len(p), nil
}

// writeFile writes all of p to f with write(2), waiting for a non-blocking
// descriptor to become writable.
func writeFile(f *os.File, p []byte) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var werr error
	err = rc.Write(func(fd uintptr) bool {
		for len(p) > 0 {
			n, err := unix.Write(int(fd), p)
			if n > 0 {
				p = p[n:]
			}
			switch {
			case errors.Is(err, unix.EINTR):
			case errors.Is(err, unix.EAGAIN):
				return false
			case err != nil:
				werr = err
				return true
			case n == 0:
				werr = io.ErrShortWrite
				return true
			}
		}
		return true
	})
	if err != nil {
		return err
	}
	return werr
}
