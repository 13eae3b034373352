// Command startupbench is the smallest Go program that runs its arguments
// as a child and exits with the child's code. bench/startup.sh builds it
// several ways to show what each part of lifeboat adds to a container's
// start-up, next to catatonit:
//
//   - no tags: the floor of any Go init (Go runtime, os/exec);
//   - tag notify: the floor plus a subscription to every signal (os/signal
//     Notify with no list), which lifeboat's supervisor makes;
//   - tag supervisor: lifeboat's own PID-1 code (supervisor.Run) instead of
//     os/exec, still without any third-party package;
//   - tags minio, prometheus, cgroups, retryablehttp, mpb, nethttp: the
//     floor plus one dependency linked in, so that its package initialisers
//     run before main, as they do in lifeboat.
package main

import (
	"errors"
	"os"
)

// before, when a build tag sets it, runs in main before the child starts.
var before func()

func main() {
	if len(os.Args) < 2 {
		os.Stderr.WriteString("usage: startupbench CMD [ARG...]\n")
		os.Exit(2)
	}
	if before != nil {
		before()
	}
	os.Exit(run(os.Args[1:]))
}

// exitCode is the exit code for run's error: 0 for none, the child's own
// code for an error that carries one (exec.ExitError, supervisor.ExitError),
// else fallback after printing the error.
func exitCode(err error, fallback int) int {
	var ec interface{ ExitCode() int }
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ec):
		return ec.ExitCode()
	}
	os.Stderr.WriteString(err.Error() + "\n")
	return fallback
}
