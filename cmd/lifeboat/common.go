package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
)

// commonOptions are the logging flags every subcommand has.
type commonOptions struct {
	logLevel  string
	logFormat string
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
	fmt.Fprintf(stderr, "lifeboat %s: %v\n", fs.Name(), err)
	var ve *valueError
	if !errors.As(err, &ve) {
		usage()
	}
	return 2
}

// checkCmd prints err, a bad flag or environment value found before
// anything started, as one line, and returns 2; -1 when err is nil.
func checkCmd(name string, err error, stderr io.Writer) int {
	if err == nil {
		return -1
	}
	fmt.Fprintf(stderr, "lifeboat %s: %v\n", name, err)
	return 2
}

// logger builds the subcommand's logger, or prints why it cannot.
func (o *commonOptions) logger(name string, stderr io.Writer) (*slog.Logger, bool) {
	log, err := newLogger(stderr, o.logLevel, o.logFormat)
	if err != nil {
		fmt.Fprintf(stderr, "lifeboat %s: %v\n", name, err)
		return nil, false
	}
	return log, true
}
