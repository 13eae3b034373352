package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"time"

	"github.com/lifeboat-project/lifeboat/checkpoint"
	"github.com/lifeboat-project/lifeboat/internal/printable"
	"github.com/lifeboat-project/lifeboat/pipeline"
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
	verify       checkFlag // --verify-restore
	interval     time.Duration
	kube         kubeOptions

	all bool // --restore-ranks all, set by withDefaults
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
	o.verify.register(fs)
	fs.DurationVar(&o.interval, "progress-interval", 5*time.Second, "how often progress is logged when stderr is not a terminal (a terminal gets a bar)")
	fs.Usage = flagUsage(fs, stderr, "lifeboat restore --store URL --dir DIR [--step N] [flags]\n\n"+
		"Restores the newest complete checkpoint into DIR, falling back past any that cannot be\n"+
		"restored, or exactly step N with --step. Either way it writes DIR/"+resume.FileName+"\n"+
		"(dir, step, id, files), which lifeboat run --restore never hands the trainer.")
	check := func() error {
		if err := o.validate(); err != nil {
			return err
		}
		if o.dir == "" {
			return errors.New("--dir (LIFEBOAT_DIR) is required: the directory to restore into")
		}
		return o.withDefaults(os.Getenv)
	}
	if code := setup(fs, args, &o.common, stdout, stderr, check); code >= 0 {
		return code
	}
	return exitCode("restore", runRestore(ctx, o), 1, stderr)
}

// withDefaults applies the defaults that depend on other values: the rank
// from the launchers' variables, and which ranks --restore-ranks takes.
func (o *restoreOptions) withDefaults(getenv func(string) string) error {
	if err := o.ranks.withDefaults(getenv); err != nil {
		return err
	}
	var err error
	o.all, err = allRanks(o.restoreRanks)
	return err
}

// runRestore restores into o.dir: exactly o.step, or the newest complete
// step it can, falling back past those it cannot. A stop signal during it
// ends it with the preemption code and removes what it wrote.
func runRestore(ctx context.Context, o *restoreOptions) error {
	log, stdout, all := o.common.log, o.common.stdout, o.all
	if err := os.MkdirAll(o.dir, 0o755); err != nil {
		return fmt.Errorf("create --dir %s: %v", o.dir, err)
	}
	pipeline.FinishInterrupted(o.dir, log) // then restored again below, as asked
	if removed, err := checkpoint.RemoveStaleRestores(o.dir); len(removed) > 0 || err != nil {
		log.Info("resume.stale_removed", "dir", o.dir, "entries", removed, "err", err,
			"reason", "left by a restore that was killed before it could clean up")
	}
	ctx, started := startup.during(ctx, nil)
	defer started()
	// stopped is the result for a stop signal during phase, nil if none.
	stopped := func(phase string, err error) error {
		if code, ok := stoppedDuringStartup(startup, phase, err, log, kubeTerminationLog, false, supervisor.DefaultPreemptExitCode); ok {
			return &codeError{code: code}
		}
		return nil
	}
	s, err := o.store.open(ctx)
	if serr := stopped("store open", err); serr != nil {
		return serr
	}
	if err != nil {
		return err
	}
	t0 := time.Now()
	rc := pipeline.RestoreConfig{Rank: o.ranks.rank, WorldSize: o.ranks.worldSize, AllRanks: all, Workers: o.workers, Check: o.verify.check,
		Log: log, ProgressTo: o.common.stderr, ProgressEvery: o.interval}
	if o.step >= 0 {
		r, res, err := pipeline.RestoreStep(ctx, s, o.dir, o.step, rc)
		if serr := stopped("restore", err); serr != nil {
			return serr
		}
		if err != nil {
			return fmt.Errorf("step %d: %w", o.step, err)
		}
		if err := handOn(o.dir, r); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "restored step %d (%d files, %d bytes) into %s\n", res.Step, res.Files, res.Bytes, printable.String(res.Dir))
		o.kube.restored(ctx, log, res.Step, time.Since(t0).Seconds())
		return nil
	}
	r, _, err := pipeline.Restore(ctx, s, o.dir, rc)
	if serr := stopped("restore", err); serr != nil {
		return serr
	}
	if err != nil {
		return err
	}
	if r == nil {
		fmt.Fprintf(stdout, "no complete checkpoint in %s: the trainer starts fresh\n", printable.String(s.String()))
		return nil
	}
	if err := handOn(o.dir, r); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "restored step %s (id %s) into %s\n", strconv.FormatInt(r.Step, 10), printable.String(r.ID), printable.String(r.Dir))
	o.kube.restored(ctx, log, r.Step, time.Since(t0).Seconds())
	return nil
}

// handOn writes r, what was restored into dir, as dir's resume file: what
// tells `run --restore never` what was restored (and so what in dir is
// stale). A restore that cannot hand it on has failed: without it the
// trainer would start fresh over the restored checkpoint and everything in
// dir would be taken as new work.
func handOn(dir string, r *resume.Point) error {
	if err := resume.Write(dir, r); err != nil {
		return fmt.Errorf("restored step %d, but %w; lifeboat run --restore never learns from that file what was restored, and without it the trainer would start fresh and everything in --dir would be uploaded as new work: free that path (or the volume) and run lifeboat restore again", r.Step, err)
	}
	return nil
}

// checkFlag is --verify-restore: how a restore checks each chunk it
// downloads (checkpoint.Check).
type checkFlag struct{ check checkpoint.Check }

func (f *checkFlag) register(fs *flag.FlagSet) {
	fs.Var(f, "verify-restore", "how a restore checks each chunk it downloads: crc32c checks it against the CRC32C its manifest "+
		"records, computed by lifeboat from the trainer's bytes when it uploaded them (finds any change the store or another writer made; "+
		"by SHA-256 where a manifest records none); sha256 recomputes its SHA-256, the content address, as well, "+
		"for stores that others can write (bytes chosen to match a CRC32C; docs/FORMAT.md)")
}

func (f *checkFlag) String() string { return f.check.String() }

func (f *checkFlag) Set(v string) error {
	c, err := checkpoint.ParseCheck(v)
	if err != nil {
		return err
	}
	f.check = c
	return nil
}
