package e2e

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lifeboat-project/lifeboat/internal/testenv"
)

// slowSaver is a trainer that saves step-000100 whole at once, then waits;
// its SIGTERM handler saves step-000200 as two files with a pause between
// them (a model, then an optimizer state, as real trainers do) and exits.
const slowSaver = `import os, pickle, signal, sys, time
root, pause = sys.argv[1], float(sys.argv[2])
def save(step, name, n):
    d = os.path.join(root, "step-%06d" % step)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        pickle.dump(bytes([step % 251]) * n, f, protocol=4)
def on_term(*_):
    save(200, "model.bin", 300000)
    time.sleep(pause)
    save(200, "optim.bin", 200000)
    open(os.path.join(root, ".saved"), "w").close()
    sys.exit(0)
signal.signal(signal.SIGTERM, on_term)
save(100, "model.bin", 300000)
save(100, "optim.bin", 200000)
open(os.path.join(root, ".ready"), "w").close()
while True:
    time.sleep(0.05)
`

// sidecarFinal runs the slow saver and a classic sidecar (both get
// SIGTERM together) and returns the sidecar's exit code and log. visible
// puts both in one PID namespace, the trainer in a mount namespace of its
// own (another container of a pod with shareProcessNamespace); otherwise
// the sidecar is in a PID namespace of its own and cannot see the trainer.
func sidecarFinal(t *testing.T, visible bool, store, dir string, pause string, args ...string) (int, string) {
	t.Helper()
	testenv.RequireRoot(t)
	if _, err := exec.LookPath("unshare"); err != nil {
		testenv.Skip(t, "unshare (util-linux) is not installed")
	}
	work := t.TempDir()
	trainer := filepath.Join(work, "trainer.py")
	if err := os.WriteFile(trainer, []byte(slowSaver), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	sidecar := append([]string{"sidecar", "--store", store, "--dir", dir}, args...)
	logPath := filepath.Join(work, "sidecar.log")
	// The shell stands for the pod: it starts the trainer's and the
	// sidecar's containers and, as the kubelet does, sends SIGTERM to
	// both at once when it gets one. With visible it is PID 1 of a PID
	// namespace both share (the pause process of shareProcessNamespace),
	// and the trainer has a mount namespace of its own (its container);
	// otherwise the sidecar gets a PID namespace of its own.
	script := `trainer=$1 dir=$2 pause=$3 mode=$4; shift 4
trap 'if [ "$mode" = visible ]; then kill -TERM $tp $lp; else kill -TERM $tp $(cat /proc/$lp/task/$lp/children); fi' TERM
if [ "$mode" = visible ]; then
	unshare --mount python3 "$trainer" "$dir" "$pause" & tp=$!
	"$@" 2>"$LOG" & lp=$!
else
	python3 "$trainer" "$dir" "$pause" & tp=$!
	unshare --pid --fork --mount-proc "$@" 2>"$LOG" & lp=$!
fi
wait $lp; c=$?
while kill -0 $lp 2>/dev/null; do wait $lp; c=$?; done
echo $c > "$LOG.code"
wait $tp`
	mode := "invisible"
	if visible {
		mode = "visible"
	}
	shArgs := append([]string{"-c", script, "sh", trainer, dir, pause, mode, lifeboatBin}, sidecar...)
	cmd := exec.Command("sh", shArgs...)
	if visible {
		cmd = exec.Command("unshare", append([]string{"--pid", "--fork", "--mount-proc", "sh"}, shArgs...)...)
	}
	cmd.Env = append(os.Environ(), "LOG="+logPath)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	pod := cmd.Process.Pid
	if visible {
		pod = waitChildPid(t, pod, done)
	}
	t.Cleanup(func() {
		_ = syscall.Kill(pod, syscall.SIGKILL)
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-done
	})
	readLog := func() string { b, _ := os.ReadFile(logPath); return string(b) }
	// Step 100 committed: the sidecar is watching, the trainer is training.
	deadline := time.Now().Add(hangLimit)
	for latestComplete(lsJSON(t, nil, store)) != 100 {
		if time.Now().After(deadline) {
			t.Fatalf("step 100 never committed; sidecar log:\n%s\n%s", readLog(), out.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err := syscall.Kill(pod, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-done:
	case <-time.After(hangLimit):
		t.Fatalf("the sidecar never exited; log:\n%s", readLog())
	}
	b, err := os.ReadFile(logPath + ".code")
	if err != nil {
		t.Fatalf("no exit code: %v; output:\n%s\nlog:\n%s", err, out.String(), readLog())
	}
	code, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	return code, readLog()
}

// restoredFiles restores the store's newest checkpoint into a new
// directory and returns the files of step-000200 found there.
func restoredFiles(t *testing.T, store string) []string {
	t.Helper()
	out := filepath.Join(t.TempDir(), "restored")
	cmd := exec.Command(lifeboatBin, "restore", "--store", store, "--dir", out)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("restore: %v\n%s", err, b)
	}
	ents, _ := os.ReadDir(filepath.Join(out, "step-000200"))
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	return names
}

// TestSidecarFinalUploadWaitsForTheTrainer: a classic sidecar gets SIGTERM
// with the trainer, whose SIGTERM save writes step 200 as two files 1.5 s
// apart. On the code before, the final scan ran after --flush-wait while
// the trainer was still alive between the two files, skipped --settle and
// committed step 200 without optim.bin (visible), or found it not settled
// and committed nothing (invisible): torn or lost. Now the final upload
// waits while the trainer's container runs (visible) or while files
// change within --settle (invisible), and commits step 200 whole.
func TestSidecarFinalUploadWaitsForTheTrainer(t *testing.T) {
	for _, tc := range []struct {
		name    string
		visible bool
		args    []string
	}{
		{"shared PID namespace", true, []string{"--flush-wait", "1s", "--settle", "1s"}},
		{"own PID namespace", false, []string{"--flush-wait", "1s", "--settle", "2s"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			store := "file://" + filepath.Join(root, "store")
			code, log := sidecarFinal(t, tc.visible, store, filepath.Join(root, "ckpt"), "1.5", tc.args...)
			if code != 0 {
				t.Fatalf("sidecar exit %d, want 0; log:\n%s", code, log)
			}
			if got := latestComplete(lsJSON(t, nil, store)); got != 200 {
				t.Fatalf("newest complete step %d, want 200; log:\n%s", got, log)
			}
			if got := restoredFiles(t, store); strings.Join(got, " ") != "model.bin optim.bin" {
				t.Errorf("restored step 200 holds %v, want model.bin and optim.bin; log:\n%s", got, log)
			}
			if want := `"msg":"checkpoint.waiting_for_trainer"`; !strings.Contains(log, want) {
				t.Errorf("no %s; log:\n%s", want, log)
			}
		})
	}
}

// TestSidecarFinalUploadTrainerStillWriting: a trainer whose SIGTERM save
// cannot be whole within the sidecar's grace (a 20 s pause between its two
// files, a 5 s grace): the sidecar waits while it can, keeps step 100 the
// newest (step 200 has not settled), says so and exits 75. On the code
// before, the final scan took step 200 with model.bin only and exited 0.
func TestSidecarFinalUploadTrainerStillWriting(t *testing.T) {
	root := t.TempDir()
	store := "file://" + filepath.Join(root, "store")
	code, log := sidecarFinal(t, true, store, filepath.Join(root, "ckpt"), "20",
		"--flush-wait", "1s", "--settle", "4s", "--grace", "5s")
	if code != 75 {
		t.Errorf("sidecar exit %d, want 75 (the last save could not be uploaded); log:\n%s", code, log)
	}
	if got := latestComplete(lsJSON(t, nil, store)); got != 100 {
		t.Errorf("newest complete step %d, want 100: step 200 was never whole; log:\n%s", got, log)
	}
	for _, want := range []string{`"msg":"checkpoint.trainer_still_writing"`, `"msg":"sidecar.final_upload_failed"`,
		"raise the pod's terminationGracePeriodSeconds and --grace, lower --flush-wait, or have the trainer save faster"} {
		if !strings.Contains(log, want) {
			t.Errorf("no %s; log:\n%s", want, log)
		}
	}
}
