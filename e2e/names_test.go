package e2e

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestNamesEscapedForPeople: a checkpoint directory
// whose name holds newlines (legal, stored byte for byte). `lifeboat
// restore` prints one line on stdout, the name escaped (\x0a), never a
// forged line of its own; an error naming it is one line on stderr; `ls`
// prints one line per checkpoint; the resume file (JSON) keeps the name
// exactly. Before, restore printed the name raw: one restore printed
// three lines, one of them a forged "no complete checkpoint in the store:
// the trainer starts fresh".
func TestNamesEscapedForPeople(t *testing.T) {
	forged := "no complete checkpoint in the store: the trainer starts fresh"
	name := "ckpt\n" + forged + "\n\x1b[2Kstep"
	url := storeWith(t, 100, map[string][]byte{name + "/model.bin": []byte("the model")})

	dir := t.TempDir()
	cmd := exec.Command(lifeboatBin, "restore", "--store", url, "--dir", dir)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("restore: %v\n%s", err, stderr.String())
	}
	lines := strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
	if len(lines) != 1 || !strings.HasPrefix(lines[0], "restored step 100 ") || !strings.Contains(lines[0], `ckpt\x0a`) || strings.Contains(string(out), "\x1b") {
		t.Errorf("restore printed %q, want one line with the name escaped", out)
	}
	b, err := os.ReadFile(filepath.Join(dir, ".lifeboat-resume.json"))
	if err != nil {
		t.Fatal(err)
	}
	var rf struct{ Dir string }
	if err := json.Unmarshal(b, &rf); err != nil || rf.Dir != filepath.Join(dir, name) {
		t.Errorf("the resume file's dir is %q (%v), want the name exactly", rf.Dir, err)
	}

	// An error that names it: a directory in the way of its file.
	dir2 := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir2, name, "model.bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	cmd = exec.Command(lifeboatBin, "restore", "--store", url, "--dir", dir2, "--step", "100")
	stderr.Reset()
	cmd.Stderr = &stderr
	if err := cmd.Run(); err == nil {
		t.Fatal("restore over a directory in the way succeeded")
	}
	var errLines []string
	for _, l := range strings.Split(strings.TrimSuffix(stderr.String(), "\n"), "\n") {
		if !strings.HasPrefix(l, "{") { // not a JSON log line
			errLines = append(errLines, l)
		}
	}
	if len(errLines) != 1 || !strings.HasPrefix(errLines[0], "lifeboat restore: ") || !strings.Contains(errLines[0], `ckpt\x0a`) || strings.Contains(stderr.String(), "\x1b") {
		t.Errorf("the error is %d lines, want one with the name escaped:\n%s", len(errLines), stderr.String())
	}

	out, err = exec.Command(lifeboatBin, "ls", "--store", url).Output()
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(out), "\n"); n != 2 {
		t.Errorf("ls printed %d lines, want a header and one checkpoint:\n%s", n, out)
	}
}
