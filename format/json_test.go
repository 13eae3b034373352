package format

import (
	"errors"
	"testing"
)

func jsonCheck(b []byte, piece int) error {
	s := new(jsonStream)
	for len(b) > 0 {
		n := min(piece, len(b))
		s.Write(b[:n])
		b = b[n:]
	}
	return s.Close()
}

// TestJSON: whole JSON as Python's json module writes it passes (NaN,
// Infinity, JSON Lines, a byte-order mark); every cut of it and anything
// garbled fail.
func TestJSON(t *testing.T) {
	whole := []byte(`{"step": 50, "loss": 0.25, "lr": [0.1, 1e-05, -2.5E+3, 0], "name": "run \"a\" \u00e9", "ok": true, "none": null, "g": NaN, "i": [Infinity, -Infinity]}` + "\n")
	for _, piece := range []int{1, 3, 1 << 20} {
		if err := jsonCheck(whole, piece); err != nil {
			t.Fatalf("whole document in pieces of %d: %v", piece, err)
		}
	}
	for _, ok := range []string{`7`, `"s"`, ` [1, {"a": []}] `, `null`, `{"a": 1}{"b": 2}`, "{\"a\": 1}\n{\"a\": 2}\n", "\xef\xbb\xbf{\"bom\": 1}", `-0.5`, `[]`, `{}`} {
		if err := jsonCheck([]byte(ok), 1); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
	for n := 0; n < len(whole)-1; n++ { // the last byte is a newline
		cut := whole[:n]
		if err := jsonCheck(cut, 7); !errors.Is(err, ErrTorn) {
			t.Errorf("cut at %d (%q) passed: %v", n, cut, err)
		}
	}
	for _, bad := range []string{`{"a": 1} x`, `{"a": }`, ``, `{"a" 1}`, `[1,]`, `[01]`, `[1.]`, `[1e]`, `"a\qb"`, "\"a\nb\"", `[nan]`, `[-inf]`, `{"a": 1]`, `[1 2]`, `{1: 2}`, "\xef\xbb{}", `[NaN`, `-`} {
		if err := jsonCheck([]byte(bad), 1); !errors.Is(err, ErrTorn) {
			t.Errorf("%q passed: %v", bad, err)
		}
	}
}

// spacesAfterBrace is a ReaderAt of '{' and then spaces, of any size.
type spacesAfterBrace struct{}

func (spacesAfterBrace) ReadAt(p []byte, off int64) (int, error) {
	for i := range p {
		p[i] = ' '
		if off+int64(i) == 0 {
			p[i] = '{'
		}
	}
	return len(p), nil
}

// TestJSONOverBoundUnchecked: a JSON file over maxJSONChecked is not read
// (its check reads every byte): it is ErrUnchecked, never torn.
func TestJSONOverBoundUnchecked(t *testing.T) {
	kind, s, err := Begin(spacesAfterBrace{}, maxJSONChecked+1)
	if kind != JSON || s != nil || !errors.Is(err, ErrUnchecked) || errors.Is(err, ErrTorn) {
		t.Errorf("got %v, %v, %v; want JSON, no stream, ErrUnchecked", kind, s, err)
	}
	if kind, s, err := Begin(spacesAfterBrace{}, 100); kind != JSON || s == nil || err != nil {
		t.Errorf("100 bytes: got %v, %v, %v; want JSON and a stream", kind, s, err)
	}
}
