package e2e

// Multi-rank tests: where a pod's rank comes from, and the job-wide stop:
// four real lifeboats on one MinIO whose trainers step in lockstep through
// a barrier that blocks like a collective.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/lifeboat-project/lifeboat/coord"
)

// rankEvent is one JSON line from testdata/ranks/lockstep.py.
type rankEvent struct {
	Event    string `json:"event"`
	Rank     int    `json:"rank"`
	Step     int64  `json:"step"`
	Target   int64  `json:"target"`
	Verified bool   `json:"verified"`
	LBStep   string `json:"lifeboat_step"`
}

// rankRun is one rank: lifeboat run supervising lockstep.py.
type rankRun struct {
	*lb
	rank int
	mu   sync.Mutex
	evs  []rankEvent
}

func (r *rankRun) events() []rankEvent {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.evs)
}

// last returns the rank's newest event named name, and whether there is one.
func (r *rankRun) last(name string) (rankEvent, bool) {
	evs := r.events()
	for i := len(evs) - 1; i >= 0; i-- {
		if evs[i].Event == name {
			return evs[i], true
		}
	}
	return rankEvent{}, false
}

// startRanks starts world lifeboats on url, each with its own --dir, whose
// trainers meet in barrier.
func startRanks(t *testing.T, url string, env []string, mode, barrier string, world int, extra ...string) []*rankRun {
	t.Helper()
	if _, err := exec.LookPath("python3"); err != nil {
		t.Fatal("python3 is needed for the trainer; scripts/test.sh installs it")
	}
	images, err := filepath.Abs("../images")
	if err != nil {
		t.Fatal(err)
	}
	var ranks []*rankRun
	for i := 0; i < world; i++ {
		args := append([]string{"run", "--store", url, "--dir", t.TempDir(), "--rank", strconv.Itoa(i), "--world-size", strconv.Itoa(world),
			"--scan-interval", "100ms", "--log-format", "json", "--termination-log", filepath.Join(t.TempDir(), "termination-log")}, extra...)
		args = append(args, "--", "python3", "testdata/ranks/lockstep.py", mode)
		cmd := exec.Command(lifeboatBin, args...)
		cmd.Env = append(os.Environ(), env...)
		cmd.Env = append(cmd.Env, "PYTHONPATH="+images, "BARRIER_DIR="+barrier, "PYTHONDONTWRITEBYTECODE=1")
		p := &lb{t: t, cmd: cmd, stdout: &syncBuffer{}, stderr: &syncBuffer{}, done: make(chan struct{})}
		r := &rankRun{lb: p, rank: i}
		cmd.Stdout, cmd.Stderr = &eventWriter{r: r}, p.stderr
		// A trainer that outlives its lifeboat keeps the pipes open: Wait
		// then closes them after WaitDelay, and what the copier had not
		// read yet is lost. Ten seconds is far more than a starved copier
		// needs to drain lifeboat's last lines (supervisor.exit, which the
		// tests assert) on a loaded machine, and only a failing test waits
		// it out (its cleanup kills the trainers).
		cmd.WaitDelay = 10 * time.Second
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		p.pid = cmd.Process.Pid
		go func() {
			_ = cmd.Wait()
			p.code = cmd.ProcessState.ExitCode()
			if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
				p.code = 128 + int(ws.Signal())
			}
			close(p.done)
		}()
		ranks = append(ranks, r)
	}
	t.Cleanup(func() {
		for _, r := range ranks {
			if r.alive() {
				_ = syscall.Kill(r.pid, syscall.SIGKILL)
			}
		}
		// A SIGKILLed lifeboat leaves its trainer behind, spinning in
		// its barrier: stop it too.
		for _, pid := range trainersOf(barrier) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		for _, r := range ranks {
			<-r.done
		}
	})
	return ranks
}

// eventWriter parses the trainer's JSON lines into its rank's events and
// keeps the output.
type eventWriter struct {
	r    *rankRun
	line []byte
}

func (w *eventWriter) Write(b []byte) (int, error) {
	_, _ = w.r.stdout.Write(b)
	w.line = append(w.line, b...)
	for {
		i := bytes.IndexByte(w.line, '\n')
		if i < 0 {
			return len(b), nil
		}
		var e rankEvent
		if json.Unmarshal(w.line[:i], &e) == nil {
			w.r.mu.Lock()
			w.r.evs = append(w.r.evs, e)
			w.r.mu.Unlock()
		}
		w.line = w.line[i+1:]
	}
}

// trainersOf returns the pids of the lockstep trainers meeting in barrier.
func trainersOf(barrier string) []int {
	var out []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmdline, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		environ, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "environ"))
		if bytes.Contains(cmdline, []byte("testdata/ranks/lockstep.py")) && bytes.Contains(environ, []byte("\x00BARRIER_DIR="+barrier+"\x00")) {
			out = append(out, pid)
		}
	}
	return out
}

// waitRanks waits until every rank satisfies cond, failing after hangLimit
// or when a rank exits first.
func waitRanks(t *testing.T, ranks []*rankRun, what string, cond func(r *rankRun) bool) {
	t.Helper()
	for deadline := time.Now().Add(hangLimit); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		all := true
		for _, r := range ranks {
			if !cond(r) {
				all = false
				if !r.alive() {
					t.Fatalf("rank %d exited (%d) before %s; stderr:\n%s", r.rank, r.code, what, tail(r.stderr.String()))
				}
			}
		}
		if all {
			return
		}
	}
	for _, r := range ranks {
		t.Logf("rank %d stderr:\n%s", r.rank, tail(r.stderr.String()))
	}
	t.Fatalf("not every rank %s within %s", what, hangLimit)
}

// reachedStep is a waitRanks condition: the rank has finished step n.
func reachedStep(n int64) func(r *rankRun) bool {
	return func(r *rankRun) bool {
		e, ok := r.last("step")
		return ok && e.Step >= n
	}
}

// waitStopped waits until every rank has exited. Its bound, grace and
// hangLimit more, only tells a hang: how late a rank sees the stop and
// exits after its deadline is the scheduler's choice, so when each rank
// was stopped is asserted from lifeboat's own decisions (stoppedByGrace),
// never from the test's clock.
func waitStopped(t *testing.T, ranks []*rankRun, grace time.Duration) {
	t.Helper()
	limit := time.After(grace + hangLimit)
	for _, r := range ranks {
		select {
		case <-r.done:
		case <-limit:
			for _, r := range ranks {
				t.Logf("rank %d (alive %v) stderr:\n%s", r.rank, r.alive(), tail(r.stderr.String()))
			}
			t.Fatalf("rank %d did not exit within %s after the stop (its grace and %s more): a rank blocked in a collective must be stopped at its grace deadline",
				r.rank, grace+hangLimit, hangLimit)
		}
	}
}

// graceStop is what a rank's lifeboat logged of how its trainer ended.
type graceStop struct {
	deadline string // the end of its grace budget (supervisor.stopping)
	expired  bool   // lifeboat SIGKILLed the trainer's tree at that deadline
	trainer  string // how the trainer ended (supervisor.child_exited)
}

// stoppedByGrace checks, from the rank's own log, that its stop ran on
// its grace budget: one supervisor.stopping whose budget is grace, and,
// when the trainer did not exit by itself, a SIGKILL that was lifeboat's
// decision at that stop's deadline (supervisor.grace_expired naming the
// same deadline and the whole grace, then supervisor.killed). The kill
// time is lifeboat's timer, not the test's clock: the verdict is the same
// however late a loaded machine runs it.
func stoppedByGrace(t *testing.T, r *rankRun, grace time.Duration) graceStop {
	t.Helper()
	stderr := r.stderr.String()
	var g graceStop
	stops := logLines(stderr, "supervisor.stopping")
	if len(stops) != 1 {
		t.Errorf("rank %d logged supervisor.stopping %d times, want once; stderr:\n%s", r.rank, len(stops), tail(stderr))
		return g
	}
	// "grace 10s = trainer 9s + ...", or "grace 10s, all of it for the
	// final upload" once the trainer's tree is gone.
	if f := strings.Fields(fmt.Sprint(stops[0]["budget"])); len(f) < 2 || f[0] != "grace" || strings.TrimSuffix(f[1], ",") != grace.String() {
		t.Errorf("rank %d stopped with budget %q, want its grace of %s; stderr:\n%s", r.rank, stops[0]["budget"], grace, tail(stderr))
	}
	g.deadline = fmt.Sprint(stops[0]["deadline"])
	if exp := logLines(stderr, "supervisor.grace_expired"); len(exp) > 0 {
		g.expired = len(exp) == 1 && exp[0]["deadline"] == g.deadline && exp[0]["grace"] == grace.String() &&
			len(logLines(stderr, "supervisor.killed")) == 1
		if !g.expired {
			t.Errorf("rank %d logged supervisor.grace_expired %v, want one at its stop's deadline %s (grace %s), then supervisor.killed; stderr:\n%s",
				r.rank, exp, g.deadline, grace, tail(stderr))
		}
	}
	if ex := logLines(stderr, "supervisor.child_exited"); len(ex) == 1 {
		g.trainer = fmt.Sprint(ex[0]["status"])
	} else {
		t.Errorf("rank %d logged supervisor.child_exited %d times, want once; stderr:\n%s", r.rank, len(ex), tail(stderr))
	}
	return g
}

// logTime is the time of the first of lifeboat's log lines msg, zero
// when there is none.
func logTime(stderr, msg string) time.Time {
	for _, rec := range logLines(stderr, msg) {
		s, _ := rec["time"].(string)
		if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
			return t
		}
	}
	return time.Time{}
}

// jsonLogHas reports whether one of lifeboat's JSON log lines is the event
// msg with every key of want (compared as printed).
func jsonLogHas(stderr, msg string, want map[string]string) bool {
	for _, rec := range logRecords(stderr) {
		if rec["msg"] != msg {
			continue
		}
		ok := true
		for k, v := range want {
			if fmt.Sprint(rec[k]) != v {
				ok = false
			}
		}
		if ok {
			return true
		}
	}
	return false
}

// barrierStep is the step rank has reached in the barrier.
func barrierStep(barrier string, rank int) int64 {
	b, _ := os.ReadFile(filepath.Join(barrier, "rank-"+strconv.Itoa(rank)))
	n, _ := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	return n
}

// TestJobWideStop: four real lifeboats on one MinIO, whose trainers step
// in lockstep through a barrier that blocks like a collective. Rank 1 is
// slower than its peers: they wait for it in the next step's collective
// when SIGTERM reaches rank 1, and rank 1 only. Every rank stops on its
// own grace budget, all four exit 143 as a preemption, and the next four
// resume one and the same step: the newest step complete for all ranks.
//
// With a SIGTERM handler (handler), rank 1 saves and exits, and the others
// cannot handle the stop while they wait in the collective: lifeboat
// SIGKILLs them at their deadline, as they would be after NCCL's timeout
// without the job-wide stop. With lifeboat.stop_step (stopstep), rank 1
// asks for the step to save; the others cannot ask while they wait for it,
// so after a quarter of the grace the step is the one after rank 1's:
// rank 1 trains it, which releases the others, and every rank saves that
// step and exits before its deadline; the next round resumes exactly it.
// The next round is not stopped by the stop records the first left.
//
// When a rank was stopped is read from lifeboat's log (its deadline, and
// whether it SIGKILLed at it), never from the test's clock; the waits are
// bounded against hangs only.
func TestJobWideStop(t *testing.T) {
	const world = 4
	for _, tc := range []struct {
		mode  string
		grace time.Duration
	}{
		// The SIGKILL at the deadline is lifeboat's own decision, whenever
		// its timer runs: nothing here depends on the grace's length.
		{"handler", 10 * time.Second},
		// Here the trainers must beat their deadlines, so the grace is a
		// margin: every other rank must see rank 1's stop within a
		// quarter of it (the agreed step is decided then; a rank that
		// sees the stop later trains past that step and is SIGKILLed), and
		// every rank must save the agreed step and exit, and lifeboat
		// upload it, within the rest. On an idle machine that takes well
		// under a second; a store request that a loaded machine stalls
		// is given up after 2s and retried. 40s (10s to see the stop, 29s
		// more to save, exit and upload) cannot run out short of a hang,
		// and costs the test 7.5s over a grace of 10s.
		{"stopstep", 40 * time.Second},
	} {
		mode, grace := tc.mode, tc.grace
		t.Run(mode, func(t *testing.T) {
			sk := storeKinds()[1]
			url, env := sk.url(t), sk.env(t)
			env = append(env, "LIFEBOAT_COORD_INTERVAL=200ms", "STEP_SECONDS=0.1", "SAVE_EVERY=5")
			barrier := t.TempDir()
			ranks := startRanks(t, url, env, mode, barrier, world, "--grace", grace.String())
			waitRanks(t, ranks, "reached step 12", reachedStep(12))

			// Rank 1 falls behind; the others wait for it in the next
			// step's collective.
			if err := os.WriteFile(filepath.Join(barrier, "hold-rank-1"), nil, 0o644); err != nil {
				t.Fatal(err)
			}
			waitRanks(t, ranks[1:2], "held", func(r *rankRun) bool { _, ok := r.last("held"); return ok })
			held, _ := ranks[1].last("held")
			waitRanks(t, ranks, "entered the collective rank 1 is late for", func(r *rankRun) bool {
				return r.rank == 1 || barrierStep(barrier, r.rank) == held.Step+1
			})
			ranks[1].signal(syscall.SIGTERM)
			waitStopped(t, ranks, grace)
			written := logLines(ranks[1].stderr.String(), "coord.stop_written")
			if len(written) != 1 {
				t.Fatalf("rank 1 logged coord.stop_written %v, want once; stderr:\n%s", written, tail(ranks[1].stderr.String()))
			}
			stopID := fmt.Sprint(written[0]["stop_id"])
			for _, r := range ranks {
				stderr := r.stderr.String()
				if r.code != 143 {
					t.Errorf("rank %d exited %d, want 143 (a preemption: the Job retries the whole gang); stderr:\n%s", r.rank, r.code, tail(stderr))
				}
				if ex := logLines(stderr, "supervisor.exit"); len(ex) != 1 || ex[0]["code"] != float64(r.code) {
					t.Errorf("rank %d exited %d, but logged supervisor.exit %v (the last line must give the real code)", r.rank, r.code, ex)
				}
				g := stoppedByGrace(t, r, grace)
				// Rank 1's trainer saves when it handles the stop; in
				// stopstep every trainer saves the agreed step and exits
				// before its deadline.
				if (r.rank == 1 || mode == "stopstep") && (g.expired || g.trainer != "trainer exited with code 0") {
					t.Errorf("rank %d: trainer ended %q, SIGKILLed at the deadline %v; want it to save and exit 0 before its deadline; stderr:\n%s",
						r.rank, g.trainer, g.expired, tail(stderr))
				}
				if r.rank == 1 {
					if !jsonLogHas(stderr, "coord.stop_written", map[string]string{"rank": "1", "reason": "SIGTERM", "deadline": g.deadline}) {
						t.Errorf("rank 1 did not log coord.stop_written with reason SIGTERM and its deadline %s; stderr:\n%s", g.deadline, tail(stderr))
					}
					continue
				}
				// A record the store does not return within the request
				// timeout is followed by its name alone (the package doc),
				// and the failure logged.
				reason := "SIGTERM"
				if jsonLogHas(stderr, "coord.store_failed", map[string]string{"op": "read stop"}) {
					reason = "unknown (the stop record could not be read)"
				}
				if !jsonLogHas(stderr, "coord.stop_seen", map[string]string{"stop_id": stopID, "from_rank": "1", "reason": reason}) {
					t.Errorf("rank %d did not log coord.stop_seen of rank 1's stop %s (reason %s); stderr:\n%s", r.rank, stopID, reason, tail(stderr))
				}
				preemption := len(logLines(stderr, "coord.exit_as_preemption")) == 1
				if mode == "handler" && (!g.expired || g.trainer != "trainer killed by SIGKILL" || !preemption) {
					t.Errorf("rank %d, blocked in the collective: trainer ended %q, SIGKILLed at its deadline %v, exit as a preemption %v; want all three; stderr:\n%s",
						r.rank, g.trainer, g.expired, preemption, tail(stderr))
				}
				if mode == "stopstep" && preemption {
					t.Errorf("rank %d exited as a preemption although stop_step released it; stderr:\n%s", r.rank, tail(stderr))
				}
			}
			latest := latestComplete(lsJSON(t, sk.env(t), url))
			if latest < 5 {
				t.Fatalf("newest complete step %d after the stop, want at least 5", latest)
			}
			if mode == "stopstep" {
				for _, r := range ranks {
					e, ok := r.last("stop_step")
					s, stopped := r.last("stopped")
					if !ok || !stopped {
						t.Fatalf("rank %d: stop_step event %v, stopped event %v; events: %v", r.rank, ok, stopped, r.events())
					}
					if e.Target != held.Step+1 || s.Step != held.Step+1 {
						t.Errorf("rank %d: stop_step returned %d and it stopped after step %d, want %d (rank 1 asked at %d; the others could not ask) on every rank",
							r.rank, e.Target, s.Step, held.Step+1, held.Step)
					}
				}
				if latest != held.Step+1 {
					t.Errorf("newest complete step %d, want the agreed step %d", latest, held.Step+1)
				}
			}

			// The next round: new pods with empty directories, and the
			// first round's stop records still in the store. A new
			// container starts at least a second after the old one's
			// stop began (the kubelet notices its exit by a relist every
			// second), well past the clock skew allowed. The second is
			// counted from rank 1's log line after it stored its record
			// (the record is stamped before), on the clock the new
			// lifeboats read their start from: a slow machine only
			// makes it longer.
			time.Sleep(time.Until(logTime(ranks[1].stderr.String(), "coord.stop_written").Add(time.Second)))
			const nextGrace = 3 * time.Second
			next := startRanks(t, url, env, mode, t.TempDir(), world, "--grace", nextGrace.String())
			waitRanks(t, next, "resumed", func(r *rankRun) bool { _, ok := r.last("resumed"); return ok })
			for _, r := range next {
				e, _ := r.last("resumed")
				if e.Step != latest || e.LBStep != strconv.FormatInt(latest, 10) || !e.Verified {
					t.Errorf("rank %d resumed step %d (LIFEBOAT_RESUME_STEP %q, verified %v), want %d on every rank", r.rank, e.Step, e.LBStep, e.Verified, latest)
				}
			}
			waitRanks(t, next, "trained past the resumed step", reachedStep(latest+10))
			for _, r := range next {
				if strings.Contains(r.stderr.String(), "coord.stop_seen") {
					t.Errorf("rank %d of the next round saw a stop; stderr:\n%s", r.rank, tail(r.stderr.String()))
				}
			}
			for _, r := range next {
				r.signal(syscall.SIGTERM)
			}
			waitStopped(t, next, nextGrace)
			for _, r := range next {
				stoppedByGrace(t, r, nextGrace)
				if r.code != 143 {
					t.Errorf("rank %d of the next round exited %d, want 143; stderr:\n%s", r.rank, r.code, tail(r.stderr.String()))
				}
			}
		})
	}
}

// TestStaleStopRecord: a stop record an earlier run left in the store,
// written before the new processes started, does not stop the new run,
// while a stop in the new run still goes job-wide.
func TestStaleStopRecord(t *testing.T) {
	const world, grace = 2, 5 * time.Second
	sk := storeKinds()[1]
	url, env := sk.url(t), sk.env(t)
	env = append(env, "LIFEBOAT_COORD_INTERVAL=200ms", "STEP_SECONDS=0.1", "SAVE_EVERY=5")
	for _, kv := range sk.env(t) {
		k, v, _ := strings.Cut(kv, "=")
		t.Setenv(k, v)
	}
	st := openCrashStore(t, url)
	old, err := coord.Write(context.Background(), st, coord.Stop{Rank: 1, Host: "old-pod", Reason: "SIGTERM", Written: time.Now(), Deadline: time.Now().Add(30 * time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	// The earlier run's processes stop and exit, and the new ones start:
	// a second after the record's stamp by the clock the new lifeboats
	// read their start from, far past the clock skew allowed, and only
	// more on a slow machine.
	time.Sleep(time.Until(old.Written.Add(time.Second)))
	barrier := t.TempDir()
	ranks := startRanks(t, url, env, "handler", barrier, world, "--grace", grace.String())
	waitRanks(t, ranks, "reached step 15 (seven intervals)", reachedStep(15))
	for _, r := range ranks {
		if strings.Contains(r.stderr.String(), "coord.stop_seen") {
			t.Fatalf("rank %d was stopped by the earlier run's record %s; stderr:\n%s", r.rank, old.ID, tail(r.stderr.String()))
		}
	}
	ranks[0].signal(syscall.SIGTERM)
	waitStopped(t, ranks, grace)
	for _, r := range ranks {
		stoppedByGrace(t, r, grace)
		if r.code != 143 {
			t.Errorf("rank %d exited %d, want 143; stderr:\n%s", r.rank, r.code, tail(r.stderr.String()))
		}
	}
	if !jsonLogHas(ranks[1].stderr.String(), "coord.stop_seen", map[string]string{"from_rank": "0"}) {
		t.Errorf("rank 1 did not follow rank 0's stop; stderr:\n%s", tail(ranks[1].stderr.String()))
	}
}

// TestCoordFlag: --coord-interval and its variable refuse what is not a
// duration of 0 or more, and the trainer learns of the stop file only
// when the job-wide stop is on (a store, several ranks, an interval).
func TestCoordFlag(t *testing.T) {
	for _, tc := range []struct {
		args []string
		env  string
		want string
	}{
		{args: []string{"--coord-interval", "-1s"}, want: "--coord-interval (LIFEBOAT_COORD_INTERVAL) must be a duration such as 2s, or 0"},
		{env: "LIFEBOAT_COORD_INTERVAL=often", want: `LIFEBOAT_COORD_INTERVAL="often"`},
	} {
		cmd := exec.Command(lifeboatBin, append(append([]string{"run"}, tc.args...), "--", "true")...)
		cmd.Env = append(os.Environ(), tc.env)
		out, err := cmd.CombinedOutput()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 2 || !strings.Contains(string(out), tc.want) {
			t.Errorf("%v %s: %v, output:\n%s\nwant exit 2 and %q", tc.args, tc.env, err, out, tc.want)
		}
	}
	for _, tc := range []struct {
		args []string
		want bool
	}{
		{[]string{"--world-size", "2", "--rank", "1"}, true},
		{[]string{"--world-size", "2", "--rank", "1", "--coord-interval", "0"}, false},
		{[]string{"--world-size", "1"}, false},
	} {
		dir, out := t.TempDir(), filepath.Join(t.TempDir(), "env")
		args := append([]string{"run", "--store", "file://" + t.TempDir(), "--dir", dir}, tc.args...)
		args = append(args, "--", "sh", "-c", `echo "$LIFEBOAT_STOP_FILE" > `+out)
		if b, err := exec.Command(lifeboatBin, args...).CombinedOutput(); err != nil {
			t.Fatalf("%v: %v\n%s", tc.args, err, b)
		}
		b, _ := os.ReadFile(out)
		got := strings.TrimSpace(string(b))
		if want := filepath.Join(dir, ".lifeboat-stop.json"); tc.want && got != want || !tc.want && got != "" {
			t.Errorf("%v: LIFEBOAT_STOP_FILE=%q, want it set: %v", tc.args, got, tc.want)
		}
	}
}

// TestStopRecordOutlivesAQuickExit: a trainer without a SIGTERM handler
// dies at once, and its lifeboat has nothing left to upload; the stop
// record is still stored before lifeboat exits, so the other rank stops.
func TestStopRecordOutlivesAQuickExit(t *testing.T) {
	sk := storeKinds()[1]
	url, env := sk.url(t), sk.env(t)
	var ps []*lb
	for i := range 2 {
		p := startEnv(t, "plain", append(env, "LIFEBOAT_COORD_INTERVAL=200ms"), "run", "--store", url, "--dir", t.TempDir(),
			"--rank", strconv.Itoa(i), "--world-size", "2", "--grace", "5s", "--log-format", "json", "--", "sleep", "1000")
		ps = append(ps, p)
	}
	for _, p := range ps {
		waitLog(t, p, `"msg":"supervisor.started"`)
		// A lifeboat that fails the test is SIGKILLed, and its trainer
		// would keep the test's pipes open.
		for _, rec := range logRecords(p.stderr.String()) {
			if pid, ok := rec["pid"].(float64); ok && rec["msg"] == "supervisor.started" {
				t.Cleanup(func() { _ = syscall.Kill(int(pid), syscall.SIGKILL) })
			}
		}
	}
	start := time.Now()
	ps[0].signal(syscall.SIGTERM)
	for i, p := range ps {
		select {
		case <-p.done:
		case <-time.After(time.Until(start.Add(hangLimit))): // a rank that never saw the record never stops
			t.Fatalf("rank %d did not stop; stderr:\n%s", i, tail(p.stderr.String()))
		}
		if p.code != 143 {
			t.Errorf("rank %d exited %d, want 143; stderr:\n%s", i, p.code, tail(p.stderr.String()))
		}
	}
}
