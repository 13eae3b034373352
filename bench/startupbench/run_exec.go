//go:build !supervisor

package main

import (
	"os"
	"os/exec"
)

// run runs argv with os/exec.
func run(argv []string) int {
	c := exec.Command(argv[0], argv[1:]...)
	c.Stdin, c.Stdout, c.Stderr = os.Stdin, os.Stdout, os.Stderr
	return exitCode(c.Run(), 127)
}
