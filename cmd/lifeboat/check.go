package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path"
	"regexp"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/lifeboat-project/lifeboat/watch"
)

// checkOptions are the flags of `lifeboat check`.
type checkOptions struct {
	common      commonOptions
	dir         string
	json        bool
	rank        int
	marker      string
	stepPattern string
	exclude     string
	markerOnly  bool
}

const checkHelp = `lifeboat check --dir DIR [--json]

Shows what lifeboat sees in a trainer's checkpoint directory, without a
store and without changing anything: each candidate checkpoint (oldest
first, the newest last), its step and where the step came from, each file's
format as its content shows it (pickle, torch-legacy, zip, safetensors, npy,
json, empty, unknown) and its verdict (whole; torn, with what was found;
unknown: no check vouches for it, and it is judged by whether a process of
the trainer died abnormally just after it changed), whether the checkpoint
would be committed at a stop now and why not, and the files that are part
of no checkpoint and why. Every file a check covers is read whole.
Run it once against what your trainer writes, before a long run.
Exit 0: the newest checkpoint would be committed (or there is none);
1: it would be refused, or the directory could not be read; 2: a bad
command line.`

func checkCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	o := &checkOptions{}
	fs := newFlagSet("check", stderr)
	o.common.register(fs)
	fs.StringVar(&o.dir, "dir", "", "the directory the trainer saves checkpoints into")
	fs.BoolVar(&o.json, "json", false, "print JSON, one object")
	fs.IntVar(&o.rank, "rank", 0, "the rank whose directory this is: on rank 0, the coordinator, a *.distcp needs its *.metadata")
	fs.StringVar(&o.marker, "marker", watch.DefaultMarker, "file whose presence marks a directory as a complete checkpoint; its content is the step")
	fs.StringVar(&o.stepPattern, "step-pattern", watch.DefaultStepPattern.String(), "regular expression whose first group is the step in a checkpoint's name")
	fs.StringVar(&o.exclude, "exclude", strings.Join(watch.DefaultExclude, ","),
		"comma-separated globs of files under --dir that are never part of a checkpoint; empty: none")
	fs.BoolVar(&o.markerOnly, "marker-only", false, "only directories holding the --marker file are checkpoints")
	fs.Usage = flagUsage(fs, stderr, checkHelp)
	if code := setup(fs, args, &o.common, stdout, stderr, o.validate); code >= 0 {
		return code
	}
	return exitCode("check", runCheck(ctx, o), 1, stderr)
}

func (o *checkOptions) validate() error {
	switch {
	case o.dir == "":
		return errors.New("--dir (LIFEBOAT_DIR) is required: the directory the trainer saves checkpoints into")
	case o.rank < 0:
		return fmt.Errorf("--rank (LIFEBOAT_RANK) is %d; it must be 0 or more", o.rank)
	}
	re, err := regexp.Compile(o.stepPattern)
	if err != nil {
		return fmt.Errorf("--step-pattern (LIFEBOAT_STEP_PATTERN) %q: it is not a regular expression: %v", o.stepPattern, err)
	}
	if re.NumSubexp() < 1 {
		return fmt.Errorf(`--step-pattern (LIFEBOAT_STEP_PATTERN) %q: it needs a group that captures the step, e.g. step-(\d+)`, o.stepPattern)
	}
	for _, g := range splitList(o.exclude) {
		if _, err := path.Match(g, ""); err != nil {
			return fmt.Errorf("--exclude (LIFEBOAT_EXCLUDE) %q: %v; use shell globs such as *.log", g, err)
		}
	}
	return nil
}

// runCheck surveys o.dir and prints it; the newest checkpoint refused is
// exit 1.
func runCheck(_ context.Context, o *checkOptions) error {
	w, err := watch.New(watch.Config{Dir: o.dir, Marker: o.marker, StepPattern: regexp.MustCompile(o.stepPattern),
		Exclude: splitList(o.exclude), MarkerOnly: o.markerOnly})
	if err != nil {
		return dirError(err)
	}
	sv, err := w.Survey(o.rank)
	if err != nil {
		return err
	}
	for i := range sv.Other {
		sv.Other[i].Why = sv.Other[i].Why.Resolve(settingFlag)
	}
	if o.json {
		enc := json.NewEncoder(o.common.stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(sv); err != nil {
			return err
		}
	} else {
		printSurvey(o.common.stdout, &sv)
	}
	if sv.Refused() {
		return &codeError{code: 1, err: fmt.Errorf("the newest checkpoint, %s, would not be committed", escapeName(sv.Newest))}
	}
	return nil
}

// printSurvey writes sv as tables; names are escaped (escapeName).
func printSurvey(w io.Writer, sv *watch.Survey) {
	fmt.Fprintf(w, "%s (rank %d)\n", escapeName(sv.Dir), sv.Rank)
	if len(sv.Checkpoints) == 0 {
		fmt.Fprintln(w, "\nno checkpoint")
	}
	for _, c := range sv.Checkpoints {
		step := "none in its marker or name (stored under the newest named step known, as a new revision)"
		if c.HasStep {
			step = strconv.FormatInt(c.Step, 10) + " (from its " + c.StepFrom + ")"
		}
		verdict := "would be committed"
		if !c.Committed {
			verdict = "would NOT be committed: " + c.Why
		}
		newest := ""
		if c.ID == sv.Newest {
			newest = " (newest)"
		}
		fmt.Fprintf(w, "\ncheckpoint %s%s: step %s: %s\n", escapeName(c.ID), newest, step, escapeName(verdict))
		if c.Note != "" {
			fmt.Fprintf(w, "  note: %s\n", escapeName(c.Note))
		}
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "  FILE\tBYTES\tFORMAT\tVERDICT")
		for _, f := range c.Files {
			v := f.Verdict
			if f.Reason != "" {
				v += ": " + f.Reason
			}
			fmt.Fprintf(tw, "  %s\t%d\t%s\t%s\n", escapeName(f.Path), f.Size, f.Format, escapeName(v))
		}
		tw.Flush()
	}
	if len(sv.Other) > 0 {
		fmt.Fprintln(w, "\nnot part of any checkpoint:")
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "  PATH\tFORMAT\tWHY")
		for _, o := range sv.Other {
			fmt.Fprintf(tw, "  %s\t%s\t%s\n", escapeName(o.Path), cmpOr(o.Format, "-"), escapeName(o.Why.String()))
		}
		tw.Flush()
	}
}

func cmpOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// escapeName makes a file name safe for a terminal table: control
// characters (and backslashes, so that the escapes are unambiguous) are
// written as Go escapes; everything else is kept.
func escapeName(s string) string {
	if !strings.ContainsFunc(s, func(r rune) bool {
		return r < 0x20 || r == 0x7f || r == '\\' || (r >= 0x80 && r < 0xa0) || r == '\ufffd'
	}) {
		return s
	}
	q := strconv.Quote(s)
	return q[1 : len(q)-1]
}
