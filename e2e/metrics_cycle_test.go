package e2e

import (
	"bufio"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/lifeboat-project/lifeboat/internal/testenv"
)

// cycleTrainer is the trainer of TestMetricsThroughACycle. The test drives
// it through files in the control directory (argv[1]) so that each fault
// happens at a chosen moment. Its first run saves steps 10 and 12, then
// starts writing step 15 and is OOM-killed in the middle of it; its second
// run (the restart) saves step 20 on USR1 (the notice) and exits 0 on TERM
// once told to. frozen.pdparams is the same in every step (a frozen
// embedding), so later uploads find it stored.
const cycleTrainer = `
import json, os, pickle, random, signal, sys, time

ctl = sys.argv[1]
root = os.environ["LIFEBOAT_DIR"]
FROZEN = random.Random(1).randbytes(1 << 20)

def emit(**kv):
    print(json.dumps(kv), flush=True)

def wait_for(name):
    while not os.path.exists(os.path.join(ctl, name)):
        time.sleep(0.02)

def save(step):
    d = os.path.join(root, "step-%06d" % step)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "model.pdparams"), "wb") as f:
        pickle.dump(os.urandom(2 << 20), f, protocol=4)
    with open(os.path.join(d, "frozen.pdparams"), "wb") as f:
        pickle.dump(FROZEN, f, protocol=4)
    emit(event="saved", step=step)

with open(os.path.join(ctl, "runs"), "a") as f:
    f.write("run\n")
with open(os.path.join(ctl, "runs")) as f:
    runs = f.read().count("run")

if runs == 1:
    emit(event="fresh")
    wait_for("save10")
    save(10)
    wait_for("save12")
    save(12)
    wait_for("oom")
    d = os.path.join(root, "step-000015")
    os.makedirs(d)
    f = open(os.path.join(d, "model.pdparams"), "wb")
    f.write(pickle.dumps(os.urandom(2 << 20), protocol=4)[: 1 << 20])
    f.flush()
    emit(event="saving", step=15)
    hog = bytearray(512 << 20)  # the OOM killer ends this run here
    emit(event="survived")
    sys.exit(0)

emit(event="resumed", step=int(os.environ.get("LIFEBOAT_RESUME_STEP", "-1")))

def on_notice(*_):
    save(20)

def on_term(*_):
    emit(event="terminated")
    wait_for("exit")
    sys.exit(0)

signal.signal(signal.SIGUSR1, on_notice)
signal.signal(signal.SIGTERM, on_term)
while True:
    time.sleep(0.05)
`

// series is one scrape of /metrics: each sample's name with its labels
// ("lifeboat_preemption_notices_total{source=\"url\"}") to its value.
type series map[string]float64

// scrapeSeries reads every sample /metrics serves, or returns an error.
func scrapeSeries(addr string) (series, error) {
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("/metrics: %s", resp.Status)
	}
	out := series{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			return nil, fmt.Errorf("/metrics: line %q has no value", line)
		}
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			return nil, fmt.Errorf("/metrics: line %q: %v", line, err)
		}
		out[line[:i]] = v
	}
	return out, sc.Err()
}

// documentedSeries lists the lifeboat_* series metrics/doc.go documents.
func documentedSeries(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "metrics", "doc.go"))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, m := range regexp.MustCompile(`(?m)^//\s+(lifeboat_[a-z_]+)`).FindAllStringSubmatch(string(b), -1) {
		out = append(out, m[1])
	}
	if len(out) < 10 {
		t.Fatalf("found only %v documented in metrics/doc.go", out)
	}
	return out
}

// cycle is one run of TestMetricsThroughACycle: lifeboat, its trainer's
// events, the control directory and what each documented series must be.
type cycle struct {
	t       *testing.T
	p       *lb
	addr    string
	ctl     string
	events  chan event
	checked map[string]bool // documented series the test has checked
}

// next returns the trainer's next event.
func (c *cycle) next() event {
	c.t.Helper()
	select {
	case e, ok := <-c.events:
		if !ok {
			c.t.Fatalf("the trainer's output ended; lifeboat stderr:\n%s", tail(c.p.stderr.String()))
		}
		return e
	case <-time.After(hangLimit):
		c.t.Fatalf("no trainer event in %s; lifeboat stderr:\n%s", hangLimit, tail(c.p.stderr.String()))
	}
	return event{}
}

// tell creates the control file name, which the trainer waits for.
func (c *cycle) tell(name string) {
	c.t.Helper()
	if err := os.WriteFile(filepath.Join(c.ctl, name), nil, 0o644); err != nil {
		c.t.Fatal(err)
	}
}

// await scrapes until every condition in want holds (see check) and
// returns that scrape.
func (c *cycle) await(stage string, want map[string]func(float64) bool) series {
	c.t.Helper()
	var s series
	var failed []string
	for deadline := time.Now().Add(hangLimit); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		var err error
		if s, err = scrapeSeries(c.addr); err != nil {
			failed = []string{err.Error()}
		} else if failed = c.check(s, want); len(failed) == 0 {
			return s
		}
		if !c.p.alive() {
			break
		}
	}
	c.t.Fatalf("%s: metrics never showed %s; lifeboat stderr:\n%s", stage, strings.Join(failed, "; "), tail(c.p.stderr.String()))
	return nil
}

// check returns the conditions in want that s does not meet. A key is a
// series with its labels; one ending in "{" is the only series of that
// name, whatever its labels.
func (c *cycle) check(s series, want map[string]func(float64) bool) []string {
	var failed []string
	for key, ok := range want {
		name, _, _ := strings.Cut(key, "{")
		c.checked[name] = true
		v, found := s[key]
		if strings.HasSuffix(key, "{") {
			n := 0
			for k, kv := range s {
				if strings.HasPrefix(k, key) {
					v, found = kv, true
					n++
				}
			}
			if n > 1 {
				failed = append(failed, fmt.Sprintf("%d series named %s", n, name))
				continue
			}
		}
		switch {
		case !found:
			failed = append(failed, key+" absent")
		case !ok(v):
			failed = append(failed, fmt.Sprintf("%s = %v", key, v))
		}
	}
	sort.Strings(failed)
	return failed
}

func eq(want float64) func(float64) bool { return func(v float64) bool { return v == want } }
func above(min float64) func(float64) bool {
	return func(v float64) bool { return v > min }
}
func between(lo, hi float64) func(float64) bool {
	return func(v float64) bool { return v >= lo && v <= hi }
}
func oneOf(want ...float64) func(float64) bool {
	return func(v float64) bool { return slices.Contains(want, v) }
}

// TestMetricsThroughACycle scrapes /metrics through a whole cycle of a pod
// (a commit, a store outage, the trainer OOM-killed in the middle of a save
// and restarted, a preemption notice, the kubelet's SIGTERM) and checks
// that every series metrics/doc.go documents is there at every stage and
// moves as documented: the checkpoint, upload, dedupe and throughput
// series with each commit, retries and failures with the outage, the OOM
// kill, the interrupted save and the restart (reason oom) with the OOM
// kill, the notice (source url) and the grace budget with the notice, and
// the notice source signal with the SIGTERM. lifeboat runs in a memory
// cgroup of its own standing in for the container's limit, so the OOM kill
// is the kernel's. It needs root and the cgroup v1 memory hierarchy.
func TestMetricsThroughACycle(t *testing.T) {
	testenv.RequireRoot(t)
	cgRoot := "/sys/fs/cgroup/memory"
	if _, err := os.Stat(filepath.Join(cgRoot, "memory.limit_in_bytes")); err != nil {
		testenv.Skip(t, "no cgroup v1 memory hierarchy at "+cgRoot)
	}
	if _, err := exec.LookPath("python3"); err != nil {
		t.Fatal("python3 is needed for the trainer; scripts/test.sh installs it")
	}
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	cg := filepath.Join(cgRoot, "lifeboat-metricstest-"+hex.EncodeToString(b))
	if err := os.Mkdir(cg, 0o755); err != nil {
		testenv.Skip(t, "cannot create a memory cgroup: "+err.Error())
	}
	t.Cleanup(func() {
		killCgroup(cg)
		removeCgroup(cg)
	})
	if err := os.WriteFile(filepath.Join(cg, "memory.limit_in_bytes"), []byte("268435456"), 0o644); err != nil {
		t.Fatalf("set the test cgroup's limit: %v", err)
	}

	var preempt atomic.Bool
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !preempt.Load() {
			w.WriteHeader(http.StatusNoContent)
			return
		}
		fmt.Fprintf(w, `{"deadline": %q, "detail": "spot reclaim"}`, time.Now().Add(20*time.Second).UTC().Format(time.RFC3339))
	}))
	defer srv.Close()

	root := t.TempDir()
	ctl, store := filepath.Join(root, "ctl"), filepath.Join(root, "store")
	if err := os.Mkdir(ctl, 0o755); err != nil {
		t.Fatal(err)
	}
	script := filepath.Join(root, "trainer.py")
	if err := os.WriteFile(script, []byte(cycleTrainer), 0o644); err != nil {
		t.Fatal(err)
	}
	c := &cycle{t: t, ctl: ctl, events: make(chan event, 100), checked: map[string]bool{}}
	args := []string{"run", "--store", "file://" + store, "--dir", filepath.Join(root, "pod"),
		"--settle", "100ms", "--scan-interval", "50ms", "--metrics-addr", "127.0.0.1:0",
		"--memory-cgroup", "on", "--memory-reserve", "200MiB",
		"--restart", "on-failure", "--max-restarts", "1", "--restart-backoff", "10ms",
		"--notices", "url:" + srv.URL, "--notice-interval", "100ms", "--notice-signal", "USR1",
		"--termination-log", filepath.Join(root, "tlog"),
		"--", "python3", "-u", script, ctl}
	cmd := exec.Command("sh", append([]string{"-c", `echo $$ > "$0/cgroup.procs" && exec "$@"`, cg, lifeboatBin}, args...)...)
	c.p = &lb{t: t, cmd: cmd, stdout: &syncBuffer{}, stderr: &syncBuffer{}, done: make(chan struct{})}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = c.p.stderr
	t0 := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	c.p.pid = cmd.Process.Pid // sh execs lifeboat
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			var e event
			if json.Unmarshal(sc.Bytes(), &e) == nil {
				c.events <- e
			}
			_, _ = c.p.stdout.Write(append(sc.Bytes(), '\n'))
		}
		close(c.events)
		_ = cmd.Wait()
		c.p.code = cmd.ProcessState.ExitCode()
		close(c.p.done)
	}()
	t.Cleanup(func() {
		if c.p.alive() {
			_ = cmd.Process.Kill()
			killCgroup(cg) // the trainer holds the output pipe open
			<-c.p.done
		}
	})
	c.addr = listenAddr(t, c.p)

	// Every stage checks the whole set: what moved, and that what has no
	// cause to move did not.
	counters := func(retries, failures, interrupted, oom, restartOOM, url, signal float64) map[string]func(float64) bool {
		m := map[string]func(float64) bool{
			"lifeboat_build_info{":                                     eq(1),
			"lifeboat_ready":                                           eq(1),
			"lifeboat_upload_retries_total":                            eq(retries),
			"lifeboat_upload_failures_total":                           eq(failures),
			"lifeboat_checkpoints_interrupted_total":                   eq(interrupted),
			"lifeboat_commits_torn_total":                              eq(0), // no committed file grows here (TestTornCommitMarked)
			"lifeboat_trainer_oom_kills_total":                         eq(oom),
			`lifeboat_trainer_restarts_total{reason="oom"}`:            eq(restartOOM),
			`lifeboat_trainer_restarts_total{reason="signal"}`:         eq(0),
			`lifeboat_trainer_restarts_total{reason="exit_code"}`:      eq(0),
			`lifeboat_trainer_restarts_total{reason="other"}`:          eq(0),
			`lifeboat_preemption_notices_total{source="url"}`:          eq(url),
			`lifeboat_preemption_notices_total{source="signal"}`:       eq(signal),
			`lifeboat_preemption_notices_total{source="aws"}`:          eq(0),
			`lifeboat_preemption_notices_total{source="gcp"}`:          eq(0),
			`lifeboat_preemption_notices_total{source="other"}`:        eq(0),
			`lifeboat_rebalance_recommendations_total{source="aws"}`:   eq(0),
			`lifeboat_rebalance_recommendations_total{source="other"}`: eq(0),
			// A restart in place does not change the resume series: they
			// describe lifeboat's start.
			`lifeboat_resume_step{source="none"}`:             eq(-1),
			`lifeboat_resume_duration_seconds{source="none"}`: between(0, 60),
			// The store was empty at the start: no progress beside it.
			"lifeboat_fresh_start_over_progress": eq(0),
			"go_goroutines":                      above(0),
			"process_resident_memory_bytes":      above(0),
		}
		if retries < 0 {
			m["lifeboat_upload_retries_total"] = above(0)
		}
		if failures < 0 {
			m["lifeboat_upload_failures_total"] = above(0)
		}
		return m
	}
	// sinceStart holds for a time, or an age, within lifeboat's run so far
	// at the moment of the scrape.
	sinceStart := func(v float64) bool { return v >= 0 && v <= time.Since(t0).Seconds()+1 }
	committedSinceStart := func(v float64) bool {
		return v >= float64(t0.Unix()) && v <= float64(time.Now().Unix()+1)
	}
	with := func(m map[string]func(float64) bool, more map[string]func(float64) bool) map[string]func(float64) bool {
		for k, v := range more {
			m[k] = v
		}
		return m
	}
	ratioOK := func(s series) {
		t.Helper()
		up, dd := s["lifeboat_upload_bytes_total"], s["lifeboat_upload_deduped_bytes_total"]
		want := 0.0
		if up+dd > 0 {
			want = dd / (up + dd)
		}
		if got := s["lifeboat_upload_dedupe_ratio"]; math.Abs(got-want) > 1e-9 {
			t.Errorf("lifeboat_upload_dedupe_ratio = %v, want deduped/(uploaded+deduped) = %v", got, want)
		}
	}

	// Stage 0: before any checkpoint.
	if e := c.next(); e.Event != "fresh" {
		t.Fatalf("first trainer event %+v, want fresh", e)
	}
	s := c.await("before any checkpoint", with(counters(0, 0, 0, 0, 0, 0, 0), map[string]func(float64) bool{
		"lifeboat_checkpoint_last_step":                     eq(-1),
		"lifeboat_checkpoint_last_commit_timestamp_seconds": eq(0),
		"lifeboat_checkpoint_age_seconds":                   sinceStart,
		"lifeboat_upload_bytes_total":                       eq(0),
		"lifeboat_upload_deduped_bytes_total":               eq(0),
		"lifeboat_upload_dedupe_ratio":                      eq(0),
		"lifeboat_upload_pending_bytes":                     eq(0),
		"lifeboat_upload_throughput_bytes_per_second":       eq(0),
		"lifeboat_grace_budget_left_seconds":                eq(30), // the whole --grace until a stop begins
	}))
	ageBefore := s["lifeboat_checkpoint_age_seconds"]
	time.Sleep(300 * time.Millisecond)
	c.await("before any checkpoint, later", map[string]func(float64) bool{
		"lifeboat_checkpoint_age_seconds": above(ageBefore), // since start, at scrape time
	})

	// Stage 1: the first commit.
	c.tell("save10")
	if e := c.next(); e.Event != "saved" || e.Step != 10 {
		t.Fatalf("trainer event %+v, want saved 10", e)
	}
	s = c.await("after the first commit", with(counters(0, 0, 0, 0, 0, 0, 0), map[string]func(float64) bool{
		"lifeboat_checkpoint_last_step":                     eq(10),
		"lifeboat_checkpoint_last_commit_timestamp_seconds": committedSinceStart,
		"lifeboat_checkpoint_age_seconds":                   sinceStart,
		"lifeboat_upload_bytes_total":                       above(3 << 20), // a 2 MiB model and a 1 MiB frozen file, pickled
		"lifeboat_upload_deduped_bytes_total":               eq(0),
		"lifeboat_upload_pending_bytes":                     eq(0),
		"lifeboat_upload_throughput_bytes_per_second":       above(0),
		"lifeboat_grace_budget_left_seconds":                eq(30),
	}))
	ratioOK(s)
	committed10, uploaded10 := s["lifeboat_checkpoint_last_commit_timestamp_seconds"], s["lifeboat_upload_bytes_total"]
	time.Sleep(300 * time.Millisecond)
	age := c.await("after the first commit, later", map[string]func(float64) bool{"lifeboat_checkpoint_age_seconds": above(0.3)})
	if got := age["lifeboat_checkpoint_age_seconds"]; got > float64(time.Now().Unix())-committed10+1 {
		t.Errorf("lifeboat_checkpoint_age_seconds = %v, more than the time since the commit", got)
	}

	// Stage 2: the store fails (its chunks/ directory is swapped for a
	// file) while step 12 is uploaded: retries, then a failed upload;
	// step 12 is committed once the store is back.
	chunks, swap := filepath.Join(store, "chunks"), filepath.Join(store, "chunks.swap")
	if err := os.WriteFile(swap, []byte("not a directory"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := unix.Renameat2(unix.AT_FDCWD, swap, unix.AT_FDCWD, chunks, unix.RENAME_EXCHANGE); err != nil {
		t.Fatalf("swap the store's chunks/ for a file: %v", err)
	}
	c.tell("save12")
	if e := c.next(); e.Event != "saved" || e.Step != 12 {
		t.Fatalf("trainer event %+v, want saved 12", e)
	}
	c.await("while the store fails", with(counters(-1, -1, 0, 0, 0, 0, 0), map[string]func(float64) bool{
		"lifeboat_checkpoint_last_step":       eq(10),
		"lifeboat_upload_bytes_total":         eq(uploaded10),
		"lifeboat_upload_deduped_bytes_total": eq(0),
	}))
	if err := unix.Renameat2(unix.AT_FDCWD, swap, unix.AT_FDCWD, chunks, unix.RENAME_EXCHANGE); err != nil {
		t.Fatalf("put the store's chunks/ back: %v", err)
	}
	if err := os.Remove(swap); err != nil {
		t.Fatal(err)
	}
	frozen, err := os.Stat(filepath.Join(root, "pod", "step-000012", "frozen.pdparams"))
	if err != nil {
		t.Fatal(err)
	}
	s = c.await("after the store came back", with(counters(-1, -1, 0, 0, 0, 0, 0), map[string]func(float64) bool{
		"lifeboat_checkpoint_last_step":                     eq(12),
		"lifeboat_checkpoint_last_commit_timestamp_seconds": above(committed10),
		"lifeboat_upload_bytes_total":                       above(uploaded10 + 2<<20),
		// Whether the frozen file (1 MiB, pickled) is found stored depends
		// on whether the attempt that succeeded listed the store while it
		// failed: none of it, or all of it.
		"lifeboat_upload_deduped_bytes_total": oneOf(0, float64(frozen.Size())),
		"lifeboat_upload_pending_bytes":       eq(0),
		"lifeboat_grace_budget_left_seconds":  eq(30),
	}))
	ratioOK(s)
	retries, failures := s["lifeboat_upload_retries_total"], s["lifeboat_upload_failures_total"]
	deduped12 := s["lifeboat_upload_deduped_bytes_total"]

	// Stage 3: the trainer is OOM-killed while it writes step 15; the
	// torn step is never stored, and the restart (reason oom) resumes 12.
	c.tell("oom")
	if e := c.next(); e.Event != "saving" || e.Step != 15 {
		t.Fatalf("trainer event %+v, want saving 15", e)
	}
	if e := c.next(); e.Event != "resumed" || e.Step != 12 {
		t.Fatalf("trainer event %+v after the OOM kill, want resumed 12", e)
	}
	s = c.await("after the OOM kill and the restart", with(counters(retries, failures, 1, 1, 1, 0, 0), map[string]func(float64) bool{
		"lifeboat_checkpoint_last_step":      eq(12),
		"lifeboat_grace_budget_left_seconds": eq(30),
	}))
	if !strings.Contains(c.p.stderr.String(), `"msg":"supervisor.oom_killed"`) {
		t.Errorf("no supervisor.oom_killed event:\n%s", tail(c.p.stderr.String()))
	}

	// Stage 4: a preemption notice (url source, 20 s away) sends USR1; the
	// trainer saves step 20, and the grace budget counts down from the
	// notice's deadline.
	preempt.Store(true)
	if e := c.next(); e.Event != "saved" || e.Step != 20 {
		t.Fatalf("trainer event %+v after the notice, want saved 20", e)
	}
	s = c.await("after the notice", with(counters(retries, failures, 1, 1, 1, 1, 0), map[string]func(float64) bool{
		"lifeboat_checkpoint_last_step":       eq(20),
		"lifeboat_upload_deduped_bytes_total": above(deduped12 + 1<<20 - 1), // the frozen file
		"lifeboat_upload_pending_bytes":       eq(0),
		"lifeboat_grace_budget_left_seconds":  between(0, 20),
	}))
	ratioOK(s)
	left := s["lifeboat_grace_budget_left_seconds"]
	time.Sleep(300 * time.Millisecond)
	c.await("after the notice, later", map[string]func(float64) bool{
		"lifeboat_grace_budget_left_seconds": between(0, left-0.2),
	})
	for _, line := range strings.Split(c.p.stderr.String(), "\n") {
		if strings.Contains(line, `"msg":"supervisor.stopping"`) && !strings.Contains(line, `"delivered":"USR1"`) {
			t.Errorf("the notice's stop does not say it delivered USR1: %s", line)
		}
	}

	// Stage 5: the kubelet's SIGTERM, counted as a notice from source
	// signal; the deadline stays the notice's.
	c.p.signal(syscall.SIGTERM)
	if e := c.next(); e.Event != "terminated" {
		t.Fatalf("trainer event %+v after SIGTERM, want terminated", e)
	}
	s = c.await("after SIGTERM", with(counters(retries, failures, 1, 1, 1, 1, 1), map[string]func(float64) bool{
		"lifeboat_checkpoint_last_step":      eq(20),
		"lifeboat_grace_budget_left_seconds": between(0, left-0.2),
	}))
	c.tell("exit")
	if code := c.p.wait(); code != 143 {
		t.Errorf("exit %d, want 143 (preempted)", code)
	}

	for _, name := range documentedSeries(t) {
		if !c.checked[name] {
			t.Errorf("%s is documented in metrics/doc.go but this test never checks it", name)
		}
	}
}

// killCgroup SIGKILLs every process in the cgroup v1 directory cg and the
// cgroups below it.
func killCgroup(cg string) {
	_ = filepath.WalkDir(cg, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || d.Name() != "cgroup.procs" {
			return nil
		}
		b, _ := os.ReadFile(path)
		for _, f := range strings.Fields(string(b)) {
			if pid, err := strconv.Atoi(f); err == nil && pid > 0 {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
		return nil
	})
}

// removeCgroup removes cg and the cgroups below it, deepest first, once
// their processes have gone.
func removeCgroup(cg string) {
	var dirs []string
	_ = filepath.WalkDir(cg, func(path string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			dirs = append(dirs, path)
		}
		return nil
	})
	for i := len(dirs) - 1; i >= 0; i-- {
		for try := 0; try < 100 && os.Remove(dirs[i]) != nil; try++ {
			time.Sleep(10 * time.Millisecond)
		}
	}
}
