// Command floor is the least a Go program that runs a child can leave of
// its start uncaught: it subscribes to every signal through
// internal/earlysignal, as lifeboat does, and has nothing else to
// initialise but os/exec. It runs its arguments as a child and exits with
// the child's code, or 143 on SIGTERM (bench/earlysignal.sh).
package main

import (
	"os"
	"os/exec"
	"syscall"

	"github.com/lifeboat-project/lifeboat/internal/earlysignal"
)

func main() {
	if len(os.Args) < 2 {
		os.Stderr.WriteString("usage: floor CMD [ARG...]\n")
		os.Exit(2)
	}
	cmd := exec.Command(os.Args[1], os.Args[2:]...)
	if err := cmd.Start(); err != nil {
		os.Stderr.WriteString(err.Error() + "\n")
		os.Exit(127)
	}
	go func() {
		_ = cmd.Wait()
		os.Exit(cmd.ProcessState.ExitCode())
	}()
	for s := range earlysignal.Signals() {
		if s == syscall.SIGTERM {
			os.Exit(143)
		}
	}
}
