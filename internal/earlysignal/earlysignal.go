// Package earlysignal catches every signal from the first moment any
// package of lifeboat's own could: its init subscribes to all of them,
// and main takes the channel over (Signals).
//
// Go runs a package's init after those of the packages it imports, and,
// among the packages ready, in the order of their import paths. This
// package imports only os/signal (and os and syscall, which os/signal
// needs anyway), so the runtime initialises it right after os/signal, before the third-party packages and every other
// package of lifeboat: the same init order puts it first in every build
// (TestEarlySignalTrials checks this on the binary). Before its init a
// SIGTERM meets the Go runtime's default (the process dies of it, or, as
// PID 1, exits 2) and, before the runtime has installed its handlers, the
// kernel's (death; as PID 1 the signal is discarded): that is the Go
// runtime's own start, which no Go code can shorten (docs/RELIABILITY.md
// gives the measured length).
//
// It must import nothing else: every other import could only move its
// init later (TestImportsOnlySignal).
package earlysignal

import (
	"os"
	"os/signal"
	"syscall"
)

// caught holds every signal received since init, until main reads them.
// Its buffer is the one main's relay keeps: nothing is read from it before
// main starts, and start-up sees few signals.
var caught = make(chan os.Signal, 1024)

func init() {
	// Subscribing to a signal takes the runtime a round trip between two
	// threads, and all 65 of them take milliseconds on a busy node: the
	// usual stop signals come first.
	signal.Notify(caught, syscall.SIGTERM, syscall.SIGINT)
	signal.Notify(caught)
}

// Signals returns the channel of every signal received since this
// package's init, in the order received; there is one subscription, so each
// signal arrives once. Its one reader is main's relay.
func Signals() <-chan os.Signal { return caught }
