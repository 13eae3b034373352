package earlysignal

import (
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestImportsOnlySignal keeps the package's imports to os, os/signal and
// syscall: any other could initialise after some of lifeboat's packages
// and move the subscription later.
func TestImportsOnlySignal(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	allowed := []string{"os", "os/signal", "syscall"}
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(token.NewFileSet(), name, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range f.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			if !slices.Contains(allowed, path) {
				t.Errorf("%s imports %q; only %v may be imported", name, path, allowed)
			}
		}
	}
}

// TestSignalsSinceInit: a signal sent to the process arrives on Signals,
// caught by the subscription that init made.
func TestSignalsSinceInit(t *testing.T) {
	if err := syscall.Kill(os.Getpid(), syscall.SIGUSR1); err != nil {
		t.Fatal(err)
	}
	timeout := time.After(time.Minute) // a bound against a hang, not a speed test
	for {
		select {
		case s := <-Signals():
			if s == syscall.SIGUSR1 {
				return
			}
		case <-timeout:
			t.Fatal("SIGUSR1 never arrived on Signals")
		}
	}
}
