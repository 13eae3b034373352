package main

import (
	"flag"
	"fmt"
	"io"
	"strings"
)

// envName is the environment twin of a flag: --preempt-exit-code is
// LIFEBOAT_PREEMPT_EXIT_CODE.
func envName(flagName string) string {
	return "LIFEBOAT_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// parseFlags parses args into fs, then fills every flag not given on the
// command line from its LIFEBOAT_ variable, so the order is flag > env >
// default. lookup is os.LookupEnv outside tests. Errors name the variable.
func parseFlags(fs *flag.FlagSet, args []string, lookup func(string) (string, bool)) error {
	if err := fs.Parse(args); err != nil {
		return err
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	var err error
	fs.VisitAll(func(f *flag.Flag) {
		if err != nil || set[f.Name] {
			return
		}
		v, ok := lookup(envName(f.Name))
		if !ok || v == "" {
			return
		}
		if multi, isMulti := f.Value.(*listFlag); isMulti {
			for _, part := range strings.Split(v, ",") {
				if part = strings.TrimSpace(part); part != "" {
					if e := multi.Set(part); e != nil {
						err = &envError{name: envName(f.Name), value: v, err: e}
						return
					}
				}
			}
			return
		}
		if e := f.Value.Set(v); e != nil {
			err = &envError{name: envName(f.Name), value: v, err: e}
		}
	})
	return err
}

// listFlag is a repeatable flag; its environment twin is comma-separated.
type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ",") }
func (l *listFlag) Set(v string) error { *l = append(*l, v); return nil }

// flagUsage prints a flag set's defaults with each flag's variable name.
func flagUsage(fs *flag.FlagSet, w io.Writer, synopsis string) func() {
	return func() {
		fmt.Fprintf(w, "Usage: %s\n\nFlags (each also read from its environment variable):\n", synopsis)
		fs.VisitAll(func(f *flag.Flag) {
			def := ""
			if f.DefValue != "" {
				def = fmt.Sprintf(" (default %s)", f.DefValue)
			}
			fmt.Fprintf(w, "  --%s  [%s]%s\n      %s\n", f.Name, envName(f.Name), def, f.Usage)
		})
	}
}

// envError is a bad value in a flag's environment variable.
type envError struct {
	name, value string
	err         error
}

func (e *envError) Error() string { return fmt.Sprintf("%s=%q: %v", e.name, e.value, e.err) }
func (e *envError) Unwrap() error { return e.err }

// newFlagSet returns a subcommand's flag set, printing to w.
func newFlagSet(name string, w io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(w)
	return fs
}
