package pipeline

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/lifeboat-project/lifeboat/setting"
	"github.com/lifeboat-project/lifeboat/storage"
	_ "github.com/lifeboat-project/lifeboat/storage/fs" // registers file://
	"github.com/lifeboat-project/lifeboat/storage/s3"
)

// StoreConfig says where checkpoints are stored and how the store is
// reached. Credentials are not here: they come from minio-go's providers
// (AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, MINIO_*, the AWS credentials
// file, IAM and web identity), so they stay out of process listings.
type StoreConfig struct {
	Location storage.Location // parsed from s3://bucket/prefix or file:///abs/path
	// Endpoint, Region, CAFile and BucketLookup override those the
	// environment gives an S3 store (s3.Config.FromEnv with Getenv);
	// empty keeps them.
	Endpoint, Region, CAFile string
	BucketLookup             s3.BucketLookup
	CreateBucket             bool
	// UploadLimit paces uploads, in bytes per second, whatever the
	// backend; 0 is unlimited, below 0 is a *FieldError.
	UploadLimit int64
	// The S3 client's clocks; zero means the default.
	ConnectTimeout, ResponseTimeout, StallTimeout time.Duration
	// UnsafeNoConditionalWrites runs on an S3 store that failed the
	// conditional-write probe (CheckConditionalWrites), with a WARN.
	UnsafeNoConditionalWrites bool
	// Getenv reads the environment an S3 store's configuration defaults
	// to; nil reads none.
	Getenv func(string) string
	// OnRetry, when set, is told of each store call retried (see
	// storage.RetryPolicy).
	OnRetry func(storage.RetryEvent)
}

// OpenStore connects to the store with the backend registered for its
// location's scheme (storage/s3 and storage/fs, imported here), its uploads
// paced by UploadLimit whatever the backend. Every call to the store it
// returns is retried after a transient failure (storage.Retry with the
// default policy, telling OnRetry), and a panic in the backend's client is
// an error (storage.Recover) that is retried like any other; the S3
// client's own retries are off, so that this is the one layer of retries.
func OpenStore(ctx context.Context, c StoreConfig) (storage.Store, error) {
	if c.UploadLimit < 0 {
		return nil, &FieldError{Field: FieldUploadLimit, Value: fmt.Sprint(c.UploadLimit), Err: errors.New("it must be 0 (unlimited) or more bytes per second")}
	}
	// Opening an S3 store asks the server about the bucket: a throttled
	// or briefly unreachable server (503 SlowDown, a pod's network not yet
	// up beside its proxy) is asked again, as every later call is. A
	// directory store's errors are the machine's own and final.
	policy := storage.RetryPolicy{OnRetry: c.OnRetry}
	opening := storage.RetryPolicy{Backoff: func(int) (time.Duration, bool) { return 0, false }}
	if c.Location.Scheme == "s3" {
		opening = policy
	}
	var s storage.Store
	if err := opening.Do(ctx, "open", c.Location.String(), func() (err error) {
		s, err = storage.Open(ctx, c.Location, c.configure)
		return err
	}); err != nil {
		return nil, err
	}
	return storage.Retry(storage.Recover(storage.Limit(s, c.UploadLimit)), policy), nil
}

// configure applies c, and the environment it defaults to, to a
// backend's configuration (see storage.Backend.Open).
func (c StoreConfig) configure(config any) error {
	cfg, ok := config.(*s3.Config)
	if !ok {
		return nil
	}
	getenv := c.Getenv
	if getenv == nil {
		getenv = func(string) string { return "" }
	}
	cfg.FromEnv(getenv)
	if c.Endpoint != "" {
		cfg.Endpoint = c.Endpoint
	}
	if c.Region != "" {
		cfg.Region = c.Region
	}
	if c.CAFile != "" {
		cfg.CAFile = c.CAFile
	}
	cfg.BucketLookup = c.BucketLookup
	cfg.CreateBucket = c.CreateBucket
	cfg.ConnectTimeout, cfg.ResponseTimeout, cfg.StallTimeout = c.ConnectTimeout, c.ResponseTimeout, c.StallTimeout
	cfg.RequestAttempts = 1 // OpenStore's storage.Retry retries
	return nil
}

// CheckConditionalWrites makes sure an S3 store refuses a create-only
// write of an existing key before anything is committed to it
// (storage.ProbeConditionalWrites; the answer is kept in the store for a
// day, so the ranks of a job probe once). A store that does not is
// refused with a *FieldError of FieldUnsafeNoConditionalWrites wrapping
// storage.ErrNoConditionalWrites, unless c.UnsafeNoConditionalWrites
// accepts it with a WARN. The kernel enforces a directory store's
// create-only writes: it is not probed.
func CheckConditionalWrites(ctx context.Context, s storage.Store, c StoreConfig, log *slog.Logger) error {
	if c.Location.Scheme != "s3" {
		return nil
	}
	p, err := storage.ProbeConditionalWrites(ctx, s, time.Now)
	switch {
	case errors.Is(err, storage.ErrNoConditionalWrites) && c.UnsafeNoConditionalWrites:
		log.Warn("store.conditional_writes_unsafe", "store", s.String(),
			"effect", "commits and stop records are plain writes: two writers of one step and rank (a replacement pod starting before the old one ended, two pods given one rank) overwrite each other's manifests without an error",
			"hint", setting.Textf("use a server that enforces If-None-Match: * on PUT (MinIO, AWS S3, recent Ceph RGW), then unset %s", setting.UnsafeNoConditionalWrites))
		return nil
	case errors.Is(err, storage.ErrNoConditionalWrites):
		return &FieldError{Field: FieldUnsafeNoConditionalWrites, Value: "false", Err: err}
	case err != nil:
		return err
	}
	log.Info("store.conditional_writes", "store", s.String(), "checked", p.Checked, "cached", p.Cached)
	return nil
}
