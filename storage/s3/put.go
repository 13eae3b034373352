package s3

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"hash"
	"io"
	"slices"
	"sync"
	"time"

	"github.com/minio/minio-go/v7"
	"golang.org/x/sync/errgroup"

	"github.com/lifeboat-project/lifeboat/storage"
)

// Put uploads r under key: in one PUT when it fits in a part, else as a
// parallel multipart upload. See the package doc for how integrity is kept.
func (s *Store) Put(ctx context.Context, key string, r io.Reader, size int64, opts storage.PutOptions) (storage.ObjectInfo, error) {
	if err := storage.CheckKey(key); err != nil {
		return storage.ObjectInfo{}, fmt.Errorf("s3: put: %w", err)
	}
	if opts.SHA256 != "" {
		if b, err := hex.DecodeString(opts.SHA256); err != nil || len(b) != sha256.Size {
			return storage.ObjectInfo{}, storage.Permanent(fmt.Errorf("s3: put %s: PutOptions.SHA256 %q is not a hex SHA-256: %w", key, opts.SHA256, storage.ErrChecksum))
		}
	}
	if err := ctx.Err(); err != nil {
		return storage.ObjectInfo{}, fmt.Errorf("s3: put %s: %w", key, err)
	}
	ctx, end := call(ctx)
	defer end(nil)
	partSize := s.cfg.PartSize
	if size > partSize*maxParts {
		partSize = (size + maxParts - 1) / maxParts
		if partSize > MaxPartSize {
			return storage.ObjectInfo{}, storage.Permanent(fmt.Errorf("s3: put %s: %d bytes is more than S3 allows in one object", key, size))
		}
	}

	if body, ok := seekableBody(r, size, partSize, opts); ok {
		info, err := s.putOne(ctx, key, body, opts)
		if err == nil {
			_, err = r.(io.Seeker).Seek(size, io.SeekCurrent) // as if read
		}
		return info, err
	}

	bp := s.bufs.Get().(*[]byte)
	first := *bp
	if int64(len(first)) != partSize {
		first = make([]byte, partSize)
	}
	want := partSize
	if size >= 0 && size < want {
		want = size
	}
	n, err := s.read(ctx, r, first[:want])
	if err != nil && err != io.ErrUnexpectedEOF {
		s.bufs.Put(bp)
		return storage.ObjectInfo{}, fmt.Errorf("s3: put %s: read: %w", key, err)
	}
	short := err == io.ErrUnexpectedEOF
	if size >= 0 && int64(n) != min(size, partSize) {
		s.bufs.Put(bp)
		return storage.ObjectInfo{}, fmt.Errorf("s3: put %s: read %d bytes, want size %d: %w", key, n, size, io.ErrUnexpectedEOF)
	}
	if size == int64(n) || (size < 0 && short) || (size < 0 && n == 0) {
		info, err := s.putSingle(ctx, key, first[:n], opts)
		s.bufs.Put(bp)
		return info, err
	}
	return s.putMultipart(ctx, key, r, size, partSize, first[:n], bp, opts)
}

// read fills p from r like io.ReadFull, honouring ctx.
// It returns io.ErrUnexpectedEOF when r ends before p is full (also when it
// is empty).
func (s *Store) read(ctx context.Context, r io.Reader, p []byte) (int, error) {
	const chunk = 1 << 20
	n := 0
	for n < len(p) {
		if err := ctx.Err(); err != nil {
			return n, err
		}
		m, err := r.Read(p[n:min(len(p), n+chunk)])
		n += m
		if err == io.EOF {
			return n, io.ErrUnexpectedEOF
		}
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// putOptions returns the options shared by every request of a Put.
func putOptions(opts storage.PutOptions, meta map[string]string) minio.PutObjectOptions {
	po := minio.PutObjectOptions{UserMetadata: meta, DisableContentSha256: true}
	if opts.IfNotExists {
		po.SetMatchETagExcept("*")
	}
	return po
}

// putSingle uploads b in one PUT. A caller's sums go as they are (see
// checkFor). Otherwise putSingle computes the SHA-256 and, in the same pass
// over b, a CRC32C for the server to check: both sums then come from the
// same bytes, so the cheap one guards the transfer as well as the expensive
// one would, and the server does not spend a SHA-256 on every byte (about a
// sixth of its CPU on a single PUT; docs/BENCHMARKS.md).
func (s *Store) putSingle(ctx context.Context, key string, b []byte, opts storage.PutOptions) (storage.ObjectInfo, error) {
	body := io.NewSectionReader(bytes.NewReader(b), 0, int64(len(b)))
	if opts.SHA256 == "" {
		opts.SHA256, opts.CRC32C = storage.Checksums(b)
	}
	return s.putOne(ctx, key, body, opts)
}

// check is the checksum header a single PUT carries for the server to
// verify the body against: x-amz-checksum-sha256 or x-amz-checksum-crc32c,
// base64 of the big-endian digest, as S3 defines them.
type check struct {
	header string
	value  string
}

// checkFor is the check for a body with opts' sums: the CRC32C when
// given, which the caller computed in one pass with the SHA-256, else the
// SHA-256.
func checkFor(opts storage.PutOptions) check {
	if opts.CRC32C != 0 {
		return crc32cCheck(opts.CRC32C)
	}
	return sha256Check(opts.SHA256)
}

func sha256Check(hexSum string) check {
	raw, _ := hex.DecodeString(hexSum)
	return check{"x-amz-checksum-sha256", base64.StdEncoding.EncodeToString(raw)}
}

func crc32cCheck(crc uint32) check {
	var c [4]byte
	binary.BigEndian.PutUint32(c[:], crc)
	return check{"x-amz-checksum-crc32c", base64.StdEncoding.EncodeToString(c[:])}
}

// putOne uploads body, whose hex SHA-256 is opts.SHA256, in one PUT. The
// SHA-256 is stored as user metadata (Stat reports it); checkFor(opts) goes
// as a header that the server verifies the body against and stores. The
// payload is UNSIGNED-PAYLOAD: also sending a digest as the signed payload
// hash would make the server hash twice, about 10% slower
// (docs/BENCHMARKS.md). body can be rewound, so minio-go can retry the
// request.
func (s *Store) putOne(ctx context.Context, key string, body *io.SectionReader, opts storage.PutOptions) (storage.ObjectInfo, error) {
	chk := checkFor(opts)
	po := putOptions(opts, map[string]string{chk.header: chk.value, metaSHA256: opts.SHA256})
	ui, err := s.core.PutObject(ctx, s.cfg.Bucket, s.prefix+key, body, body.Size(), "", "", po)
	if err != nil {
		return storage.ObjectInfo{}, s.translate(ctx, "put", key, err)
	}
	if got := echoed(ui, chk.header); got != "" && got != chk.value {
		return storage.ObjectInfo{}, storage.Permanent(fmt.Errorf("s3: put %s: server stored %s %s, sent %s: %w", key, chk.header, got, chk.value, storage.ErrChecksum))
	}
	return storage.ObjectInfo{Key: key, Size: body.Size(), ModTime: modTime(ui.LastModified), SHA256: opts.SHA256}, nil
}

// echoed is the checksum the server returned for header, or "" when it
// returned none (not every S3-compatible server does).
func echoed(ui minio.UploadInfo, header string) string {
	if header == "x-amz-checksum-crc32c" {
		return ui.ChecksumCRC32C
	}
	return ui.ChecksumSHA256
}

// seekableBody returns a view of exactly the next size bytes of r when
// they can go out in one PUT without being copied into a part buffer: r is
// held in memory and readable at an offset (a bytes.Reader, a
// strings.Reader, an io.SectionReader) with at least size bytes left, the
// caller gave the SHA-256 (so nothing needs to read the bytes before they
// are sent) and the object fits in one part. (storage.Limit hides the
// reader behind one that paces its reads, so a limited Put always takes the
// buffered path.) The view can be rewound for
// minio-go's retries. Otherwise Put takes the buffered path, which also
// reports a reader shorter than size.
func seekableBody(r io.Reader, size, partSize int64, opts storage.PutOptions) (*io.SectionReader, bool) {
	if opts.SHA256 == "" || size < 0 || size > partSize {
		return nil, false
	}
	rs, ok := r.(interface {
		io.ReaderAt
		io.Seeker
		Size() int64
	})
	if !ok {
		return nil, false
	}
	off, err := rs.Seek(0, io.SeekCurrent)
	if err != nil || rs.Size()-off < size {
		return nil, false
	}
	return io.NewSectionReader(rs, off, size), true
}

// modTime is t, or now when the server did not say.
func modTime(t time.Time) time.Time {
	if t.IsZero() {
		return time.Now()
	}
	return t
}

// part is one filled buffer on its way to a worker.
type part struct {
	num int
	buf []byte
	crc uint32  // CRC32C of buf
	bp  *[]byte // pool entry to return, or nil
}

// putMultipart uploads first and the rest of r as a multipart upload with
// Parallelism parts in flight. The reading goroutine hashes the stream and
// each part's CRC32C in the same pass; an errgroup uploads the parts. Any
// failure aborts the upload.
func (s *Store) putMultipart(ctx context.Context, key string, r io.Reader, size, partSize int64, first []byte, firstBP *[]byte, opts storage.PutOptions) (info storage.ObjectInfo, err error) {
	obj := s.prefix + key
	meta := map[string]string{"x-amz-checksum-algorithm": "CRC32C"}
	if opts.SHA256 != "" {
		meta[metaSHA256] = opts.SHA256 // checked before Complete
	}
	uploadID, err := s.core.NewMultipartUpload(ctx, s.cfg.Bucket, obj, putOptions(opts, meta))
	if err != nil {
		s.bufs.Put(firstBP)
		return storage.ObjectInfo{}, s.translate(ctx, "put", key, err)
	}
	defer func() {
		if err != nil {
			// Abort even when ctx is done: no unfinished upload is left.
			// The abort is a call of its own, so a server that does not
			// answer it ends it at the first timeout.
			actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
			defer cancel()
			actx, end := call(actx)
			defer end(nil)
			_ = s.core.AbortMultipartUpload(actx, s.cfg.Bucket, obj, uploadID)
		}
	}()

	// At most Parallelism parts upload at once; g.Go blocks the reader
	// until a slot is free, so no more than Parallelism+1 buffers are in
	// use. The first part that fails cancels gctx, which stops the reader
	// and the other parts.
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(s.cfg.Parallelism)
	var (
		mu        sync.Mutex
		completed []minio.CompletePart
	)
	upload := func(p part) {
		g.Go(func() error {
			cp, err := s.uploadPart(gctx, obj, uploadID, p)
			if p.bp != nil {
				s.bufs.Put(p.bp)
			}
			if err != nil {
				return err
			}
			mu.Lock()
			completed = append(completed, cp)
			mu.Unlock()
			return nil
		})
	}

	h := sha256.New()
	total, rerr := s.feed(gctx, r, size, partSize, first, firstBP, h, upload)
	if werr := g.Wait(); werr != nil {
		return storage.ObjectInfo{}, s.translate(ctx, "put", key, werr)
	}
	if cause := context.Cause(ctx); cause != nil {
		return storage.ObjectInfo{}, s.translate(ctx, "put", key, cause)
	}
	if rerr != nil {
		return storage.ObjectInfo{}, fmt.Errorf("s3: put %s: %w", key, rerr)
	}
	if size >= 0 && total != size {
		return storage.ObjectInfo{}, fmt.Errorf("s3: put %s: read %d bytes, want size %d: %w", key, total, size, io.ErrUnexpectedEOF)
	}
	sum := hex.EncodeToString(h.Sum(nil))
	if opts.SHA256 != "" && opts.SHA256 != sum {
		return storage.ObjectInfo{}, storage.Permanent(fmt.Errorf("s3: put %s: got SHA-256 %s, caller said %s: %w", key, sum, opts.SHA256, storage.ErrChecksum))
	}
	slices.SortFunc(completed, func(a, b minio.CompletePart) int { return a.PartNumber - b.PartNumber })
	ui, err := s.core.CompleteMultipartUpload(ctx, s.cfg.Bucket, obj, uploadID, completed, putOptions(opts, nil))
	if err != nil {
		return storage.ObjectInfo{}, s.translate(ctx, "put", key, err)
	}
	return storage.ObjectInfo{Key: key, Size: total, ModTime: modTime(ui.LastModified), SHA256: sum}, nil
}

// feed hashes first and the rest of r into h and hands them to upload
// part by part. It returns the bytes read.
func (s *Store) feed(ctx context.Context, r io.Reader, size, partSize int64, first []byte, firstBP *[]byte, h hash.Hash, upload func(part)) (int64, error) {
	send := func(p part) error {
		p.crc = storage.WriteSums(h, 0, p.buf)
		if ctx.Err() != nil {
			if p.bp != nil {
				s.bufs.Put(p.bp)
			}
			return context.Cause(ctx)
		}
		upload(p)
		return nil
	}
	total := int64(len(first))
	if err := send(part{num: 1, buf: first, bp: firstBP}); err != nil {
		return total, err
	}
	for num := 2; size < 0 || total < size; num++ {
		if num > maxParts {
			return total, storage.Permanent(fmt.Errorf("more than %d parts of %d bytes; the object is larger than S3 allows in one upload", maxParts, partSize))
		}
		want := partSize
		if size >= 0 {
			want = min(want, size-total)
		}
		bp := s.bufs.Get().(*[]byte)
		buf := *bp
		if int64(len(buf)) != partSize {
			buf, bp = make([]byte, partSize), nil
		}
		n, err := s.read(ctx, r, buf[:want])
		total += int64(n)
		if err != nil && !(err == io.ErrUnexpectedEOF && size < 0) {
			if bp != nil {
				s.bufs.Put(bp)
			}
			return total, err
		}
		if n == 0 { // unknown size ended on a part boundary
			if bp != nil {
				s.bufs.Put(bp)
			}
			return total, nil
		}
		if err := send(part{num: num, buf: buf[:n], bp: bp}); err != nil {
			return total, err
		}
		if err == io.ErrUnexpectedEOF {
			return total, nil
		}
	}
	return total, nil
}

// uploadPart uploads one part with its CRC32C for the server to check.
func (s *Store) uploadPart(ctx context.Context, obj, uploadID string, p part) (minio.CompletePart, error) {
	crc := crc32cCheck(p.crc).value
	hdr := make(map[string][]string, 1)
	hdr["X-Amz-Checksum-Crc32c"] = []string{crc}
	op, err := s.core.PutObjectPart(ctx, s.cfg.Bucket, obj, uploadID, p.num, bytes.NewReader(p.buf), int64(len(p.buf)),
		minio.PutObjectPartOptions{CustomHeader: hdr, DisableContentSha256: true})
	if err != nil {
		return minio.CompletePart{}, err
	}
	if op.ChecksumCRC32C != "" && op.ChecksumCRC32C != crc {
		return minio.CompletePart{}, storage.Permanent(fmt.Errorf("part %d: server CRC32C %s, sent %s: %w", p.num, op.ChecksumCRC32C, crc, storage.ErrChecksum))
	}
	return minio.CompletePart{PartNumber: p.num, ETag: op.ETag, ChecksumCRC32C: crc}, nil
}
