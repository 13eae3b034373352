package watch

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"path"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/lifeboat-project/lifeboat/internal/reserved"
)

// DefaultMarker is the file whose presence in a directory says "this
// checkpoint is complete"; its content is the step.
const DefaultMarker = reserved.Marker

// DefaultStepPattern finds the step in a checkpoint's name: the last run of
// digits ("step-000100" -> 100, "epoch_3.pdparams" -> 3,
// "checkpoint-1500" -> 1500).
var DefaultStepPattern = regexp.MustCompile(`(\d+)\D*$`)

// File is one regular file under the watched directory.
type File struct {
	Path       string // slash-separated, relative to the watched directory
	Size       int64
	ModTime    time.Time
	ChangeTime time.Time // the inode's ctime (zero where not read)
}

// Candidate is one checkpoint as seen in one scan.
type Candidate struct {
	// ID names the checkpoint within the watched directory: the marker's or
	// subdirectory's path, or "files:<step>" / "files:" for top-level groups.
	ID string
	// Dir is the directory its files are relative to ("" is the watched
	// directory itself); Files are relative to Dir.
	Dir   string
	Files []File
	// Step is the step from the marker or the name; HasStep is false when
	// neither gives one and Watcher.Number must.
	Step    int64
	HasStep bool
	// Marker is true for a marker checkpoint.
	Marker bool
}

// Bytes is the total size of the candidate's files.
func (c *Candidate) Bytes() int64 {
	var n int64
	for _, f := range c.Files {
		n += f.Size
	}
	return n
}

// Fingerprint changes whenever a file of the candidate is added, removed,
// resized or rewritten, even in place with its size and modification time
// set back (the change time moves).
func (c *Candidate) Fingerprint() string {
	h := sha256.New()
	for _, f := range c.Files {
		fmt.Fprintf(h, "%s\x00%d\x00%d\x00%d\n", f.Path, f.Size, nanos(f.ModTime), nanos(f.ChangeTime))
	}
	return hex.EncodeToString(h.Sum(nil)[:16])
}

// nanos is t in Unix nanoseconds, 0 for the zero time.
func nanos(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

// LastChange is the latest modification or change time among the
// candidate's files.
func (c *Candidate) LastChange() time.Time {
	var t time.Time
	for _, f := range c.Files {
		if f.ModTime.After(t) {
			t = f.ModTime
		}
		if f.ChangeTime.After(t) {
			t = f.ChangeTime
		}
	}
	return t
}

// Group sorts the files of one scan into candidates, following the
// precedence in the package comment. markerSteps maps each directory that
// holds the marker to the step written in it (a marker without a valid step
// maps to -1 and the name, or Watcher.Number, decides). Files are relative
// to the watched directory; the marker files themselves are left out.
func Group(files []File, marker string, markerSteps map[string]int64, pattern *regexp.Regexp) []Candidate {
	g := newGrouper(markerSteps, pattern)
	byID := map[string]*Candidate{}
	for _, f := range files {
		if path.Base(f.Path) == marker {
			continue
		}
		k := g.of(f.Path)
		c := byID[k.ID]
		if c == nil {
			c = &Candidate{ID: k.ID, Dir: k.Dir, Step: k.Step, HasStep: k.HasStep, Marker: k.Marker}
			byID[k.ID] = c
		}
		c.Files = append(c.Files, rel(f, k.Dir))
	}
	out := make([]Candidate, 0, len(byID))
	for _, c := range byID {
		sort.Slice(c.Files, func(i, j int) bool { return c.Files[i].Path < c.Files[j].Path })
		out = append(out, *c)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].HasStep != out[j].HasStep {
			return out[i].HasStep
		}
		if out[i].Step != out[j].Step {
			return out[i].Step < out[j].Step
		}
		return out[i].ID < out[j].ID
	})
	return out
}

// grouper says which candidate a path belongs to.
type grouper struct {
	markerSteps map[string]int64
	markerDirs  []string // deepest first, so nested markers win
	pattern     *regexp.Regexp
}

func newGrouper(markerSteps map[string]int64, pattern *regexp.Regexp) *grouper {
	g := &grouper{markerSteps: markerSteps, pattern: pattern}
	for d := range markerSteps {
		g.markerDirs = append(g.markerDirs, d)
	}
	sort.Slice(g.markerDirs, func(i, j int) bool { return len(g.markerDirs[i]) > len(g.markerDirs[j]) })
	return g
}

// of returns the candidate (without files) that the file at p belongs to.
func (g *grouper) of(p string) Candidate {
	if d, ok := underAny(p, g.markerDirs); ok {
		c := Candidate{ID: "marker:" + d, Dir: d, Marker: true}
		if s := g.markerSteps[d]; s >= 0 {
			c.Step, c.HasStep = s, true
		} else if s, ok := stepOf(path.Base(d), g.pattern); ok && d != "" {
			c.Step, c.HasStep = s, true
		}
		return c
	}
	if top, _, nested := strings.Cut(p, "/"); nested {
		c := Candidate{ID: "dir:" + top, Dir: top}
		c.Step, c.HasStep = stepOf(top, g.pattern)
		return c
	}
	if s, ok := stepOf(p, g.pattern); ok {
		return Candidate{ID: "files:" + strconv.FormatInt(s, 10), Step: s, HasStep: true}
	}
	return Candidate{ID: "files:"}
}

// underAny returns the first of dirs that contains p ("" contains all).
func underAny(p string, dirs []string) (string, bool) {
	for _, d := range dirs {
		if d == "" || strings.HasPrefix(p, d+"/") {
			return d, true
		}
	}
	return "", false
}

func rel(f File, dir string) File {
	if dir != "" {
		f.Path = strings.TrimPrefix(f.Path, dir+"/")
	}
	return f
}

// stepOf extracts the step from name with pattern's first group.
func stepOf(name string, pattern *regexp.Regexp) (int64, bool) {
	m := pattern.FindStringSubmatch(name)
	if len(m) < 2 {
		return 0, false
	}
	s, err := strconv.ParseInt(m[1], 10, 64)
	if err != nil || s < 0 {
		return 0, false
	}
	return s, true
}

// ParseMarkerStep reads the step written in a marker file: a decimal number,
// optionally followed by whitespace. Anything else gives -1.
func ParseMarkerStep(b []byte) int64 {
	s, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil || s < 0 {
		return -1
	}
	return s
}
