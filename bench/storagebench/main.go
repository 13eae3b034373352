// Command storagebench uploads and downloads files through storage/s3, for
// bench/storage.sh to time next to other S3 clients.
//
//	storagebench -op upload   -src FILE|DIR -dst s3://bucket/prefix
//	storagebench -op download -src s3://bucket/prefix -dst DIR
//
// A file source uploads one object named after the file; a directory
// source uploads each regular file in it, -files at a time. Downloads fetch
// every object under the prefix; objects larger than -range-size are read
// as -parallelism concurrent range Gets. The server and credentials come
// from AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY. With
// -client minio-default the upload goes through minio-go's PutObject with
// its default options instead, to show what its payload hashing costs.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/lifeboat-project/lifeboat/storage"
	"github.com/lifeboat-project/lifeboat/storage/s3"
)

type options struct {
	op, src, dst, client string
	files, parallelism   int
	partSize, rangeSize  int64
}

func main() {
	var o options
	flag.StringVar(&o.op, "op", "", "upload or download")
	flag.StringVar(&o.src, "src", "", "source file, directory or s3:// URL")
	flag.StringVar(&o.dst, "dst", "", "destination s3:// URL or directory")
	flag.StringVar(&o.client, "client", "lifeboat", "lifeboat or minio-default (upload only)")
	flag.IntVar(&o.files, "files", 8, "files transferred at once")
	flag.IntVar(&o.parallelism, "parallelism", 0, "parts in flight per object (0: s3.DefaultParallelism)")
	flag.Int64Var(&o.partSize, "part-size", 0, "multipart part size (0: s3.DefaultPartSize)")
	flag.Int64Var(&o.rangeSize, "range-size", 16<<20, "range Get size for large downloads")
	flag.Parse()
	start := time.Now()
	n, err := run(context.Background(), o)
	if err != nil {
		fmt.Fprintln(os.Stderr, "storagebench:", err)
		os.Exit(1)
	}
	d := time.Since(start)
	fmt.Fprintf(os.Stderr, "storagebench: %s %d bytes in %v: %.1f MB/s\n", o.op, n, d.Round(time.Millisecond), float64(n)/d.Seconds()/1e6)
}

func run(ctx context.Context, o options) (int64, error) {
	remote := o.dst
	if o.op == "download" {
		remote = o.src
	}
	loc, err := storage.ParseURL(remote)
	if err != nil || loc.Scheme != "s3" {
		return 0, fmt.Errorf("want an s3:// URL, got %q: %v", remote, err)
	}
	cfg := s3.Config{
		Bucket: loc.Bucket, Prefix: loc.Prefix, BucketLookup: s3.LookupPath,
		AccessKey: os.Getenv("AWS_ACCESS_KEY_ID"), SecretKey: os.Getenv("AWS_SECRET_ACCESS_KEY"),
		PartSize: o.partSize, Parallelism: o.parallelism, CreateBucket: true,
	}
	cfg.FromEnv(os.Getenv)
	if cfg.Region == "" {
		cfg.Region = "us-east-1"
	}
	st, err := s3.New(ctx, cfg)
	if err != nil {
		return 0, err
	}
	switch o.op {
	case "upload":
		put := func(ctx context.Context, key, path string) (int64, error) { return upload(ctx, st, key, path) }
		if o.client == "minio-default" {
			put, err = minioDefault(cfg)
			if err != nil {
				return 0, err
			}
		}
		return uploadAll(ctx, put, o)
	case "download":
		return downloadAll(ctx, st, o)
	}
	return 0, fmt.Errorf("unknown -op %q", o.op)
}

type putFunc func(ctx context.Context, key, path string) (int64, error)

func uploadAll(ctx context.Context, put putFunc, o options) (int64, error) {
	fi, err := os.Stat(o.src)
	if err != nil {
		return 0, err
	}
	if !fi.IsDir() {
		return put(ctx, filepath.Base(o.src), o.src)
	}
	ents, err := os.ReadDir(o.src)
	if err != nil {
		return 0, err
	}
	var keys []string
	for _, e := range ents {
		if e.Type().IsRegular() {
			keys = append(keys, e.Name())
		}
	}
	return forEach(keys, o.files, func(k string) (int64, error) { return put(ctx, k, filepath.Join(o.src, k)) })
}

func upload(ctx context.Context, st *s3.Store, key, path string) (int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return 0, err
	}
	info, err := st.Put(ctx, key, f, fi.Size(), storage.PutOptions{})
	return info.Size, err
}

// minioDefault uploads with minio-go's PutObject and default options: over
// plain http that signs every 64 KiB chunk with its SHA-256
// (STREAMING-AWS4-HMAC-SHA256-PAYLOAD).
func minioDefault(cfg s3.Config) (putFunc, error) {
	ep := cfg.Endpoint
	secure := len(ep) > 8 && ep[:8] == "https://"
	host := ep[len("http://"):]
	if secure {
		host = ep[len("https://"):]
	}
	c, err := minio.New(host, &minio.Options{Creds: credentials.NewStaticV4(cfg.AccessKey, cfg.SecretKey, ""), Secure: secure, Region: cfg.Region})
	if err != nil {
		return nil, err
	}
	prefix := ""
	if cfg.Prefix != "" {
		prefix = cfg.Prefix + "/"
	}
	return func(ctx context.Context, key, path string) (int64, error) {
		f, err := os.Open(path)
		if err != nil {
			return 0, err
		}
		defer f.Close()
		fi, err := f.Stat()
		if err != nil {
			return 0, err
		}
		// Hide ReadAt so the stream path is taken, as for a pipe.
		ui, err := c.PutObject(ctx, cfg.Bucket, prefix+key, struct{ io.Reader }{f}, fi.Size(), minio.PutObjectOptions{})
		return ui.Size, err
	}, nil
}

func downloadAll(ctx context.Context, st *s3.Store, o options) (int64, error) {
	var infos []storage.ObjectInfo
	if err := st.List(ctx, "", func(i storage.ObjectInfo) error { infos = append(infos, i); return nil }); err != nil {
		return 0, err
	}
	if len(infos) == 0 {
		return 0, errors.New("nothing to download")
	}
	if err := os.MkdirAll(o.dst, 0o755); err != nil {
		return 0, err
	}
	par := o.parallelism
	if par == 0 {
		par = s3.DefaultParallelism
	}
	byKey := map[string]storage.ObjectInfo{}
	keys := make([]string, 0, len(infos))
	for _, i := range infos {
		byKey[i.Key] = i
		keys = append(keys, i.Key)
	}
	return forEach(keys, o.files, func(k string) (int64, error) {
		return download(ctx, st, byKey[k], filepath.Join(o.dst, filepath.FromSlash(k)), o.rangeSize, par)
	})
}

// download writes one object to path, in parallel ranges when it is large.
func download(ctx context.Context, st *s3.Store, info storage.ObjectInfo, path string, rangeSize int64, par int) (int64, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return 0, err
	}
	f, err := os.Create(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	var offsets []int64
	for off := int64(0); off < info.Size || off == 0; off += rangeSize {
		offsets = append(offsets, off)
	}
	_, err = forEach(offsets, par, func(off int64) (int64, error) {
		n := min(rangeSize, info.Size-off)
		rc, err := st.Get(ctx, info.Key, off, n)
		if err != nil {
			return 0, err
		}
		defer rc.Close()
		return io.CopyBuffer(io.NewOffsetWriter(f, off), rc, make([]byte, copyBuffer))
	})
	if err != nil {
		return 0, err
	}
	return info.Size, f.Close()
}

// copyBuffer is the size of each write into the downloaded file: large
// writes cost fewer system calls than io.Copy's 32 KiB.
const copyBuffer = 1 << 20

// forEach runs fn on items, n at a time, and sums the results.
func forEach[T any](items []T, n int, fn func(T) (int64, error)) (int64, error) {
	var (
		mu    sync.Mutex
		total int64
		errs  []error
		wg    sync.WaitGroup
		sem   = make(chan struct{}, max(n, 1))
	)
	for _, it := range items {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			m, err := fn(it)
			mu.Lock()
			total += m
			if err != nil {
				errs = append(errs, err)
			}
			mu.Unlock()
		})
	}
	wg.Wait()
	return total, errors.Join(errs...)
}
