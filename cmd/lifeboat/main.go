// Command lifeboat is the PID 1 of training containers: it supervises the
// trainer, and (in later subcommands) moves its checkpoints to durable
// storage and back.
//
// Each subcommand lives in its own file with an options struct, its flag set
// and a runX(ctx, opts) error function. Its xCmd builds the flag set, hands
// it to setup (common.go: parse, flag > env > default; validate, exit 2;
// the logger), calls runX, and exitCode turns runX's error into the exit
// code (2 for a bad value, the command's documented code, else its runtime
// failure: 125 for run and sidecar, 1 for the others). Flags and
// environment are read here and nowhere else.
package main

import (
	"context"
	"fmt"
	"io"
	"os"

	"github.com/lifeboat-project/lifeboat/internal/earlysignal"
	"github.com/lifeboat-project/lifeboat/signals"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

// startup holds the signals caught since lifeboat started; nil when the
// commands run in-process (tests).
var startup *earlySignals

func main() {
	// Built with signals.LinkFlag, the runtime leaves SIGURG alone and it
	// is forwarded like any other signal; a plain `go build` (or
	// GODEBUG=asyncpreemptoff=0) keeps it the runtime's.
	signals.SetRuntimeOwnsURG(!signals.AsyncPreemptOff(signals.LinkedGODEBUG(), os.Getenv("GODEBUG")))
	// Every signal since before the first of lifeboat's packages
	// initialised (internal/earlysignal): a stop that came while the
	// program initialised ends the start-up as a stop (143).
	startup = catchSignals(earlysignal.Signals())
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
		return runCmd(ctx, args[1:], stdout, stderr)
	case "sidecar":
		return sidecarCmd(ctx, args[1:], stdout, stderr)
	case "restore":
		return restoreCmd(ctx, args[1:], stdout, stderr)
	case "ls":
		return stoppable(ctx, lsCmd, args[1:], stdout, stderr)
	case "verify":
		return stoppable(ctx, verifyCmd, args[1:], stdout, stderr)
	case "prune":
		return stoppable(ctx, pruneCmd, args[1:], stdout, stderr)
	case "doctor":
		return stoppable(ctx, doctorCmd, args[1:], stdout, stderr)
	case "check":
		return stoppable(ctx, checkCmd, args[1:], stdout, stderr)
	case "version", "--version", "-version":
		fmt.Fprintln(stdout, versionLine())
		return 0
	case "help", "-h", "-help", "--help":
		if len(args) > 1 {
			return run(ctx, []string{args[1], "-h"}, stdout, stdout)
		}
		usage(stdout)
		return 0
	default:
		fmt.Fprintf(stderr, "lifeboat: unknown command %q\n\n", args[0])
		usage(stderr)
		return 2
	}
}

// stoppable runs a command that supervises nothing (ls, verify, prune,
// doctor, check) so that a stop signal ends it as a shell expects: every
// signal is caught from the first moment (internal/earlysignal), so without
// this a Ctrl-C or a SIGTERM would be ignored. The signal cancels the
// command's context; what it was doing stops (a prune between two
// deletes, as it is safe to), and the exit code is 128 plus the signal.
func stoppable(ctx context.Context, cmd func(context.Context, []string, io.Writer, io.Writer) int, args []string, stdout, stderr io.Writer) int {
	ctx, done := startup.during(ctx, nil)
	defer done()
	code := cmd(ctx, args, stdout, stderr)
	if sig := startup.stop(); sig != 0 {
		fmt.Fprintf(stderr, "lifeboat: stopped by SIG%s\n", signals.Name(sig))
		return 128 + int(sig)
	}
	return code
}

func usage(w io.Writer) {
	fmt.Fprint(w, `lifeboat: PID 1 for training containers that get preempted.

Usage:
  lifeboat run [flags] -- CMD [ARG...]   supervise CMD as PID 1 (with --store/--dir: upload
                                         its checkpoints, resume from the newest)
  lifeboat sidecar --store URL --dir DIR upload a trainer's checkpoints from a shared volume
  lifeboat restore --store URL --dir DIR fetch the newest complete checkpoint (init container)
  lifeboat ls --store URL [--json]       list checkpoints
  lifeboat verify --store URL [--read-data-subset all|none|n/t] [STEP|latest|all]
                                         check checkpoints for missing or corrupt data
  lifeboat prune --store URL --keep N [--min-chunk-age D]
                                         delete all but the newest N checkpoints
  lifeboat doctor [--store URL] [--json] GPUs seen and what the trainer gets, memory plan, store reachability
  lifeboat check --dir DIR [--json]      what lifeboat sees in a checkpoint directory: checkpoints, steps,
                                         each file's format and verdict, what a stop would commit
  lifeboat version                       print the version and the build flavour (static or gpu)
  lifeboat help [COMMAND]                show this help, or a command's flags

Every flag has an environment twin: --grace is LIFEBOAT_GRACE. A flag wins
over its variable. Run 'lifeboat help COMMAND' for a command's flags.
Store credentials come from the usual AWS_* (or MINIO_*) variables, the AWS
credentials file, or IAM; never from flags.
`)
}
