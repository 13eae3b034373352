package watch

import (
	"errors"
	"log/slog"
	"os"
	"regexp"
	"time"
)

// Config says what to watch. Zero fields take the defaults.
type Config struct {
	Dir         string         // the trainer's checkpoint directory (required)
	Marker      string         // default DefaultMarker
	StepPattern *regexp.Regexp // default DefaultStepPattern; group 1 is the step
	// Settle is how long a checkpoint's files must stay unchanged before it
	// counts as complete (markers and final scans do not wait). Default 5s.
	Settle   time.Duration
	ProcRoot string           // default "/proc"
	Clock    func() time.Time // default time.Now
	Log      *slog.Logger     // default: discard
}

// DefaultSettle is the default Config.Settle.
const DefaultSettle = 5 * time.Second

// Ready is a complete checkpoint, with the step it is to be stored under.
type Ready struct {
	Candidate
	Fingerprint string
}

// Watcher tracks the checkpoints under one directory across scans. It is
// not safe for concurrent use; one goroutine scans.
type Watcher struct {
	cfg     Config
	self    int
	seen    map[string]seenState // by Candidate.ID
	done    map[string]string    // ID -> fingerprint handed out and settled
	counter int64                // next step for candidates without one
}

type seenState struct {
	fp       string
	since    time.Time // when this fingerprint was first seen
	step     int64     // counter step given to it, for candidates without one
	numbered bool      // step has been given
}

// New returns a Watcher for cfg.
func New(cfg Config) (*Watcher, error) {
	if cfg.Dir == "" {
		return nil, errors.New("watch: no directory to watch: set --dir (LIFEBOAT_DIR)")
	}
	if cfg.Marker == "" {
		cfg.Marker = DefaultMarker
	}
	if cfg.StepPattern == nil {
		cfg.StepPattern = DefaultStepPattern
	}
	if cfg.StepPattern.NumSubexp() < 1 {
		return nil, errors.New("watch: the step pattern needs a group that captures the step, e.g. step-(\\d+)")
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
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	return &Watcher{cfg: cfg, self: os.Getpid(), seen: map[string]seenState{}, done: map[string]string{}}, nil
}

// SetNextStep sets the step the next candidate without one gets, when it is
// higher than the current counter (steps only go up).
func (w *Watcher) SetNextStep(step int64) {
	if step > w.counter {
		w.counter = step
	}
}

// Scan lists the directory and returns the checkpoints that are complete and
// were not marked Done with the same content, in ascending step order, those
// without a step (HasStep false) last; Number gives them one.
// final says the trainer is gone: nothing will change any more, so the
// settle time is not waited for (files still open for writing by some other
// process are still left out).
func (w *Watcher) Scan(final bool) ([]Ready, error) {
	files, markers, err := scanDir(w.cfg.Dir, w.cfg.Marker)
	if err != nil {
		return nil, err
	}
	now := w.cfg.Clock()
	cands := Group(files, w.cfg.Marker, markers, w.cfg.StepPattern)
	var busy map[string]bool
	var out []Ready
	present := map[string]bool{}
	for _, c := range cands {
		present[c.ID] = true
		if c.HasStep && c.Step >= w.counter {
			w.counter = c.Step + 1
		}
		fp := c.Fingerprint()
		st, ok := w.seen[c.ID]
		if !ok || st.fp != fp {
			st = seenState{fp: fp, since: now}
			w.seen[c.ID] = st
		}
		if w.done[c.ID] == fp || len(c.Files) == 0 {
			continue
		}
		settled := c.Marker || final ||
			(now.Sub(st.since) >= w.cfg.Settle && now.Sub(c.newest()) >= w.cfg.Settle)
		if !settled {
			continue
		}
		if busy == nil {
			busy = openForWrite(w.cfg.ProcRoot, w.cfg.Dir, w.self)
		}
		if isBusy(c, busy) {
			w.cfg.Log.Debug("checkpoint.still_open", "id", c.ID)
			continue
		}
		out = append(out, Ready{Candidate: c, Fingerprint: fp})
	}
	for id := range w.seen {
		if !present[id] {
			delete(w.seen, id)
		}
	}
	return out, nil
}

// Number gives r its step when its name and marker gave none: the next
// counter step, the same one again for the same content. Call it only for
// the checkpoint about to be stored, so that skipped ones use up no steps.
func (w *Watcher) Number(r *Ready) {
	if r.HasStep {
		return
	}
	st, ok := w.seen[r.ID]
	if !ok || st.fp != r.Fingerprint {
		st = seenState{fp: r.Fingerprint, since: w.cfg.Clock()}
	}
	if !st.numbered {
		st.step, st.numbered = w.counter, true
		w.counter++
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
