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
)

// DefaultMarker is the file whose presence in a directory says "this
// checkpoint is complete"; its content is the step.
const DefaultMarker = ".lifeboat-commit"

// DefaultStepPattern finds the step in a checkpoint's name: the last run of
// digits ("step-000100" -> 100, "epoch_3.pdparams" -> 3,
// "checkpoint-1500" -> 1500).
var DefaultStepPattern = regexp.MustCompile(`(\d+)\D*$`)

// File is one regular file under the watched directory.
type File struct {
	Path    string // slash-separated, relative to the watched directory
	Size    int64
	ModTime time.Time
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
	// neither gives one and a counter must.
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
// resized or rewritten.
func (c *Candidate) Fingerprint() string {
	h := sha256.New()
	for _, f := range c.Files {
		fmt.Fprintf(h, "%s\x00%d\x00%d\n", f.Path, f.Size, f.ModTime.UnixNano())
	}
	return hex.EncodeToString(h.Sum(nil)[:16])
}

// newest is the latest modification time among the candidate's files.
func (c *Candidate) newest() time.Time {
	var t time.Time
	for _, f := range c.Files {
		if f.ModTime.After(t) {
			t = f.ModTime
		}
	}
	return t
}

// Group sorts the files of one scan into candidates, following the
// precedence in the package comment. markerSteps maps each directory that
// holds the marker to the step written in it (a marker without a valid step
// maps to -1 and the name or a counter decides). Files are relative to the
// watched directory; the marker files themselves are left out.
func Group(files []File, marker string, markerSteps map[string]int64, pattern *regexp.Regexp) []Candidate {
	byID := map[string]*Candidate{}
	get := func(id, dir string) *Candidate {
		c := byID[id]
		if c == nil {
			c = &Candidate{ID: id, Dir: dir}
			byID[id] = c
		}
		return c
	}
	// Marker directories, deepest first so nested markers win.
	markerDirs := make([]string, 0, len(markerSteps))
	for d := range markerSteps {
		markerDirs = append(markerDirs, d)
	}
	sort.Slice(markerDirs, func(i, j int) bool { return len(markerDirs[i]) > len(markerDirs[j]) })

	for _, f := range files {
		if path.Base(f.Path) == marker {
			continue
		}
		if d, ok := underAny(f.Path, markerDirs); ok {
			c := get("marker:"+d, d)
			c.Marker = true
			c.Files = append(c.Files, rel(f, d))
			if s := markerSteps[d]; s >= 0 {
				c.Step, c.HasStep = s, true
			} else if s, ok := stepOf(path.Base(d), pattern); ok && d != "" {
				c.Step, c.HasStep = s, true
			}
			continue
		}
		if top, _, nested := strings.Cut(f.Path, "/"); nested {
			c := get("dir:"+top, top)
			c.Files = append(c.Files, rel(f, top))
			if s, ok := stepOf(top, pattern); ok {
				c.Step, c.HasStep = s, true
			}
			continue
		}
		if s, ok := stepOf(f.Path, pattern); ok {
			c := get("files:"+strconv.FormatInt(s, 10), "")
			c.Files = append(c.Files, f)
			c.Step, c.HasStep = s, true
			continue
		}
		c := get("files:", "")
		c.Files = append(c.Files, f)
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
