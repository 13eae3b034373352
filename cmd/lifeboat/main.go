// Command lifeboat is the PID 1 of training containers: it supervises the
// trainer, and (in later subcommands) moves its checkpoints to durable
// storage and back.
//
// Each subcommand lives in its own file with an options struct, its flag set
// and a runX(ctx, opts) function. Flags and environment are read here and
// nowhere else (flag > env > default).
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

// errUsage means the command line was wrong; usage has been printed.
var errUsage = errors.New("usage")

func main() {
	os.Exit(run(context.Background(), os.Args[1:], os.Stdout, os.Stderr))
}

// run dispatches to a subcommand and returns the process exit code.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		usage(stderr)
		return 2
	}
	switch args[0] {
	case "run":
		return runCmd(ctx, args[1:], stderr)
	case "version", "--version", "-version":
		fmt.Fprintf(stdout, "lifeboat %s\n", version)
		return 0
	case "help", "-h", "-help", "--help":
		if len(args) > 1 && args[1] == "run" {
			fs, _ := newRunFlags(&runOptions{}, stdout)
			fs.Usage()
			return 0
		}
		usage(stdout)
		return 0
	default:
		fmt.Fprintf(stderr, "lifeboat: unknown command %q\n\n", args[0])
		usage(stderr)
		return 2
	}
}

func usage(w io.Writer) {
	fmt.Fprint(w, `lifeboat: PID 1 for training containers that get preempted.

Usage:
  lifeboat run [flags] -- CMD [ARG...]   supervise CMD as PID 1
  lifeboat version                       print the version
  lifeboat help [run]                    show this help, or a command's flags

Every flag has an environment twin: --grace is LIFEBOAT_GRACE. A flag wins
over its variable. Run 'lifeboat help run' for the flags of run.
`)
}
