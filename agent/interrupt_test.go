package agent

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
	"golang.org/x/sys/unix"

	"github.com/lifeboat-project/lifeboat/checkpoint"
	"github.com/lifeboat-project/lifeboat/storage/mem"
	"github.com/lifeboat-project/lifeboat/watch"
)

// wholePickle is the smallest pickle a trainer could write: PROTO 4,
// BININT1 1, STOP.
var wholePickle = []byte{0x80, 0x04, 'K', 0x01, '.'}

// interruptAgent is an agent over dir with a long settle, so that every
// file written by the test is "recent" at the deaths it reports.
func interruptAgent(t *testing.T, dir string, logs *bytes.Buffer) (*Agent, *mem.Store) {
	t.Helper()
	return interruptAgentSettle(t, dir, logs, time.Hour)
}

func interruptAgentSettle(t *testing.T, dir string, logs *bytes.Buffer, settle time.Duration) (*Agent, *mem.Store) {
	t.Helper()
	s := mem.New()
	log := slog.New(slog.NewJSONHandler(logs, nil))
	w, err := watch.New(watch.Config{Dir: dir, Settle: settle, Log: log})
	if err != nil {
		t.Fatal(err)
	}
	a, err := New(Config{Dir: dir, Watcher: w, WorldSize: 1, Settle: settle, VerifyFormat: true, Log: log,
		Uploader: &checkpoint.Uploader{Store: s, ChunkSize: 64 << 10}})
	if err != nil {
		t.Fatal(err)
	}
	return a, s
}

func steps(t *testing.T, s *mem.Store) []int64 {
	t.Helper()
	snaps, err := checkpoint.List(context.Background(), s)
	if err != nil {
		t.Fatal(err)
	}
	var out []int64
	for _, sn := range snaps {
		out = append(out, sn.Step)
	}
	return out
}

// TestInterruptedSaveIsNotCommitted: the trainer died by a signal right
// after writing step-200's raw file (no format check covers .bin): the
// final flush commits the older whole step-100, never step-200, and says
// why. A rewrite after the death makes step-200 a checkpoint again.
func TestInterruptedSaveIsNotCommitted(t *testing.T) {
	defer goleak.VerifyNone(t)
	dir := t.TempDir()
	const settle = 50 * time.Millisecond
	writeFile(t, filepath.Join(dir, "step-100", "model.bin"), 10<<10, 1)
	var logs bytes.Buffer
	a, s := interruptAgentSettle(t, dir, &logs, settle)
	time.Sleep(2 * settle) // step-100 was quiet for the settle time before the death
	p200 := filepath.Join(dir, "step-200", "model.bin")
	writeFile(t, p200, 10<<10, 2)
	// The trainer died right after that write: at the file's last change,
	// not whenever this goroutine next runs, which a busy machine could
	// put past the settle time and make step-200 look whole.
	a.Died(Death{Pid: 4242, How: "killed by SIGKILL", At: lastChangeOf(t, p200)})
	go a.Run(context.Background())
	if err := a.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := steps(t, s); len(got) != 1 || got[0] != 100 {
		t.Errorf("store holds steps %v, want only the whole step 100", got)
	}
	if st := a.Stats(); st.Interrupted != 1 {
		t.Errorf("stats %+v, want 1 interrupted", st)
	}
	if !strings.Contains(logs.String(), `"msg":"checkpoint.interrupted"`) || !strings.Contains(logs.String(), `"pid":4242`) {
		t.Errorf("no checkpoint.interrupted line naming the process:\n%s", logs.String())
	}
}

// lastChangeOf is when path's content or status last changed, as the
// watcher sees it.
func lastChangeOf(t *testing.T, path string) time.Time {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	m, c := time.Unix(st.Mtim.Unix()), time.Unix(st.Ctim.Unix())
	if c.After(m) {
		return c
	}
	return m
}

// TestWholePickleSurvivesALaterDeath: the SIGTERM save finished (a whole
// pickle), then a worker of the trainer hung until the tree was SIGKILLed
// at the deadline. The format check vouches for the file: it is committed.
func TestWholePickleSurvivesALaterDeath(t *testing.T) {
	defer goleak.VerifyNone(t)
	dir := t.TempDir()
	var logs bytes.Buffer
	a, s := interruptAgent(t, dir, &logs)
	if err := os.MkdirAll(filepath.Join(dir, "backup"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "backup", "latest.pdparams"), wholePickle, 0o644); err != nil {
		t.Fatal(err)
	}
	a.Killing(time.Now())
	a.Died(Death{Pid: 99, How: "killed by SIGKILL", At: time.Now()})
	go a.Run(context.Background())
	if err := a.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := steps(t, s); len(got) != 1 {
		t.Errorf("store holds steps %v, want the whole SIGTERM save; log:\n%s", got, logs.String())
	}
}

// TestOpenAtKillIsInterrupted: a file still open for writing when the tree
// is SIGKILLed is an interrupted save, whatever its format says.
func TestOpenAtKillIsInterrupted(t *testing.T) {
	defer goleak.VerifyNone(t)
	dir := t.TempDir()
	var logs bytes.Buffer
	a, s := interruptAgent(t, dir, &logs)
	p := filepath.Join(dir, "backup", "latest.pdparams")
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, wholePickle, 0o644); err != nil {
		t.Fatal(err)
	}
	// A writer that holds the file open (another process: lifeboat never
	// counts its own descriptors).
	ready := filepath.Join(t.TempDir(), "ready")
	w := exec.Command("sh", "-c", `exec 3>>"$0"; touch "$1"; exec sleep 60`, p, ready)
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = w.Process.Kill(); _ = w.Wait() }()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if _, err := os.Stat(ready); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the writer never started")
		}
	}
	a.Killing(time.Now())
	_ = w.Process.Kill()
	_ = w.Wait()
	go a.Run(context.Background())
	if err := a.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := steps(t, s); len(got) != 0 {
		t.Errorf("store holds steps %v; a file open for writing at the kill must never be committed", got)
	}
	if !strings.Contains(logs.String(), "open for writing when the trainer's tree was SIGKILLed") {
		t.Errorf("the log does not say why:\n%s", logs.String())
	}
}

// TestTornPickleFallsBack: the newest checkpoint's pickle is cut short (a
// format check finds it while uploading): the final flush commits the
// newest whole one instead, and the flush succeeds.
func TestTornPickleFallsBack(t *testing.T) {
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
	err := a.Flush(context.Background())
	if err != nil && !errors.Is(err, checkpoint.ErrInterrupted) {
		t.Fatal(err)
	}
	if got := steps(t, s); len(got) != 1 || got[0] != 100 {
		t.Errorf("store holds steps %v, want the whole step 100; log:\n%s", got, logs.String())
	}
	if st := a.Stats(); st.Interrupted != 1 {
		t.Errorf("stats %+v, want 1 interrupted", st)
	}
}

// TestReapedDeaths: of the reaped processes, only those killed by a signal
// or exiting non-zero are deaths that may have cut a save short.
func TestReapedDeaths(t *testing.T) {
	a := &Agent{}
	at := time.Now()
	a.Reaped(10, unix.WaitStatus(0), at)                 // exit 0
	a.Reaped(11, unix.WaitStatus(3<<8), at)              // exit 3
	a.Reaped(12, unix.WaitStatus(unix.SIGKILL), at)      // killed by SIGKILL
	a.Reaped(13, unix.WaitStatus(unix.SIGSEGV|0x80), at) // SIGSEGV, core dumped
	want := []Death{{11, "exit 3", at}, {12, "killed by SIGKILL", at}, {13, "killed by SIGSEGV", at}}
	if !slices.Equal(a.deaths, want) {
		t.Errorf("deaths %v, want %v", a.deaths, want)
	}
}
