package main

import (
	"flag"
	"fmt"
	"io"
	"strings"
	"time"
)

// envName is the environment twin of a flag: --preempt-exit-code is
// LIFEBOAT_PREEMPT_EXIT_CODE.
func envName(flagName string) string {
	return "LIFEBOAT_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// parseFlags parses args into fs, then fills every flag not given on the
// command line from its LIFEBOAT_ variable, so the order is flag > env >
// default. lookup is os.LookupEnv outside tests. A bad value, given as the
// flag or its variable, is a *valueError naming both.
func parseFlags(fs *flag.FlagSet, args []string, lookup func(string) (string, bool)) error {
	var bad *valueError
	fs.VisitAll(func(f *flag.Flag) { f.Value = wrapValue(f, &bad) })
	if err := fs.Parse(args); err != nil {
		if bad != nil {
			return bad
		}
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
		if multi, isMulti := unwrapValue(f.Value).(*listFlag); isMulti {
			for _, part := range strings.Split(v, ",") {
				if part = strings.TrimSpace(part); part != "" {
					if e := multi.Set(part); e != nil {
						err = &valueError{flag: f.Name, value: v, env: true, kind: kindOf(f.Value), err: e}
						return
					}
				}
			}
			return
		}
		if e := unwrapValue(f.Value).Set(v); e != nil {
			err = &valueError{flag: f.Name, value: v, env: true, kind: kindOf(f.Value), err: e}
		}
	})
	return err
}

// checkedValue records the first flag whose value the flag package
// refused, so that the error names the flag and its variable in one line.
type checkedValue struct {
	flag.Value
	name string
	bad  **valueError
}

// checkedBool is a checkedValue of a boolean flag (--json without a value).
type checkedBool struct{ checkedValue }

func (c *checkedBool) IsBoolFlag() bool { return true }

func (c *checkedValue) Set(s string) error {
	err := c.Value.Set(s)
	if err != nil && *c.bad == nil {
		*c.bad = &valueError{flag: c.name, value: s, kind: kindOf(c.Value), err: err}
	}
	return err
}

func wrapValue(f *flag.Flag, bad **valueError) flag.Value {
	v := unwrapValue(f.Value)
	c := checkedValue{Value: v, name: f.Name, bad: bad}
	if b, ok := v.(interface{ IsBoolFlag() bool }); ok && b.IsBoolFlag() {
		return &checkedBool{c}
	}
	return &c
}

// unwrapValue returns the flag's own value under a parse-time wrapper.
func unwrapValue(v flag.Value) flag.Value {
	switch c := v.(type) {
	case *checkedValue:
		return c.Value
	case *checkedBool:
		return c.Value
	}
	return v
}

// valueError is a value a flag or its variable does not accept.
type valueError struct {
	flag, value string
	env         bool   // given as the variable
	kind        string // what the flag takes: bool, int, duration or ""
	err         error
}

func (e *valueError) Error() string {
	what := e.err.Error()
	// Our own values' messages already name the flag and its variable.
	if strings.Contains(what, "--"+e.flag+" ") || strings.Contains(what, "--"+e.flag+")") {
		return fmt.Sprintf("%s=%q: %s", e.via(), e.value, what)
	}
	what = plainParseError(e.err, e.kind)
	if e.env {
		return fmt.Sprintf("%s=%q (--%s): %s", envName(e.flag), e.value, e.flag, what)
	}
	return fmt.Sprintf("--%s (%s) is %q: %s", e.flag, envName(e.flag), e.value, what)
}

// via names how the value was given.
func (e *valueError) via() string {
	if e.env {
		return envName(e.flag)
	}
	return "--" + e.flag
}

func (e *valueError) Unwrap() error { return e.err }

// plainParseError turns strconv's and time's errors into a sentence
// saying what the flag takes.
func plainParseError(err error, kind string) string {
	switch kind {
	case "bool":
		return "use true or false"
	case "int":
		return "give a whole number"
	case "duration":
		return "give a duration such as 30s or 5m"
	}
	return err.Error()
}

// kindOf says what a flag's value takes, for messages.
func kindOf(v flag.Value) string {
	g, ok := unwrapValue(v).(flag.Getter)
	if !ok {
		return ""
	}
	switch g.Get().(type) {
	case bool:
		return "bool"
	case int, int64, uint, uint64:
		return "int"
	case time.Duration:
		return "duration"
	}
	return ""
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

// newFlagSet returns a subcommand's flag set, printing to w.
func newFlagSet(name string, w io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(w)
	if onNewFlagSet != nil {
		onNewFlagSet(fs)
	}
	return fs
}

// onNewFlagSet, when set (by tests), sees every subcommand's flag set.
var onNewFlagSet func(*flag.FlagSet)
