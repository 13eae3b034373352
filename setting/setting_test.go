package setting_test

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"slices"
	"strings"
	"testing"

	"github.com/lifeboat-project/lifeboat/setting"
)

// TestText: a Text prints its settings by their plain names, or as a
// renderer names them; other arguments, and a % in a prefix, are kept.
func TestText(t *testing.T) {
	x := setting.Textf("raise %s above %d%% of %s", setting.Settle, 50, "a save").Prefixed("100% sure: ")
	flag := func(n setting.Name) string { return "--" + strings.ToLower(string(n)) }
	if got, want := x.String(), "100% sure: raise Settle above 50% of a save"; got != want {
		t.Errorf("String = %q; want %q", got, want)
	}
	if got, want := x.Render(flag), "100% sure: raise --settle above 50% of a save"; got != want {
		t.Errorf("Render = %q; want %q", got, want)
	}
	if got, want := x.Resolve(flag).String(), x.Render(flag); got != want {
		t.Errorf("Resolve(...).String = %q; want %q", got, want)
	}
	if !slices.Equal(x.Names(), []setting.Name{setting.Settle}) || !x.Mentions(setting.Settle) || x.Mentions(setting.Exclude) {
		t.Errorf("Names = %v; want Settle only", x.Names())
	}
	var zero setting.Text
	if !zero.IsZero() || zero.String() != "" || x.IsZero() {
		t.Errorf("IsZero: %v for the zero Text (%q), %v for %q", zero.IsZero(), zero, x.IsZero(), x)
	}
	b, err := json.Marshal(struct{ Why setting.Text }{x})
	if err != nil || string(b) != `{"Why":"100% sure: raise Settle above 50% of a save"}` {
		t.Errorf("JSON %s, %v", b, err)
	}
	var logged bytes.Buffer
	slog.New(slog.NewJSONHandler(&logged, nil)).Info("x", "hint", x)
	var line struct{ Hint string }
	if err := json.Unmarshal(logged.Bytes(), &line); err != nil || line.Hint != x.String() {
		t.Errorf("logged %s (%v); want the hint %q", logged.String(), err, x.String())
	}
}

// TestNames: every Name is listed once in Names.
func TestNames(t *testing.T) {
	seen := map[setting.Name]bool{}
	for _, n := range setting.Names {
		if seen[n] || n == "" {
			t.Errorf("Names holds %q twice or empty", n)
		}
		seen[n] = true
	}
}
