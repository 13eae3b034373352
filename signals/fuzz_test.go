package signals

import "testing"

// FuzzParseRewrite checks that no rewrite spec panics, and that an accepted
// one never maps to or from an uncatchable signal.
func FuzzParseRewrite(f *testing.F) {
	for _, s := range []string{"TERM:USR1", "15:10", "RTMIN+1:RTMAX-2", ":", "TERM:", "KILL:TERM", "a:b:c"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, spec string) {
		rw := Rewrite{}
		if err := rw.ParseRewrite(spec); err != nil {
			return
		}
		for from, to := range rw {
			if !Forwardable(from) || to <= 0 || to > maxSignal || to == 9 || to == 19 {
				t.Fatalf("%q accepted as %v -> %v", spec, from, to)
			}
		}
	})
}
