// Package mountinfo reads the format of proc(5)'s /proc/PID/mountinfo: the
// memory limits find the cgroup file systems in it, and a sidecar finds the
// checkpoint volume in its own and its trainer's.
package mountinfo

import (
	"bufio"
	"bytes"
	"fmt"
	"strconv"
	"strings"
)

// Entry is one line of a mountinfo file, the fields lifeboat uses.
type Entry struct {
	Dev      string   // major:minor of the file system
	Root     string   // the mounted subtree of the file system
	Point    string   // where it is mounted
	ReadOnly bool     // per-mount "ro"
	FSType   string   // the file system's type
	Super    []string // per-superblock options (cgroup v1: the controllers)
}

// Parse parses a mountinfo file. A malformed line is an error naming it.
func Parse(data []byte) ([]Entry, error) {
	var out []Entry
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if strings.TrimSpace(line) == "" {
			continue
		}
		pre, post, ok := strings.Cut(line, " - ")
		f := strings.Fields(pre)
		g := strings.Fields(post)
		if !ok || len(f) < 6 || len(g) < 2 {
			return nil, fmt.Errorf("line %d: malformed: %q", n, line)
		}
		e := Entry{Dev: f[2], Root: Unescape(f[3]), Point: Unescape(f[4]), FSType: g[0]}
		for _, o := range strings.Split(f[5], ",") {
			if o == "ro" {
				e.ReadOnly = true
			}
		}
		if len(g) >= 3 {
			e.Super = strings.Split(g[2], ",")
		}
		out = append(out, e)
	}
	return out, sc.Err()
}

// Unescape undoes mountinfo's octal escapes (\040 for a space, \011,
// \012, \134).
func Unescape(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
