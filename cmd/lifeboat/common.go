package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"

	"github.com/lifeboat-project/lifeboat/internal/printable"
	"github.com/lifeboat-project/lifeboat/supervisor"
)

// commonOptions are the logging flags every subcommand has.
type commonOptions struct {
	logLevel  string
	logFormat string

	// Set by setup: the command's logger and where it prints.
	log            *slog.Logger
	stdout, stderr io.Writer
}

func (o *commonOptions) register(fs *flag.FlagSet) {
	fs.StringVar(&o.logLevel, "log-level", "info", "debug, info, warn or error")
	fs.StringVar(&o.logFormat, "log-format", "auto", "auto (JSON unless stderr is a terminal), json or text")
}

// parseCmd parses args for a subcommand. It returns the exit code to use
// when parsing ended the command (help: 0, bad usage: 2), or -1 to go on.
// A bad value is one line naming the flag and its variable; an unknown
// flag or a missing value is followed by the usage.
func parseCmd(fs *flag.FlagSet, args []string, stderr io.Writer) int {
	usage, out := fs.Usage, fs.Output()
	fs.Usage = func() {}
	fs.SetOutput(io.Discard)
	err := parseFlags(fs, args, os.LookupEnv)
	fs.Usage = usage
	fs.SetOutput(out)
	if err == nil {
		return -1
	}
	if errors.Is(err, flag.ErrHelp) {
		usage()
		return 0
	}
	printError(stderr, fs.Name(), err)
	var ve *valueError
	if !errors.As(err, &ve) {
		usage()
	}
	return 2
}

// setup is every command's start-up after its flag set is built: parse
// args (flag > env > default), validate (bad values are one line and exit
// 2; an argsError also prints the usage) and build the logger into c. It
// returns the exit code when the command ends here (help: 0, bad usage:
// 2), or -1 to go on to the command's runX.
func setup(fs *flag.FlagSet, args []string, c *commonOptions, stdout, stderr io.Writer, validate func() error) int {
	if code := parseCmd(fs, args, stderr); code >= 0 {
		return code
	}
	if err := validate(); err != nil {
		printError(stderr, fs.Name(), err)
		var ae argsError
		if errors.As(err, &ae) {
			fs.Usage()
		}
		return 2
	}
	log, err := newLogger(stderr, c.logLevel, c.logFormat)
	if err != nil {
		printError(stderr, fs.Name(), err)
		return 2
	}
	c.log, c.stdout, c.stderr = log, stdout, stderr
	return -1
}

// usageError is a bad flag value: exit 2 rather than the command's
// runtime failure.
type usageError struct{ error }

func (e usageError) Unwrap() error { return e.error }

// argsError is a missing or extra argument: exit 2, with the usage.
type argsError struct{ error }

func (e argsError) Unwrap() error { return e.error }

// codeError ends a command with a given code; err, when set, is printed.
// It carries the codes that are not failures of the command's work (a
// stop during start-up, 143) and the documented ones that are (75, 1 for
// verify's problems).
type codeError struct {
	code int
	err  error
}

func (e *codeError) Error() string {
	if e.err == nil {
		return fmt.Sprintf("exit code %d", e.code)
	}
	return e.err.Error()
}

func (e *codeError) Unwrap() error { return e.err }

// printError prints err for people: "lifeboat NAME: " and the message,
// one line per error it joins, names in it escaped (printable.ErrorLines),
// so no name can start a line of its own, and the settings a library's
// error names as flags and variables (namedLines).
func printError(stderr io.Writer, name string, err error) {
	lines := namedLines(err)
	if len(lines) == 0 {
		return
	}
	fmt.Fprintf(stderr, "lifeboat %s: %s\n", name, lines[0])
	for _, l := range lines[1:] {
		fmt.Fprintln(stderr, l)
	}
}

// exitCode is the one place a command's result becomes the process exit
// code: nil is 0; a usageError or argsError 2; a *codeError its code; a
// *supervisor.ExitError (run) its code, printing a spawn failure as one
// line; anything else is the command's runtime failure (125 for run and
// sidecar, 1 for the one-shot commands). What is printed is one line,
// "lifeboat NAME: error".
func exitCode(name string, err error, runtime int, stderr io.Writer) int {
	if err == nil {
		return 0
	}
	var ce *codeError
	if errors.As(err, &ce) {
		if ce.err != nil {
			printError(stderr, name, ce.err)
		}
		return ce.code
	}
	var ee *supervisor.ExitError
	if errors.As(err, &ee) {
		if !ee.Started {
			for _, l := range printable.ErrorLines(ee.Err) {
				fmt.Fprintln(stderr, l)
			}
		}
		return ee.ExitCode()
	}
	printError(stderr, name, err)
	var ue usageError
	var ae argsError
	if errors.As(err, &ue) || errors.As(err, &ae) {
		return 2
	}
	return runtime
}
