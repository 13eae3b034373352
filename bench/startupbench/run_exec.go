//go:build !supervisor

package main

import (
	"errors"
	"os"
	"os/exec"
)

// run runs argv with os/exec.
func run(argv []string) int {
	c := exec.Command(argv[0], argv[1:]...)
	c.Stdin, c.Stdout, c.Stderr = os.Stdin, os.Stdout, os.Stderr
	err := c.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ee):
		return ee.ExitCode()
	}
	os.Stderr.WriteString(err.Error() + "\n")
	return 127
}
