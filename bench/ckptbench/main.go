// Command ckptbench measures lifeboat's checkpoint path against mc on one
// MinIO server, in one run, and prints Markdown tables with medians and
// ratios. bench/checkpoint.sh builds the binaries, starts the server and
// runs it.
//
//	ckptbench -lifeboat PATH -mc PATH -work DIR [-runs 3] [-size 1073741824]
//
// Measurements, each -runs times (the tables show medians):
//  1. SIGTERM to durable: `lifeboat run --store s3://... --dir D -- ckptbench
//     trainer`, whose SIGTERM handler writes a -size checkpoint and exits 0.
//     From kill(lifeboat, SIGTERM) until lifeboat has exited, which it does
//     only after the final upload committed (checked with `lifeboat ls
//     --json`). Minus the trainer's own write time, this is compared with
//     `mc cp` of the same file to the same server.
//  2. Re-upload of an unchanged checkpoint, through checkpoint.Uploader on
//     storage/s3 (what lifeboat runs): the same files as step 1 and step 2;
//     bytes moved and time of the second against the first.
//  3. Verified restore (`lifeboat restore`) into an empty directory against
//     `mc cp` of the same bytes from the server to local disk, with the page
//     cache dropped before each.
//  4. The cost of the format checks: a checkpoint of -size bytes in 64
//     pickle files uploaded through checkpoint.Uploader with the checks on
//     and off (in alternating order, each into a new prefix so nothing is
//     deduplicated), and the checks alone over the same bytes in memory
//     (the upload runs them on the buffers it has read anyway).
//
// Peak RSS comes from /usr/bin/time -v. The server and credentials come from
// AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY; mc finds
// the server as the alias -mc-alias (MC_HOST_<alias>).
//
// `ckptbench trainer ...` is the helper trainer (trainer.go).
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/lifeboat-project/lifeboat/checkpoint"
	"github.com/lifeboat-project/lifeboat/format"
	"github.com/lifeboat-project/lifeboat/storage/s3"
)

// ckptFile is where the trainer saves, relative to --dir: the usual SIGTERM
// handler's paddle.save(..., "backup/latest.pdparams").
const ckptFile = "backup/latest.pdparams"

type options struct {
	lifeboat, mc, alias, work, bucket string
	runs                              int
	size                              int64
	rates                             []float64 // measurement 5: MB/s of the trainer's write, 0 unpaced
	ratesOnly                         bool      // run measurement 5 alone
	before                            string    // measurement 5: another lifeboat binary to time in the same runs
	restoreOnly                       bool      // measurements 1 and 3 only
}

// paced is one run of measurement 5 at one write rate. Times are seconds.
type paced struct {
	rate                      float64 // MB/s, 0: unpaced
	total, write, mcUp, flush float64
	streamed                  int64   // bytes the commit took from the stream (checkpoint.committed's streamed_bytes)
	totalBefore               float64 // SIGTERM to durable with -before's binary, 0 without
}

// round is one run of every measurement. Times are seconds, RSS KiB.
type round struct {
	termTotal, trainerWrite, flush float64 // 1: lifeboat
	termRSS, trainerRSS            int64
	mcUp                           float64 // 1: mc
	mcUpRSS                        int64
	first, second                  float64 // 2
	secondBytes, total             int64
	restore                        float64 // 3: lifeboat (--verify-restore crc32c, the default)
	restoreRSS                     int64
	restoreSHA                     float64 // 3: lifeboat --verify-restore sha256
	restoreSHACPU, restoreSHASrv   float64
	mcDown, mcDownSync             float64 // 3: mc, and mc plus an fsync of the file
	mcDownRSS                      int64
	restoreCPU, restoreServer      float64 // 3: CPU seconds of lifeboat, and of the server meanwhile
	mcDownCPU, mcDownServer        float64 // 3: the same for mc
	checksOn, checksOff, checkOnly float64 // 4: uploads with and without the format checks, the checks alone
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == "trainer" {
		trainer(os.Args[2:])
		return
	}
	var o options
	flag.StringVar(&o.lifeboat, "lifeboat", "lifeboat", "path of the lifeboat binary")
	flag.StringVar(&o.mc, "mc", "mc", "path of the mc binary")
	flag.StringVar(&o.alias, "mc-alias", "ckpt", "mc alias of the server (MC_HOST_<alias>)")
	flag.StringVar(&o.work, "work", "", "scratch directory (required)")
	flag.StringVar(&o.bucket, "bucket", "ckptbench", "bucket to use; created when missing")
	flag.IntVar(&o.runs, "runs", 3, "runs of each measurement")
	flag.Int64Var(&o.size, "size", 1<<30, "checkpoint bytes")
	flag.BoolVar(&o.restoreOnly, "restore-only", false, "measurements 1 (which stores the checkpoint) and 3 only")
	flag.IntVar(&serverPID, "server-pid", 0, "pid of the MinIO server, to report its CPU time during restores and downloads")
	rates := flag.String("rates", "0,300,100", "measurement 5: the trainer's write rates in MB/s, comma-separated; 0 is as fast as it goes; empty skips it")
	flag.BoolVar(&o.ratesOnly, "rates-only", false, "run measurement 5 alone")
	flag.StringVar(&o.before, "before", "", "measurement 5: another lifeboat binary (an earlier version) timed at each rate in the same runs, the order alternating")
	flag.Parse()
	for f := range strings.SplitSeq(*rates, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		r, err := strconv.ParseFloat(f, 64)
		if err != nil || r < 0 {
			fmt.Fprintf(os.Stderr, "ckptbench: -rates: %q is not a rate in MB/s (0 or more)\n", f)
			os.Exit(2)
		}
		o.rates = append(o.rates, r)
	}
	if o.work == "" {
		fmt.Fprintln(os.Stderr, "ckptbench: -work is required")
		os.Exit(2)
	}
	self, err := os.Executable()
	check(err)
	ctx := context.Background()
	// The bucket is created here so that mc finds it too.
	_, err = openStore(ctx, o.bucket, "")
	check(err)

	dropped := dropCaches()
	loadBefore := loadAvg()
	var rounds []round
	var pacedRuns []paced
	for i := range o.runs {
		if !o.ratesOnly {
			r, err := runRound(ctx, o, self, i)
			check(err)
			rounds = append(rounds, r)
		}
		if !o.restoreOnly {
			p, err := pacedRound(o, self, i)
			check(err)
			pacedRuns = append(pacedRuns, p...)
		}
	}
	if !o.ratesOnly {
		printTables(os.Stdout, o, rounds, dropped)
	}
	printPaced(os.Stdout, o, pacedRuns)
	fmt.Printf("Load average (1 min) before / after: %s / %s; other work on the machine shares the cores.\n", loadBefore, loadAvg())
}

// loadAvg is the 1-minute load average.
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	return strings.Fields(string(b))[0]
}

func runRound(ctx context.Context, o options, self string, i int) (round, error) {
	var r round
	dir := filepath.Join(o.work, fmt.Sprintf("run%d", i))
	ckpt := filepath.Join(dir, "ckpt")
	if err := os.MkdirAll(ckpt, 0o755); err != nil {
		return r, err
	}
	defer os.RemoveAll(dir)
	store := fmt.Sprintf("s3://%s/sigterm-%d", o.bucket, i)
	mcObj := fmt.Sprintf("%s/%s/mc-%d/latest.pdparams", o.alias, o.bucket, i)

	// 1. SIGTERM to durable, then mc cp of the same file.
	logf("run %d: lifeboat run, SIGTERM, %d-byte checkpoint", i+1, o.size)
	if err := sigtermToDurable(o, self, i, dir, ckpt, store, 0, &r); err != nil {
		return r, err
	}
	src := filepath.Join(ckpt, filepath.FromSlash(ckptFile))
	logf("run %d: mc cp up", i+1)
	res, err := timed(dir, o.mc, "cp", "--quiet", src, mcObj)
	if err != nil {
		return r, err
	}
	r.mcUp, r.mcUpRSS = res.secs, res.rssKiB

	// 2. The same files uploaded twice through the Go API.
	if !o.restoreOnly {
		if err := reupload(ctx, o, i, ckpt, &r); err != nil {
			return r, err
		}
	}
	return restoreRound(o, i, dir, src, store, mcObj, r)
}

// reupload is measurement 2 of run i.
func reupload(ctx context.Context, o options, i int, ckpt string, r *round) error {
	logf("run %d: re-upload of an unchanged checkpoint", i+1)
	st, err := openStore(ctx, o.bucket, fmt.Sprintf("reupload-%d", i))
	if err != nil {
		return err
	}
	u := &checkpoint.Uploader{Store: st, Producer: "ckptbench"}
	for step, secs := range []*float64{&r.first, &r.second} {
		t0 := time.Now()
		res, err := u.Upload(ctx, ckpt, checkpoint.Target{Step: int64(step + 1), WorldSize: 1})
		if err != nil {
			return err
		}
		*secs = time.Since(t0).Seconds()
		r.secondBytes, r.total = res.UploadedBytes, res.Bytes
	}
	if r.total != o.size {
		return fmt.Errorf("re-upload stored %d bytes, want %d", r.total, o.size)
	}
	return nil
}

// restoreRound is measurement 3 (and 4, unless -restore-only) of run i.
func restoreRound(o options, i int, dir, src, store, mcObj string, r round) (round, error) {
	ctx := context.Background()

	// 3. Restore, against mc cp down; the order alternates between runs.
	restoreDir := filepath.Join(dir, "restore")
	mcDir := filepath.Join(dir, "mc-down")
	lb := func() error {
		dropCaches()
		logf("run %d: lifeboat restore", i+1)
		os.RemoveAll(restoreDir)
		res, err := timed(dir, o.lifeboat, "restore", "--store", store, "--dir", restoreDir, "--log-format", "json")
		if err != nil {
			return err
		}
		r.restore, r.restoreRSS = res.secs, res.rssKiB
		r.restoreCPU, r.restoreServer = res.cpu, res.server
		return sameFile(src, filepath.Join(restoreDir, filepath.FromSlash(ckptFile)))
	}
	lbSHA := func() error {
		dropCaches()
		logf("run %d: lifeboat restore --verify-restore sha256", i+1)
		os.RemoveAll(restoreDir)
		res, err := timed(dir, o.lifeboat, "restore", "--store", store, "--dir", restoreDir, "--log-format", "json", "--verify-restore", "sha256")
		if err != nil {
			return err
		}
		r.restoreSHA, r.restoreSHACPU, r.restoreSHASrv = res.secs, res.cpu, res.server
		return sameFile(src, filepath.Join(restoreDir, filepath.FromSlash(ckptFile)))
	}
	mc := func() error {
		dropCaches()
		logf("run %d: mc cp down", i+1)
		dst := filepath.Join(mcDir, "latest.pdparams")
		res, err := timed(dir, o.mc, "cp", "--quiet", mcObj, dst)
		if err != nil {
			return err
		}
		r.mcDown, r.mcDownRSS = res.secs, res.rssKiB
		r.mcDownCPU, r.mcDownServer = res.cpu, res.server
		sync, err := fsyncFile(dst)
		if err != nil {
			return err
		}
		r.mcDownSync = r.mcDown + sync
		return sameFile(src, dst)
	}
	order := []func() error{lb, lbSHA, mc}
	if i%2 == 1 {
		order = []func() error{mc, lbSHA, lb}
	}
	for _, f := range order {
		if err := f(); err != nil {
			return r, err
		}
	}
	if o.restoreOnly {
		return r, nil
	}
	logf("run %d: format checks on and off, %d bytes in %d files", i+1, o.size, formatFiles)
	return r, formatCost(ctx, o, i, dir, &r)
}

// pacedRound is measurement 5 for run i: at each of o.rates, SIGTERM to
// durable with the trainer writing at that rate, then `mc cp` of the same
// finished file to the same server.
func pacedRound(o options, self string, i int) ([]paced, error) {
	var out []paced
	for k, rate := range o.rates {
		dir := filepath.Join(o.work, fmt.Sprintf("paced%d-%d", i, k))
		ckpt := filepath.Join(dir, "ckpt")
		if err := os.MkdirAll(ckpt, 0o755); err != nil {
			return nil, err
		}
		store := fmt.Sprintf("s3://%s/paced-%d-%d", o.bucket, i, k)
		p := paced{rate: rate}
		lb := func() error {
			logf("run %d: lifeboat run, SIGTERM, %d-byte checkpoint written at %s", i+1, o.size, rateName(rate))
			var r round
			// Another seed than measurement 1's: nothing of it is stored yet.
			if err := sigtermToDurable(o, self, 100+10*i+k, dir, ckpt, store, rate, &r); err != nil {
				return err
			}
			p.total, p.write, p.flush = r.termTotal, r.trainerWrite, r.flush
			p.streamed = streamedBytes(filepath.Join(dir, "lifeboat-run.log"))
			return nil
		}
		before := func() error {
			if o.before == "" {
				return nil
			}
			logf("run %d: the -before binary, the same at %s", i+1, rateName(rate))
			ob := o
			ob.lifeboat = o.before
			d := filepath.Join(dir, "before")
			if err := os.MkdirAll(filepath.Join(d, "ckpt"), 0o755); err != nil {
				return err
			}
			var r round
			if err := sigtermToDurable(ob, self, 200+10*i+k, d, filepath.Join(d, "ckpt"), store+"-before", rate, &r); err != nil {
				return fmt.Errorf("-before: %w", err)
			}
			p.totalBefore = r.termTotal
			return os.RemoveAll(d)
		}
		first, second := lb, before
		if i%2 == 1 {
			first, second = before, lb
		}
		if err := first(); err != nil {
			return nil, err
		}
		if err := second(); err != nil {
			return nil, err
		}
		logf("run %d: mc cp up", i+1)
		src := filepath.Join(ckpt, filepath.FromSlash(ckptFile))
		res, err := timed(dir, o.mc, "cp", "--quiet", src, fmt.Sprintf("%s/%s/paced-mc-%d-%d/latest.pdparams", o.alias, o.bucket, i, k))
		if err != nil {
			return nil, err
		}
		p.mcUp = res.secs
		out = append(out, p)
		// What this rate stored is not needed again: free the server's disk.
		for _, prefix := range []string{fmt.Sprintf("paced-%d-%d", i, k), fmt.Sprintf("paced-%d-%d-before", i, k), fmt.Sprintf("paced-mc-%d-%d", i, k)} {
			if out, err := exec.Command(o.mc, "rm", "--recursive", "--force", "--quiet", fmt.Sprintf("%s/%s/%s", o.alias, o.bucket, prefix)).CombinedOutput(); err != nil {
				logf("mc rm %s: %v: %s", prefix, err, out)
			}
		}
		if err := os.RemoveAll(dir); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func rateName(rate float64) string {
	if rate == 0 {
		return "full speed"
	}
	return fmt.Sprintf("%.0f MB/s", rate)
}

// printPaced prints measurement 5: per rate, the medians of the runs.
func printPaced(w io.Writer, o options, runs []paced) {
	if len(runs) == 0 {
		return
	}
	med := func(rate float64, f func(paced) float64) float64 {
		var v []float64
		for _, p := range runs {
			if p.rate == rate {
				v = append(v, f(p))
			}
		}
		slices.Sort(v)
		if n := len(v); n%2 == 0 {
			return (v[n/2-1] + v[n/2]) / 2
		}
		return v[len(v)/2]
	}
	fmt.Fprintf(w, "\n5. SIGTERM to durable with the trainer's %d-byte save written at a set rate, against the trainer's write and `mc cp` of the finished file in the same run; median of %d runs, seconds.\n\n", o.size, o.runs)
	fmt.Fprintln(w, "| write rate | trainer's write | `mc cp` up | SIGTERM to durable | of which the final flush | / max(write, mc) | aim | met | / (write + mc) | `-before` binary | this / before |")
	fmt.Fprintln(w, "|---|---:|---:|---:|---:|---:|---|---|---:|---:|---:|")
	for _, rate := range o.rates {
		write := med(rate, func(p paced) float64 { return p.write })
		mc := med(rate, func(p paced) float64 { return p.mcUp })
		total := med(rate, func(p paced) float64 { return p.total })
		flush := med(rate, func(p paced) float64 { return p.flush })
		ofMax := med(rate, func(p paced) float64 { return p.total / max(p.write, p.mcUp) })
		ofSum := med(rate, func(p paced) float64 { return p.total / (p.write + p.mcUp) })
		met := "yes"
		if ofMax > 1.15 {
			met = "**no**"
		}
		bef, vs := "", ""
		if o.before != "" {
			bef = fmt.Sprintf("%.2f", med(rate, func(p paced) float64 { return p.totalBefore }))
			vs = fmt.Sprintf("%.2fx", med(rate, func(p paced) float64 { return p.total / p.totalBefore }))
		}
		fmt.Fprintf(w, "| %s | %.2f | %.2f | %.2f | %.2f | %.2fx | <= 1.15x | %s | %.2fx | %s | %s |\n", rateName(rate), write, mc, total, flush, ofMax, met, ofSum, bef, vs)
	}
	fmt.Fprintln(w, "\nEach run (seconds):")
	fmt.Fprintln(w, "\n| run | write rate | write | mc up | total | flush | MiB the commit took from the stream | total, `-before` |")
	fmt.Fprintln(w, "|---|---|---:|---:|---:|---:|---:|---:|")
	for i, p := range runs {
		fmt.Fprintf(w, "| %d | %s | %.2f | %.2f | %.2f | %.2f | %.0f | %.2f |\n", i/len(o.rates)+1, rateName(p.rate), p.write, p.mcUp, p.total, p.flush, float64(p.streamed)/(1<<20), p.totalBefore)
	}
}

// formatFiles is how many pickles measurement 4's checkpoint is made of.
const formatFiles = 64

// formatCost is measurement 4.
func formatCost(ctx context.Context, o options, i int, dir string, r *round) error {
	many := filepath.Join(dir, "many")
	if err := os.MkdirAll(many, 0o755); err != nil {
		return err
	}
	var paths []string
	for k := range formatFiles {
		name := fmt.Sprintf("shard_%02d.pdparams", k)
		f, err := os.Create(filepath.Join(many, name))
		if err != nil {
			return err
		}
		err = writeStateDict(f, o.size/formatFiles, uint64(1000*i+k))
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
		paths = append(paths, name)
	}
	upload := func(skip bool, secs *float64) error {
		st, err := openStore(ctx, o.bucket, fmt.Sprintf("format-%d-%v", i, skip))
		if err != nil {
			return err
		}
		u := &checkpoint.Uploader{Store: st, Producer: "ckptbench", SkipFormatCheck: skip}
		t0 := time.Now()
		if _, err := u.UploadFiles(ctx, many, paths, checkpoint.Target{Step: 1, WorldSize: 1}); err != nil {
			return err
		}
		*secs = time.Since(t0).Seconds()
		return nil
	}
	on, off := func() error { return upload(false, &r.checksOn) }, func() error { return upload(true, &r.checksOff) }
	if i%2 == 1 {
		on, off = off, on
	}
	if err := on(); err != nil {
		return err
	}
	if err := off(); err != nil {
		return err
	}
	// The checks alone, as the upload runs them: over bytes already read
	// (the upload feeds each buffer it read to the check), so the reading
	// is not timed here.
	for _, p := range paths {
		b, err := os.ReadFile(filepath.Join(many, p))
		if err != nil {
			return err
		}
		t0 := time.Now()
		_, st, err := format.Begin(bytes.NewReader(b), int64(len(b)))
		if err != nil {
			return err
		}
		if st == nil {
			r.checkOnly += time.Since(t0).Seconds()
			continue
		}
		for off := 0; off < len(b); off += 8 << 20 {
			_, _ = st.Write(b[off:min(off+8<<20, len(b))])
		}
		err = st.Close()
		r.checkOnly += time.Since(t0).Seconds()
		if err != nil {
			return err
		}
	}
	return nil
}

// sigtermToDurable runs lifeboat with the helper trainer, sends SIGTERM
// once the trainer is ready and times lifeboat until it exits.
func sigtermToDurable(o options, self string, i int, dir, ckpt, store string, rate float64, r *round) error {
	ready := filepath.Join(dir, "ready")
	report := filepath.Join(dir, "trainer.json")
	timeOut := filepath.Join(dir, "time-run.txt")
	logPath := filepath.Join(dir, "lifeboat-run.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		return err
	}
	defer logFile.Close()
	cmd := exec.Command("/usr/bin/time", "-v", "-o", timeOut, o.lifeboat, "run",
		"--store", store, "--dir", ckpt, "--grace", "600s", "--create-bucket", "--log-format", "json", "--",
		self, "trainer", "-out", ckptFile, "-size", strconv.FormatInt(o.size, 10),
		"-seed", strconv.Itoa(i+1), "-ready", ready, "-report", report, "-rate", strconv.FormatFloat(rate*1e6, 'f', -1, 64))
	cmd.Stdout, cmd.Stderr = logFile, logFile
	// Its own group, so that a failure here can kill time and lifeboat.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return err
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	pid, err := waitReady(ready, done, time.Minute)
	if err != nil {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		return fmt.Errorf("%w; lifeboat's log:\n%s", err, tail(logPath))
	}
	t0 := time.Now()
	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
		return fmt.Errorf("SIGTERM lifeboat (pid %d): %w", pid, err)
	}
	werr := <-done
	r.termTotal = time.Since(t0).Seconds()
	var ee *exec.ExitError
	if !errors.As(werr, &ee) || ee.ExitCode() != 143 {
		return fmt.Errorf("lifeboat run exited with %v, want 143; its log:\n%s", werr, tail(logPath))
	}
	tb, err := os.ReadFile(timeOut)
	if err != nil {
		return err
	}
	rss, err := timeField(tb, "Maximum resident set size (kbytes)")
	if err != nil {
		return err
	}
	r.termRSS = int64(rss)
	var tr trainerReport
	b, err := os.ReadFile(report)
	if err != nil {
		return fmt.Errorf("trainer report: %w; lifeboat's log:\n%s", err, tail(logPath))
	}
	if err := json.Unmarshal(b, &tr); err != nil {
		return err
	}
	r.trainerWrite, r.trainerRSS = tr.WriteSeconds, tr.MaxRSSKiB
	r.flush = flushSeconds(logPath)
	return checkCommitted(o, store)
}

// waitReady waits for the trainer's ready file and returns the pid in it
// (lifeboat's). done reports lifeboat exiting first.
func waitReady(path string, done <-chan error, limit time.Duration) (int, error) {
	deadline := time.After(limit)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		if b, err := os.ReadFile(path); err == nil {
			return strconv.Atoi(strings.TrimSpace(string(b)))
		}
		select {
		case err := <-done:
			return 0, fmt.Errorf("lifeboat run exited before the trainer was ready: %v", err)
		case <-deadline:
			return 0, fmt.Errorf("the trainer did not become ready within %s", limit)
		case <-tick.C:
		}
	}
}

// checkCommitted fails unless `lifeboat ls --json` shows exactly one
// complete checkpoint of the expected size.
func checkCommitted(o options, store string) error {
	out, err := exec.Command(o.lifeboat, "ls", "--store", store, "--json").Output()
	if err != nil {
		return fmt.Errorf("lifeboat ls --store %s: %w", store, err)
	}
	var entries []struct {
		Step     int64 `json:"step"`
		Bytes    int64 `json:"bytes"`
		Complete bool  `json:"complete"`
	}
	if err := json.Unmarshal(out, &entries); err != nil {
		return fmt.Errorf("lifeboat ls --json: %w", err)
	}
	if len(entries) != 1 || !entries[0].Complete || entries[0].Bytes != o.size {
		return fmt.Errorf("lifeboat ls --store %s: want one complete checkpoint of %d bytes, got %s", store, o.size, out)
	}
	return nil
}

// streamedBytes reads the streamed_bytes of lifeboat's last
// checkpoint.committed log line: the bytes the final commit took from
// the chunks stored while the trainer wrote; 0 when there is none.
func streamedBytes(logPath string) int64 {
	b, err := os.ReadFile(logPath)
	if err != nil {
		return 0
	}
	var n int64
	for line := range bytes.Lines(b) {
		var ev struct {
			Msg      string `json:"msg"`
			Streamed int64  `json:"streamed_bytes"`
		}
		if json.Unmarshal(line, &ev) == nil && ev.Msg == "checkpoint.committed" {
			n = ev.Streamed
		}
	}
	return n
}

// flushSeconds reads the final upload's duration from lifeboat's
// checkpoint.flushed log line; 0 when there is none.
func flushSeconds(logPath string) float64 {
	b, err := os.ReadFile(logPath)
	if err != nil {
		return 0
	}
	for line := range bytes.Lines(b) {
		var ev struct {
			Msg     string  `json:"msg"`
			Seconds float64 `json:"seconds"`
		}
		if json.Unmarshal(line, &ev) == nil && ev.Msg == "checkpoint.flushed" {
			return ev.Seconds
		}
	}
	return 0
}

type timing struct {
	secs   float64
	rssKiB int64
	cpu    float64 // user + system seconds of the command (time -v)
	server float64 // CPU seconds the server spent meanwhile; 0 without -server-pid
}

// timed runs argv under /usr/bin/time -v, timing the wall clock here.
func timed(dir string, argv ...string) (timing, error) {
	timeOut := filepath.Join(dir, "time.txt")
	var out bytes.Buffer
	cmd := exec.Command("/usr/bin/time", append([]string{"-v", "-o", timeOut}, argv...)...)
	cmd.Stdout, cmd.Stderr = &out, &out
	s0 := serverCPU()
	t0 := time.Now()
	err := cmd.Run()
	secs := time.Since(t0).Seconds()
	if err != nil {
		return timing{}, fmt.Errorf("%s: %w\n%s", strings.Join(argv, " "), err, out.String())
	}
	t := timing{secs: secs, server: serverCPU() - s0}
	b, err := os.ReadFile(timeOut)
	if err != nil {
		return t, err
	}
	rss, err := timeField(b, "Maximum resident set size (kbytes)")
	t.rssKiB = int64(rss)
	user, err2 := timeField(b, "User time (seconds)")
	sys, err3 := timeField(b, "System time (seconds)")
	t.cpu = user + sys
	return t, errors.Join(err, err2, err3)
}

// timeField reads the value of one line of time -v output.
func timeField(out []byte, name string) (float64, error) {
	for line := range strings.Lines(string(out)) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), name+": "); ok {
			return strconv.ParseFloat(strings.TrimSpace(v), 64)
		}
	}
	return 0, fmt.Errorf("time -v output has no %q", name)
}

// serverPID is the MinIO server's pid (-server-pid), 0 when not given.
var serverPID int

// serverCPU returns the user + system CPU seconds the server has used so
// far, from /proc/PID/stat (in USER_HZ, 100 per second on Linux); 0 when
// serverPID is not set or cannot be read.
func serverCPU() float64 {
	if serverPID == 0 {
		return 0
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", serverPID))
	if err != nil {
		return 0
	}
	// Fields after the command name, which is in parentheses: utime and
	// stime are the 14th and 15th fields, the 12th and 13th after ")".
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	if len(f) < 13 {
		return 0
	}
	u, _ := strconv.ParseFloat(f[11], 64)
	st, _ := strconv.ParseFloat(f[12], 64)
	return (u + st) / 100
}

// openStore opens bucket/prefix on the server in the environment, creating
// the bucket when missing.
func openStore(ctx context.Context, bucket, prefix string) (*s3.Store, error) {
	cfg := s3.Config{Bucket: bucket, Prefix: prefix, BucketLookup: s3.LookupPath, CreateBucket: true,
		AccessKey: os.Getenv("AWS_ACCESS_KEY_ID"), SecretKey: os.Getenv("AWS_SECRET_ACCESS_KEY")}
	cfg.FromEnv(os.Getenv)
	if cfg.Region == "" {
		cfg.Region = "us-east-1"
	}
	return s3.New(ctx, cfg)
}

// dropCaches writes back dirty pages and drops the page cache; it reports
// whether the kernel let it.
func dropCaches() bool {
	syscall.Sync()
	return os.WriteFile("/proc/sys/vm/drop_caches", []byte("3\n"), 0o200) == nil
}

// fsyncFile fsyncs path and returns how long that took.
func fsyncFile(path string) (float64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	t0 := time.Now()
	err = f.Sync()
	return time.Since(t0).Seconds(), err
}

// sameFile fails unless a and b have the same bytes.
func sameFile(a, b string) error {
	fa, err := os.Open(a)
	if err != nil {
		return err
	}
	defer fa.Close()
	fb, err := os.Open(b)
	if err != nil {
		return err
	}
	defer fb.Close()
	ba, bb := make([]byte, 1<<20), make([]byte, 1<<20)
	for off := int64(0); ; {
		na, ea := io.ReadFull(fa, ba)
		nb, eb := io.ReadFull(fb, bb)
		if na != nb || !bytes.Equal(ba[:na], bb[:nb]) {
			return fmt.Errorf("%s differs from %s near byte %d", b, a, off)
		}
		off += int64(na)
		if ea == io.EOF || ea == io.ErrUnexpectedEOF {
			return nil
		}
		if ea != nil {
			return ea
		}
		if eb != nil {
			return eb
		}
	}
}

func printTables(w io.Writer, o options, rounds []round, dropped bool) {
	med := func(f func(round) float64) float64 {
		v := make([]float64, 0, len(rounds))
		for _, r := range rounds {
			v = append(v, f(r))
		}
		slices.Sort(v)
		if n := len(v); n%2 == 0 {
			return (v[n/2-1] + v[n/2]) / 2
		}
		return v[len(v)/2]
	}
	maxRSS := func(f func(round) int64) float64 {
		var m int64
		for _, r := range rounds {
			m = max(m, f(r))
		}
		return float64(m) / 1024
	}
	mbs := func(s float64) float64 { return float64(o.size) / s / 1e6 }
	yes := func(ok bool) string {
		if ok {
			return "yes"
		}
		return "**no**"
	}

	total := med(func(r round) float64 { return r.termTotal })
	write := med(func(r round) float64 { return r.trainerWrite })
	upload := med(func(r round) float64 { return r.termTotal - r.trainerWrite })
	flush := med(func(r round) float64 { return r.flush })
	mcUp := med(func(r round) float64 { return r.mcUp })
	first := med(func(r round) float64 { return r.first })
	second := med(func(r round) float64 { return r.second })
	moved := med(func(r round) float64 { return float64(r.secondBytes) })
	restore := med(func(r round) float64 { return r.restore })
	mcDown := med(func(r round) float64 { return r.mcDown })
	mcDownSync := med(func(r round) float64 { return r.mcDownSync })

	upRatio := upload / mcUp
	bytesPct := 100 * moved / float64(o.size)
	timePct := 100 * second / first
	downRatio := mcDown / restore
	restoreSHA := med(func(r round) float64 { return r.restoreSHA })
	shaRatio := mcDown / restoreSHA
	gib := float64(o.size) / (1 << 30)
	mcCPU := med(func(r round) float64 { return r.mcDownCPU })
	fmt.Fprintf(w, "Checkpoint of %d bytes (%.0f MiB), median of %d runs; MB/s is 10^6 bytes per second.\n\n", o.size, float64(o.size)/(1<<20), len(rounds))
	fmt.Fprintln(w, "| measurement | lifeboat | mc | ratio | aim | met |")
	fmt.Fprintln(w, "|---|---:|---:|---:|---|---|")
	fmt.Fprintf(w, "| 1. SIGTERM to durable (lifeboat exits after the commit) | %.2f s | | | | |\n", total)
	fmt.Fprintf(w, "| 1. of which the trainer's own write | %.2f s | | | | |\n", write)
	fmt.Fprintf(w, "| 1. SIGTERM to durable minus the write, vs `mc cp` up | %.2f s (%.0f MB/s) | %.2f s (%.0f MB/s) | %.2fx the time | <= 1.10x | %s |\n",
		upload, mbs(upload), mcUp, mbs(mcUp), upRatio, yes(upRatio <= 1.10))
	fmt.Fprintf(w, "| 1. of which the final flush (lifeboat's `checkpoint.flushed`) | %.2f s (%.0f MB/s) | | | | |\n", flush, mbs(flush))
	if !o.restoreOnly {
		fmt.Fprintf(w, "| 2. first upload (Go API, %d workers, 8 MiB chunks) | %.2f s (%.0f MB/s) | | | | |\n", checkpoint.DefaultUploadWorkers, first, mbs(first))
		fmt.Fprintf(w, "| 2. unchanged re-upload: bytes moved | %.0f of %d (%.2f%%) | | | <= 1%% | %s |\n", moved, o.size, bytesPct, yes(bytesPct <= 1))
		fmt.Fprintf(w, "| 2. unchanged re-upload: time | %.2f s (%.1f%% of the first) | | | <= 10%% | %s |\n", second, timePct, yes(timePct <= 10))
	}
	for _, m := range []struct {
		name      string
		secs, cpu float64
		server    float64
		downRatio float64
		syncRatio float64
	}{
		{"verified restore (crc32c, the default)", restore, med(func(r round) float64 { return r.restoreCPU }), med(func(r round) float64 { return r.restoreServer }), downRatio, mcDownSync / restore},
		{"verified restore, `--verify-restore sha256`", restoreSHA, med(func(r round) float64 { return r.restoreSHACPU }), med(func(r round) float64 { return r.restoreSHASrv }), shaRatio, mcDownSync / restoreSHA},
	} {
		fmt.Fprintf(w, "| 3. %s vs `mc cp` down | %.2f s (%.0f MB/s) | %.2f s (%.0f MB/s) | %.2fx the speed | >= 1.1x | %s |\n",
			m.name, m.secs, mbs(m.secs), mcDown, mbs(mcDown), m.downRatio, yes(m.downRatio >= 1.1))
		fmt.Fprintf(w, "| 3. the same vs `mc cp` down + fsync of the file | %.2f s (%.0f MB/s) | %.2f s (%.0f MB/s) | %.2fx the speed | >= 1.3x | %s |\n",
			m.secs, mbs(m.secs), mcDownSync, mbs(mcDownSync), m.syncRatio, yes(m.syncRatio >= 1.3))
		fmt.Fprintf(w, "| 3. the same: client CPU s per GiB (server CPU s meanwhile) | %.2f (%.2f) | %.2f (%.2f) | | <= mc's | %s |\n",
			m.cpu/gib, m.server, mcCPU/gib, med(func(r round) float64 { return r.mcDownServer }), yes(m.cpu <= mcCPU))
	}
	fmt.Fprintf(w, "| peak RSS, 1 (lifeboat run) / 3 (restore), max of runs | %.0f / %.0f MiB | %.0f / %.0f MiB (up / down) | | | |\n",
		maxRSS(func(r round) int64 { return r.termRSS }), maxRSS(func(r round) int64 { return r.restoreRSS }),
		maxRSS(func(r round) int64 { return r.mcUpRSS }), maxRSS(func(r round) int64 { return r.mcDownRSS }))

	if !o.restoreOnly {
		on := med(func(r round) float64 { return r.checksOn })
		off := med(func(r round) float64 { return r.checksOff })
		alone := med(func(r round) float64 { return r.checkOnly })
		fmt.Fprintf(w, "| 4. upload of %d pickles, format checks on / off (Go API) | %.2f s / %.2f s (%+.1f%%) | | | | |\n",
			formatFiles, on, off, 100*(on-off)/off)
		fmt.Fprintf(w, "| 4. the format checks alone over the same bytes, in 8 MiB buffers as the upload feeds them | %.4f s (%.3f%% of the upload) | | | < 1%% | %s |\n",
			alone, 100*alone/off, yes(alone/off < 0.01))

	}
	fmt.Fprintln(w, "\nEach run (seconds):")
	fmt.Fprintln(w, "\n| run | 1. total | write | total-write | flush | mc up | 2. first | second | moved bytes | 3. restore | sha256 | mc down | mc down+fsync | 4. checks on | off | alone |")
	fmt.Fprintln(w, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	for i, r := range rounds {
		fmt.Fprintf(w, "| %d | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f | %d | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f | %.3f |\n", i+1,
			r.termTotal, r.trainerWrite, r.termTotal-r.trainerWrite, r.flush, r.mcUp, r.first, r.second, r.secondBytes,
			r.restore, r.restoreSHA, r.mcDown, r.mcDownSync, r.checksOn, r.checksOff, r.checkOnly)
	}
	trainerRSS := maxRSS(func(r round) int64 { return r.trainerRSS })
	cache := "dropped before each restore and mc download"
	if !dropped {
		cache = "NOT dropped (no permission to write /proc/sys/vm/drop_caches)"
	}
	fmt.Fprintf(w, "\n%d cores (%s), MinIO on 127.0.0.1 on the same machine; page cache %s; the helper trainer's own peak RSS was %.0f MiB (time -v of lifeboat run reports the largest of lifeboat and its reaped children).\n",
		runtime.NumCPU(), cpuModel(), cache, trainerRSS)
}

func cpuModel() string {
	b, _ := os.ReadFile("/proc/cpuinfo")
	for line := range strings.Lines(string(b)) {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "unknown CPU"
}

func tail(path string) string {
	b, _ := os.ReadFile(path)
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "ckptbench: "+format+"\n", args...)
}

func check(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "ckptbench:", err)
		os.Exit(1)
	}
}
