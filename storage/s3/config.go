package s3

import (
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"time"

	"github.com/lifeboat-project/lifeboat/storage"
)

// BucketLookup says how requests name the bucket.
type BucketLookup string

// Bucket lookup styles.
const (
	// LookupAuto picks virtual-host style for AWS and path style elsewhere.
	LookupAuto BucketLookup = "auto"
	// LookupPath puts the bucket in the path: http://host/bucket/key.
	LookupPath BucketLookup = "path"
	// LookupDNS puts the bucket in the host name: http://bucket.host/key.
	LookupDNS BucketLookup = "dns"
)

// Defaults, chosen by measurement (docs/BENCHMARKS.md, "## Storage").
const (
	DefaultEndpoint    = "https://s3.amazonaws.com"
	DefaultPartSize    = 32 << 20
	DefaultParallelism = 4
	// MinPartSize is the smallest part S3 accepts (except the last).
	MinPartSize = 5 << 20
	// MaxPartSize is the largest part S3 accepts.
	MaxPartSize = 5 << 30
	// maxParts is the most parts a multipart upload may have.
	maxParts = 10000
)

// Config says where the store is and how to talk to it. The zero value of
// every field but Bucket has a working default. Environment variables are
// read by the command layer (see FromEnv), never here.
type Config struct {
	// Endpoint is the server's URL, http:// or https://
	// ("http://minio:9000"). Empty means AWS S3.
	Endpoint string
	// Bucket holds the objects. Required.
	Bucket string
	// Prefix is prepended to every key, without leading or trailing slash.
	Prefix string
	// Region is the bucket's region; empty lets minio-go discover it.
	Region string
	// BucketLookup is path or virtual-host style; empty means LookupAuto.
	BucketLookup BucketLookup
	// CAFile is a PEM file of CA certificates trusted for https endpoints
	// in addition to the system's (AWS_CA_BUNDLE). It is ignored for http
	// endpoints, since AWS_CA_BUNDLE is often set machine-wide.
	CAFile string

	// AccessKey and SecretKey (and SessionToken) are explicit static
	// credentials. When AccessKey is empty, minio-go's provider chain is
	// used: AWS_* and MINIO_* environment variables, the AWS credentials
	// file, then IAM (EC2/ECS roles and web identity, which covers IRSA).
	AccessKey    string
	SecretKey    string
	SessionToken string

	// CreateBucket makes the bucket when it does not exist.
	CreateBucket bool
	// PartSize is the multipart part size in bytes; objects up to this size
	// go up in one PUT. 0 means DefaultPartSize. Each Put buffers up to
	// Parallelism+1 parts.
	PartSize int64
	// Parallelism is how many parts of one object upload at once; 0 means
	// DefaultParallelism.
	Parallelism int
	// RequestAttempts is how many times minio-go sends a request before it
	// gives up on a transient failure (a reset connection, HTTP 503, a
	// throttling answer), waiting up to a second between tries; 0 keeps
	// minio-go's default of 10. A store wrapped in storage.Retry should
	// have 1, so that the wrapper alone decides what is retried, how often
	// and how far apart. (With 1, the request minio-go would send again
	// after AWS S3 named a bucket's other region is left to the wrapper
	// too; minio-go keeps the region it learnt. Setting Region avoids it.)
	RequestAttempts int
	// ConnectTimeout bounds making a connection: the TCP connect (with
	// the name lookup) and, for https, the TLS handshake. 0 means
	// DefaultConnectTimeout.
	ConnectTimeout time.Duration
	// ResponseTimeout bounds the wait for a response's headers once the
	// request, body included, has been sent. It never cuts an upload that
	// is still sending: the body's transfer is StallTimeout's. 0 means
	// DefaultResponseTimeout.
	ResponseTimeout time.Duration
	// StallTimeout fails a transfer whose connection moves no byte in
	// either direction for this long (a hung server, a dead route), so
	// that it is retried instead of hanging. 0 means DefaultStallTimeout.
	StallTimeout time.Duration
}

// Timeout defaults: together they bound a server that accepts connections
// but never answers, or never accepts them, to well under a minute.
const (
	DefaultConnectTimeout  = 10 * time.Second
	DefaultResponseTimeout = 30 * time.Second
	DefaultStallTimeout    = 60 * time.Second
)

// FromEnv fills fields still empty from the standard environment variables,
// read through getenv (os.Getenv in the command layer): AWS_ENDPOINT_URL_S3
// or AWS_ENDPOINT_URL for Endpoint, AWS_REGION or AWS_DEFAULT_REGION for
// Region, AWS_CA_BUNDLE for CAFile. Credentials are left to the provider
// chain.
func (c *Config) FromEnv(getenv func(string) string) {
	first := func(names ...string) string {
		for _, n := range names {
			if v := getenv(n); v != "" {
				return v
			}
		}
		return ""
	}
	if c.Endpoint == "" {
		c.Endpoint = first("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL")
	}
	if c.Region == "" {
		c.Region = first("AWS_REGION", "AWS_DEFAULT_REGION")
	}
	if c.CAFile == "" {
		c.CAFile = getenv("AWS_CA_BUNDLE")
	}
}

// withDefaults returns c with defaults filled in.
func (c Config) withDefaults() Config {
	if c.Endpoint == "" {
		c.Endpoint = DefaultEndpoint
	}
	if c.ConnectTimeout == 0 {
		c.ConnectTimeout = DefaultConnectTimeout
	}
	if c.ResponseTimeout == 0 {
		c.ResponseTimeout = DefaultResponseTimeout
	}
	if c.StallTimeout == 0 {
		c.StallTimeout = DefaultStallTimeout
	}
	c.Endpoint = strings.TrimSuffix(c.Endpoint, "/")
	c.Prefix = strings.Trim(c.Prefix, "/")
	if c.BucketLookup == "" {
		c.BucketLookup = LookupAuto
	}
	if c.PartSize == 0 {
		c.PartSize = DefaultPartSize
	}
	if c.Parallelism == 0 {
		c.Parallelism = DefaultParallelism
	}
	return c
}

// Validate reports every problem with the configuration; one about a
// setting the caller names to its users is a *FieldError.
func (c Config) Validate() error {
	c = c.withDefaults()
	var errs []error
	u, err := url.Parse(c.Endpoint)
	shown := storage.RedactUser(c.Endpoint)
	invalid := func(f Field, value, why string) {
		errs = append(errs, &FieldError{Field: f, Value: value, Err: errors.New(why)})
	}
	switch {
	case err != nil:
		invalid(FieldEndpoint, shown, "is not a URL")
	case u.Scheme != "http" && u.Scheme != "https":
		invalid(FieldEndpoint, shown, "must start with http:// or https://")
	case u.Host == "" || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.User != nil:
		invalid(FieldEndpoint, shown, "must be scheme://host[:port] only")
	}
	if c.Bucket == "" {
		errs = append(errs, errors.New("no bucket is set; give the store as s3://bucket/prefix"))
	}
	switch c.BucketLookup {
	case LookupAuto, LookupPath, LookupDNS:
	default:
		invalid(FieldBucketLookup, string(c.BucketLookup), "must be auto, path or dns")
	}
	if (c.AccessKey == "") != (c.SecretKey == "") {
		invalid(FieldCredentials, "", "give both, or neither to use the provider chain (the environment, the credentials file or IAM)")
	}
	if c.PartSize < MinPartSize || c.PartSize > MaxPartSize {
		errs = append(errs, fmt.Errorf("the part size %d must be between %d (5 MiB) and %d (5 GiB)", c.PartSize, MinPartSize, int64(MaxPartSize)))
	}
	if c.RequestAttempts < 0 {
		errs = append(errs, fmt.Errorf("the request attempts %d must be 0 (minio-go's default) or more", c.RequestAttempts))
	}
	if c.Parallelism < 1 {
		errs = append(errs, fmt.Errorf("the parallelism %d must be at least 1", c.Parallelism))
	}
	for _, d := range []struct {
		v     time.Duration
		field Field
	}{{c.ConnectTimeout, FieldConnectTimeout}, {c.ResponseTimeout, FieldResponseTimeout}, {c.StallTimeout, FieldStallTimeout}} {
		if d.v < 0 {
			invalid(d.field, d.v.String(), "must be positive")
		}
	}
	return errors.Join(errs...)
}

// redacted shows whether a secret is set without showing it.
func redacted(s string) string {
	if s == "" {
		return ""
	}
	return "[redacted]"
}

// String describes the configuration for logs with secrets redacted.
func (c Config) String() string {
	return fmt.Sprintf("s3.Config{Endpoint:%s Bucket:%s Prefix:%s Region:%s BucketLookup:%s CAFile:%s AccessKey:%s SecretKey:%s SessionToken:%s CreateBucket:%t PartSize:%d Parallelism:%d RequestAttempts:%d}",
		c.Endpoint, c.Bucket, c.Prefix, c.Region, c.BucketLookup, c.CAFile,
		redacted(c.AccessKey), redacted(c.SecretKey), redacted(c.SessionToken),
		c.CreateBucket, c.PartSize, c.Parallelism, c.RequestAttempts)
}

// GoString is String, so %#v does not print secrets either.
func (c Config) GoString() string { return c.String() }

// LogValue implements slog.LogValuer with secrets redacted.
func (c Config) LogValue() slog.Value {
	return slog.GroupValue(
		slog.String("endpoint", c.Endpoint),
		slog.String("bucket", c.Bucket),
		slog.String("prefix", c.Prefix),
		slog.String("region", c.Region),
		slog.String("bucket_lookup", string(c.BucketLookup)),
		slog.String("ca_file", c.CAFile),
		slog.String("access_key", redacted(c.AccessKey)),
		slog.String("secret_key", redacted(c.SecretKey)),
		slog.String("session_token", redacted(c.SessionToken)),
		slog.Bool("create_bucket", c.CreateBucket),
		slog.Int64("part_size", c.PartSize),
		slog.Int("parallelism", c.Parallelism),
		slog.Int("request_attempts", c.RequestAttempts),
	)
}
