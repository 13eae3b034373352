package watch

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"time"

	"github.com/lifeboat-project/lifeboat/format"
	"github.com/lifeboat-project/lifeboat/setting"
)

// Config says what to watch. Zero fields take the defaults.
type Config struct {
	Dir         string         // the trainer's checkpoint directory (required); symlinks are resolved
	Marker      string         // default DefaultMarker
	StepPattern *regexp.Regexp // default DefaultStepPattern; group 1 is the step
	// Settle is how long a checkpoint's files must stay unchanged before it
	// counts as complete (markers and final scans do not wait). Default 5s.
	Settle   time.Duration
	ProcRoot string           // default "/proc"
	Clock    func() time.Time // default time.Now
	Log      *slog.Logger     // default: discard
	// Exclude lists the glob patterns (path.Match) of files that are part
	// of no checkpoint, matched against the base name, or against the path
	// relative to Dir for a pattern that holds a '/'. Nil means
	// DefaultExclude; an empty slice excludes nothing.
	Exclude []string
	// MarkerOnly makes marker directories the only checkpoints from the
	// start (--marker-only), instead of from the first marker seen.
	MarkerOnly bool
	// WritersInvisible says the trainer's processes cannot be seen under
	// ProcRoot (a sidecar in its own PID namespace; see WritersVisible): a
	// file still open for writing cannot be told, so even a final scan
	// waits for the settle time.
	WritersInvisible bool
}

// DefaultSettle is the default Config.Settle.
const DefaultSettle = 5 * time.Second

// Ready is a complete checkpoint, with the step it is to be stored under.
type Ready struct {
	Candidate
	Fingerprint string
	// Counter is true when neither a marker nor the name gave the step:
	// Number gives it the newest named step, and storage keeps it as a new
	// revision of that step.
	Counter bool
}

// Watcher tracks the checkpoints under one directory across scans. It is
// not safe for concurrent use; one goroutine scans.
type Watcher struct {
	cfg        Config
	self       int
	seen       map[string]seenState // by Candidate.ID
	done       map[string]string    // ID -> fingerprint handed out and settled
	lastStep   int64                // newest named step known, for candidates without one
	markerSeen bool                 // a marker was seen in some scan
	logged     map[string]map[string]bool
}

type seenState struct {
	fp       string
	since    time.Time // when this fingerprint was first seen
	step     int64     // step given to it, for candidates without one
	numbered bool      // step has been given
}

// FieldDir is the field of a FieldError about Config.Dir.
const FieldDir = "dir"

// ErrNotDir: Config.Dir is not a directory (a FieldError wraps it; one
// about a Dir that does not exist wraps fs.ErrNotExist).
var ErrNotDir = errors.New("not a directory")

// FieldError says which of Config was wrong, and why. The caller names
// the field as its user gave it (a flag, a variable).
type FieldError struct {
	Field string // FieldDir
	Value string
	Err   error
}

func (e *FieldError) Error() string { return fmt.Sprintf("watch: %s %s: %v", e.Field, e.Value, e.Err) }
func (e *FieldError) Unwrap() error { return e.Err }

// New returns a Watcher for cfg. Config.Dir must be a directory; its
// symlinks are resolved once, here. A Dir that is empty, does not exist or
// is not a directory is a *FieldError of FieldDir.
func New(cfg Config) (*Watcher, error) {
	if cfg.Dir == "" {
		return nil, &FieldError{Field: FieldDir, Err: errors.New("no directory to watch")}
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	dir, err := resolveDir(cfg.Dir)
	if err != nil {
		return nil, err
	}
	if abs, _ := filepath.Abs(cfg.Dir); dir != abs {
		cfg.Log.Info("watch.dir_resolved", "dir", cfg.Dir, "resolved", dir)
	}
	cfg.Dir = dir
	if cfg.Marker == "" {
		cfg.Marker = DefaultMarker
	}
	if cfg.StepPattern == nil {
		cfg.StepPattern = DefaultStepPattern
	}
	if cfg.StepPattern.NumSubexp() < 1 {
		return nil, errors.New("watch: the step pattern needs a group that captures the step, e.g. step-(\\d+)")
	}
	if cfg.Exclude == nil {
		cfg.Exclude = DefaultExclude
	}
	if err := validExclude(cfg.Exclude); err != nil {
		return nil, err
	}
	if cfg.Settle == 0 {
		cfg.Settle = DefaultSettle
	}
	if cfg.ProcRoot == "" {
		cfg.ProcRoot = "/proc"
	}
	if cfg.Clock == nil {
		cfg.Clock = time.Now
	}
	return &Watcher{cfg: cfg, self: os.Getpid(), seen: map[string]seenState{}, done: map[string]string{},
		logged: map[string]map[string]bool{}}, nil
}

// resolveDir returns dir as an absolute path without symlinks: the form the
// kernel shows in /proc/PID/fd, against which open files are compared.
func resolveDir(dir string) (string, error) {
	bad := func(err error) (string, error) { return "", &FieldError{Field: FieldDir, Value: dir, Err: err} }
	abs, err := filepath.Abs(dir)
	if err != nil {
		return bad(err)
	}
	resolved, err := filepath.EvalSymlinks(abs)
	if errors.Is(err, fs.ErrNotExist) {
		return bad(fmt.Errorf("it does not exist: %w", fs.ErrNotExist))
	}
	if err != nil {
		return bad(err)
	}
	fi, err := os.Stat(resolved)
	if err != nil {
		return bad(err)
	}
	if !fi.IsDir() {
		return bad(ErrNotDir)
	}
	return resolved, nil
}

// Dir is the watched directory, absolute and with symlinks resolved.
func (w *Watcher) Dir() string { return w.cfg.Dir }

// SetLastStep tells the watcher of a step known from elsewhere (the newest
// in the store, the one restored): a checkpoint without a step is numbered
// with the newest named step known, which never goes down.
func (w *Watcher) SetLastStep(step int64) {
	if step > w.lastStep {
		w.lastStep = step
	}
}

// SetNextStep is SetLastStep(step-1).
//
// Deprecated: counter steps no longer go above the newest named step; call
// SetLastStep with the newest step known.
func (w *Watcher) SetNextStep(step int64) { w.SetLastStep(step - 1) }

// Scan lists the directory and returns the checkpoints that are complete and
// were not marked Done with the same content, in ascending step order, those
// without a step (HasStep false, Counter true) last; Number gives them one.
// Candidates that are not checkpoints (see the package comment) are never
// returned; each is logged once, when it would otherwise have been
// complete.
// final says the trainer is gone: nothing will change any more, so the
// settle time is not waited for, unless Config.WritersInvisible (files
// still open for writing by some other process are still left out).
func (w *Watcher) Scan(final bool) ([]Ready, error) {
	l, err := scanDir(w.cfg.Dir, w.cfg.Marker, w.cfg.Exclude)
	if err != nil {
		return nil, err
	}
	if len(l.markers) > 0 {
		w.markerSeen = true
	}
	now := w.cfg.Clock()
	cands := Group(l.files, w.cfg.Marker, l.markers, w.cfg.StepPattern)
	withheld := w.logUnreadable(l)
	var busy map[string]bool
	var out []Ready
	present := map[string]bool{}
	for _, c := range cands {
		present[c.ID] = true
		fp := c.Fingerprint()
		st, ok := w.seen[c.ID]
		if !ok || st.fp != fp {
			st = seenState{fp: fp, since: now}
			w.seen[c.ID] = st
		}
		event, why := w.rejection(&c)
		if event == "" && c.HasStep {
			w.SetLastStep(c.Step)
		}
		if w.done[c.ID] == fp || len(c.Files) == 0 || withheld[c.ID] {
			continue
		}
		// A final scan with the writers invisible goes by the files'
		// times alone: it comes after the caller waited for the directory
		// to be quiet (Writing), and the last background scan may be older
		// than the trainer's last write.
		quiet := now.Sub(c.LastChange()) >= w.cfg.Settle
		settled := c.Marker || (final && !w.cfg.WritersInvisible) || (final && quiet) ||
			(now.Sub(st.since) >= w.cfg.Settle && quiet)
		if !settled {
			continue
		}
		if event != "" {
			if w.once(event, c.ID) {
				w.cfg.Log.Info(event, "id", c.ID, "files", len(c.Files), "example", path.Join(c.Dir, c.Files[0].Path), "reason", why)
			}
			continue
		}
		if busy == nil {
			busy = w.OpenForWrite()
		}
		if isBusy(c, busy) {
			w.cfg.Log.Debug("checkpoint.still_open", "id", c.ID)
			continue
		}
		out = append(out, Ready{Candidate: c, Fingerprint: fp, Counter: !c.HasStep})
	}
	w.logSpecials(l, present)
	for id := range w.seen {
		if !present[id] {
			delete(w.seen, id)
		}
	}
	w.forget(eventNotACheckpoint, present)
	w.forget(eventUnmarked, present)
	return out, nil
}

// logUnreadable warns once per path about the directories of a scan that
// lifeboat may not list, and returns the candidates they belong to: those
// are withheld, since a checkpoint stored without the files it cannot see
// would not be whole (a trainer resumed from it would miss them). They
// are stored once the directory can be listed.
func (w *Watcher) logUnreadable(l listing) map[string]bool {
	const event = "checkpoint.unreadable_dir"
	withheld := map[string]bool{}
	paths := map[string]bool{}
	var g *grouper
	for _, d := range l.unreadable {
		paths[d] = true
		if g == nil {
			g = newGrouper(l.markers, w.cfg.StepPattern)
		}
		id := g.of(d + "/-").ID // as a file inside it would be grouped
		withheld[id] = true
		if w.once(event, d) {
			w.cfg.Log.Warn(event, "path", d, "id", id, "uid", os.Geteuid(),
				"effect", "lifeboat may not list this directory (permission denied): the checkpoint it belongs to is not stored until it can; the previous committed checkpoint stays the latest",
				"hint", setting.Textf("make it readable (chmod), run lifeboat as the user that writes it, or %s it if it is not part of a checkpoint", setting.Exclude))
		}
	}
	w.forget(event, paths)
	return withheld
}

// logSpecials warns once per path about the special files of a scan.
func (w *Watcher) logSpecials(l listing, present map[string]bool) {
	const event = "checkpoint.skipped_special"
	paths := map[string]bool{}
	var g *grouper
	for _, s := range l.specials {
		paths[s.path] = true
		if !w.once(event, s.path) {
			continue
		}
		if g == nil {
			g = newGrouper(l.markers, w.cfg.StepPattern)
		}
		attrs := []any{"path", s.path, "type", format.FileType(s.mode)}
		if id := g.of(s.path).ID; present[id] {
			attrs = append(attrs, "id", id)
		}
		w.cfg.Log.Warn(event, attrs...)
	}
	w.forget(event, paths)
}

// once reports whether event has not been logged for key yet, and records
// that it now is.
func (w *Watcher) once(event, key string) bool {
	m := w.logged[event]
	if m == nil {
		m = map[string]bool{}
		w.logged[event] = m
	}
	if m[key] {
		return false
	}
	m[key] = true
	return true
}

// forget drops event's keys that are gone, so that one that comes back is
// logged again and the record does not grow.
func (w *Watcher) forget(event string, present map[string]bool) {
	for k := range w.logged[event] {
		if !present[k] {
			delete(w.logged[event], k)
		}
	}
}

// Number gives r its step when its name and marker gave none: the newest
// named step known (see SetLastStep), the same one again for the same
// content. Call it for the checkpoint about to be stored.
func (w *Watcher) Number(r *Ready) {
	if r.HasStep {
		return
	}
	r.Counter = true
	st, ok := w.seen[r.ID]
	if !ok || st.fp != r.Fingerprint {
		st = seenState{fp: r.Fingerprint, since: w.cfg.Clock()}
	}
	if !st.numbered {
		st.step, st.numbered = w.lastStep, true
	}
	w.seen[r.ID] = st
	r.Step = st.step
}

// Done records that r was handled (uploaded, or superseded by a newer one),
// so Scan does not return it again until its content changes.
func (w *Watcher) Done(r Ready) {
	w.done[r.ID] = r.Fingerprint
}

func isBusy(c Candidate, busy map[string]bool) bool {
	for _, f := range c.Files {
		p := f.Path
		if c.Dir != "" {
			p = c.Dir + "/" + p
		}
		if busy[p] {
			return true
		}
	}
	return false
}
