package signals

import (
	"fmt"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Parse reads a signal name as users write it: "TERM", "SIGTERM", "term",
// "15", "RTMIN+2". It returns an error naming the input when it is not a
// signal.
func Parse(s string) (unix.Signal, error) {
	name := strings.ToUpper(strings.TrimSpace(s))
	if name == "" {
		return 0, fmt.Errorf("signal name is empty")
	}
	if n, err := strconv.Atoi(name); err == nil {
		if n <= 0 || n > maxSignal {
			return 0, fmt.Errorf("signal number %d is out of range 1..%d", n, maxSignal)
		}
		return unix.Signal(n), nil
	}
	name = strings.TrimPrefix(name, "SIG")
	if base, off, ok := strings.Cut(name, "+"); ok && (base == "RTMIN") {
		n, err := strconv.Atoi(off)
		if err != nil || n < 0 || sigRTMin+n > maxSignal {
			return 0, fmt.Errorf("signal %q: RTMIN offset must be 0..%d", s, maxSignal-sigRTMin)
		}
		return unix.Signal(sigRTMin + n), nil
	}
	if base, off, ok := strings.Cut(name, "-"); ok && (base == "RTMAX") {
		n, err := strconv.Atoi(off)
		if err != nil || n < 0 || maxSignal-n < sigRTMin {
			return 0, fmt.Errorf("signal %q: RTMAX offset must be 0..%d", s, maxSignal-sigRTMin)
		}
		return unix.Signal(maxSignal - n), nil
	}
	switch name {
	case "RTMIN":
		return unix.Signal(sigRTMin), nil
	case "RTMAX":
		return unix.Signal(maxSignal), nil
	}
	if sig := unix.SignalNum("SIG" + name); sig != 0 {
		return sig, nil
	}
	return 0, fmt.Errorf("unknown signal %q: use a name such as TERM or USR1, or a number", s)
}

// Name returns the short upper-case name of sig ("TERM"), or "RTMIN+n" for
// real-time signals, or the number.
func Name(sig unix.Signal) string {
	if n := unix.SignalName(sig); n != "" {
		return strings.TrimPrefix(n, "SIG")
	}
	if int(sig) >= sigRTMin && int(sig) <= maxSignal {
		return fmt.Sprintf("RTMIN+%d", int(sig)-sigRTMin)
	}
	return strconv.Itoa(int(sig))
}

// ParseList reads a comma-separated list of signal names ("TERM,INT").
func ParseList(s string) ([]unix.Signal, error) {
	var out []unix.Signal
	for _, part := range strings.Split(s, ",") {
		if strings.TrimSpace(part) == "" {
			continue
		}
		sig, err := Parse(part)
		if err != nil {
			return nil, err
		}
		out = append(out, sig)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("signal list %q is empty", s)
	}
	return out, nil
}

// Rewrite maps a received signal to the one delivered to the child.
type Rewrite map[unix.Signal]unix.Signal

// ParseRewrite reads one rewrite rule "FROM:TO" ("TERM:USR1") into r.
// Rewriting to or from an uncatchable signal (KILL, STOP) or to 0 is an error:
// lifeboat never receives KILL or STOP, and delivering them would deny the
// trainer its chance to save.
func (r Rewrite) ParseRewrite(spec string) error {
	from, to, ok := strings.Cut(spec, ":")
	if !ok {
		return fmt.Errorf("rewrite %q: want FROM:TO, for example TERM:USR1", spec)
	}
	f, err := Parse(from)
	if err != nil {
		return fmt.Errorf("rewrite %q: %w", spec, err)
	}
	t, err := Parse(to)
	if err != nil {
		return fmt.Errorf("rewrite %q: %w", spec, err)
	}
	for _, s := range []unix.Signal{f, t} {
		if s == unix.SIGKILL || s == unix.SIGSTOP {
			return fmt.Errorf("rewrite %q: %s cannot be rewritten (it cannot be caught)", spec, Name(s))
		}
	}
	if !Forwardable(f) {
		return fmt.Errorf("rewrite %q: lifeboat never forwards %s", spec, Name(f))
	}
	if prev, dup := r[f]; dup && prev != t {
		return fmt.Errorf("rewrite %q: %s is already rewritten to %s", spec, Name(f), Name(prev))
	}
	r[f] = t
	return nil
}

// Apply returns the signal to deliver for a received sig.
func (r Rewrite) Apply(sig unix.Signal) unix.Signal {
	if to, ok := r[sig]; ok {
		return to
	}
	return sig
}

// String renders r as a sorted, comma-separated FROM:TO list.
func (r Rewrite) String() string {
	var parts []string
	for s := unix.Signal(1); int(s) <= maxSignal; s++ {
		if to, ok := r[s]; ok {
			parts = append(parts, Name(s)+":"+Name(to))
		}
	}
	return strings.Join(parts, ",")
}
