// Command ranksbench measures how lifeboat's store traffic grows with the
// number of ranks of a job, against one S3 server, and prints Markdown
// tables. bench/ranks.sh starts a local MinIO and runs it.
//
//	ranksbench -work DIR [-ranks 1,8,32,128,512] [-steps 4] [-keep 3]
//
// The ranks run in this one process, each with its own storage/s3 client
// (its own connections), its own checkpoint.Uploader and its own directory:
// 128 lifeboat processes would measure the scheduler of a small machine, not
// the requests, which are the same either way. Every client is wrapped in a
// counting storage.Store, so the request counts are exact; LIST pages are
// the keys each listing returned divided by 1,000 (S3's page), at least one.
//
// For each number of ranks N, in its own prefix:
//  1. -steps commits: every rank writes a -size file (its own bytes, so no
//     chunk is shared) and uploads it as Target{Step, Rank, N}, all ranks at
//     once. Recorded: the time from the start to the last rank's commit,
//     the time from the last rank's commit until checkpoint.Latest returns
//     the step, and each rank's requests during its upload.
//  2. The cost of checkpoint.Latest (restore's "latest") and checkpoint.List
//     (ls) after each step, as steps x ranks grow, and of rank 0's Prune
//     with -keep after each step past -keep, as lifeboat run does.
//  3. Every rank calling Latest at once, and then every rank's
//     RestoreLatest at once, as a job's restore does (its LIST pages and
//     GETs of manifests and completion records, by rank).
//  4. Idle watching: a coord.Coordinator and a coord.Claim per rank for -watch-window at
//     -watch-interval; requests per rank per second, and per interval by kind, the
//     stop watching apart from the claim. -idle-only measures this alone.
//
// Then, once, -latest-ranks ranks x -keep steps are committed (through one
// Uploader) and Latest and List are measured on them; and -prefill-ranks
// ranks commit -steps steps into a prefix pre-filled with -prefill chunks,
// to show what a commit costs whatever the job has stored.
//
// Each size's rows are printed as soon as it is measured (so a run cut
// short shows what it measured), and every table again at the end.
package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"flag"
	"fmt"
	"log"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/lifeboat-project/lifeboat/checkpoint"
	"github.com/lifeboat-project/lifeboat/coord"
	"github.com/lifeboat-project/lifeboat/storage"
	"github.com/lifeboat-project/lifeboat/storage/s3"
)

const ckptFile = "state.bin"

type options struct {
	work          string
	bucket        string
	ranks         []int
	steps, keep   int
	size          int
	watchInterval time.Duration
	watchWindow   time.Duration
	latestRanks   int
	idleOnly      bool
	prefill       int
	prefillRanks  int
}

func main() {
	var o options
	var ranks string
	flag.StringVar(&o.work, "work", "", "scratch directory (required)")
	flag.StringVar(&o.bucket, "bucket", "lifeboat-bench", "bucket, created when missing")
	flag.StringVar(&ranks, "ranks", "1,8,32,128,512", "numbers of ranks, comma-separated")
	flag.IntVar(&o.steps, "steps", 4, "steps committed by every rank")
	flag.IntVar(&o.keep, "keep", 3, "rank 0 prunes to this many steps after each commit")
	flag.IntVar(&o.size, "size", 4096, "bytes of each rank's checkpoint")
	flag.DurationVar(&o.watchInterval, "watch-interval", 500*time.Millisecond, "coord interval while watching")
	flag.DurationVar(&o.watchWindow, "watch-window", 5*time.Second, "how long the ranks watch")
	flag.IntVar(&o.latestRanks, "latest-ranks", 1000, "ranks of the one large Latest measurement (0: none)")
	flag.BoolVar(&o.idleOnly, "idle-only", false, "measure only the idle watching (step 4)")
	flag.IntVar(&o.prefill, "prefill", 100000, "chunks stored beforehand in the prefix of the pre-filled commit measurement (0: none)")
	flag.IntVar(&o.prefillRanks, "prefill-ranks", 32, "ranks of the pre-filled commit measurement")
	flag.Parse()
	for _, f := range strings.Split(ranks, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			log.Fatalf("ranksbench: -ranks %q: %q is not a positive number", ranks, f)
		}
		o.ranks = append(o.ranks, n)
	}
	if o.work == "" || o.steps < 1 || o.keep < 1 {
		log.Fatal("ranksbench: -work is required; -steps and -keep must be at least 1")
	}
	if err := run(context.Background(), o); err != nil {
		log.Fatal(err)
	}
}

// result is what one number of ranks measured.
type result struct {
	n         int
	commit    []time.Duration // per step: start to the last rank's commit
	visible   []time.Duration // per step: last commit to Latest returning the step
	perCommit []counts        // per step: all ranks' upload requests
	minRank   []int64         // per step: fewest requests of one rank
	maxRank   []int64         // per step: most requests of one rank
	latest    []cost          // after each step, and after the last prune
	prune     []cost          // rank 0's prunes
	together  cost            // every rank's Latest at once (summed)
	restore   cost            // every rank's RestoreLatest at once (summed)
	restoreHi int64           // most requests of one rank's RestoreLatest (LIST pages and snapshots/ GETs)
	idle      counts          // all ranks but rank 0, while watching
	idleRank0 counts
	watch     counts // the Coordinators' part of idle (the rest is the claims')
}

// cost is the requests and time of one call.
type cost struct {
	steps      int // steps stored when it ran
	latest     counts
	latestT    time.Duration
	list       counts
	listT      time.Duration
	afterPrune bool
	restore    counts // measureLarge: rank 0's RestoreLatest
}

func newStore(ctx context.Context, bucket, prefix string) (*countingStore, error) {
	st, err := s3.New(ctx, s3.Config{
		Endpoint: os.Getenv("AWS_ENDPOINT_URL"), Bucket: bucket, Prefix: prefix, Region: "us-east-1",
		AccessKey: os.Getenv("AWS_ACCESS_KEY_ID"), SecretKey: os.Getenv("AWS_SECRET_ACCESS_KEY"),
		BucketLookup: s3.LookupPath, CreateBucket: true,
	})
	if err != nil {
		return nil, err
	}
	return newCounting(st), nil
}

// writeCkpt writes rank's checkpoint of step: size bytes of its own.
func writeCkpt(dir string, rank int, step int64, size int) error {
	b := make([]byte, size)
	r := rand.New(rand.NewPCG(uint64(rank), uint64(step)))
	for i := 0; i+8 <= len(b); i += 8 {
		binary.LittleEndian.PutUint64(b[i:], r.Uint64())
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, ckptFile), b, 0o644)
}

func run(ctx context.Context, o options) error {
	stamp := time.Now().UTC().Format("20060102T150405")
	var results []*result
	for _, n := range o.ranks {
		log.Printf("ranksbench: %d ranks", n)
		r, err := measure(ctx, o, n, fmt.Sprintf("ranks-%s/n%05d", stamp, n))
		if err != nil {
			return fmt.Errorf("ranksbench: %d ranks: %w", n, err)
		}
		results = append(results, r)
		fmt.Printf("\n## %d ranks, as measured\n", n)
		report(o, []*result{r}, nil)
	}
	var big *cost
	if o.latestRanks > 0 && !o.idleOnly {
		log.Printf("ranksbench: Latest over %d ranks x %d steps", o.latestRanks, o.keep)
		c, err := measureLarge(ctx, o, fmt.Sprintf("ranks-%s/large%05d", stamp, o.latestRanks))
		if err != nil {
			return fmt.Errorf("ranksbench: %d ranks: %w", o.latestRanks, err)
		}
		big = &c
		fmt.Printf("\n## %d ranks x %d steps (1 Uploader), as measured\n\n", o.latestRanks, o.keep)
		reportLarge(o, c)
	}
	var filled []counts
	if o.prefill > 0 && !o.idleOnly {
		log.Printf("ranksbench: %d ranks commit into a store holding %d chunks", o.prefillRanks, o.prefill)
		var err error
		if filled, err = measurePrefilled(ctx, o, fmt.Sprintf("ranks-%s/filled%05d", stamp, o.prefillRanks)); err != nil {
			return fmt.Errorf("ranksbench: pre-filled store: %w", err)
		}
		fmt.Printf("\n## Commit into a pre-filled store, as measured\n")
		reportPrefilled(o, filled)
	}
	fmt.Printf("\n## Every size\n")
	report(o, results, big)
	if filled != nil {
		reportPrefilled(o, filled)
	}
	return nil
}

// measurePrefilled stores -prefill chunk objects in prefix (1 byte each:
// only their keys are listed), then has -prefill-ranks ranks, each with
// its own client and Uploader, commit -steps steps together; it returns
// the ranks' requests of each step's commit (summed).
func measurePrefilled(ctx context.Context, o options, prefix string) ([]counts, error) {
	raw, err := newStore(ctx, o.bucket, prefix)
	if err != nil {
		return nil, err
	}
	fill := raw.retried()
	keys := make(chan int)
	errs := make(chan error, 64)
	var wg sync.WaitGroup
	for range 64 {
		wg.Go(func() {
			for i := range keys {
				sum := sha256.Sum256(binary.LittleEndian.AppendUint64(nil, uint64(i)))
				h := hex.EncodeToString(sum[:])
				if _, err := fill.Put(ctx, "chunks/"+h[:2]+"/"+h, bytes.NewReader([]byte{0}), 1, storage.PutOptions{}); err != nil {
					select {
					case errs <- err:
					default:
					}
				}
			}
		})
	}
	t := time.Now()
	for i := range o.prefill {
		keys <- i
	}
	close(keys)
	wg.Wait()
	select {
	case err := <-errs:
		return nil, err
	default:
	}
	log.Printf("ranksbench: %d chunks stored in %s", o.prefill, time.Since(t).Round(time.Second))
	n := o.prefillRanks
	stores := make([]*countingStore, n)
	ups := make([]*checkpoint.Uploader, n)
	for r := range n {
		if stores[r], err = newStore(ctx, o.bucket, prefix); err != nil {
			return nil, err
		}
		ups[r] = &checkpoint.Uploader{Store: stores[r].retried(), Workers: 2}
	}
	dir := func(r int) string { return filepath.Join(o.work, prefix, fmt.Sprintf("rank-%05d", r)) }
	var out []counts
	for step := int64(1); step <= int64(o.steps); step++ {
		for r := range n {
			if err := writeCkpt(dir(r), r, step, o.size); err != nil {
				return nil, err
			}
		}
		errs := make([]error, n)
		per := make([]counts, n)
		for r := range n {
			wg.Go(func() {
				before := stores[r].snapshot()
				_, errs[r] = ups[r].Upload(ctx, dir(r), checkpoint.Target{Step: step, Rank: r, WorldSize: n})
				per[r] = stores[r].snapshot().sub(before)
			})
		}
		wg.Wait()
		var sum counts
		for r := range n {
			if errs[r] != nil {
				return nil, errs[r]
			}
			sum = sum.add(per[r])
		}
		out = append(out, sum)
	}
	return out, nil
}

// reportPrefilled prints the requests per rank of each commit into the
// pre-filled store.
func reportPrefilled(o options, steps []counts) {
	n := o.prefillRanks
	fmt.Printf("\n### Commit into a store pre-filled with %d chunks: %d ranks, each with its own Uploader, %d-byte checkpoints; requests per rank per commit\n\n", o.prefill, n, o.size)
	fmt.Println("| step | requests | PUT | GET | HEAD | LIST pages | keys listed |")
	fmt.Println("|---:|---:|---:|---:|---:|---:|---:|")
	for i, c := range steps {
		fmt.Printf("| %d | %s | %s | %s | %s | %s | %s |\n", i+1, per(c.Requests(), n), per(c.Put, n), per(c.Get, n), per(c.Stat, n), per(c.Pages, n), per(c.Keys, n))
	}
}

// reportLarge prints the one large Latest, List and restore measurement.
func reportLarge(o options, c cost) {
	fmt.Printf("Latest over %d ranks x %d steps: %d LIST pages, %d GETs, %s; List: %d LIST pages, %d GETs, %s; rank 0's RestoreLatest: %d LIST pages, %d GETs of manifests and records.\n",
		o.latestRanks, c.steps, c.latest.Pages, c.latest.Get, ms(c.latestT), c.list.Pages, c.list.Get, ms(c.listT), c.restore.Pages, c.restore.SnapGet)
}

func measure(ctx context.Context, o options, n int, prefix string) (*result, error) {
	res := &result{n: n}
	stores := make([]*countingStore, n)
	ups := make([]*checkpoint.Uploader, n)
	for r := range n {
		st, err := newStore(ctx, o.bucket, prefix)
		if err != nil {
			return nil, err
		}
		stores[r] = st
		ups[r] = &checkpoint.Uploader{Store: st.retried(), Workers: 2}
	}
	if o.idleOnly {
		return res, measureIdle(ctx, o, res, stores)
	}
	observer, err := newStore(ctx, o.bucket, prefix)
	if err != nil {
		return nil, err
	}
	dir := func(r int) string { return filepath.Join(o.work, prefix, fmt.Sprintf("rank-%05d", r)) }

	for step := int64(1); step <= int64(o.steps); step++ {
		for r := range n {
			if err := writeCkpt(dir(r), r, step, o.size); err != nil {
				return nil, err
			}
		}
		done := make([]time.Time, n)
		per := make([]counts, n)
		errs := make([]error, n)
		var wg sync.WaitGroup
		start := time.Now()
		for r := range n {
			wg.Go(func() {
				before := stores[r].snapshot()
				_, errs[r] = ups[r].Upload(ctx, dir(r), checkpoint.Target{Step: step, Rank: r, WorldSize: n})
				done[r] = time.Now()
				per[r] = stores[r].snapshot().sub(before)
			})
		}
		wg.Wait()
		for _, err := range errs {
			if err != nil {
				return nil, err
			}
		}
		last := slices.MaxFunc(done, func(a, b time.Time) int { return a.Compare(b) })
		var got int64
		for got != step {
			if got, err = checkpoint.Latest(ctx, observer.retried(), n); err != nil {
				return nil, err
			}
		}
		res.visible = append(res.visible, time.Since(last))
		res.commit = append(res.commit, last.Sub(start))
		var sum counts
		lo, hi := per[0].Requests(), per[0].Requests()
		for _, c := range per {
			sum = sum.add(c)
			lo, hi = min(lo, c.Requests()), max(hi, c.Requests())
		}
		res.perCommit, res.minRank, res.maxRank = append(res.perCommit, sum), append(res.minRank, lo), append(res.maxRank, hi)

		c, err := lookCost(ctx, observer, n)
		if err != nil {
			return nil, err
		}
		res.latest = append(res.latest, c)
		if step > int64(o.keep) {
			before := stores[0].snapshot()
			t := time.Now()
			if _, err := checkpoint.Prune(ctx, stores[0].retried(), checkpoint.PruneOptions{Keep: o.keep}); err != nil {
				return nil, err
			}
			res.prune = append(res.prune, cost{steps: c.steps, latest: stores[0].snapshot().sub(before), latestT: time.Since(t)})
		}
	}
	if len(res.prune) > 0 {
		c, err := lookCost(ctx, observer, n)
		if err != nil {
			return nil, err
		}
		c.afterPrune = true
		res.latest = append(res.latest, c)
	}

	// Every rank's restore asks for the latest step at once.
	var wg sync.WaitGroup
	before := make([]counts, n)
	for r := range n {
		before[r] = stores[r].snapshot()
	}
	errs := make([]error, n)
	t := time.Now()
	for r := range n {
		wg.Go(func() { _, errs[r] = checkpoint.Latest(ctx, stores[r].retried(), n) })
	}
	wg.Wait()
	res.together.latestT = time.Since(t)
	for r := range n {
		if errs[r] != nil {
			return nil, errs[r]
		}
		res.together.latest = res.together.latest.add(stores[r].snapshot().sub(before[r]))
	}

	// Every rank restores the latest step at once, each into its own
	// directory, as a job's restart does.
	for r := range n {
		before[r] = stores[r].snapshot()
	}
	t = time.Now()
	for r := range n {
		wg.Go(func() {
			_, errs[r] = checkpoint.RestoreLatest(ctx, stores[r].retried(), r, filepath.Join(o.work, prefix, fmt.Sprintf("restore-%05d", r)), checkpoint.RestoreOptions{WorldSize: n, Workers: 2})
		})
	}
	wg.Wait()
	res.restore.latestT = time.Since(t)
	for r := range n {
		if errs[r] != nil {
			return nil, errs[r]
		}
		d := stores[r].snapshot().sub(before[r])
		res.restore.latest = res.restore.latest.add(d)
		res.restoreHi = max(res.restoreHi, d.Pages+d.SnapGet)
	}
	return res, measureIdle(ctx, o, res, stores)
}

// measureIdle runs a coord.Coordinator and a coord.Claim per rank for
// -watch-window on the ranks' clients; each Coordinator counts its own
// requests too, apart from the claim's.
func measureIdle(ctx context.Context, o options, res *result, stores []*countingStore) error {
	n := len(stores)
	wctx, cancel := context.WithTimeout(ctx, o.watchWindow)
	defer cancel()
	started := time.Now()
	before := make([]counts, n)
	watch := make([]*countingStore, n)
	for r := range n {
		before[r] = stores[r].snapshot()
		watch[r] = newCounting(stores[r])
	}
	var wg sync.WaitGroup
	for r := range n {
		// As lifeboat wires them: the Coordinator passes its looks at
		// the flag on to the claim.
		cl, err := coord.NewClaim(coord.ClaimConfig{Store: stores[r].retried(), Rank: r, WorldSize: n, Interval: o.watchInterval, Started: started})
		if err != nil {
			return err
		}
		c, err := coord.New(coord.Config{Store: watch[r].retried(), Rank: r, WorldSize: n, Interval: o.watchInterval, Started: started, Claim: cl})
		if err != nil {
			return err
		}
		wg.Go(func() { c.Run(wctx) })
		wg.Go(func() { cl.Start(wctx); cl.Loop(wctx) })
	}
	wg.Wait()
	for r := range n {
		d := stores[r].snapshot().sub(before[r])
		if r == 0 {
			res.idleRank0 = d
		} else {
			res.idle = res.idle.add(d)
			res.watch = res.watch.add(watch[r].snapshot())
		}
	}
	return nil
}

// lookCost measures one Latest and one List.
func lookCost(ctx context.Context, st *countingStore, n int) (cost, error) {
	var c cost
	before := st.snapshot()
	t := time.Now()
	if _, err := checkpoint.Latest(ctx, st.retried(), n); err != nil {
		return c, err
	}
	c.latestT = time.Since(t)
	c.latest = st.snapshot().sub(before)
	before = st.snapshot()
	t = time.Now()
	snaps, err := checkpoint.List(ctx, st.retried())
	if err != nil {
		return c, err
	}
	c.listT = time.Since(t)
	c.list = st.snapshot().sub(before)
	c.steps = len(snaps)
	return c, nil
}

// measureLarge commits -latest-ranks ranks x -keep steps through one
// Uploader (one listing of the chunks) and measures Latest, List and rank
// 0's RestoreLatest on them.
func measureLarge(ctx context.Context, o options, prefix string) (cost, error) {
	st, err := newStore(ctx, o.bucket, prefix)
	if err != nil {
		return cost{}, err
	}
	up := &checkpoint.Uploader{Store: st.retried(), Workers: 1}
	n := o.latestRanks
	type job struct {
		rank int
		step int64
	}
	jobs := make(chan job)
	errs := make(chan error, 32)
	var wg sync.WaitGroup
	for range 32 {
		wg.Go(func() {
			for j := range jobs {
				d := filepath.Join(o.work, prefix, fmt.Sprintf("rank-%05d-step-%d", j.rank, j.step))
				err := writeCkpt(d, j.rank, j.step, 512)
				if err == nil {
					_, err = up.UploadFiles(ctx, d, []string{ckptFile}, checkpoint.Target{Step: j.step, Rank: j.rank, WorldSize: n})
				}
				if err != nil {
					select {
					case errs <- err:
					default:
					}
				}
			}
		})
	}
	for step := int64(1); step <= int64(o.keep); step++ {
		for r := range n {
			jobs <- job{r, step}
		}
	}
	close(jobs)
	wg.Wait()
	select {
	case err := <-errs:
		return cost{}, err
	default:
	}
	c, err := lookCost(ctx, st, n)
	if err != nil {
		return c, err
	}
	before := st.snapshot()
	if _, err := checkpoint.RestoreLatest(ctx, st.retried(), 0, filepath.Join(o.work, prefix, "restore"), checkpoint.RestoreOptions{WorldSize: n}); err != nil {
		return c, err
	}
	c.restore = st.snapshot().sub(before)
	return c, nil
}

func median(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func ms(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond)) }

func per(v int64, n int) string { return strconv.FormatFloat(float64(v)/float64(n), 'f', 2, 64) }

func report(o options, rs []*result, big *cost) {
	if o.idleOnly {
		reportIdle(o, rs)
		return
	}
	fmt.Printf("\n### Commit: every rank uploads a %d-byte checkpoint of the same step (%d steps; medians over steps 2..%d)\n\n", o.size, o.steps, o.steps)
	fmt.Println("| ranks | start to last rank's commit | last commit to Latest = step | requests per rank per commit | PUT | GET | HEAD | LIST pages | keys listed | fewest..most of one rank | vs 1 rank |")
	fmt.Println("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	var base float64
	for _, r := range rs {
		var sum counts
		steps := max(1, len(r.perCommit)-1)
		lo, hi := int64(1<<62), int64(0)
		for i, c := range r.perCommit {
			if i == 0 && len(r.perCommit) > 1 {
				continue
			}
			sum = sum.add(c)
			lo, hi = min(lo, r.minRank[i]), max(hi, r.maxRank[i])
		}
		k := r.n * steps
		req := float64(sum.Requests()) / float64(k)
		if base == 0 {
			base = req
		}
		tail := func(d []time.Duration) []time.Duration {
			if len(d) > 1 {
				return d[1:]
			}
			return d
		}
		fmt.Printf("| %d | %s | %s | %.2f | %s | %s | %s | %s | %s | %d..%d | %.2fx |\n", r.n, ms(median(tail(r.commit))), ms(median(tail(r.visible))),
			req, per(sum.Put, k), per(sum.Get, k), per(sum.Stat, k), per(sum.Pages, k), per(sum.Keys, k), lo, hi, req/base)
	}

	reportIdle(o, rs)

	fmt.Printf("\n### Latest (restore) and List (ls) as steps x ranks grow (rank 0 prunes to --keep %d after each step past it)\n\n", o.keep)
	fmt.Println("| ranks | steps stored | manifests | Latest: LIST pages | GETs | time | List: LIST pages | GETs | time |")
	fmt.Println("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	row := func(n int, c cost, note string) {
		fmt.Printf("| %d | %d%s | %d | %d | %d | %s | %d | %d | %s |\n", n, c.steps, note, c.list.Keys, c.latest.Pages, c.latest.Get, ms(c.latestT),
			c.list.Pages, c.list.Get, ms(c.listT))
	}
	for _, r := range rs {
		for i, c := range r.latest {
			note := ""
			if c.afterPrune {
				note = " (after prune)"
			} else if i >= o.keep {
				note = " (before prune)"
			}
			row(r.n, c, note)
		}
	}
	if big != nil {
		row(o.latestRanks, *big, " (1 Uploader)")
	}

	fmt.Printf("\n### Every rank restores the latest step at once (a job's restore): LIST pages and GETs of manifests and records (snapshots/), chunks not counted\n\n")
	fmt.Println("| ranks | steps stored | all ranks: LIST pages | GETs of manifests and records | wall time | requests per rank | most of one rank | failed requests (tried again) |")
	fmt.Println("|---:|---:|---:|---:|---:|---:|---:|---:|")
	for _, r := range rs {
		c := r.restore.latest
		steps := 0
		if len(r.latest) > 0 {
			steps = r.latest[len(r.latest)-1].steps
		}
		fmt.Printf("| %d | %d | %d | %d | %s | %s | %d | %d |\n", r.n, steps, c.Pages, c.SnapGet, ms(r.restore.latestT), per(c.Pages+c.SnapGet, r.n), r.restoreHi, c.Failed)
	}
	if big != nil {
		fmt.Printf("\nRank 0's restore over %d ranks x %d steps (1 Uploader): %d LIST pages, %d GETs of manifests and records.\n", o.latestRanks, o.keep, big.restore.Pages, big.restore.SnapGet)
	}

	fmt.Printf("\n### Every rank asks for the latest step at once (a job's restore), and rank 0's prune\n\n")
	fmt.Println("| ranks | all ranks' Latest: GETs | LIST pages | wall time | GETs per rank | prune (rank 0): requests | LIST pages | GETs | DELETEs | time |")
	fmt.Println("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	for _, r := range rs {
		t := r.together
		p := cost{}
		if len(r.prune) > 0 {
			p = r.prune[len(r.prune)-1]
		}
		fmt.Printf("| %d | %d | %d | %s | %s | %d | %d | %d | %d | %s |\n", r.n, t.latest.Get, t.latest.Pages, ms(t.latestT), per(t.latest.Get, r.n),
			p.latest.Requests(), p.latest.Pages, p.latest.Get, p.latest.Delete, ms(p.latestT))
	}
}

// reportIdle prints the idle watching's table.
func reportIdle(o options, rs []*result) {
	fmt.Printf("\n### Idle: stop watching and the claim of the rank, one coord.Coordinator and one coord.Claim per rank, %s interval, %s window\n\n", o.watchInterval, o.watchWindow)
	ticks := int(o.watchWindow / o.watchInterval)
	fmt.Printf("Ranks 1..N-1 (rank 0 separately: it also deletes an earlier run's stop records at start). %d intervals in the window; per rank per interval, the stop watching (the Coordinator) apart from the claim.\n\n", ticks)
	fmt.Println("| ranks | requests per rank per second | watching: HEAD per interval | LIST pages per rank in the window | other | claim: PUT per interval | LIST pages per interval | other | rank 0's requests in the window | vs the first size |")
	fmt.Println("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	var ibase float64
	for _, r := range rs {
		others := r.n - 1
		if others == 0 {
			fmt.Printf("| %d | (rank 0 only) %.2f | | | | | | | %d | |\n", r.n, float64(r.idleRank0.Requests())/o.watchWindow.Seconds(), r.idleRank0.Requests())
			continue
		}
		rate := float64(r.idle.Requests()) / float64(others) / o.watchWindow.Seconds()
		if ibase == 0 {
			ibase = rate
		}
		k := others * ticks
		w, cl := r.watch, r.idle.sub(r.watch)
		fmt.Printf("| %d | %.2f | %s | %s | %s | %s | %s | %s | %d | %.2fx |\n", r.n, rate,
			per(w.Stat, k), per(w.Pages, others), per(w.Requests()-w.Stat-w.Pages, k),
			per(cl.Put, k), per(cl.Pages, k), per(cl.Requests()-cl.Put-cl.Pages, k), r.idleRank0.Requests(), rate/ibase)
	}
}
