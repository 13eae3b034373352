// Command maxrss runs a command and prints, on its last line of stderr,
// the command's peak resident memory in KiB ("maxrss KIB"), then exits
// with its exit code.
//
// A process started by a large one inherits that one's high-water mark:
// Linux keeps the resident peak of the memory a process had before it
// exec'd (for a Go parent, which starts children sharing its memory, the
// parent's whole peak). Started from this small program instead, the
// command's peak is its own, or this program's few MiB when larger.
package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"syscall"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: maxrss COMMAND [ARG...]")
		os.Exit(2)
	}
	cmd := exec.Command(os.Args[1], os.Args[2:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	err := cmd.Run()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		fmt.Fprintln(os.Stderr, "maxrss:", err)
		os.Exit(2)
	}
	ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage)
	if !ok {
		fmt.Fprintln(os.Stderr, "maxrss: no resource usage")
		os.Exit(2)
	}
	fmt.Fprintf(os.Stderr, "maxrss %d\n", ru.Maxrss)
	os.Exit(cmd.ProcessState.ExitCode())
}
