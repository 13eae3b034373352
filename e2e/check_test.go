package e2e

import (
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lifeboat-project/lifeboat/internal/testenv"
)

// TestCheckCommand drives `lifeboat check` on a directory holding a whole
// checkpoint (a pickle under a name no check knows, JSON with NaN, a name
// with a newline), one no check recognises, and a torn one as the newest:
// table and JSON say each file's format and verdict and what would be
// committed; the exit code is 1 while the newest would be refused and 0
// once it is gone.
func TestCheckCommand(t *testing.T) {
	dir := t.TempDir()
	for rel, b := range map[string]string{
		"step-100/state.bin":          "\x80\x04K\x01.\x80\x02N.", // two pickles
		"step-100/trainer_state.json": `{"grad_norm": NaN, "loss": Infinity}` + "\n",
		"step-100/bad\nname.pkl":      "\x80\x04N.",
		"step-200/weights.raw":        "raw bytes no check knows",
		"step-300/model.pt":           "PK\x03\x04 and then the save was cut",
		"train.log":                   "loss 1.0\n",
	} {
		p := filepath.Join(dir, filepath.FromSlash(rel))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(b), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("/etc/hostname", filepath.Join(dir, "step-100", "link.pt")); err != nil {
		t.Fatal(err)
	}

	table, code := runCheckBin(t, "--dir", dir)
	if code != 1 {
		t.Errorf("exit %d with a torn newest checkpoint, want 1\n%s", code, table)
	}
	for _, want := range []string{
		"checkpoint dir:step-100: step 100 (from its directory name): would be committed",
		"state.bin  ", "pickle  whole",
		"trainer_state.json", "json    whole",
		`bad\nname.pkl`,
		"checkpoint dir:step-200: step 200 (from its directory name): would be committed",
		"no format check vouches for weights.raw",
		"weights.raw  24     unknown  unknown: no check recognises its content",
		"checkpoint dir:step-300 (newest): step 300 (from its directory name): would NOT be committed: not whole: model.pt (zip: no end-of-central-directory record",
		"train.log", "excluded",
		"step-100/link.pt", "a symlink",
		"lifeboat check: the newest checkpoint, dir:step-300, would not be committed",
	} {
		if !strings.Contains(table, want) {
			t.Errorf("table lacks %q:\n%s", want, table)
		}
	}
	if strings.Contains(table, "bad\nname") {
		t.Errorf("a newline in a file name reached the table unescaped:\n%s", table)
	}

	out, code := runCheckBin(t, "--dir", dir, "--json")
	if code != 1 {
		t.Errorf("--json: exit %d, want 1", code)
	}
	js := out[:strings.LastIndex(out, "}")+1]
	testenv.AssertSnakeCase(t, []byte(js))
	var sv struct {
		Newest      string `json:"newest"`
		NewestOK    bool   `json:"newest_would_commit"`
		Checkpoints []struct {
			ID       string `json:"id"`
			Step     int64  `json:"step"`
			StepFrom string `json:"step_from"`
			Commit   bool   `json:"would_commit"`
			Why      string `json:"why"`
			Files    []struct {
				Path, Format, Verdict, Reason string
			} `json:"files"`
		} `json:"checkpoints"`
		Other []struct{ Path, Why string } `json:"other"`
	}
	if err := json.Unmarshal([]byte(js), &sv); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if sv.Newest != "dir:step-300" || sv.NewestOK || len(sv.Checkpoints) != 3 {
		t.Fatalf("newest %q (would commit %v), %d checkpoints; want dir:step-300, false, 3\n%s", sv.Newest, sv.NewestOK, len(sv.Checkpoints), out)
	}
	verdicts := map[string]string{}
	for _, c := range sv.Checkpoints {
		if c.StepFrom != "directory name" {
			t.Errorf("%s: step from %q", c.ID, c.StepFrom)
		}
		for _, f := range c.Files {
			verdicts[c.ID+"/"+f.Path] = f.Format + " " + f.Verdict
		}
	}
	for k, want := range map[string]string{
		"dir:step-100/state.bin": "pickle whole", "dir:step-100/trainer_state.json": "json whole",
		"dir:step-100/bad\nname.pkl": "pickle whole", "dir:step-200/weights.raw": "unknown unknown",
		"dir:step-300/model.pt": "zip torn",
	} {
		if verdicts[k] != want {
			t.Errorf("%q: %q, want %q (all: %q)", k, verdicts[k], want, verdicts)
		}
	}
	other := map[string]string{}
	for _, o := range sv.Other {
		other[o.Path] = o.Why
	}
	if !strings.Contains(other["train.log"], "excluded") || !strings.Contains(other["step-100/link.pt"], "symlink") {
		t.Errorf("other: %q", other)
	}

	if err := os.RemoveAll(filepath.Join(dir, "step-300")); err != nil {
		t.Fatal(err)
	}
	if out, code := runCheckBin(t, "--dir", dir); code != 0 || !strings.Contains(out, "checkpoint dir:step-200 (newest)") {
		t.Errorf("without the torn checkpoint: exit %d, want 0\n%s", code, out)
	}
	if out, code := runCheckBin(t); code != 2 || !strings.Contains(out, "--dir (LIFEBOAT_DIR) is required") {
		t.Errorf("no --dir: exit %d, want 2\n%s", code, out)
	}
	// What watch finds wrong with the directory names the flag and its
	// variable.
	missing, file := filepath.Join(dir, "missing"), filepath.Join(dir, "step-200", "weights.raw")
	if out, code := runCheckBin(t, "--dir", missing); code != 1 || !strings.Contains(out, "--dir (LIFEBOAT_DIR) "+missing+" does not exist; create it or point --dir at") {
		t.Errorf("--dir %s: exit %d, want 1\n%s", missing, code, out)
	}
	if out, code := runCheckBin(t, "--dir", file); code != 1 || !strings.Contains(out, "--dir (LIFEBOAT_DIR) "+file+" is not a directory; point --dir at") {
		t.Errorf("--dir %s: exit %d, want 1\n%s", file, code, out)
	}
}

// runCheckBin runs `lifeboat check` with args and returns its stdout and
// stderr together, and its exit code.
func runCheckBin(t *testing.T, args ...string) (string, int) {
	t.Helper()
	out, err := exec.Command(lifeboatBin, append([]string{"check"}, args...)...).CombinedOutput()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return string(out), ee.ExitCode()
	}
	if err != nil {
		t.Fatal(err)
	}
	return string(out), 0
}
