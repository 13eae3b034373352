package checkpoint

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/lifeboat-project/lifeboat/format"
	"github.com/lifeboat-project/lifeboat/storage"
)

// ErrUnreadable marks an upload refused because lifeboat may not read a
// file of the checkpoint (permission denied: a file of mode 000, another
// user's file, lifeboat running as another user than the trainer). The
// checkpoint is not stored: without that file it is not whole, and a
// trainer resumed from it would miss what it saved there. The error also
// wraps ErrInterrupted and is permanent, so it is reported once and not
// tried again until the checkpoint's files change (a chmod does).
var ErrUnreadable = errors.New("lifeboat may not read a file of the checkpoint")

// localFile is a regular file of a checkpoint directory as stat-ed: its
// identity is what the bytes read from it must still match.
type localFile struct {
	rel  string
	abs  string
	mode fs.FileMode
	identity
}

// identity is what the file system says about a file's content: when all
// of it is unchanged, so are the bytes (the same rule as restic's and
// rsync's quick check; the change time, which no user call can set back,
// guards it: it moves on every write, truncate, chmod, rename and utimes).
type identity struct {
	dev, ino     uint64
	size         int64
	mtime, ctime int64 // ns
}

// fileID identifies a file's content across uploads by one Uploader.
type fileID struct {
	abs string
	identity
}

func (f localFile) id() fileID { return fileID{abs: f.abs, identity: f.identity} }

func identityOf(st *syscall.Stat_t) identity {
	return identity{dev: st.Dev, ino: st.Ino, size: st.Size, mtime: st.Mtim.Nano(), ctime: st.Ctim.Nano()}
}

func unixIdentity(st *unix.Stat_t) identity {
	return identity{dev: st.Dev, ino: st.Ino, size: st.Size, mtime: st.Mtim.Nano(), ctime: st.Ctim.Nano()}
}

// newLocalFile describes the file rel under dir that fi (from Lstat) is.
func newLocalFile(dir, rel string, fi fs.FileInfo) localFile {
	f := localFile{rel: rel, abs: filepath.Join(dir, filepath.FromSlash(rel)), mode: fi.Mode()}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		f.identity = identityOf(st)
	} else {
		f.size, f.mtime = fi.Size(), fi.ModTime().UnixNano()
	}
	return f
}

// restat stats f's path again (the file changed since it was stat-ed). A
// path that no longer names a regular file is an error wrapping ErrChanged.
func restat(dir string, f localFile) (localFile, error) {
	fi, err := os.Lstat(f.abs)
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) {
		return f, fmt.Errorf("checkpoint: upload %s: it was removed while it was uploaded: %w", f.abs, ErrChanged)
	}
	if err != nil {
		return f, fmt.Errorf("checkpoint: upload %s: %w", f.abs, err)
	}
	if !fi.Mode().IsRegular() {
		return f, fmt.Errorf("checkpoint: upload %s: it was replaced by a %s while it was uploaded: %w", f.abs, format.FileType(fi.Mode()), ErrChanged)
	}
	return newLocalFile(dir, f.rel, fi), nil
}

// openBeneath opens the file rel under dir for reading without following a
// symlink in rel (O_NOFOLLOW on every component), and without blocking on
// a FIFO. A path that no longer leads to a file that way (a component
// replaced by a symlink, removed, or not a directory) is an error wrapping
// ErrChanged.
func openBeneath(dir, rel string) (*os.File, error) {
	dfd, err := openRetry(unix.AT_FDCWD, dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC)
	if err != nil {
		return nil, err
	}
	parts := strings.Split(rel, "/")
	for _, p := range parts[:len(parts)-1] {
		next, err := openRetry(dfd, p, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC)
		unix.Close(dfd)
		if err != nil {
			return nil, changedOpen(err)
		}
		dfd = next
	}
	fd, err := openRetry(dfd, parts[len(parts)-1], unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_NOCTTY|unix.O_CLOEXEC)
	unix.Close(dfd)
	if err != nil {
		return nil, changedOpen(err)
	}
	return os.NewFile(uintptr(fd), filepath.Join(dir, filepath.FromSlash(rel))), nil
}

func openRetry(dfd int, name string, flags int) (int, error) {
	for {
		fd, err := unix.Openat(dfd, name, flags, 0)
		if err != unix.EINTR {
			return fd, err
		}
	}
}

// changedOpen marks the errors of an open that say the path no longer
// leads to the file stat-ed: ELOOP (a symlink), ENOENT, ENOTDIR, ENXIO (a
// socket).
func changedOpen(err error) error {
	switch {
	case errors.Is(err, unix.ELOOP):
		return fmt.Errorf("it or a directory above it was replaced by a symlink, which is not followed: %w", ErrChanged)
	case errors.Is(err, unix.ENOENT), errors.Is(err, unix.ENOTDIR), errors.Is(err, unix.ENXIO):
		return fmt.Errorf("%v: %w", err, ErrChanged)
	}
	return err
}

// readCheck is what readChunks checks besides the file's identity.
type readCheck struct {
	format bool // run the format checks of package format
}

// readChunks reads f in chunks of chunkSize into buffers taken from pool and
// hands each to send, which owns it from then on. The file is opened
// without following symlinks and must be the regular file stat-ed, with
// the same device, inode, size, modification and change times; after the
// last byte it must still have the same size and times. Otherwise the error
// wraps ErrChanged (the caller may stat and read it again).
//
// With check.format, the file's header is checked before it is read and
// every byte read is fed to its format's stream check in this same pass; a
// file that is not whole is an error wrapping ErrInterrupted and
// format.ErrTorn.
func readChunks(ctx context.Context, dir string, f localFile, chunkSize int, pool *chunkBuffers, check readCheck, send func([]byte)) error {
	fh, err := openBeneath(dir, f.rel)
	if errors.Is(err, unix.EACCES) || errors.Is(err, unix.EPERM) {
		return storage.Permanent(fmt.Errorf("checkpoint: upload %s: %w (uid %d: %v), so %w; make it readable (chmod) or run lifeboat as the user that writes it",
			f.abs, ErrUnreadable, os.Geteuid(), err, ErrInterrupted))
	}
	if err != nil {
		return fmt.Errorf("checkpoint: upload %s: %w", f.abs, err)
	}
	defer fh.Close()
	var st unix.Stat_t
	if err := unix.Fstat(int(fh.Fd()), &st); err != nil {
		return fmt.Errorf("checkpoint: upload %s: %w", f.abs, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return fmt.Errorf("checkpoint: upload %s: it was replaced by a file that is not regular (mode %#o): %w", f.abs, st.Mode, ErrChanged)
	}
	if got := unixIdentity(&st); got != f.identity {
		return fmt.Errorf("checkpoint: upload %s: %s since it was scanned: %w", f.abs, describeChange(f.identity, got), ErrChanged)
	}
	// Reads of a regular file never block; clear O_NONBLOCK all the same.
	if err := unix.SetNonblock(int(fh.Fd()), false); err != nil {
		return fmt.Errorf("checkpoint: upload %s: %w", f.abs, err)
	}

	var stream format.Stream
	if check.format {
		// The content decides which check runs; one that cannot vouch
		// for the file (format.ErrUnchecked) leaves it to the death rule.
		var err error
		if _, stream, err = format.Begin(fh, f.size); err != nil && !errors.Is(err, format.ErrUnchecked) {
			if cerr := stillSame(fh, f); cerr != nil {
				return cerr
			}
			return notWhole(f, err)
		}
	}
	var total int64
	for {
		buf, ok := pool.take(ctx, nil, chunkSize)
		if !ok {
			return context.Cause(ctx)
		}
		n, err := io.ReadFull(fh, buf)
		if n > 0 {
			total += int64(n)
			if stream != nil {
				stream.Write(buf[:n])
			}
			send(buf[:n])
		} else {
			pool.give(buf)
		}
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			break
		}
		if err != nil {
			return fmt.Errorf("checkpoint: upload %s: read: %w", f.abs, err)
		}
	}
	if err := stillSame(fh, f); err != nil {
		return err
	}
	if total != f.size {
		return fmt.Errorf("checkpoint: upload %s: read %d bytes of %d: %w", f.abs, total, f.size, ErrChanged)
	}
	if stream != nil {
		if err := stream.Close(); err != nil {
			return notWhole(f, err)
		}
	}
	return nil
}

// stillSame fails with ErrChanged unless the open file still has f's size,
// modification and change times.
func stillSame(fh *os.File, f localFile) error {
	var st unix.Stat_t
	if err := unix.Fstat(int(fh.Fd()), &st); err != nil {
		return fmt.Errorf("checkpoint: upload %s: %w", f.abs, err)
	}
	if got := unixIdentity(&st); got != f.identity {
		return fmt.Errorf("checkpoint: upload %s: %s while it was read: %w", f.abs, describeChange(f.identity, got), ErrChanged)
	}
	return nil
}

func describeChange(was, now identity) string {
	switch {
	case was.dev != now.dev || was.ino != now.ino:
		return "it was replaced by another file"
	case was.size != now.size:
		return fmt.Sprintf("its size changed from %d to %d bytes", was.size, now.size)
	case was.mtime != now.mtime:
		return "its modification time changed"
	}
	return "its change time moved (it was written, or its times were set)"
}

// notWhole is the error of a file that failed its format check. It is
// permanent: reading the same bytes again cannot make them whole.
func notWhole(f localFile, err error) error {
	if !errors.Is(err, format.ErrTorn) {
		return fmt.Errorf("checkpoint: upload %s: format check: %w", f.abs, err)
	}
	return storage.Permanent(&interruptedError{rel: f.rel, err: fmt.Errorf("checkpoint: upload %s: %w: %w", f.abs, ErrInterrupted, err)})
}

// interruptedError is an ErrInterrupted with the file that made the
// checkpoint not whole.
type interruptedError struct {
	rel string // slash-separated, relative to the uploaded directory
	err error
}

func (e *interruptedError) Error() string { return e.err.Error() }
func (e *interruptedError) Unwrap() error { return e.err }

// InterruptedPath returns the path, relative to the uploaded directory and
// slash-separated, of the file (or, for a set of files that is not whole,
// a file of the set) that made err an ErrInterrupted; "" when err names
// none.
func InterruptedPath(err error) string {
	var ie *interruptedError
	if errors.As(err, &ie) {
		return ie.rel
	}
	return ""
}

// statFiles stats the given paths relative to dir: the regular files,
// sorted by relative slash path, and the other entries it leaves out.
func statFiles(dir string, paths []string) (files []localFile, skipped []string, err error) {
	if len(paths) > MaxFiles {
		return nil, nil, fmt.Errorf("checkpoint: %d files under %s, over the %d limit", len(paths), dir, MaxFiles)
	}
	seen := make(map[string]bool, len(paths))
	for _, rel := range paths {
		if err := CheckPath(rel); err != nil {
			return nil, nil, fmt.Errorf("checkpoint: file %q under %s: %w", rel, dir, err)
		}
		if seen[rel] {
			continue
		}
		seen[rel] = true
		abs := filepath.Join(dir, filepath.FromSlash(rel))
		fi, err := os.Lstat(abs)
		if err != nil {
			return nil, nil, fmt.Errorf("checkpoint: stat %s: %w", abs, err)
		}
		if !fi.Mode().IsRegular() {
			skipped = append(skipped, rel)
			continue
		}
		files = append(files, newLocalFile(dir, rel, fi))
	}
	slices.SortFunc(files, func(a, b localFile) int { return strings.Compare(a.rel, b.rel) })
	slices.Sort(skipped)
	return files, skipped, nil
}

// scanDir lists the regular files under dir, sorted by relative slash path,
// and the other entries it leaves out. Restore's temporary directories are
// neither.
func scanDir(dir string) (files []localFile, skipped []string, err error) {
	err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p == dir {
			if !d.IsDir() {
				return fmt.Errorf("%s is not a directory", dir)
			}
			return nil
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		if strings.HasPrefix(d.Name(), tempPrefix) {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		switch {
		case d.IsDir():
			return nil
		case !d.Type().IsRegular():
			skipped = append(skipped, rel)
			return nil
		}
		if err := CheckPath(rel); err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		files = append(files, newLocalFile(dir, rel, fi))
		return nil
	})
	if err != nil {
		return nil, nil, fmt.Errorf("checkpoint: scan %s: %w", dir, err)
	}
	if len(files) > MaxFiles {
		return nil, nil, fmt.Errorf("checkpoint: scan %s: %d files, over the %d limit", dir, len(files), MaxFiles)
	}
	slices.SortFunc(files, func(a, b localFile) int { return strings.Compare(a.rel, b.rel) })
	return files, skipped, nil
}
