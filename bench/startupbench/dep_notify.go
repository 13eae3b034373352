//go:build notify

package main

import (
	"os"
	"os/signal"
)

// Subscribes to every signal in main, as lifeboat's supervisor does;
// os/signal enables them one by one, each with a round trip to a runtime
// thread.
func init() { before = func() { signal.Notify(make(chan os.Signal, 1)) } }
