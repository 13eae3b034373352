package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lifeboat-project/lifeboat/checkpoint"
	"github.com/lifeboat-project/lifeboat/pipeline"
	"github.com/lifeboat-project/lifeboat/setting"
	"github.com/lifeboat-project/lifeboat/watch"
)

// TestSettingFlags: every setting a library's text may name is named to
// users by a flag that a command has, with the variable of that flag (or a
// source of it that the commands read) where the name gives one.
func TestSettingFlags(t *testing.T) {
	real := allFlags(t)
	// Where a rank comes from besides --rank and LIFEBOAT_RANK.
	rankSources := map[string]bool{} // every variable a rank is read from
	for _, v := range rankVars {
		rankSources[v] = true
	}
	for _, n := range setting.Names {
		text, ok := settingFlags[n]
		if !ok {
			t.Errorf("setting %s has no flag in settingFlags", n)
			continue
		}
		flags := flagRef.FindAllStringSubmatch(text, -1)
		if len(flags) == 0 {
			t.Errorf("setting %s is named %q, which names no flag", n, text)
		}
		vars := map[string]bool{}
		for _, m := range flags {
			if !real[m[1]] {
				t.Errorf("setting %s is named %q: no command has --%s", n, text, m[1])
			}
			vars[envName(m[1])] = true
		}
		for _, v := range varRef.FindAllString(text, -1) {
			if !vars[v] {
				t.Errorf("setting %s is named %q: %s is not the variable of a flag it names", n, text, v)
			}
		}
		for _, w := range strings.FieldsFunc(text, func(r rune) bool { return r == ',' || r == ' ' || r == '(' || r == ')' }) {
			if strings.ToUpper(w) == w && !strings.HasPrefix(w, "--") && !vars[w] && !rankSources[w] {
				t.Errorf("setting %s is named %q: %s is neither a flag nor its variable", n, text, w)
			}
		}
		if n == setting.Rank {
			for v := range rankSources {
				if !strings.Contains(text, v) {
					t.Errorf("setting %s is named %q, without %s", n, text, v)
				}
			}
		}
	}
	if len(settingFlags) != len(setting.Names) {
		t.Errorf("settingFlags has %d settings, setting.Names %d", len(settingFlags), len(setting.Names))
	}
}

// loggedHint is what lifeboat's logger writes as the hint of a line whose
// hint is v, in JSON and in text.
func loggedHint(t *testing.T, v any) (jsonHint, textLine string) {
	t.Helper()
	var j, txt strings.Builder
	for _, c := range []struct {
		format string
		out    *strings.Builder
	}{{"json", &j}, {"text", &txt}} {
		log, err := newLogger(c.out, "info", c.format)
		if err != nil {
			t.Fatal(err)
		}
		log.Warn("x", "hint", v)
	}
	var line struct{ Hint string }
	if err := json.Unmarshal([]byte(j.String()), &line); err != nil {
		t.Fatalf("%v: %s", err, j.String())
	}
	return line.Hint, txt.String()
}

// TestSettingTexts: the texts of the libraries that name settings reach
// users as they did when the libraries named the flags themselves: in log
// lines (the logger renders a setting.Text) and in what check prints. The
// texts come from the libraries where that needs neither a server nor a
// trainer.
func TestSettingTexts(t *testing.T) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	line := "aaaaaaaaaaaaaaaa"
	stored := []checkpoint.Snapshot{{Step: 100, WorldSize: 2, Line: line, Complete: true, Created: at, Committed: at}}
	never := pipeline.Decide(pipeline.Facts{WorldSize: 2, Snaps: stored})
	if never.Fresh == nil {
		t.Fatal("Decide: no fresh start beside the store's step")
	}
	tooBig, err := pipeline.AfterRestore(fmt.Errorf("%w: %w", checkpoint.ErrNothingRestorable, checkpoint.ErrTooBig), 2, stored)
	if err != nil || tooBig == nil {
		t.Fatalf("AfterRestore: %+v, %v", tooBig, err)
	}
	otherSize, err := pipeline.AfterRestore(checkpoint.ErrNoCheckpoint, 1, stored)
	if err != nil || otherSize == nil {
		t.Fatalf("AfterRestore: %+v, %v", otherSize, err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "model.pdparams"), []byte("m"), 0o600); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	w, err := watch.New(watch.Config{Dir: dir, WritersInvisible: true, Settle: time.Hour, Clock: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	writing, why := w.Writing()
	if !writing {
		t.Fatal("Writing: not writing a moment after a change, within an hour's settle time")
	}
	for _, c := range []struct {
		name string
		text setting.Text
		want string
	}{
		{"restore never's fresh start", never.Fresh.Reason,
			"--restore never and no resume file from lifeboat restore, although the store holds complete step 100 of this world size (line " + checkpoint.ShortLine(line) + ")"},
		{"restore never's hint", never.Fresh.Hint, "the trainer starts a new line of work beside it; set --restore auto to resume it; lifeboat ls shows the lines"},
		{"a volume too small", tooBig.Hint, "make --dir's volume larger; the steps stay in the store"},
		{"another world size", otherSize.Hint,
			"run with the world size those steps were saved with (--world-size); or, if the format reshards on load, load every old rank's files with --restore-ranks all; or start this world size fresh on purpose with --restore never"},
		{"the trainer writing", why, "less than --settle 1h0m0s (the trainer's processes are not visible)"},
		// The hints of lines that need a store or a trainer, as the
		// libraries write them.
		{"a torn commit", setting.Textf("have the trainer mark a finished save (a marker file, lifeboat.commit(path, step)), or raise %s above the longest pause inside one save", setting.Settle),
			"have the trainer mark a finished save (a marker file, lifeboat.commit(path, step)), or raise --settle above the longest pause inside one save"},
		{"a rank claimed twice", setting.Textf("give every pod its own rank (%s): two pods", setting.Rank),
			"give every pod its own rank (--rank, LIFEBOAT_RANK, PADDLE_TRAINER_ID, RANK, JOB_COMPLETION_INDEX, VC_TASK_INDEX): two pods"},
		{"a sidecar's final upload", setting.Textf("raise the pod's terminationGracePeriodSeconds and %s, lower %s, or", setting.Grace, setting.FlushWait),
			"raise the pod's terminationGracePeriodSeconds and --grace, lower --flush-wait, or"},
		{"plain writes", setting.Textf("then unset %s", setting.UnsafeNoConditionalWrites),
			"then unset --s3-unsafe-no-conditional-writes (LIFEBOAT_S3_UNSAFE_NO_CONDITIONAL_WRITES)"},
		{"an unreadable directory", setting.Textf("or %s it if it is not part of a checkpoint", setting.Exclude), "or --exclude it if it is not part of a checkpoint"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if s := c.text.String(); flagRef.MatchString(s) || varRef.MatchString(s) {
				t.Errorf("the library's own text names a flag or a variable: %q", s)
			}
			j, txt := loggedHint(t, c.text)
			if !strings.HasSuffix(j, c.want) {
				t.Errorf("logged hint %q; want it to end in %q", j, c.want)
			}
			if !strings.Contains(txt, fmt.Sprintf("%q", j)) {
				t.Errorf("text line %q; want the hint %q", txt, j)
			}
		})
	}
	if j, _ := loggedHint(t, "plain --settle"); j != "plain --settle" {
		t.Errorf("a plain string logged as %q", j)
	}
	if j, _ := loggedHint(t, errors.New("e")); j != "e" {
		t.Errorf("an error logged as %q", j)
	}
}

// TestCheckSettingTexts: check names the flags behind its verdicts, in its
// table and in its JSON: an excluded file is "excluded (--exclude)", and
// with --marker-only an unmarked directory is "not a checkpoint:
// --marker-only".
func TestCheckSettingTexts(t *testing.T) {
	dir := t.TempDir()
	for name, data := range map[string]string{"train.log": "l", "step-100/model.pdparams": "m"} {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("LIFEBOAT_LOG_FORMAT", "json")
	want := map[string]string{"train.log": "excluded (--exclude)", "step-100/model.pdparams": "not a checkpoint: --marker-only"}
	var stdout, stderr bytes.Buffer
	if code := checkCmd(context.Background(), []string{"--dir", dir, "--marker-only", "--json"}, &stdout, &stderr); code != 0 {
		t.Fatalf("check --json: exit %d\n%s%s", code, stdout.String(), stderr.String())
	}
	var sv struct {
		Other []struct{ Path, Why string }
	}
	if err := json.Unmarshal(stdout.Bytes(), &sv); err != nil {
		t.Fatalf("%v: %s", err, stdout.String())
	}
	got := map[string]string{}
	for _, o := range sv.Other {
		got[o.Path] = o.Why
	}
	for p, why := range want {
		if got[p] != why {
			t.Errorf("check --json: %s: %q; want %q (all: %q)", p, got[p], why, got)
		}
	}
	stdout.Reset()
	if code := checkCmd(context.Background(), []string{"--dir", dir, "--marker-only"}, &stdout, &stderr); code != 0 {
		t.Fatalf("check: exit %d\n%s%s", code, stdout.String(), stderr.String())
	}
	for _, why := range want {
		if !strings.Contains(stdout.String(), "  "+why+"\n") {
			t.Errorf("check: no %q in\n%s", why, stdout.String())
		}
	}
}
