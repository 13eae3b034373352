// Package keys logs in each form whose keys the log tests must read, and
// in forms they must refuse. It is never built; the tests parse it.
package keys

import (
	"context"
	"log/slog"
	"time"

	"example.com/other"
)

const keyC = "c"

type W struct {
	log  *slog.Logger
	args []any
}

func newW(log *slog.Logger) *W {
	w := &W{}
	w.log = log.With("component", "w")
	return w
}

// withDeadline appends "deadline" when t is set, then rest.
func withDeadline(args []any, t time.Time, rest ...any) []any {
	if !t.IsZero() {
		args = append(args, "deadline", t)
	}
	return append(args, rest...)
}

func (w *W) logf(args ...any) { w.log.Info("keys.param", args...) }

func f(ctx context.Context, log *slog.Logger, w *W, t time.Time, x int) {
	log.Info("keys.literal", "a", 1, "b", 2)
	log.Info("keys.const", keyC, 1)
	log.Info("keys.attrs", slog.String("s", "v"), "p", 1, slog.Int("i", 1), slog.Any("any", x), slog.Group("g", "inner", 1))
	log.LogAttrs(ctx, slog.LevelInfo, "keys.log_attrs", slog.Attr{Key: "attr_lit", Value: slog.IntValue(1)}, slog.Bool("b", true))

	args := []any{"a", 1}
	if x > 0 {
		args = append(args, "b", 2)
	} else {
		args = append(args, slog.Int("c", 3))
	}
	args = append([]any{"first", 0}, args...)
	log.Warn("keys.spread", args...)
	log.Warn("keys.inline_append", append(args, "effect", "x")...)

	var more []any
	if x > 1 {
		more = append(more, "late", x)
	}
	log.Debug("keys.var_nil", more...)

	log.Error("keys.helper", withDeadline([]any{"h1", 1}, t, "h3", 3)...)

	warn := func(why string, args ...any) {
		log.Warn("keys.closure", append([]any{"why", why}, args...)...)
	}
	warn("none")
	warn("pairs", "e3", 3)
	extra := []any{"e1", 1}
	extra = append(extra, "e2", 2)
	warn("spread", extra...)

	w.logf("p1", 1)
	pargs := []any{"p2", 2}
	w.logf(pargs...)

	w.log.Info("keys.with_field", "k", 1)
	l := log.With("local", 1)
	l.Info("keys.with_local")
	log.With("inline", 1).Info("keys.with_inline", "k", 1)

	event := "keys.by_var"
	log.Info(event, "v", 1)
	key := "local_key"
	log.InfoContext(ctx, "keys.context", "ctx_key", 1, key, 2)

	// Refused: keys that cannot be read without running the code.
	log.Info("keys.bad_computed", "k"+"x", 1)
	attr := slog.String("a", "b")
	log.Info("keys.bad_attr_var", attr)
	log.Info("keys.bad_foreign", other.Args()...)
	log.Info("keys.bad_no_value", "k")
	log.Info("keys.bad_field", w.args...)
	other.Use(log.With("lost", 1))
}

func g(log *slog.Logger) {
	lg := log.With("passed", 1)
	lg.Info("keys.passed_on")
	other.Use(lg)
}
