package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strconv"
	"time"

	"github.com/lifeboat-project/lifeboat/checkpoint"
	"github.com/lifeboat-project/lifeboat/resume"
	"github.com/lifeboat-project/lifeboat/supervisor"
)

// restoreOptions are the flags of `lifeboat restore`, the init-container
// form of resume.
type restoreOptions struct {
	common       commonOptions
	store        storeOptions
	ranks        rankOptions
	dir          string
	restoreRanks string // --restore-ranks: own or all
	step         int64
	workers      int
	interval     time.Duration
	kube         kubeOptions
}

func restoreCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	o := &restoreOptions{}
	fs := newFlagSet("restore", stderr)
	o.common.register(fs)
	o.store.register(fs)
	o.ranks.register(fs)
	o.kube.register(fs, false)
	fs.StringVar(&o.dir, "dir", "", "directory to restore into (the trainer's checkpoint directory)")
	fs.Int64Var(&o.step, "step", -1, "restore this step instead of the newest complete one")
	fs.StringVar(&o.restoreRanks, "restore-ranks", "own", restoreRanksUsage)
	fs.IntVar(&o.workers, "workers", checkpoint.DefaultDownloadWorkers, "parallel chunk downloads")
	fs.DurationVar(&o.interval, "progress-interval", 5*time.Second, "how often progress is logged when stderr is not a terminal (a terminal gets a bar)")
	fs.Usage = flagUsage(fs, stderr, "lifeboat restore --store URL --dir DIR [--step N] [flags]\n\n"+
		"Restores the newest complete checkpoint into DIR, falling back past any that cannot be\n"+
		"restored, or exactly step N with --step. Either way it writes DIR/"+resume.FileName+"\n"+
		"(dir, step, id, files), which lifeboat run --restore never hands the trainer.")
	if code := parseCmd(fs, args, stderr); code >= 0 {
		return code
	}
	if code := checkCmd("restore", o.validate(), stderr); code >= 0 {
		return code
	}
	log, ok := o.common.logger("restore", stderr)
	if !ok {
		return 2
	}
	if o.dir == "" {
		fmt.Fprintln(stderr, "lifeboat restore: --dir (LIFEBOAT_DIR) is required: the directory to restore into")
		return 2
	}
	if err := o.ranks.resolve(os.Getenv); err != nil {
		fmt.Fprintf(stderr, "lifeboat restore: %v\n", err)
		return 2
	}
	all, err := allRanks(o.restoreRanks)
	if err != nil {
		fmt.Fprintf(stderr, "lifeboat restore: %v\n", err)
		return 2
	}
	if err := os.MkdirAll(o.dir, 0o755); err != nil {
		fmt.Fprintf(stderr, "lifeboat restore: create --dir %s: %v\n", o.dir, err)
		return 1
	}
	if removed, err := checkpoint.RemoveStaleRestores(o.dir); len(removed) > 0 || err != nil {
		log.Info("resume.stale_removed", "dir", o.dir, "entries", removed, "err", err,
			"why", "left by a restore that was killed before it could clean up")
	}
	ctx, started := startup.during(ctx, nil)
	defer started()
	stopped := func(phase string, err error) (int, bool) {
		return stoppedDuringStartup(startup, phase, err, log, kubeTerminationLog, false, supervisor.DefaultPreemptExitCode)
	}
	s, err := o.store.open(ctx)
	if code, ok := stopped("store open", err); ok {
		return code
	}
	if err != nil {
		fmt.Fprintf(stderr, "lifeboat restore: %v\n", err)
		return 1
	}
	t0 := time.Now()
	if o.step >= 0 {
		pr := newProgress(stderr, log, o.interval)
		ws := o.ranks.worldSize
		if all {
			ws = 0 // the step's own world size
		}
		res, err := checkpoint.Restore(ctx, s, o.step, o.ranks.rank, o.dir, checkpoint.RestoreOptions{WorldSize: ws, Workers: o.workers, Log: log, Progress: pr.update, AllRanks: all})
		pr.stop()
		if code, ok := stopped("restore", err); ok {
			return code
		}
		if err != nil {
			fmt.Fprintf(stderr, "lifeboat restore: step %d: %v\n", o.step, err)
			return 1
		}
		writeResumeFile(o.dir, resume.Restored(o.dir, res, all), log)
		fmt.Fprintf(stdout, "restored step %d (%d files, %d bytes) into %s\n", res.Step, res.Files, res.Bytes, res.Dir)
		o.kube.restored(ctx, log, res.Step, time.Since(t0).Seconds())
		return 0
	}
	r, err := restoreLatestEvery(ctx, s, o.dir, o.ranks, o.workers, all, log, stderr, o.interval)
	if code, ok := stopped("restore", err); ok {
		return code
	}
	if err != nil {
		fmt.Fprintf(stderr, "lifeboat restore: %v\n", err)
		return 1
	}
	if r == nil {
		fmt.Fprintf(stdout, "no complete checkpoint in %s: the trainer starts fresh\n", s)
		return 0
	}
	fmt.Fprintf(stdout, "restored step %s (id %s) into %s\n", strconv.FormatInt(r.Step, 10), r.ID, r.Dir)
	o.kube.restored(ctx, log, r.Step, time.Since(t0).Seconds())
	return 0
}
