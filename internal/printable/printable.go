// Package printable writes names (file paths, directory names, error
// messages that hold them) for people: on one line, with nothing a
// terminal would act on.
//
// String keeps every printable character and escapes, as \xHH (two
// lower-case hex digits) for each byte, what is not: the C0 controls
// (newline, carriage return, tab, escape and the rest), DEL, the C1
// controls, the Unicode line and paragraph separators and the
// bidirectional overrides and isolates (which reorder what a terminal
// shows) and every byte that is not part of valid UTF-8. The backslash is
// kept: messages quote values with %q, whose escapes would double
// otherwise, so a name that holds a literal "\x0a" reads like an escaped
// newline (the JSON outputs tell them apart). It is the spelling the
// manifest's EscapePath uses for bytes. JSON output needs none of this:
// encoding/json escapes.
package printable

import (
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"
)

// String is s with what is not printable escaped (see the package doc).
func String(s string) string {
	if !needs(s) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		if (r == utf8.RuneError && n == 1) || escaped(r) {
			for j := i; j < i+n; j++ {
				fmt.Fprintf(&b, "\\x%02x", s[j])
			}
		} else {
			b.WriteString(s[i : i+n])
		}
		i += n
	}
	return b.String()
}

// needs reports whether String changes s.
func needs(s string) bool {
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		if (r == utf8.RuneError && n == 1) || escaped(r) {
			return true
		}
		i += n
	}
	return false
}

// escaped reports whether the rune r is written escaped.
func escaped(r rune) bool {
	switch {
	case r < 0x20, r == 0x7f, r >= 0x80 && r <= 0x9f:
		return true
	case r == 0x2028, r == 0x2029: // line and paragraph separators
		return true
	case r >= 0x202a && r <= 0x202e, r >= 0x2066 && r <= 0x2069, r == 0x200e, r == 0x200f, r == 0x061c:
		return true // bidirectional marks, embeddings, overrides, isolates
	}
	return false
}

// ErrorLines is err's message for people, one line per error: the errors
// an errors.Join joins (also when wrapped, as fmt.Errorf("...: %w",
// joined) does) each get a line of their own, and within each line
// String escapes the rest, so a newline that came from a name never
// starts a line of its own.
func ErrorLines(err error) []string {
	if err == nil {
		return nil
	}
	msg := err.Error()
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		errs := j.Unwrap()
		parts := make([]string, 0, len(errs))
		for _, e := range errs {
			if e != nil {
				parts = append(parts, e.Error())
			}
		}
		if msg == strings.Join(parts, "\n") { // errors.Join's message
			var out []string
			for _, e := range errs {
				if e != nil {
					out = append(out, ErrorLines(e)...)
				}
			}
			return out
		}
	}
	if w := errors.Unwrap(err); w != nil && strings.Contains(w.Error(), "\n") && strings.HasSuffix(msg, w.Error()) {
		sub := ErrorLines(w)
		if len(sub) > 1 {
			sub[0] = String(strings.TrimSuffix(msg, w.Error())) + sub[0]
			return sub
		}
	}
	return []string{String(msg)}
}
