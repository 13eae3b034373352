package signals

import (
	"log/slog"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// urgForwarded is set when the Go runtime of this process does not use
// SIGURG. Its zero value, the runtime's, suits a binary built without the
// flag below and every test binary.
var urgForwarded atomic.Bool

// LinkFlag holds the linker flags that turn asynchronous preemption off in
// lifeboat, so that the runtime leaves SIGURG alone and it can be
// forwarded: every build of lifeboat passes them in -ldflags. The go
// command refuses `//go:debug asyncpreemptoff=1` and a go.mod godebug line
// (asyncpreemptoff is not one of its compatibility settings); the runtime
// reads runtime.godebugDefault at start-up, before the GODEBUG environment
// variable, as it would either of those. The second flag records the same
// value where LinkedGODEBUG finds it in a -trimpath build, whose build
// info drops -ldflags.
const LinkFlag = "-X runtime.godebugDefault=asyncpreemptoff=1 -X github.com/lifeboat-project/lifeboat/signals.recordedGODEBUG=asyncpreemptoff=1"

// recordedGODEBUG is set by LinkFlag to what it gave
// runtime.godebugDefault.
var recordedGODEBUG string

// SetRuntimeOwnsURG says whether the Go runtime of this process sends
// itself SIGURG to preempt goroutines (asynchronous preemption on, Go's
// default). While it does, a SIGURG received cannot be told from the
// runtime's own and is not Forwardable; when it does not, SIGURG is
// forwarded like any other signal. main decides it once, before any signal
// is handled, with AsyncPreemptOff.
func SetRuntimeOwnsURG(owns bool) { urgForwarded.Store(!owns) }

// RuntimeOwnsURG reports what SetRuntimeOwnsURG last set (true before).
func RuntimeOwnsURG() bool { return !urgForwarded.Load() }

// AsyncPreemptOff reports whether the Go runtime's asynchronous preemption
// is off in a process whose binary was linked with the GODEBUG defaults
// linked (LinkedGODEBUG) and that runs with env as its GODEBUG
// environment variable. It reads them as the runtime does at start-up:
// comma-separated key=value settings, the defaults first, left to right,
// the last asyncpreemptoff with an integer value winning; any non-zero
// value turns preemption off.
func AsyncPreemptOff(linked, env string) bool {
	off := false
	for _, field := range strings.Split(linked+","+env, ",") {
		key, value, ok := strings.Cut(field, "=")
		if !ok || key != "asyncpreemptoff" {
			continue
		}
		if n, err := strconv.ParseInt(value, 10, 32); err == nil {
			off = n != 0
		}
	}
	return off
}

// LinkedGODEBUG returns the GODEBUG defaults linked into this binary's
// runtime: what LinkFlag recorded, or else BuildGODEBUG of its build info.
func LinkedGODEBUG() string {
	if recordedGODEBUG != "" {
		return recordedGODEBUG
	}
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return ""
	}
	return BuildGODEBUG(info.Settings)
}

// BuildGODEBUG returns the GODEBUG defaults that a build linked into the
// runtime (runtime.godebugDefault), from its build settings: the last
// `-X runtime.godebugDefault=...` in -ldflags, which replaces the go
// command's own (its DefaultGODEBUG setting, passed to the linker first),
// or else that DefaultGODEBUG. The go command does not record -ldflags in
// a -trimpath build.
func BuildGODEBUG(build []debug.BuildSetting) string {
	var def, ldflags string
	for _, s := range build {
		switch s.Key {
		case "DefaultGODEBUG":
			def = s.Value
		case "-ldflags":
			ldflags = s.Value
		}
	}
	if v, ok := linkedByFlags(ldflags); ok {
		return v
	}
	return def
}

// linkedByFlags finds the last -X runtime.godebugDefault=VALUE in an
// -ldflags value as the go command takes it: an optional leading
// "pattern=", then fields split at spaces, a field that starts with a
// quote running to the matching quote.
func linkedByFlags(ldflags string) (string, bool) {
	v := strings.TrimSpace(ldflags)
	if v != "" && !strings.HasPrefix(v, "-") {
		if _, rest, ok := strings.Cut(v, "="); ok {
			v = rest
		}
	}
	const sym = "runtime.godebugDefault="
	args := splitQuoted(v)
	value, found := "", false
	for i := 0; i < len(args); i++ {
		a := strings.TrimPrefix(args[i], "-")
		a = strings.TrimPrefix(a, "-")
		var x string
		switch {
		case a == "X" && i+1 < len(args):
			i++
			x = args[i]
		case strings.HasPrefix(a, "X="):
			x = a[len("X="):]
		default:
			continue
		}
		if rest, ok := strings.CutPrefix(x, sym); ok {
			value, found = rest, true
		}
	}
	return value, found
}

// splitQuoted splits s into fields at spaces; a field that begins with '
// or " runs to the next such quote, which is dropped.
func splitQuoted(s string) []string {
	var fields []string
	for {
		s = strings.TrimLeft(s, " \t\n\r")
		if s == "" {
			return fields
		}
		if q := s[0]; q == '\'' || q == '"' {
			if end := strings.IndexByte(s[1:], q); end >= 0 {
				fields = append(fields, s[1:1+end])
				s = s[2+end:]
				continue
			}
		}
		end := strings.IndexAny(s, " \t\n\r")
		if end < 0 {
			end = len(s)
		}
		fields = append(fields, s[:end])
		s = s[end:]
	}
}

var explainedURG sync.Once

// ExplainURG logs at Debug, once per process, why SIGURG is not forwarded
// while the runtime owns it. It logs nothing when SIGURG is forwarded.
func ExplainURG(log *slog.Logger) {
	if !RuntimeOwnsURG() {
		return
	}
	explainedURG.Do(func() {
		log.Debug("signal.urg_not_forwarded", "signal", Name(unix.SIGURG),
			"reason", "the Go runtime preempts goroutines with SIGURG in this lifeboat, so one received cannot be told from its own",
			"hint", "build lifeboat with -ldflags '"+LinkFlag+"' (the release image is), and do not set GODEBUG=asyncpreemptoff=0")
	})
}
