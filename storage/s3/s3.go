package s3

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/lifeboat-project/lifeboat/storage"
)

// metaSHA256 is the user metadata key that keeps an object's hex SHA-256
// (sent as x-amz-meta-lifeboat-sha256).
const metaSHA256 = "Lifeboat-Sha256"

// Store is a storage.Store in one bucket and prefix of an S3 server.
type Store struct {
	cfg    Config // with defaults
	client *minio.Client
	core   minio.Core
	prefix string    // cfg.Prefix + "/", or ""
	bufs   sync.Pool // *[]byte of cfg.PartSize
}

var (
	_ storage.Store     = (*Store)(nil)
	_ storage.DirLister = (*Store)(nil)
)

// New connects to the server, checks that the bucket exists (creating it
// when cfg.CreateBucket is set) and returns the store. Its errors say what
// is wrong and what to do, name the endpoint and bucket, and never contain
// credentials.
func New(ctx context.Context, cfg Config) (*Store, error) {
	s, err := newStore(cfg)
	if err != nil {
		// The configuration, a CA file, the client: nothing a retry
		// changes.
		return nil, storage.Permanent(err)
	}
	if err := s.checkBucket(ctx); err != nil {
		return nil, err
	}
	return s, nil
}

// newStore builds the store without talking to the server.
func newStore(cfg Config) (*Store, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("s3: invalid configuration: %w", err)
	}
	cfg = cfg.withDefaults()
	u, _ := url.Parse(cfg.Endpoint) // checked by Validate
	secure := u.Scheme == "https"
	tr, err := transport(cfg, secure)
	if err != nil {
		return nil, err
	}
	lookup := minio.BucketLookupAuto
	switch cfg.BucketLookup {
	case LookupPath:
		lookup = minio.BucketLookupPath
	case LookupDNS:
		lookup = minio.BucketLookupDNS
	}
	client, err := minio.New(u.Host, &minio.Options{
		Creds:           creds(cfg, tr),
		Secure:          secure,
		Transport:       &timeoutTransport{base: tr, cfg: cfg},
		Region:          cfg.Region,
		BucketLookup:    lookup,
		TrailingHeaders: true,
		MaxRetries:      cfg.RequestAttempts, // 0: minio-go's default
	})
	if err != nil {
		return nil, fmt.Errorf("s3: client for %s: %w", cfg.Endpoint, err)
	}
	s := &Store{cfg: cfg, client: client, core: minio.Core{Client: client}}
	if cfg.Prefix != "" {
		s.prefix = cfg.Prefix + "/"
	}
	s.bufs.New = func() any {
		b := make([]byte, cfg.PartSize)
		return &b
	}
	return s, nil
}

// transport is minio-go's default transport with the configured timeouts
// (see timeout.go), the CA file added and enough idle connections for the
// part uploads.
func transport(cfg Config, secure bool) (*http.Transport, error) {
	tr, err := minio.DefaultTransport(secure)
	if err != nil {
		return nil, fmt.Errorf("s3: transport: %w", err)
	}
	tr.MaxIdleConnsPerHost = max(tr.MaxIdleConnsPerHost, 2*cfg.Parallelism)
	dialer := &net.Dialer{Timeout: cfg.ConnectTimeout, KeepAlive: 30 * time.Second}
	tr.DialContext = stallDialer(dialer.DialContext, cfg.StallTimeout)
	tr.TLSHandshakeTimeout = cfg.ConnectTimeout
	tr.ResponseHeaderTimeout = cfg.ResponseTimeout
	tr.WriteBufferSize = 256 << 10
	tr.ReadBufferSize = 256 << 10
	if secure && cfg.CAFile != "" {
		pem, err := os.ReadFile(cfg.CAFile)
		if err != nil {
			return nil, &FieldError{Field: FieldCAFile, Err: err}
		}
		pool, err := x509.SystemCertPool()
		if err != nil || pool == nil {
			pool = x509.NewCertPool()
		}
		if !pool.AppendCertsFromPEM(pem) {
			return nil, &FieldError{Field: FieldCAFile, Value: cfg.CAFile, Err: ErrNoPEM}
		}
		if tr.TLSClientConfig == nil {
			tr.TLSClientConfig = &tls.Config{MinVersion: tls.VersionTLS12}
		}
		tr.TLSClientConfig.RootCAs = pool
	}
	return tr, nil
}

// creds returns the static keys when given, else minio-go's provider chain.
func creds(cfg Config, tr http.RoundTripper) *credentials.Credentials {
	if cfg.AccessKey != "" {
		return credentials.NewStaticV4(cfg.AccessKey, cfg.SecretKey, cfg.SessionToken)
	}
	return credentials.NewChainCredentials([]credentials.Provider{
		&credentials.EnvAWS{},
		&credentials.EnvMinio{},
		&credentials.FileAWSCredentials{},
		&credentials.IAM{Client: &http.Client{Transport: tr}},
	})
}

// checkBucket makes sure the bucket exists, creating it if configured to.
// Each request has ConnectTimeout+ResponseTimeout in all (openCall).
func (s *Store) checkBucket(ctx context.Context) error {
	octx, end := s.openCall(ctx)
	ok, err := s.client.BucketExists(octx, s.cfg.Bucket)
	err = failed(octx, err)
	end(nil)
	if err != nil {
		return s.connectError(err)
	}
	if ok {
		return nil
	}
	// BucketExists is a HEAD, whose answer has no body: every 404 reads as
	// NoSuchBucket, also a server's refusal of the keys (versitygw's).
	// A listing's answer says which it is.
	if err := s.confirmNoBucket(ctx); err != nil {
		return err
	}
	if !s.cfg.CreateBucket {
		return storage.Permanent(s.noBucket())
	}
	octx, end = s.openCall(ctx)
	err = failed(octx, s.client.MakeBucket(octx, s.cfg.Bucket, minio.MakeBucketOptions{Region: s.cfg.Region}))
	end(nil)
	var resp minio.ErrorResponse
	if err != nil && !(errors.As(err, &resp) && (resp.Code == "BucketAlreadyOwnedByYou" || resp.Code == "BucketAlreadyExists")) {
		return fmt.Errorf("s3: create bucket %q at %s: %w", s.cfg.Bucket, s.cfg.Endpoint, s.connectError(err))
	}
	return nil
}

// confirmNoBucket lists one key of the bucket that a HEAD found missing:
// nil when the server says NoSuchBucket (or lists, for a bucket made
// meanwhile), else the listing's error explained.
func (s *Store) confirmNoBucket(ctx context.Context) error {
	octx, end := s.openCall(ctx)
	defer end(nil)
	lctx, cancel := context.WithCancel(octx)
	defer cancel()
	for oi := range s.client.ListObjectsIter(lctx, s.cfg.Bucket, minio.ListObjectsOptions{MaxKeys: 1}) {
		var resp minio.ErrorResponse
		if oi.Err != nil && !(errors.As(oi.Err, &resp) && classifyAnswer(resp) == kindNoBucket) {
			return s.connectError(failed(octx, oi.Err))
		}
		break
	}
	return nil
}

// noBucket is the error of a bucket that does not exist.
func (s *Store) noBucket() error {
	return &FieldError{Field: FieldCreateBucket, Fix: FixSet, Err: fmt.Errorf("s3: bucket %q does not exist at %s", s.cfg.Bucket, s.cfg.Endpoint)}
}

// connectError explains a failure of the first request to the server.
func (s *Store) connectError(err error) error {
	where := fmt.Sprintf("bucket %q at %s", s.cfg.Bucket, s.cfg.Endpoint)
	var te *TimeoutError
	if errors.As(err, &te) {
		return fmt.Errorf("s3: check bucket %q: %w", s.cfg.Bucket, te)
	}
	var resp minio.ErrorResponse
	if errors.As(err, &resp) {
		if e := s.explain(resp); e != nil {
			return e
		}
	}
	var uerr x509.UnknownAuthorityError
	var herr x509.HostnameError
	var cerr *tls.CertificateVerificationError
	var rerr tls.RecordHeaderError
	switch {
	case errors.As(err, &cerr) || errors.As(err, &uerr) || errors.As(err, &herr):
		return storage.Permanent(&FieldError{Field: FieldCAFile, Fix: FixSet, Value: "the CA that signed it",
			Err: fmt.Errorf("s3: TLS certificate of %s not trusted (%v)", s.cfg.Endpoint, errors.Unwrap(storage.UnwrapURLError(err)))})
	case errors.As(err, &rerr) || strings.Contains(err.Error(), "server gave HTTP response to HTTPS client"):
		return storage.Permanent(fmt.Errorf("s3: TLS handshake with %s failed; the server does not speak TLS on that port: use http:// in the endpoint", s.cfg.Endpoint))
	case strings.Contains(err.Error(), "tls:") || strings.Contains(err.Error(), "x509:"):
		return storage.Permanent(&FieldError{Field: FieldCAFile, Fix: FixCheck,
			Err: fmt.Errorf("s3: TLS handshake with %s failed: %v", s.cfg.Endpoint, storage.UnwrapURLError(err))})
	}
	var operr *net.OpError
	var dnserr *net.DNSError
	if errors.As(err, &operr) || errors.As(err, &dnserr) {
		return &FieldError{Field: FieldEndpoint, Fix: FixCheck,
			Err: fmt.Errorf("s3: cannot reach %s for bucket %q: %v", s.cfg.Endpoint, s.cfg.Bucket, storage.UnwrapURLError(err))}
	}
	return fmt.Errorf("s3: check %s: %w", where, err)
}

// String describes the store: "s3://bucket/prefix at http://host:port".
func (s *Store) String() string {
	loc := storage.Location{Scheme: "s3", Bucket: s.cfg.Bucket, Prefix: s.cfg.Prefix}
	return loc.String() + " at " + s.cfg.Endpoint
}

// translate maps a minio-go error of a call made with ctx into the storage
// errors, wrapped with the operation and the key.
func (s *Store) translate(ctx context.Context, op, key string, err error) error {
	err = failed(ctx, err)
	var resp minio.ErrorResponse
	if errors.As(err, &resp) {
		switch resp.Code {
		case "NoSuchKey":
			return fmt.Errorf("s3: %s %s: %w", op, key, storage.ErrNotExist)
		case "PreconditionFailed":
			return fmt.Errorf("s3: %s %s: %w", op, key, storage.ErrExists)
		case "BadDigest", "InvalidDigest", "XAmzContentChecksumMismatch", "XAmzContentSHA256Mismatch", "InvalidChecksum":
			return storage.Permanent(fmt.Errorf("s3: %s %s: %s: %w", op, key, resp.Message, storage.ErrChecksum))
		}
		if e := s.explain(resp); e != nil {
			return fmt.Errorf("s3: %s %s: %w", op, key, e)
		}
	}
	return fmt.Errorf("s3: %s %s: %w", op, key, err)
}

// explain turns a server's error answer into an error that says what is
// wrong and what to change, marked permanent where no retry can help; nil
// when the answer is none of the kinds it knows.
func (s *Store) explain(resp minio.ErrorResponse) error {
	where := fmt.Sprintf("bucket %q at %s", s.cfg.Bucket, s.cfg.Endpoint)
	answer := fmt.Sprintf("%s, HTTP %d: %s", resp.Code, resp.StatusCode, resp.Message)
	switch classifyAnswer(resp) {
	case kindCredentials:
		return storage.Permanent(&FieldError{Field: FieldCredentials, Fix: FixCheck,
			Err: fmt.Errorf("s3: the server refused the credentials for %s (%s)", where, answer)})
	case kindDenied:
		return storage.Permanent(fmt.Errorf("s3: access denied to %s (%s); check the credentials and that their policy allows s3:ListBucket, s3:GetObject, s3:PutObject and s3:DeleteObject on the bucket", where, answer))
	case kindNoBucket:
		return storage.Permanent(s.noBucket())
	case kindAddressing:
		if s.cfg.BucketLookup != LookupPath {
			return storage.Permanent(&FieldError{Field: FieldBucketLookup, Fix: FixSet, Value: string(LookupPath),
				Err: fmt.Errorf("s3: %s answered %s: the request did not reach the bucket, as when a server without virtual-host (DNS) bucket names is addressed that way", where, answer)})
		}
	case kindFull:
		return storage.Permanent(fmt.Errorf("s3: %s is out of space or over its quota (%s); this is the server's side: free space on the server or raise the bucket's quota", where, answer))
	case kindServer:
		return fmt.Errorf("s3: %s failed on the server's side (%s); if it persists, check the server's logs and free space (a server out of disks or volumes answers so)", where, answer)
	}
	if resp.StatusCode == http.StatusForbidden {
		return storage.Permanent(fmt.Errorf("s3: access denied to %s (HTTP 403); check the credentials and the bucket policy", where))
	}
	return nil
}

// Get returns a reader for a range of key. The request is made before Get
// returns, so a missing key is reported here.
func (s *Store) Get(ctx context.Context, key string, offset, length int64) (io.ReadCloser, error) {
	if err := storage.CheckKey(key); err != nil {
		return nil, fmt.Errorf("s3: get: %w", err)
	}
	if offset < 0 || length < -1 {
		return nil, fmt.Errorf("s3: get %s: invalid range offset %d length %d", key, offset, length)
	}
	if length == 0 {
		if _, err := s.Stat(ctx, key); err != nil {
			return nil, err
		}
		return io.NopCloser(strings.NewReader("")), nil
	}
	ctx, end := call(ctx)
	var opts minio.GetObjectOptions
	switch {
	case length > 0:
		if err := opts.SetRange(offset, offset+length-1); err != nil {
			end(nil)
			return nil, fmt.Errorf("s3: get %s: %w", key, err)
		}
	case offset > 0:
		if err := opts.SetRange(offset, 0); err != nil {
			end(nil)
			return nil, fmt.Errorf("s3: get %s: %w", key, err)
		}
	}
	body, _, _, err := s.core.GetObject(ctx, s.cfg.Bucket, s.prefix+key, opts)
	if err != nil {
		err = s.translate(ctx, "get", key, err)
		end(nil)
		return nil, err
	}
	return &getBody{ReadCloser: body, ctx: ctx, end: end, cfg: s.cfg, key: key}, nil
}

// Stat returns key's size, modification time and, where kept, SHA-256.
func (s *Store) Stat(ctx context.Context, key string) (storage.ObjectInfo, error) {
	if err := storage.CheckKey(key); err != nil {
		return storage.ObjectInfo{}, fmt.Errorf("s3: stat: %w", err)
	}
	ctx, end := call(ctx)
	defer end(nil)
	oi, err := s.client.StatObject(ctx, s.cfg.Bucket, s.prefix+key, minio.StatObjectOptions{})
	if err != nil {
		return storage.ObjectInfo{}, s.translate(ctx, "stat", key, err)
	}
	return storage.ObjectInfo{Key: key, Size: oi.Size, ModTime: oi.LastModified, SHA256: oi.UserMetadata[metaSHA256]}, nil
}

// List lists the keys under prefix in lexical order, as S3 returns them.
func (s *Store) List(ctx context.Context, prefix string, fn func(storage.ObjectInfo) error) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("s3: list %s: %w", prefix, err)
	}
	ctx, end := call(ctx)
	defer end(nil)
	for oi := range s.client.ListObjectsIter(ctx, s.cfg.Bucket, minio.ListObjectsOptions{Prefix: s.prefix + prefix, Recursive: true}) {
		if oi.Err != nil {
			return s.translate(ctx, "list", prefix, oi.Err)
		}
		if err := fn(storage.ObjectInfo{Key: strings.TrimPrefix(oi.Key, s.prefix), Size: oi.Size, ModTime: oi.LastModified}); err != nil {
			return err
		}
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("s3: list %s: %w", prefix, failed(ctx, err))
	}
	return nil
}

// ListDirs lists one level under prefix (storage.DirLister), with S3's
// delimiter "/": one request per 1,000 objects and folders. A page gives
// its objects and its folders apart, so the entries are gathered and
// sorted before fn sees them: memory for one level's entries.
func (s *Store) ListDirs(ctx context.Context, prefix string, fn func(storage.ObjectInfo) error) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("s3: list %s: %w", prefix, err)
	}
	ctx, end := call(ctx)
	defer end(nil)
	var entries []storage.ObjectInfo
	for oi := range s.client.ListObjectsIter(ctx, s.cfg.Bucket, minio.ListObjectsOptions{Prefix: s.prefix + prefix, Recursive: false}) {
		if oi.Err != nil {
			return s.translate(ctx, "list", prefix, oi.Err)
		}
		e := storage.ObjectInfo{Key: strings.TrimPrefix(oi.Key, s.prefix)}
		if !strings.HasSuffix(oi.Key, "/") {
			e.Size, e.ModTime = oi.Size, oi.LastModified
		}
		entries = append(entries, e)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("s3: list %s: %w", prefix, failed(ctx, err))
	}
	slices.SortFunc(entries, func(a, b storage.ObjectInfo) int { return strings.Compare(a.Key, b.Key) })
	for _, e := range entries {
		if err := fn(e); err != nil {
			return err
		}
	}
	return nil
}

// Delete removes key; S3 reports success for a missing key too.
func (s *Store) Delete(ctx context.Context, key string) error {
	if err := storage.CheckKey(key); err != nil {
		return fmt.Errorf("s3: delete: %w", err)
	}
	ctx, end := call(ctx)
	defer end(nil)
	if err := s.client.RemoveObject(ctx, s.cfg.Bucket, s.prefix+key, minio.RemoveObjectOptions{}); err != nil {
		return s.translate(ctx, "delete", key, err)
	}
	return nil
}
