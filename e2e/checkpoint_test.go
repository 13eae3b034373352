package e2e

// End-to-end tests of the checkpoint path: the real binary, a Python trainer
// that saves the way Paddle jobs do, a directory store and a real MinIO
// server, SIGTERM in the middle of training, and a restart that resumes.

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/lifeboat-project/lifeboat/internal/testenv"
	"github.com/lifeboat-project/lifeboat/resume"
)

// storeKind is a store the checkpoint tests run against.
type storeKind struct {
	name string
	url  func(t *testing.T) string
	env  func(t *testing.T) []string
}

func storeKinds() []storeKind {
	return []storeKind{
		{
			name: "fs",
			url:  func(t *testing.T) string { return "file://" + filepath.Join(t.TempDir(), "store") },
			env:  func(t *testing.T) []string { return nil },
		},
		{
			name: "minio",
			url: func(t *testing.T) string {
				testenv.RequireMinIO(t)
				b := make([]byte, 6)
				_, _ = rand.Read(b)
				return "s3://lifeboat-e2e-" + hex.EncodeToString(b) + "/job"
			},
			env: func(t *testing.T) []string {
				m := testenv.RequireMinIO(t)
				return []string{"AWS_ENDPOINT_URL=" + m.Endpoint, "AWS_ACCESS_KEY_ID=" + m.AccessKey,
					"AWS_SECRET_ACCESS_KEY=" + m.SecretKey, "AWS_REGION=us-east-1", "LIFEBOAT_CREATE_BUCKET=true"}
			},
		},
	}
}

// event is one JSON line from testdata/trainer.py.
type event struct {
	Event    string `json:"event"`
	Step     int64  `json:"step"`
	Verified bool   `json:"verified"`
	Dir      string `json:"dir"`
	LBStep   string `json:"lifeboat_step"`
}

// trainerRun is lifeboat run supervising the Python trainer.
type trainerRun struct {
	*lb
	events chan event
}

func startTrainer(t *testing.T, env []string, args ...string) *trainerRun {
	t.Helper()
	if _, err := exec.LookPath("python3"); err != nil {
		t.Fatal("python3 is needed for the trainer; scripts/test.sh installs it")
	}
	cmd := exec.Command(lifeboatBin, args...)
	cmd.Env = append(os.Environ(), env...)
	p := &lb{t: t, cmd: cmd, stdout: &syncBuffer{}, stderr: &syncBuffer{}, done: make(chan struct{})}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = p.stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p.pid = cmd.Process.Pid
	tr := &trainerRun{lb: p, events: make(chan event, 1000)}
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			var e event
			if json.Unmarshal(sc.Bytes(), &e) == nil {
				tr.events <- e
			}
			_, _ = p.stdout.Write(append(sc.Bytes(), '\n'))
		}
		close(tr.events)
		_ = cmd.Wait()
		p.code = cmd.ProcessState.ExitCode()
		close(p.done)
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			_ = cmd.Process.Kill()
			<-p.done
		}
	})
	return tr
}

// next returns the next event, failing on a hang or an early exit.
func (tr *trainerRun) next(t *testing.T) event {
	t.Helper()
	select {
	case e, ok := <-tr.events:
		if !ok {
			t.Fatalf("trainer output ended; lifeboat stderr:\n%s", tail(tr.stderr.String()))
		}
		return e
	case <-time.After(hangLimit):
		t.Fatalf("no trainer event in %s; stderr:\n%s", hangLimit, tail(tr.stderr.String()))
	}
	return event{}
}

// lsJSON runs lifeboat ls --json against url.
func lsJSON(t *testing.T, env []string, url string) []lsEntry {
	t.Helper()
	cmd := exec.Command(lifeboatBin, "ls", "--json", "--store", url)
	cmd.Env = append(os.Environ(), env...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("lifeboat ls: %v\n%s", err, stderr.String())
	}
	var entries []lsEntry
	if err := json.Unmarshal(out, &entries); err != nil {
		t.Fatalf("ls --json output %q: %v", out, err)
	}
	return entries
}

func latestComplete(entries []lsEntry) int64 {
	latest := int64(-1)
	for _, e := range entries {
		if e.Complete && e.Step > latest {
			latest = e.Step
		}
	}
	return latest
}

// TestPreemptAndResume is the product's promise, for each way of saving and
// each store: SIGTERM in the middle of training, the checkpoint is
// committed, lifeboat exits 143, and a new pod with an empty directory
// resumes from exactly the saved step with byte-identical files.
func TestPreemptAndResume(t *testing.T) {
	for _, sk := range storeKinds() {
		for _, mode := range []string{"dirs", "backup", "marker"} {
			t.Run(sk.name+"/"+mode, func(t *testing.T) {
				url, env := sk.url(t), sk.env(t)
				flags := []string{"run", "--store", url, "--settle", "300ms", "--scan-interval", "100ms", "--grace", "30s", "--keep", "2"}
				dir1 := filepath.Join(t.TempDir(), "pod1")
				tr := startTrainer(t, env, append(flags, "--dir", dir1, "--", "python3", "-u", "testdata/trainer.py", mode)...)
				if e := tr.next(t); e.Event != "fresh" {
					t.Fatalf("first run: %+v, want a fresh start", e)
				}
				// Let it save a few times (backup mode saves only at TERM).
				for saved := 0; saved < 3 && mode != "backup"; {
					if tr.next(t).Event == "saved" {
						saved++
					}
				}
				if mode == "backup" {
					time.Sleep(500 * time.Millisecond)
				}
				tr.signal(syscall.SIGTERM)
				var termStep int64 = -1
				for e := range tr.events {
					if e.Event == "terminated" {
						termStep = e.Step
					}
				}
				if code := tr.wait(); code != 143 {
					t.Fatalf("exit %d, want 143; stderr:\n%s", code, tail(tr.stderr.String()))
				}
				if termStep < 0 {
					t.Fatalf("the trainer's SIGTERM handler never ran")
				}
				entries := lsJSON(t, env, url)
				latest := latestComplete(entries)
				switch mode {
				case "backup":
					if latest != 0 {
						t.Errorf("backup saved at TERM committed as step %d, want counter step 0", latest)
					}
				default:
					if latest <= 0 || latest > termStep {
						t.Errorf("latest committed step %d, want a saved step <= %d", latest, termStep)
					}
				}
				if len(entries) > 3 {
					t.Errorf("--keep 2 left %d checkpoints: %+v", len(entries), entries)
				}

				dir2 := filepath.Join(t.TempDir(), "pod2")
				tr2 := startTrainer(t, env, append(flags, "--dir", dir2, "--", "python3", "-u", "testdata/trainer.py", mode)...)
				e := tr2.next(t)
				wantStep := latest
				if mode == "backup" {
					wantStep = termStep // the model's own step, saved in state.json
				}
				if e.Event != "resumed" || !e.Verified || e.Step != wantStep || e.LBStep != fmt.Sprint(latest) {
					t.Errorf("second run: %+v; want resumed and verified at trainer step %d, LIFEBOAT_RESUME_STEP %d", e, wantStep, latest)
				}
				tr2.signal(syscall.SIGTERM)
				tr2.wait()
				checkManifestIDs(t, entries, latest, tr.stderr.String(), tr2.stderr.String())
				// Credentials never reach a log line.
				for _, kv := range env {
					k, v, _ := strings.Cut(kv, "=")
					if (k == "AWS_SECRET_ACCESS_KEY" || k == "AWS_ACCESS_KEY_ID") && v != "" {
						for _, out := range []string{tr.stderr.String(), tr2.stderr.String()} {
							if strings.Contains(out, v) {
								t.Errorf("%s appears in lifeboat's log", k)
							}
						}
					}
				}
			})
		}
	}
}

// checkManifestIDs: the manifest id that `lifeboat ls` shows for step is
// the one the commit was logged with (checkpoint.committed's manifest_id)
// and the one the restore was logged with (resume.restored's manifest_id),
// so a user can follow one checkpoint from its commit to its restore.
func checkManifestIDs(t *testing.T, entries []lsEntry, step int64, commitLog, restoreLog string) {
	t.Helper()
	var ids []string
	for _, e := range entries {
		if e.Step == step {
			ids = e.IDs
		}
	}
	if len(ids) != 1 {
		t.Fatalf("lifeboat ls shows ids %v for step %d, want one", ids, step)
	}
	committed := false
	for _, c := range logLines(commitLog, "checkpoint.committed") {
		if c["step"] == float64(step) {
			committed = true
			if c["manifest_id"] != ids[0] {
				t.Errorf("checkpoint.committed of step %d: manifest_id %v, want %s (lifeboat ls)", step, c["manifest_id"], ids[0])
			}
		}
	}
	if !committed {
		t.Errorf("no checkpoint.committed line for step %d", step)
	}
	r := logLines(restoreLog, "resume.restored")
	if len(r) != 1 || r[0]["manifest_id"] != ids[0] {
		t.Errorf("resume.restored lines %v, want one with manifest_id %s (lifeboat ls)", r, ids[0])
	}
}

// TestRestoreFallsBackPastCorruption: verify names a corrupt chunk, and
// restore (the init-container form) falls back to the previous checkpoint.
func TestRestoreFallsBackPastCorruption(t *testing.T) {
	root := t.TempDir()
	url := "file://" + filepath.Join(root, "store")
	flags := []string{"run", "--store", url, "--settle", "200ms", "--scan-interval", "50ms", "--keep", "0"}
	tr := startTrainer(t, []string{"TRAINER_EVERY=20"}, append(flags, "--dir", filepath.Join(root, "pod1"), "--", "python3", "-u", "testdata/trainer.py", "dirs")...)
	var saved []int64
	for len(saved) < 4 {
		if e := tr.next(t); e.Event == "saved" {
			saved = append(saved, e.Step)
		}
	}
	tr.signal(syscall.SIGTERM)
	tr.wait()
	entries := lsJSON(t, nil, url)
	if len(entries) < 2 {
		t.Fatalf("want at least 2 checkpoints, got %+v", entries)
	}
	newest, previous := entries[len(entries)-1].Step, entries[len(entries)-2].Step

	// Flip a byte in a chunk only the newest checkpoint has: the model
	// bytes depend on the step, so its chunks are its own. The manifests
	// say which they are (the newest file's time would not: the final
	// flush and the upload of the step before can store their chunks in
	// the same clock tick).
	byStep := map[int64]map[string]int64{}
	for _, m := range storeManifests(t, openCrashStore(t, url)) {
		if byStep[m.Step] == nil {
			byStep[m.Step] = map[string]int64{}
		}
		for _, f := range m.Files {
			for _, c := range f.Chunks {
				byStep[m.Step][c.SHA256] = c.Size
			}
		}
	}
	var target string
	for sum, size := range byStep[newest] {
		if _, shared := byStep[previous][sum]; size > 1000 && !shared {
			target = filepath.Join(root, "store", "chunks", sum[:2], sum)
		}
	}
	if target == "" {
		t.Fatalf("step %d has no large chunk of its own: %v, step %d: %v", newest, byStep[newest], previous, byStep[previous])
	}
	b, err := os.ReadFile(target)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)/2] ^= 0x01
	if err := os.WriteFile(target, b, 0o644); err != nil {
		t.Fatal(err)
	}

	out, err := exec.Command(lifeboatBin, "verify", "--store", url, "--read-data-subset", "all", fmt.Sprint(newest)).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "corrupt-chunk") {
		t.Errorf("verify of the corrupted step %d: %v\n%s", newest, err, out)
	}
	out, err = exec.Command(lifeboatBin, "verify", "--store", url, fmt.Sprint(previous)).CombinedOutput()
	if err != nil {
		t.Errorf("verify of the intact step %d: %v\n%s", previous, err, out)
	}
	dir := filepath.Join(root, "restored")
	cmd := exec.Command(lifeboatBin, "restore", "--store", url, "--dir", dir)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err = cmd.Output()
	if err != nil || !strings.Contains(string(out), fmt.Sprintf("restored step %d", previous)) {
		t.Fatalf("restore: %v, %q; want step %d after falling back\n%s", err, out, previous, stderr.String())
	}
	if !strings.Contains(stderr.String(), "resume.fallback") {
		t.Errorf("restore did not say why it fell back:\n%s", stderr.String())
	}
	var r resume.Point
	b, err = os.ReadFile(filepath.Join(dir, resume.FileName))
	if err != nil || json.Unmarshal(b, &r) != nil || r.Step != previous {
		t.Errorf("%s: %q, %v; want step %d", resume.FileName, b, err, previous)
	}

	out, err = exec.Command(lifeboatBin, "prune", "--store", url, "--keep", "1").CombinedOutput()
	if err != nil {
		t.Fatalf("prune: %v\n%s", err, out)
	}
	if left := lsJSON(t, nil, url); len(left) != 1 || left[0].Step != newest {
		t.Errorf("after prune --keep 1: %+v, want only step %d", left, newest)
	}
}

// TestSidecarFlushesOnTerm: the sidecar uploads what a trainer in another
// container writes, and on SIGTERM commits the last checkpoint.
func TestSidecarFlushesOnTerm(t *testing.T) {
	root := t.TempDir()
	url, dir := "file://"+filepath.Join(root, "store"), filepath.Join(root, "shared")
	p := start(t, "plain", "sidecar", "--store", url, "--dir", dir, "--settle", "1h", "--grace", "30s")
	waitFor(t, p, func() bool { return strings.Contains(p.stderr.String(), "sidecar.started") })
	if err := os.MkdirAll(filepath.Join(dir, "step-000042"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "step-000042", "model.pdparams"), pickleBytes(bytes.Repeat([]byte("w"), 1<<20)), 0o644); err != nil {
		t.Fatal(err)
	}
	p.signal(syscall.SIGTERM)
	if code := p.wait(); code != 0 {
		t.Fatalf("sidecar exit %d; stderr:\n%s", code, p.stderr.String())
	}
	if latest := latestComplete(lsJSON(t, nil, url)); latest != 42 {
		t.Errorf("latest %d after the sidecar's flush, want 42", latest)
	}
}

// TestCheckpointFlagErrors: bad checkpoint configuration is a clear error
// and starts nothing.
func TestCheckpointFlagErrors(t *testing.T) {
	marker := filepath.Join(t.TempDir(), "ran")
	for _, tc := range []struct {
		args []string
		code int
		msg  string
	}{
		{[]string{"run", "--dir", "/tmp/x", "--", "touch", marker}, 2, "--dir is set but --store is not"},
		{[]string{"run", "--store", "file:///tmp/lb-store", "--", "touch", marker}, 2, "--store is set but --dir is not"},
		{[]string{"run", "--store", "ftp://x/y", "--dir", t.TempDir(), "--", "touch", marker}, 2, "--store (LIFEBOAT_STORE)"},
		{[]string{"run", "--store", "file://relative", "--dir", t.TempDir(), "--", "touch", marker}, 2, "--store (LIFEBOAT_STORE)"},
		{[]string{"run", "--store", "file:///tmp/lb-store", "--dir", t.TempDir(), "--step-pattern", "(", "--", "touch", marker}, 2, "--step-pattern"},
		{[]string{"run", "--store", "file:///tmp/lb-store", "--dir", t.TempDir(), "--rank", "3", "--world-size", "2", "--", "touch", marker}, 2, "must be below --world-size"},
		{[]string{"run", "--store", "s3://no-such-bucket-here/x", "--s3-endpoint", "http://127.0.0.1:1", "--dir", t.TempDir(), "--", "touch", marker}, 125, "127.0.0.1:1"},
		{[]string{"verify", "--store", "file:///tmp/lb-store", "notastep"}, 2, "not a step"},
		{[]string{"prune", "--store", "file:///tmp/lb-store", "--keep", "0"}, 2, "keep at least 1"},
		{[]string{"restore", "--store", "file:///tmp/lb-store"}, 2, "--dir (LIFEBOAT_DIR) is required"},
	} {
		cmd := exec.Command(lifeboatBin, tc.args...)
		cmd.Env = append(os.Environ(), "AWS_ACCESS_KEY_ID=AKIDLIFEBOATTEST", "AWS_SECRET_ACCESS_KEY=lifeboat-secret-value-xyz")
		out, _ := cmd.CombinedOutput()
		if code := cmd.ProcessState.ExitCode(); code != tc.code || !strings.Contains(string(out), tc.msg) {
			t.Errorf("%v: exit %d, output %q; want %d and %q", tc.args, code, out, tc.code, tc.msg)
		}
		if strings.Contains(string(out), "lifeboat-secret-value-xyz") {
			t.Errorf("%v: the secret key appears in the output", tc.args)
		}
	}
	if _, err := os.Stat(marker); err == nil {
		t.Errorf("a command was started despite a configuration error")
	}
}

// waitFor polls cond until it holds or lifeboat exits.
func waitFor(t *testing.T, p *lb, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(hangLimit); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if cond() {
			return
		}
		if !p.alive() {
			t.Fatalf("lifeboat exited (%d); stderr:\n%s", p.code, p.stderr.String())
		}
	}
	t.Fatalf("condition never held; stderr:\n%s", p.stderr.String())
}

// TestRestartResumesFromCheckpoint: a trainer that crashes after saving is
// restarted in place, from the checkpoint it completed before the crash.
func TestRestartResumesFromCheckpoint(t *testing.T) {
	root := t.TempDir()
	url := "file://" + filepath.Join(root, "store")
	tr := startTrainer(t, []string{"TRAINER_CRASH_AFTER=2"}, "run", "--store", url, "--dir", filepath.Join(root, "pod"),
		"--settle", "1h", "--scan-interval", "50ms", "--restart", "on-failure", "--max-restarts", "2", "--restart-backoff", "10ms",
		"--", "python3", "-u", "testdata/trainer.py", "dirs")
	var crashed int64 = -1
	for crashed < 0 {
		if e := tr.next(t); e.Event == "crashed" {
			crashed = e.Step
		}
	}
	e := tr.next(t)
	if e.Event != "resumed" || !e.Verified || e.Step != crashed {
		t.Fatalf("after the crash: %+v; want resumed and verified at step %d (saved just before it)", e, crashed)
	}
	tr.signal(syscall.SIGTERM)
	if code := tr.wait(); code != 143 {
		t.Errorf("exit %d, want 143", code)
	}
	if !strings.Contains(tr.stderr.String(), `"msg":"supervisor.restart"`) {
		t.Errorf("no restart event in the log")
	}
}

// TestDirFromEnvWithoutStore: an image's default LIFEBOAT_DIR without a
// store (docker run on a laptop) warns and runs the trainer, which still
// sees its directory.
func TestDirFromEnvWithoutStore(t *testing.T) {
	cmd := exec.Command(lifeboatBin, "run", "--", "sh", "-c", `printf "$LIFEBOAT_DIR"`)
	cmd.Env = append(os.Environ(), "LIFEBOAT_DIR=/ckpt-default")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil || string(out) != "/ckpt-default" {
		t.Errorf("trainer saw %q, %v; want it to run with LIFEBOAT_DIR", out, err)
	}
	if !strings.Contains(stderr.String(), "checkpoint.no_store") {
		t.Errorf("no warning that checkpoints stay local:\n%s", stderr.String())
	}
}

// TestInitContainerRestore: `lifeboat restore` (an init container), then
// `lifeboat run --restore never`: the trainer gets LIFEBOAT_RESUME_* from
// the resume file, and the restored files are not uploaded again.
func TestInitContainerRestore(t *testing.T) {
	root := t.TempDir()
	url := "file://" + filepath.Join(root, "store")
	flags := []string{"run", "--store", url, "--settle", "100ms", "--scan-interval", "50ms"}
	tr := startTrainer(t, nil, append(flags, "--dir", filepath.Join(root, "pod1"), "--", "python3", "-u", "testdata/trainer.py", "dirs")...)
	for saved := 0; saved < 2; {
		if tr.next(t).Event == "saved" {
			saved++
		}
	}
	tr.signal(syscall.SIGTERM)
	tr.wait()
	latest := latestComplete(lsJSON(t, nil, url))

	dir := filepath.Join(root, "pod2")
	if out, err := exec.Command(lifeboatBin, "restore", "--store", url, "--dir", dir).CombinedOutput(); err != nil {
		t.Fatalf("restore: %v\n%s", err, out)
	}
	tr2 := startTrainer(t, []string{"TRAINER_EVERY=100000"}, append(flags, "--restore", "never", "--dir", dir, "--", "python3", "-u", "testdata/trainer.py", "dirs")...)
	if e := tr2.next(t); e.Event != "resumed" || e.Step != latest || !e.Verified {
		t.Fatalf("trainer after an init-container restore: %+v, want resumed at %d", e, latest)
	}
	time.Sleep(500 * time.Millisecond) // several scans
	tr2.signal(syscall.SIGTERM)
	tr2.wait()
	if strings.Contains(tr2.stderr.String(), `"msg":"checkpoint.upload_started"`) {
		t.Errorf("the restored checkpoint was uploaded again:\n%s", tail(tr2.stderr.String()))
	}
}

// freeAddr returns a loopback address that was free a moment ago. Another
// process may take it before it is used: lifeboat's metrics server listens
// on 127.0.0.1:0 instead, and the tests read its address with listenAddr.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// listenAddr waits until lifeboat has logged metrics.listening and returns
// the address its metrics server bound (--metrics-addr 127.0.0.1:0).
func listenAddr(t *testing.T, p *lb) string {
	t.Helper()
	var addr string
	waitFor(t, p, func() bool {
		for _, rec := range logRecords(p.stderr.String()) {
			if a, ok := rec["addr"].(string); ok && rec["msg"] == "metrics.listening" {
				addr = a
				return true
			}
		}
		return false
	})
	return addr
}

// scrape returns the value of an unlabelled metric, or -1e9 when absent.
func scrape(t *testing.T, addr, name string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return -1e9
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) == 2 && f[0] == name {
			v, _ := strconv.ParseFloat(f[1], 64)
			return v
		}
	}
	return -1e9
}

// TestMetricsMoveDuringARun scrapes /metrics while the trainer saves: the
// last committed step and the uploaded bytes go up, /healthz answers, and
// the store's credentials appear nowhere.
func TestMetricsMoveDuringARun(t *testing.T) {
	root := t.TempDir()
	url := "file://" + filepath.Join(root, "store")
	tr := startTrainer(t, nil, "run", "--store", url, "--dir", filepath.Join(root, "pod"), "--settle", "100ms",
		"--scan-interval", "50ms", "--metrics-addr", "127.0.0.1:0", "--", "python3", "-u", "testdata/trainer.py", "dirs")
	addr := listenAddr(t, tr.lb)
	tr.next(t)
	for deadline := time.Now().Add(hangLimit); ; time.Sleep(50 * time.Millisecond) {
		if scrape(t, addr, "lifeboat_checkpoint_last_step") > 0 && scrape(t, addr, "lifeboat_upload_bytes_total") > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("metrics never showed a committed checkpoint; stderr:\n%s", tail(tr.stderr.String()))
		}
	}
	first := scrape(t, addr, "lifeboat_checkpoint_last_step")
	for deadline := time.Now().Add(hangLimit); scrape(t, addr, "lifeboat_checkpoint_last_step") <= first; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("lifeboat_checkpoint_last_step stuck at %v", first)
		}
	}
	if v := scrape(t, addr, "lifeboat_ready"); v != 1 {
		t.Errorf("lifeboat_ready = %v, want 1", v)
	}
	resp, err := http.Get("http://" + addr + "/healthz")
	if err != nil || resp.StatusCode != 200 {
		t.Errorf("/healthz: %v, %v", resp, err)
	} else {
		resp.Body.Close()
	}
	if v := scrape(t, addr, "lifeboat_grace_budget_left_seconds"); v != 30 {
		t.Errorf("grace budget left before a stop = %v, want the full 30", v)
	}
	tr.signal(syscall.SIGTERM)
	if code := tr.wait(); code != 143 {
		t.Errorf("exit %d, want 143", code)
	}
}

// TestNoticeStopsTheTrainer: a preemption notice from a url: source (a
// real HTTP server on 127.0.0.1) sends --notice-signal to the trainer,
// which saves; lifeboat commits and exits with the preemption code.
func TestNoticeStopsTheTrainer(t *testing.T) {
	var preempt atomic.Bool
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !preempt.Load() {
			w.WriteHeader(http.StatusNoContent)
			return
		}
		fmt.Fprintf(w, `{"deadline": %q}`, time.Now().Add(20*time.Second).UTC().Format(time.RFC3339))
	}))
	defer srv.Close()
	root := t.TempDir()
	url := "file://" + filepath.Join(root, "store")
	tlog := filepath.Join(root, "tlog")
	tr := startTrainer(t, []string{"TRAINER_EVERY=100000"}, "run", "--store", url, "--dir", filepath.Join(root, "pod"),
		"--notices", "url:"+srv.URL, "--termination-log", tlog, "--", "python3", "-u", "testdata/trainer.py", "backup")
	if e := tr.next(t); e.Event != "fresh" {
		t.Fatalf("first event %+v", e)
	}
	preempt.Store(true)
	if e := tr.next(t); e.Event != "terminated" {
		t.Fatalf("after the notice: %+v, want the trainer's TERM handler to run", e)
	}
	if code := tr.wait(); code != 143 {
		t.Errorf("exit %d, want 143", code)
	}
	if latestComplete(lsJSON(t, nil, url)) < 0 {
		t.Errorf("the checkpoint saved on the notice was not committed")
	}
	if b, _ := os.ReadFile(tlog); !strings.Contains(string(b), "url preemption notice") {
		t.Errorf("termination log %q does not name the notice", b)
	}
}

// TestRestoreProgress: `lifeboat restore` logs its progress as plain lines
// when stderr is not a terminal, and draws a bar when it is.
func TestRestoreProgress(t *testing.T) {
	root := t.TempDir()
	url := "file://" + filepath.Join(root, "store")
	src := filepath.Join(root, "src")
	p := start(t, "plain", "sidecar", "--store", url, "--dir", src, "--settle", "1h")
	waitFor(t, p, func() bool { return strings.Contains(p.stderr.String(), "sidecar.started") })
	if err := os.MkdirAll(filepath.Join(src, "step-7"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(src, "step-7", "model.pdparams"), pickleBytes(bytes.Repeat([]byte("abcdefgh"), 4<<20)), 0o644); err != nil {
		t.Fatal(err)
	}
	p.signal(syscall.SIGTERM)
	if code := p.wait(); code != 0 {
		t.Fatalf("sidecar exit %d:\n%s", code, p.stderr.String())
	}

	cmd := exec.Command(lifeboatBin, "restore", "--store", url, "--dir", filepath.Join(root, "plain"), "--progress-interval", "10ms")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("restore: %v\n%s", err, stderr.String())
	}
	if !strings.Contains(stderr.String(), `"msg":"resume.progress","bytes":33554444,"total_bytes":33554444,"percent":100`) {
		t.Errorf("no final progress line with every byte:\n%s", stderr.String())
	}

	master, slave := openPTY(t)
	if err := unix.IoctlSetWinsize(int(slave.Fd()), unix.TIOCSWINSZ, &unix.Winsize{Row: 24, Col: 100}); err != nil {
		t.Fatal(err)
	}
	cmd = exec.Command(lifeboatBin, "restore", "--store", url, "--dir", filepath.Join(root, "tty"), "--log-format", "json")
	cmd.Stderr = slave
	var stdout bytes.Buffer
	cmd.Stdout = &stdout
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	slave.Close()
	var screen bytes.Buffer
	copied := make(chan struct{})
	go func() { _, _ = io.Copy(&screen, master); close(copied) }()
	if err := cmd.Wait(); err != nil {
		t.Fatalf("restore on a terminal: %v", err)
	}
	<-copied
	if !strings.Contains(screen.String(), "restore ") || !strings.Contains(screen.String(), "100 %") {
		t.Errorf("no progress bar on the terminal:\n%q", screen.String())
	}
	if strings.Contains(screen.String(), "resume.progress") {
		t.Errorf("plain progress lines on a terminal")
	}
}
