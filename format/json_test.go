package format

import (
	"bytes"
	"errors"
	"testing"
)

// TestJSON: a whole JSON document passes; every cut of it and anything
// after it fail.
func TestJSON(t *testing.T) {
	whole := []byte(`{"step": 50, "loss": 0.25, "lr": [0.1, 0.01], "name": "run \"a\"", "ok": true, "none": null}` + "\n")
	if err := CheckHeader("state.json", bytes.NewReader(whole), int64(len(whole))); err != nil {
		t.Fatalf("whole document: %v", err)
	}
	for _, ok := range []string{`7`, `"s"`, ` [1, {"a": []}] `, `null`} {
		if err := CheckHeader("x.json", bytes.NewReader([]byte(ok)), int64(len(ok))); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
	for n := 0; n < len(whole)-1; n++ { // the last byte is a newline
		cut := whole[:n]
		if err := CheckHeader("state.json", bytes.NewReader(cut), int64(n)); !errors.Is(err, ErrTorn) {
			t.Errorf("cut at %d (%q) passed: %v", n, cut, err)
		}
	}
	for _, bad := range []string{`{"a": 1}{"b": 2}`, `{"a": 1} x`, `{"a": }`, ``} {
		if err := CheckHeader("x.json", bytes.NewReader([]byte(bad)), int64(len(bad))); !errors.Is(err, ErrTorn) {
			t.Errorf("%q passed: %v", bad, err)
		}
	}
	if KindOf("trainer_state.JSON") != JSON || !Known("a/b/state.json") {
		t.Errorf("a .json file is not known as JSON")
	}
}
