package agent

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/lifeboat-project/lifeboat/checkpoint"
)

// TestContentDecidesWhateverTheName: after a process of the trainer died,
// a whole pickle under a name no check knows (model.bin) is vouched for by
// its content and committed; text under a pickle's name (model.pkl) is no
// pickle, so the death rule judges it, as any unrecognised file, and the
// refusal names it.
func TestContentDecidesWhateverTheName(t *testing.T) {
	defer goleak.VerifyNone(t)
	dir := t.TempDir()
	var logs bytes.Buffer
	a, s := interruptAgent(t, dir, &logs)
	for rel, b := range map[string][]byte{
		"step-200/model.bin": wholePickle,
		"step-300/model.pkl": []byte("half a line of tex"),
	} {
		p := filepath.Join(dir, filepath.FromSlash(rel))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	a.Died(Death{Pid: 4242, How: "killed by SIGKILL", At: time.Now()})
	go a.Run(context.Background())
	if err := a.Flush(context.Background()); err != nil && !errors.Is(err, checkpoint.ErrInterrupted) {
		t.Fatal(err)
	}
	if got := steps(t, s); len(got) != 1 || got[0] != 200 {
		t.Errorf("store holds steps %v, want step 200, whose pickle is whole; log:\n%s", got, logs.String())
	}
	if !strings.Contains(logs.String(), `"path":"step-300/model.pkl","reason":"changed `) {
		t.Errorf("no checkpoint.interrupted line naming step-300/model.pkl for the death rule:\n%s", logs.String())
	}
}

// TestTornFileIsNamed: a checkpoint refused by a format check while it is
// uploaded names the torn file in checkpoint.interrupted's path.
func TestTornFileIsNamed(t *testing.T) {
	defer goleak.VerifyNone(t)
	dir := t.TempDir()
	var logs bytes.Buffer
	a, _ := interruptAgent(t, dir, &logs)
	if err := os.MkdirAll(filepath.Join(dir, "step-200"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "step-200", "model.pdparams"), wholePickle[:3], 0o644); err != nil {
		t.Fatal(err)
	}
	go a.Run(context.Background())
	if err := a.Flush(context.Background()); err != nil && !errors.Is(err, checkpoint.ErrInterrupted) {
		t.Fatal(err)
	}
	if !strings.Contains(logs.String(), `"msg":"checkpoint.interrupted","id":"dir:step-200","path":"step-200/model.pdparams"`) {
		t.Errorf("checkpoint.interrupted does not name step-200/model.pdparams in path:\n%s", logs.String())
	}
}

// TestFlushSaysWhichStepInstead: when the newest checkpoint is refused at
// the final flush, checkpoint.flushed says which step was committed
// instead of it.
func TestFlushSaysWhichStepInstead(t *testing.T) {
	defer goleak.VerifyNone(t)
	dir := t.TempDir()
	var logs bytes.Buffer
	a, s := interruptAgent(t, dir, &logs)
	for step, b := range map[string][]byte{"step-100": wholePickle, "step-200": wholePickle[:3]} {
		if err := os.MkdirAll(filepath.Join(dir, step), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, step, "model.pdparams"), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	go a.Run(context.Background())
	if err := a.Flush(context.Background()); err != nil && !errors.Is(err, checkpoint.ErrInterrupted) {
		t.Fatal(err)
	}
	if got := steps(t, s); len(got) != 1 || got[0] != 100 {
		t.Fatalf("store holds steps %v, want 100", got)
	}
	if !strings.Contains(logs.String(), `"msg":"checkpoint.flushed","step":100,`) || !strings.Contains(logs.String(), `"instead_of":200`) {
		t.Errorf("checkpoint.flushed does not say step 100 was committed instead of 200:\n%s", logs.String())
	}
}
