package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/lifeboat-project/lifeboat/pipeline"
	"github.com/lifeboat-project/lifeboat/storage"
	"github.com/lifeboat-project/lifeboat/storage/s3"
)

// storeOptions are the flags that say where checkpoints are stored, shared
// by every subcommand that talks to the store.
type storeOptions struct {
	url          string
	endpoint     string
	region       string
	lookup       string
	caFile       string
	createBucket bool
	uploadLimit  string

	// unsafeNoConditionalWrites runs on an S3 store that failed the
	// conditional-write probe (registerWriter).
	unsafeNoConditionalWrites bool

	// The S3 client's clocks; zero (options not from flags) means the
	// default.
	connectTimeout  time.Duration
	responseTimeout time.Duration
	stallTimeout    time.Duration

	// opened is the store open returned last: a stop during the restore
	// that follows writes its stop record there.
	opened storage.Store

	// loc and locErr are url parsed, once (location).
	loc    *storage.Location
	locErr error
}

// location is --store parsed: the one place the URL is read; the first
// call parses it, the others return the same.
func (o *storeOptions) location() (storage.Location, error) {
	if o.loc == nil {
		loc, err := storage.ParseURL(o.url)
		o.loc, o.locErr = &loc, err
	}
	return *o.loc, o.locErr
}

// scheme is the scheme of a --store that parses ("s3" or "file"), else "".
func (o *storeOptions) scheme() string {
	if loc, err := o.location(); err == nil {
		return loc.Scheme
	}
	return ""
}

func (o *storeOptions) register(fs *flag.FlagSet) {
	fs.StringVar(&o.url, "store", "", "where checkpoints are stored: s3://bucket/prefix or file:///abs/path")
	fs.StringVar(&o.endpoint, "s3-endpoint", "", "S3 endpoint URL, e.g. http://minio:9000 (default: AWS_ENDPOINT_URL, else AWS S3)")
	fs.StringVar(&o.region, "s3-region", "", "bucket region (default: AWS_REGION, else discovered)")
	fs.StringVar(&o.lookup, "s3-bucket-lookup", "auto", "auto, path or dns (virtual-host) style bucket addressing")
	fs.StringVar(&o.caFile, "s3-ca-file", "", "PEM file of extra CAs for https endpoints (default: AWS_CA_BUNDLE)")
	fs.BoolVar(&o.createBucket, "create-bucket", false, "create the bucket when it does not exist")
	fs.StringVar(&o.uploadLimit, "upload-limit", "", "cap upload bandwidth, e.g. 200MB (bytes per second; empty: unlimited)")
	positiveDurationVar(fs, &o.connectTimeout, "s3-connect-timeout", s3.DefaultConnectTimeout,
		"give up connecting to the S3 endpoint (TCP connect and TLS handshake) after this long")
	positiveDurationVar(fs, &o.responseTimeout, "s3-response-timeout", s3.DefaultResponseTimeout,
		"give up on an S3 request whose response does not start this long after it was sent (an upload still sending is never cut)")
	positiveDurationVar(fs, &o.stallTimeout, "s3-stall-timeout", s3.DefaultStallTimeout,
		"fail an S3 transfer that moves no byte for this long, so that it is retried")
}

// registerWriter defines the flags of the commands that commit to the
// store (run and sidecar) and of doctor, which checks what they would.
func (o *storeOptions) registerWriter(fs *flag.FlagSet) {
	fs.BoolVar(&o.unsafeNoConditionalWrites, "s3-unsafe-no-conditional-writes", false,
		"run on an S3 store that does not refuse a second create-only write (If-None-Match: *): two writers of one step can then overwrite each other's manifests and stop records")
}

// positiveDuration is a duration flag that refuses zero and negative
// values, naming the flag and its variable.
type positiveDuration struct {
	d    *time.Duration
	name string
}

// positiveDurationVar defines a positiveDuration flag.
func positiveDurationVar(fs *flag.FlagSet, d *time.Duration, name string, value time.Duration, usage string) {
	*d = value
	fs.Var(&positiveDuration{d: d, name: name}, name, usage)
}

func (p *positiveDuration) String() string {
	if p == nil || p.d == nil {
		return ""
	}
	return p.d.String()
}

func (p *positiveDuration) Set(s string) error {
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		return fmt.Errorf("--%s (%s) must be a positive duration such as 30s", p.name, envName(p.name))
	}
	*p.d = d
	return nil
}

// config is the store's flags, and the environment they default to, as
// pipeline.OpenStore takes them.
func (o *storeOptions) config() (pipeline.StoreConfig, error) {
	if o.url == "" {
		return pipeline.StoreConfig{}, errors.New("no store given: set --store (LIFEBOAT_STORE) to s3://bucket/prefix or file:///abs/path")
	}
	loc, err := o.location()
	if err != nil {
		return pipeline.StoreConfig{}, fmt.Errorf("--store (LIFEBOAT_STORE): %w", err)
	}
	var limit int64
	if o.uploadLimit != "" {
		if limit, err = parseBytes(o.uploadLimit); err != nil || limit <= 0 {
			limit = -1 // pipeline.FieldUploadLimit
		}
	}
	return pipeline.StoreConfig{Location: loc, Endpoint: o.endpoint, Region: o.region, CAFile: o.caFile, BucketLookup: s3.BucketLookup(o.lookup),
		CreateBucket: o.createBucket, UploadLimit: limit, ConnectTimeout: o.connectTimeout, ResponseTimeout: o.responseTimeout, StallTimeout: o.stallTimeout,
		UnsafeNoConditionalWrites: o.unsafeNoConditionalWrites, Getenv: os.Getenv}, nil
}

// open connects to the store (pipeline.OpenStore: every call retried
// after a transient failure, uploads paced by --upload-limit).
// Credentials come from minio-go's providers and never from flags.
func (o *storeOptions) open(ctx context.Context) (storage.Store, error) {
	c, err := o.config()
	if err != nil {
		return nil, err
	}
	s, err := pipeline.OpenStore(ctx, c)
	if err != nil {
		return nil, o.fieldError(err)
	}
	o.opened = s
	return s, nil
}

// fieldError names the flags and variables of the store's fields in
// pipeline's *pipeline.FieldError, and those of the backend's settings in
// its errors (named); other errors are returned as they are.
func (o *storeOptions) fieldError(err error) error {
	var fe *pipeline.FieldError
	switch {
	case !errors.As(err, &fe):
		return named(err)
	case fe.Field == pipeline.FieldUploadLimit:
		return fmt.Errorf("--upload-limit (LIFEBOAT_UPLOAD_LIMIT) is %q; give bytes per second such as 200MB or 1GiB", o.uploadLimit)
	case fe.Field == pipeline.FieldUnsafeNoConditionalWrites:
		return fmt.Errorf("%w; lifeboat commits checkpoints and stop records with create-only writes, and without them two writers of one step overwrite each other's manifests: "+
			"use a server (or a proxy in front of it) that enforces If-None-Match: * on PUT, or set --s3-unsafe-no-conditional-writes (LIFEBOAT_S3_UNSAFE_NO_CONDITIONAL_WRITES) to run anyway", fe.Err)
	}
	return err
}

// parseBytes reads sizes such as 512, 64KB, 200MB, 1GiB (KB=1000, KiB=1024).
func parseBytes(s string) (int64, error) {
	s = strings.TrimSpace(s)
	units := []struct {
		suffix string
		mult   int64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"B", 1}}
	for _, u := range units {
		if num, ok := strings.CutSuffix(s, u.suffix); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(num), 64)
			if err != nil {
				return 0, err
			}
			return int64(f * float64(u.mult)), nil
		}
	}
	return strconv.ParseInt(s, 10, 64)
}

// rankOptions say which rank of how many this process is. A pod is one
// rank: a pod that runs several local ranks (paddle.distributed.launch
// --nproc_per_node) is one lifeboat rank, and all its local ranks' files
// under --dir are one snapshot.
type rankOptions struct {
	rank, worldSize int
}

// rankVars and worldSizeVars are read in order when --rank and
// --world-size are not given: Paddle's, then torchrun's and most
// launchers', then the pod's index in a Kubernetes Indexed Job and in a
// Volcano job's task.
var (
	rankVars      = []string{"PADDLE_TRAINER_ID", "RANK", "JOB_COMPLETION_INDEX", "VC_TASK_INDEX"}
	worldSizeVars = []string{"PADDLE_TRAINERS_NUM", "WORLD_SIZE"}
)

func (o *rankOptions) register(fs *flag.FlagSet) {
	fs.IntVar(&o.rank, "rank", -1, "this pod's rank (default: "+strings.Join(rankVars, ", else ")+", else 0 with a world size of 1; a larger world size needs one)")
	fs.IntVar(&o.worldSize, "world-size", -1, "number of ranks, one per pod (default: "+strings.Join(worldSizeVars, ", else ")+", else 1)")
}

// withDefaults fills --rank and --world-size, when not given, from the
// launchers' usual variables, else 0 of 1, and checks the pair.
func (o *rankOptions) withDefaults(getenv func(string) string) error {
	pick := func(v *int, flagName string, names []string) (string, error) {
		if *v >= 0 {
			return "--" + flagName, nil
		}
		for _, n := range names {
			if s := strings.TrimSpace(getenv(n)); s != "" {
				i, err := strconv.Atoi(s)
				if err != nil || i < 0 {
					return "", fmt.Errorf("%s=%q is not a non-negative number (it sets --%s)", n, s, flagName)
				}
				*v = i
				return n, nil
			}
		}
		return "", nil
	}
	rankFrom, err := pick(&o.rank, "rank", rankVars)
	if err != nil {
		return err
	}
	sizeFrom, err := pick(&o.worldSize, "world-size", worldSizeVars)
	if err != nil {
		return err
	}
	if o.worldSize < 0 {
		o.worldSize, sizeFrom = 1, "the default"
	}
	if o.rank < 0 {
		if o.worldSize > 1 {
			// Every pod would run as rank 0 and their checkpoints would
			// be stored as revisions of one another's.
			return usageError{fmt.Errorf("world size %d (from %s) but no rank: set --rank (LIFEBOAT_RANK), or one of %s, to this pod's rank; every pod of the job must have its own",
				o.worldSize, sizeFrom, strings.Join(rankVars, ", "))}
		}
		o.rank, rankFrom = 0, "the default"
	}
	if o.worldSize < 1 || o.rank >= o.worldSize {
		return fmt.Errorf("rank %d (from %s) of world size %d (from %s): --rank (LIFEBOAT_RANK) must be below --world-size (LIFEBOAT_WORLD_SIZE); "+
			"set --world-size to the number of pods (an Indexed Job's completions, a Volcano task's replicas)", o.rank, rankFrom, o.worldSize, sizeFrom)
	}
	return nil
}
