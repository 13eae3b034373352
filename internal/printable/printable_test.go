package printable

import (
	"errors"
	"fmt"
	"slices"
	"testing"
)

func TestString(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"step-000100/model.pdparams", "step-000100/model.pdparams"},
		{"héllo wörld ✓", "héllo wörld ✓"},
		{"a\nb", `a\x0ab`},
		{"a\r\tb\x1b[31m", `a\x0d\x09b\x1b[31m`},
		{`back\slash "q\"uoted"`, `back\slash "q\"uoted"`},
		{"bad\xffutf8", `bad\xffutf8`},
		{"line\u2028sep", `line\xe2\x80\xa8sep`},
		{"rtl\u202eoverride", `rtl\xe2\x80\xaeoverride`},
		{"c1\u0085", `c1\xc2\x85`},
		{"del\x7f", `del\x7f`},
	} {
		if got := String(c.in); got != c.want {
			t.Errorf("String(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

func TestErrorLines(t *testing.T) {
	name := "step-1\nno complete checkpoint in the store: the trainer starts fresh"
	leaf := fmt.Errorf("file %s: bad", name)
	joined := fmt.Errorf("restore: %w", errors.Join(errors.New("all failed"), fmt.Errorf("step 1: %w", leaf), errors.New("step 0: gone")))
	got := ErrorLines(joined)
	want := []string{"restore: all failed", `step 1: file step-1\x0ano complete checkpoint in the store: the trainer starts fresh: bad`, "step 0: gone"}
	if !slices.Equal(got, want) {
		t.Errorf("ErrorLines = %q, want %q", got, want)
	}
	if got := ErrorLines(leaf); len(got) != 1 {
		t.Errorf("ErrorLines of one error with a newline in a name = %q, want one line", got)
	}
}
