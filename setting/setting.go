// Package setting names the settings of lifeboat's libraries in the
// texts they log and return beside errors: hints, reasons, verdicts. A
// library names a setting by its option (Name), never by a flag or an
// environment variable; the program that sets the option from its command
// line renders the Name as the flag users type (Text.Render). Printed as
// they are (String, MarshalText, and so a log line of a logger that does
// not render them), the Names read as the options' names.
package setting

import (
	"fmt"
	"strings"
)

// Name is a setting of a library's configuration, by its option's name.
type Name string

// The settings that libraries' texts name.
const (
	Dir                       Name = "Dir"                             // the checkpoint directory (pipeline.Options.Dir)
	Settle                    Name = "Settle"                          // watch.Config.Settle
	Exclude                   Name = "Exclude"                         // watch.Config.Exclude
	MarkerOnly                Name = "MarkerOnly"                      // watch.Config.MarkerOnly
	Grace                     Name = "Grace"                           // the grace budget (supervisor.Config.Grace)
	FlushWait                 Name = "FlushWait"                       // how long a sidecar waits for the trainer before its final upload
	Rank                      Name = "Rank"                            // coord.Config.Rank
	WorldSize                 Name = "WorldSize"                       // pipeline.Options.WorldSize
	Restore                   Name = "Restore"                         // pipeline.Options.Restore: auto (set) or never (unset)
	AllRanks                  Name = "AllRanks"                        // pipeline.Options.AllRanks: every old rank's files
	UnsafeNoConditionalWrites Name = "Store.UnsafeNoConditionalWrites" // pipeline.StoreConfig.UnsafeNoConditionalWrites
)

// Names lists every Name, for a program's table of them and its test.
var Names = []Name{Dir, Settle, Exclude, MarkerOnly, Grace, FlushWait, Rank, WorldSize, Restore, AllRanks, UnsafeNoConditionalWrites}

// Text is a text that names settings: Format and Args as for fmt.Sprintf,
// where an argument of type Name is a setting, rendered by Render's
// function (as its plain name by String).
type Text struct {
	Format string
	Args   []any
}

// Textf is the Text of format and args; an argument of type Name is a
// setting.
func Textf(format string, args ...any) Text { return Text{Format: format, Args: args} }

// Render is the text with each Name rendered by name.
func (t Text) Render(name func(Name) string) string {
	return fmt.Sprintf(t.Format, t.Resolve(name).Args...)
}

// Resolve is t with each Name argument replaced by name's rendering of
// it, so that printing it (String, MarshalText: an encoder of JSON)
// shows those.
func (t Text) Resolve(name func(Name) string) Text {
	args := make([]any, len(t.Args))
	for i, a := range t.Args {
		if n, ok := a.(Name); ok {
			a = name(n)
		}
		args[i] = a
	}
	return Text{Format: t.Format, Args: args}
}

// Names lists the settings t names, in order.
func (t Text) Names() []Name {
	var out []Name
	for _, a := range t.Args {
		if n, ok := a.(Name); ok {
			out = append(out, n)
		}
	}
	return out
}

// Mentions reports whether t names n.
func (t Text) Mentions(n Name) bool {
	for _, m := range t.Names() {
		if m == n {
			return true
		}
	}
	return false
}

// IsZero reports whether t is empty.
func (t Text) IsZero() bool { return t.Format == "" && len(t.Args) == 0 }

// String is the text with each setting by its plain name.
func (t Text) String() string {
	if t.IsZero() {
		return ""
	}
	return t.Render(func(n Name) string { return string(n) })
}

// MarshalText is String, for encoders (JSON, slog's handlers).
func (t Text) MarshalText() ([]byte, error) { return []byte(t.String()), nil }

// Prefixed is t preceded by the plain text p.
func (t Text) Prefixed(p string) Text {
	return Text{Format: strings.ReplaceAll(p, "%", "%%") + t.Format, Args: t.Args}
}
