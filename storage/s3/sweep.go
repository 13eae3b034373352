package s3

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/minio/minio-go/v7"

	"github.com/lifeboat-project/lifeboat/storage"
)

var _ storage.Sweeper = (*Store)(nil)

// Sweep offers the multipart uploads of keys under prefix in this store's
// bucket and prefix that were initiated and never completed or aborted
// (a Put's putMultipart aborts its own upload when it fails, but a process
// killed in the middle cannot), and aborts those fn accepts. S3 keeps such
// uploads' parts, and bills them, until they are aborted. ModTime is when
// the upload was initiated; Size is -1 (its parts are not listed).
// Aborting the upload of a Put still in progress makes its Complete fail:
// that Put fails, and no partial object ever appears under its key.
//
// Uploads are listed by prefix, as S3 defines it. MinIO reads the prefix
// of that listing as one object's whole key and so answers nothing for a
// real prefix; when the listing by prefix finds nothing, Sweep lists the
// bucket's uploads without a prefix (MinIO answers that from the uploads
// it knows since it started) and keeps only those under the prefix. A
// refusal of that second listing is not an error: the one S3 defines was
// allowed and answered.
func (s *Store) Sweep(ctx context.Context, prefix string, fn func(storage.Leftover) (bool, error)) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("s3: sweep %s: %w", prefix, err)
	}
	if p := strings.TrimSuffix(prefix, "/"); p != "" {
		if err := storage.CheckKey(p); err != nil {
			return fmt.Errorf("s3: sweep: %w", err)
		}
	}
	ctx, end := call(ctx)
	defer end(nil)
	full := s.prefix + prefix
	offered := map[string]bool{} // upload IDs
	if err := s.sweepListing(ctx, prefix, full, offered, fn); err != nil {
		return err
	}
	if len(offered) > 0 || full == "" {
		return nil
	}
	return s.sweepListing(ctx, prefix, "", offered, fn)
}

// sweepListing lists the bucket's incomplete uploads under list and
// offers those under the store's prefix plus prefix not offered yet.
func (s *Store) sweepListing(ctx context.Context, prefix, list string, offered map[string]bool, fn func(storage.Leftover) (bool, error)) error {
	lctx, cancel := context.WithCancel(ctx)
	defer cancel() // stops minio-go's listing goroutine when fn stops early
	want := s.prefix + prefix
	for up := range s.client.ListIncompleteUploads(lctx, s.cfg.Bucket, list, true) {
		if up.Err != nil {
			var resp minio.ErrorResponse
			if list != want && errors.As(up.Err, &resp) && classifyAnswer(resp) == kindDenied {
				return nil // the listing of the whole bucket, refused
			}
			return s.translate(ctx, "sweep", prefix, up.Err)
		}
		if !strings.HasPrefix(up.Key, want) || offered[up.UploadID] {
			continue
		}
		offered[up.UploadID] = true
		key := strings.TrimPrefix(up.Key, s.prefix)
		remove, err := fn(storage.Leftover{Name: key + " (upload " + up.UploadID + ")", Size: -1, ModTime: up.Initiated})
		if err != nil {
			return err
		}
		if !remove {
			continue
		}
		// This upload only, by its ID: minio-go's RemoveIncompleteUpload
		// would abort every upload of the key, also a younger one that a
		// live Put is writing.
		err = s.core.AbortMultipartUpload(ctx, s.cfg.Bucket, up.Key, up.UploadID)
		var resp minio.ErrorResponse
		if err != nil && !(errors.As(err, &resp) && resp.Code == minio.NoSuchUpload) {
			return s.translate(ctx, "sweep", key, err)
		}
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("s3: sweep %s: %w", prefix, failed(ctx, err))
	}
	return nil
}
