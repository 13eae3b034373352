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
func parseCmd(fs *flag.FlagSet, args []string, stderr io.Writer) int {
	if err := parseFlags(fs, args, os.LookupEnv); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		if !isParseError(err) {
			fmt.Fprintf(stderr, "lifeboat %s: %v\n", fs.Name(), err)
		}
		fs.Usage()
		return 2
	}
	return -1
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
