package watch

import (
	"errors"
	"path"
	"strings"

	"github.com/lifeboat-project/lifeboat/format"
	"github.com/lifeboat-project/lifeboat/setting"
)

// Survey is what lifeboat sees in the watched directory, for `lifeboat
// check`: each candidate checkpoint, its step and where the step came from,
// each file's format and verdict, whether it would be committed now, and
// the files that are part of no checkpoint.
type Survey struct {
	Dir         string        `json:"dir"`
	Rank        int           `json:"rank"`
	Checkpoints []SurveyGroup `json:"checkpoints"` // in the order Scan returns them: the newest last
	Other       []SurveyOther `json:"other"`       // files and directories part of no checkpoint
	// Newest is the newest checkpoint's ID ("" when there is none), the
	// one a stop would commit; NewestCommitted says whether it would be.
	Newest          string `json:"newest"`
	NewestCommitted bool   `json:"newest_would_commit"`
}

// Refused reports whether the newest checkpoint would not be committed.
func (s *Survey) Refused() bool { return s.Newest != "" && !s.NewestCommitted }

// SurveyGroup is one candidate checkpoint.
type SurveyGroup struct {
	ID       string       `json:"id"`
	Dir      string       `json:"dir"` // relative to the watched directory; "" for files at its top
	Step     int64        `json:"step"`
	HasStep  bool         `json:"has_step"`
	StepFrom string       `json:"step_from"` // marker, directory name, file names, or none (stored under the newest named step known)
	Files    []SurveyFile `json:"files"`
	// Committed says whether it would be committed now, as at a stop
	// (the trainer gone, nothing waits to settle); Why says why not.
	Committed bool   `json:"would_commit"`
	Why       string `json:"why,omitempty"`  // why not, when it would not be
	Note      string `json:"note,omitempty"` // a condition it would be committed under
}

// SurveyFile is one file of a checkpoint, with what its content is.
type SurveyFile struct {
	Path    string `json:"path"` // relative to the checkpoint's Dir
	Size    int64  `json:"size"`
	Format  string `json:"format"`  // format.Kind's name
	Verdict string `json:"verdict"` // whole, torn, unknown, error
	Reason  string `json:"reason,omitempty"`
}

// The verdicts of a file.
const (
	VerdictWhole   = "whole"   // a check recognised its content and vouches for it
	VerdictTorn    = "torn"    // a check found it cut short or garbled
	VerdictUnknown = "unknown" // no check vouches for it: the death rule judges it
	VerdictError   = "error"   // it could not be read
)

// SurveyOther is a file (or directory) that is part of no checkpoint.
type SurveyOther struct {
	Path   string       `json:"path"`             // relative to the watched directory
	Why    setting.Text `json:"why"`              // a setting it names (Exclude) is a setting.Name: a program renders it (Resolve) before printing
	Format string       `json:"format,omitempty"` // for a regular file: its content's format
}

// Survey scans the directory once, as the final scan of a stop would
// (nothing waits to settle; a file still open for writing is not complete),
// and runs every format check on every file. rank decides the rule of
// distributed checkpoints (on rank 0, the coordinator, a *.distcp needs its
// *.metadata). It reads every byte of the files that a streamed check
// covers (pickle, JSON); it changes nothing and logs nothing.
func (w *Watcher) Survey(rank int) (Survey, error) {
	l, err := scanDir(w.cfg.Dir, w.cfg.Marker, w.cfg.Exclude)
	if err != nil {
		return Survey{}, err
	}
	sv := Survey{Dir: w.cfg.Dir, Rank: rank, Checkpoints: []SurveyGroup{}, Other: []SurveyOther{}}
	markerSeen := w.markerSeen || len(l.markers) > 0
	probe := &Watcher{cfg: w.cfg, markerSeen: markerSeen}
	cands := Group(l.files, w.cfg.Marker, l.markers, w.cfg.StepPattern)
	withheld := map[string]string{}
	g := newGrouper(l.markers, w.cfg.StepPattern)
	for _, d := range l.unreadable {
		id := g.of(d + "/-").ID
		withheld[id] = d
		sv.Other = append(sv.Other, SurveyOther{Path: d + "/", Why: setting.Textf("a directory lifeboat may not list (permission denied)")})
	}
	var busy map[string]bool
	for _, c := range cands {
		if _, why := probe.rejection(&c); !why.IsZero() {
			for _, f := range c.Files {
				p := path.Join(c.Dir, f.Path)
				kind, _ := format.HeadBeneath(w.cfg.Dir, p)
				sv.Other = append(sv.Other, SurveyOther{Path: p, Why: why.Prefixed("not a checkpoint: "), Format: kind.String()})
			}
			continue
		}
		sg := SurveyGroup{ID: c.ID, Dir: c.Dir, Step: c.Step, HasStep: c.HasStep, StepFrom: stepFrom(c, l.markers)}
		var torn, unknown []string
		for _, f := range c.Files {
			sf := surveyFile(w.cfg.Dir, path.Join(c.Dir, f.Path))
			sf.Path, sf.Size = f.Path, f.Size
			switch sf.Verdict {
			case VerdictTorn, VerdictError:
				torn = append(torn, f.Path+" ("+sf.Reason+")")
			case VerdictUnknown:
				unknown = append(unknown, f.Path)
			}
			sg.Files = append(sg.Files, sf)
		}
		var rels []string
		for _, f := range c.Files {
			rels = append(rels, f.Path)
		}
		if busy == nil {
			busy = w.OpenForWrite()
		}
		switch {
		case withheld[c.ID] != "":
			sg.Why = "its directory " + withheld[c.ID] + " may not be listed (permission denied), so its files are not all known"
		case len(torn) > 0:
			sg.Why = "not whole: " + strings.Join(torn, "; ")
		case distcpTorn(w.cfg.Dir, c) != "":
			sg.Why = "not whole: " + distcpTorn(w.cfg.Dir, c)
		case rank == 0 && format.CheckSet(rels) != nil:
			sg.Why = format.Reason(format.CheckSet(rels)) + " (the coordinator, rank 0, writes it)"
		case isBusy(c, busy):
			sg.Why = "a file is open for writing now: it is not complete"
		default:
			sg.Committed = true
			if len(unknown) > 0 {
				sg.Note = "no format check vouches for " + strings.Join(unknown, ", ") +
					": committed unless a process of the trainer dies abnormally within the settle time after its last change"
			}
		}
		sv.Checkpoints = append(sv.Checkpoints, sg)
	}
	if n := len(sv.Checkpoints); n > 0 {
		sv.Newest, sv.NewestCommitted = sv.Checkpoints[n-1].ID, sv.Checkpoints[n-1].Committed
	}
	for _, p := range l.excluded {
		sv.Other = append(sv.Other, SurveyOther{Path: p, Why: setting.Textf("excluded (%s)", setting.Exclude)})
	}
	for _, s := range l.specials {
		sv.Other = append(sv.Other, SurveyOther{Path: s.path, Why: setting.Textf("a %s: a checkpoint is regular files", format.FileType(s.mode))})
	}
	return sv, nil
}

// stepFrom says where c's step came from.
func stepFrom(c Candidate, markers map[string]int64) string {
	switch {
	case !c.HasStep:
		return "none"
	case c.Marker && markers[c.Dir] >= 0:
		return "marker"
	case c.Dir != "":
		return "directory name"
	}
	return "file names"
}

// surveyFile inspects the file at rel (relative to dir).
func surveyFile(dir, rel string) SurveyFile {
	kind, err := format.InspectBeneath(dir, rel)
	sf := SurveyFile{Format: kind.String(), Verdict: VerdictWhole}
	switch {
	case errors.Is(err, format.ErrTorn):
		sf.Verdict, sf.Reason = VerdictTorn, format.Reason(err)
	case errors.Is(err, format.ErrUnchecked):
		sf.Verdict, sf.Reason = VerdictUnknown, format.Reason(err)
	case err != nil:
		sf.Verdict, sf.Reason = VerdictError, err.Error()
	case kind == format.Empty:
		sf.Verdict, sf.Reason = VerdictUnknown, "empty: no check applies"
	case !kind.Checked():
		sf.Verdict, sf.Reason = VerdictUnknown, "no check recognises its content"
	}
	return sf
}

// distcpTorn checks the *.distcp shards of c against each *.metadata
// beside them (format.CheckDistcpMetadata) and says why one is not whole,
// or "".
func distcpTorn(dir string, c Candidate) string {
	for _, m := range c.Files {
		if !strings.EqualFold(path.Ext(m.Path), ".metadata") {
			continue
		}
		mdir := path.Dir(m.Path)
		sizes := map[string]int64{}
		for _, f := range c.Files {
			if path.Dir(f.Path) == mdir && strings.EqualFold(path.Ext(f.Path), ".distcp") {
				sizes[path.Base(f.Path)] = f.Size
			}
		}
		if len(sizes) == 0 {
			continue
		}
		shard, err := format.CheckDistcpBeneath(dir, path.Join(c.Dir, m.Path), sizes)
		if errors.Is(err, format.ErrTorn) {
			return path.Join(mdir, shard) + " (" + format.Reason(err) + ")"
		}
	}
	return ""
}
