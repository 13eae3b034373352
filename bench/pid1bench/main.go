// Command pid1bench measures container inits side by side in one run:
// lifeboat in both build flavours (static, and gpu with -lifeboat-gpu),
// tini, dumb-init and catatonit. It prints a Markdown table with each
// figure and its ratio to catatonit's. bench/pid1.sh builds both flavours,
// installs the peers and runs it.
//
// Measurements:
//   - start-up: hyperfine -N of `INIT -- /bin/true`, minus plain /bin/true
//   - forward latency: time from kill(init, TERM) to the child's handler
//     writing a byte to a pipe, p50 and p99 over many runs
//   - reap 1000: as PID 1 of a new PID namespace, time from releasing 1000
//     orphans at once until every one of them has been reaped
//   - idle RSS of the init while its child sleeps
//
// Then the same measurements for one lifeboat binary two ways: as built
// (signals.LinkFlag: asynchronous preemption off, so SIGURG is forwarded)
// and with Go's default back on (GODEBUG=asyncpreemptoff=0, set in the
// init's environment), with the ratio of the two. The two are measured in
// alternation, one run of each in turn, so that a change in the machine's
// load falls on both alike; their start-up is timed here (fork to exit of
// `lifeboat run -- /bin/true`, less plain /bin/true timed in the same
// rounds), since hyperfine has no per-command environment.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// initCmd is one init under test: argv that runs a command after it, with
// env added to an environment without GODEBUG.
type initCmd struct {
	name string
	argv []string
	env  []string
}

// environ is the environment the init runs in.
func (in initCmd) environ() []string {
	var out []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "GODEBUG=") {
			out = append(out, kv)
		}
	}
	return append(out, in.env...)
}

// command is in's argv followed by args, in its environment.
func (in initCmd) command(args ...string) *exec.Cmd {
	cmd := exec.Command(in.argv[0], append(append([]string{}, in.argv[1:]...), args...)...)
	cmd.Env = in.environ()
	return cmd
}

func main() {
	if len(os.Args) > 1 {
		switch os.Args[1] {
		case "child-term":
			childTerm()
			return
		case "orphans":
			n, _ := strconv.Atoi(os.Args[2])
			orphans(n)
			return
		}
	}
	lifeboat := flag.String("lifeboat", "lifeboat", "path of the lifeboat binary (static flavour)")
	lifeboatGPU := flag.String("lifeboat-gpu", "", "path of the lifeboat binary of the gpu flavour (cgo), measured too when given")
	runs := flag.Int("runs", 300, "forward-latency runs per init")
	reapRuns := flag.Int("reap-runs", 5, "reap runs per init")
	flag.Parse()
	self, err := os.Executable()
	check(err)
	lb := []string{*lifeboat, "run", "--log-level", "error", "--"}
	inits := []initCmd{{name: "lifeboat static", argv: lb}}
	if *lifeboatGPU != "" {
		inits = append(inits, initCmd{name: "lifeboat gpu", argv: []string{*lifeboatGPU, "run", "--log-level", "error", "--"}})
	}
	inits = append(inits, []initCmd{
		{name: "tini", argv: []string{"tini", "-s", "--"}},
		{name: "dumb-init", argv: []string{"dumb-init", "--"}},
		{name: "catatonit", argv: []string{"catatonit", "--"}},
	}...)
	rows := map[string]row{}
	startup := hyperfine(inits)
	for _, in := range inits {
		lat := forwardLatency(in, self, *runs)
		rows[in.name] = row{
			startup: startup[in.name],
			p50:     percentile(lat, 50),
			p99:     percentile(lat, 99),
			reap:    reap(in, self, *reapRuns),
			rss:     idleRSS(in),
		}
	}
	base := rows["catatonit"]
	fmt.Printf("| init | start-up overhead (ms) | vs catatonit | TERM->child p50 (ms) | p99 (ms) | vs catatonit (p99) | reap 1000 orphans as PID 1 (ms, median) | vs catatonit | idle RSS (MiB) |\n")
	fmt.Printf("|---|---|---|---|---|---|---|---|---|\n")
	for _, in := range inits {
		r := rows[in.name]
		fmt.Printf("| %s | %.2f | %.2fx | %.3f | %.3f | %.2fx | %.1f | %.2fx | %.1f |\n", in.name,
			r.startup, r.startup/base.startup, r.p50, r.p99, r.p99/base.p99, r.reap, r.reap/base.reap, r.rss)
	}
	fmt.Println()
	preemptionAB([2]initCmd{
		{name: "static, preemption off (as built)", argv: lb},
		{name: "static, preemption on (GODEBUG=asyncpreemptoff=0)", argv: lb, env: []string{"GODEBUG=asyncpreemptoff=0"}},
	}, self, *runs, *reapRuns)
}

type row struct {
	startup, p50, p99, reap, rss float64
}

// preemptionAB measures the two sides in alternation (which one goes first
// alternates too) and prints their table and the ratio off / on.
func preemptionAB(ab [2]initCmd, self string, runs, reapRuns int) {
	var start [3][]float64 // [2]: plain /bin/true
	var lat, reaps [2][]float64
	for i := 0; i < runs; i++ {
		for k := 0; k < 3; k++ {
			if j := (i + k) % 3; j < 2 {
				start[j] = append(start[j], timeRun(ab[j].command("/bin/true")))
			} else {
				start[2] = append(start[2], timeRun(exec.Command("/bin/true")))
			}
		}
		for k := 0; k < 2; k++ {
			j := (i + k) % 2
			lat[j] = append(lat[j], forwardOnce(ab[j], self))
		}
	}
	for i := 0; i < reapRuns; i++ {
		for k := 0; k < 2; k++ {
			j := (i + k) % 2
			reaps[j] = append(reaps[j], reapOnce(ab[j], self))
		}
	}
	var r [2]row
	for j := range ab {
		r[j] = row{
			startup: percentile(start[j], 50) - percentile(start[2], 50),
			p50:     percentile(lat[j], 50),
			p99:     percentile(lat[j], 99),
			reap:    percentile(reaps[j], 50),
			rss:     idleRSS(ab[j]),
		}
	}
	fmt.Printf("| lifeboat, one binary | start-up overhead (ms, median) | TERM->child p50 (ms) | p99 (ms) | reap 1000 orphans as PID 1 (ms, median) | idle RSS (MiB) |\n")
	fmt.Printf("|---|---|---|---|---|---|\n")
	for j, in := range ab {
		fmt.Printf("| %s | %.2f | %.3f | %.3f | %.1f | %.1f |\n", in.name, r[j].startup, r[j].p50, r[j].p99, r[j].reap, r[j].rss)
	}
	off, on := r[0], r[1]
	fmt.Printf("| off / on | %.2fx | %.2fx | %.2fx | %.2fx | %.2fx |\n",
		off.startup/on.startup, off.p50/on.p50, off.p99/on.p99, off.reap/on.reap, off.rss/on.rss)
}

// timeRun runs cmd to its end and returns the ms from its start.
func timeRun(cmd *exec.Cmd) float64 {
	t0 := time.Now()
	check(cmd.Run())
	return float64(time.Since(t0).Microseconds()) / 1000
}

// hyperfine times `INIT /bin/true` for each init and plain /bin/true, and
// returns each init's mean overhead in ms.
func hyperfine(inits []initCmd) map[string]float64 {
	out := filepath.Join(os.TempDir(), fmt.Sprintf("pid1bench-%d.json", os.Getpid()))
	defer os.Remove(out)
	args := []string{"-N", "--warmup", "20", "--runs", "300", "--export-json", out, "--style", "none", "/bin/true"}
	for _, in := range inits {
		args = append(args, strings.Join(append(append([]string{}, in.argv...), "/bin/true"), " "))
	}
	cmd := exec.Command("hyperfine", args...)
	cmd.Stderr = os.Stderr
	check(cmd.Run())
	var res struct {
		Results []struct {
			Mean float64 `json:"mean"`
		} `json:"results"`
	}
	b, err := os.ReadFile(out)
	check(err)
	check(json.Unmarshal(b, &res))
	m := map[string]float64{}
	for i, in := range inits {
		m[in.name] = (res.Results[i+1].Mean - res.Results[0].Mean) * 1000
	}
	return m
}

// forwardLatency measures, runs times, the time from kill(init, TERM) until
// the child's TERM handler has written to the pipe on fd 3.
func forwardLatency(in initCmd, self string, runs int) []float64 {
	var out []float64
	for i := 0; i < runs; i++ {
		out = append(out, forwardOnce(in, self))
	}
	return out
}

// forwardOnce is one run of forwardLatency, in ms.
func forwardOnce(in initCmd, self string) float64 {
	r, w, err := os.Pipe()
	check(err)
	defer r.Close()
	cmd := in.command(self, "child-term")
	cmd.ExtraFiles = []*os.File{w}
	check(cmd.Start())
	w.Close()
	buf := make([]byte, 1)
	_, err = r.Read(buf) // child ready
	check(err)
	t0 := time.Now()
	check(cmd.Process.Signal(syscall.SIGTERM))
	_, err = r.Read(buf)
	check(err)
	ms := float64(time.Since(t0).Microseconds()) / 1000
	_ = cmd.Wait()
	return ms
}

// childTerm writes a byte to fd 3 when ready and another on SIGTERM.
func childTerm() {
	f := os.NewFile(3, "pipe")
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGTERM)
	_, _ = f.Write([]byte("r"))
	<-ch
	_, _ = f.Write([]byte("t"))
}

// reap runs `unshare -fp --mount-proc INIT self orphans 1000` runs times and
// returns the median of what the orphans mode reports.
func reap(in initCmd, self string, runs int) float64 {
	var ms []float64
	for i := 0; i < runs; i++ {
		ms = append(ms, reapOnce(in, self))
	}
	return percentile(ms, 50)
}

// reapOnce is one run of reap, in ms.
func reapOnce(in initCmd, self string) float64 {
	args := append([]string{"--pid", "--fork", "--mount-proc"}, in.argv...)
	args = append(args, self, "orphans", "1000")
	cmd := exec.Command("unshare", args...)
	cmd.Env = in.environ()
	out, err := cmd.Output()
	check(err)
	v, err := strconv.ParseFloat(strings.TrimSpace(string(out)), 64)
	check(err)
	return v
}

// orphans starts n `cat` processes whose stdin is a pipe, through a middle
// process that exits so they are orphaned to PID 1, then closes the pipe so
// they all exit at once, and prints the ms until none of them exists any
// more (PID 1 has reaped them all).
func orphans(n int) {
	if os.Getenv("PID1BENCH_MIDDLE") == "1" {
		in := os.NewFile(3, "r") // one *os.File: each has a finalizer that closes the fd
		for i := 0; i < n; i++ {
			c := exec.Command("cat")
			c.Stdin = in
			check(c.Start())
			fmt.Println(c.Process.Pid)
		}
		return
	}
	r, w, err := os.Pipe()
	check(err)
	mid := exec.Command("/proc/self/exe", "orphans", strconv.Itoa(n))
	mid.Env = append(os.Environ(), "PID1BENCH_MIDDLE=1")
	mid.ExtraFiles = []*os.File{r}
	mid.Stderr = os.Stderr
	out, err := mid.Output()
	check(err)
	r.Close()
	var pids []string
	for _, f := range strings.Fields(string(out)) {
		pids = append(pids, "/proc/"+f)
	}
	t0 := time.Now()
	w.Close()
	for len(pids) > 0 {
		left := pids[:0]
		for _, p := range pids {
			if _, err := os.Stat(p); err == nil {
				left = append(left, p)
			}
		}
		pids = left
		if len(pids) > 0 {
			time.Sleep(100 * time.Microsecond)
		}
	}
	fmt.Printf("%.3f\n", float64(time.Since(t0).Microseconds())/1000)
}

// idleRSS starts INIT -- sleep and reads the init's VmRSS.
func idleRSS(in initCmd) float64 {
	cmd := in.command("sleep", "10")
	check(cmd.Start())
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	time.Sleep(500 * time.Millisecond)
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", cmd.Process.Pid))
	check(err)
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, _ := strconv.ParseFloat(f[1], 64)
			return kb / 1024
		}
	}
	return 0
}

func percentile(v []float64, p float64) float64 {
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	i := int(float64(len(s)-1) * p / 100)
	return s[i]
}

func check(err error) {
	if err != nil {
		_, file, line, _ := runtime.Caller(1)
		fmt.Fprintf(os.Stderr, "pid1bench: %s:%d: %v\n", filepath.Base(file), line, err)
		os.Exit(1)
	}
}
