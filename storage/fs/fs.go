package fs

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/lifeboat-project/lifeboat/internal/beneath"
	"github.com/lifeboat-project/lifeboat/internal/reserved"
	"github.com/lifeboat-project/lifeboat/storage"
)

// TempPrefix starts the name of every temporary file a Put writes. Get, Stat
// and List never show such files, and keys with a segment starting with it
// are invalid here.
const TempPrefix = reserved.TempPrefix

// xattrSHA256 holds the hex SHA-256 of an object's bytes.
const xattrSHA256 = "user.lifeboat.sha256"

// Store keeps objects as files under a root directory.
type Store struct {
	root string // absolute, clean
}

var _ storage.Store = (*Store)(nil)

// New returns a Store rooted at dir, creating the directory if needed. dir
// must be absolute.
func New(dir string) (*Store, error) {
	if !filepath.IsAbs(dir) {
		return nil, fmt.Errorf("fs: root %q is not an absolute path", dir)
	}
	dir = filepath.Clean(dir)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("fs: create root: %w", err)
	}
	fi, err := os.Stat(dir)
	if err != nil {
		return nil, fmt.Errorf("fs: root: %w", err)
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("fs: root %s is not a directory", dir)
	}
	return &Store{root: dir}, nil
}

// String returns the store's file URL.
func (s *Store) String() string {
	return storage.Location{Scheme: "file", Path: s.root}.String()
}

// checkKey applies storage.CheckKey and refuses temp-file names.
func checkKey(key string) error {
	if err := storage.CheckKey(key); err != nil {
		return err
	}
	for _, seg := range strings.Split(key, "/") {
		if strings.HasPrefix(seg, TempPrefix) {
			return fmt.Errorf("key %q has a segment starting with %q, reserved for temporary files: %w", key, TempPrefix, storage.ErrInvalidKey)
		}
	}
	return nil
}

// openRoot opens the root directory.
func (s *Store) openRoot() (int, error) {
	return unix.Open(s.root, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
}

// openDir opens the directory dir (slash-separated, relative to the root,
// "" for the root) beneath the root without following symlinks
// (beneath.OpenDirAt). With create it makes missing directories.
func (s *Store) openDir(dir string, create bool) (int, error) {
	fd, err := s.openRoot()
	if err != nil {
		return fd, err
	}
	defer unix.Close(fd)
	sub, err := beneath.OpenDirAt(fd, dir, create)
	if err != nil {
		return -1, symlinkError(err)
	}
	return sub, nil
}

// symlinkError turns ELOOP (O_NOFOLLOW met a symlink) into a clearer error.
func symlinkError(err error) error {
	if errors.Is(err, unix.ELOOP) {
		return fmt.Errorf("path has a symlink, which this store refuses: %w", err)
	}
	return err
}

// split returns the directory and file name of key.
func split(key string) (dir, name string) {
	i := strings.LastIndexByte(key, '/')
	if i < 0 {
		return "", key
	}
	return key[:i], key[i+1:]
}

// missing reports whether err means a path component does not exist.
func missing(err error) bool {
	return errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR)
}

// Put writes the object to a temporary file and renames it into place.
func (s *Store) Put(ctx context.Context, key string, r io.Reader, size int64, opts storage.PutOptions) (storage.ObjectInfo, error) {
	if err := checkKey(key); err != nil {
		return storage.ObjectInfo{}, fmt.Errorf("fs: put: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return storage.ObjectInfo{}, fmt.Errorf("fs: put %s: %w", key, err)
	}
	info, err := s.put(ctx, key, r, size, opts)
	if err != nil {
		return storage.ObjectInfo{}, fmt.Errorf("fs: put %s: %w", key, err)
	}
	return info, nil
}

func (s *Store) put(ctx context.Context, key string, r io.Reader, size int64, opts storage.PutOptions) (storage.ObjectInfo, error) {
	dir, name := split(key)
	dfd, err := s.openDir(dir, true)
	if err != nil {
		return storage.ObjectInfo{}, err
	}
	defer unix.Close(dfd)

	tmp := TempPrefix + rand.Text()
	fd, err := unix.Openat(dfd, tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o644)
	if err != nil {
		return storage.ObjectInfo{}, err
	}
	f := os.NewFile(uintptr(fd), filepath.Join(s.root, dir, tmp))
	committed := false
	defer func() {
		if !committed {
			f.Close()
			unix.Unlinkat(dfd, tmp, 0)
		}
	}()

	h := sha256.New()
	n, err := copyCtx(ctx, io.MultiWriter(f, h), r)
	if err != nil {
		return storage.ObjectInfo{}, err
	}
	if size >= 0 && n != size {
		return storage.ObjectInfo{}, fmt.Errorf("read %d bytes, want size %d", n, size)
	}
	sum := hex.EncodeToString(h.Sum(nil))
	if opts.SHA256 != "" && opts.SHA256 != sum {
		return storage.ObjectInfo{}, storage.Permanent(fmt.Errorf("got SHA-256 %s, caller said %s: %w", sum, opts.SHA256, storage.ErrChecksum))
	}
	// Best effort: filesystems without user xattrs simply do not keep it.
	_ = unix.Fsetxattr(fd, xattrSHA256, []byte(sum), 0)
	if err := f.Sync(); err != nil {
		return storage.ObjectInfo{}, err
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return storage.ObjectInfo{}, err
	}
	if err := f.Close(); err != nil {
		return storage.ObjectInfo{}, err
	}
	if err := ctx.Err(); err != nil {
		return storage.ObjectInfo{}, err
	}

	if opts.IfNotExists {
		err = renameNoReplace(dfd, tmp, name)
	} else {
		err = unix.Renameat(dfd, tmp, dfd, name)
	}
	if err != nil {
		if errors.Is(err, unix.EEXIST) {
			return storage.ObjectInfo{}, storage.ErrExists
		}
		return storage.ObjectInfo{}, err
	}
	committed = true
	if err := unix.Fsync(dfd); err != nil {
		return storage.ObjectInfo{}, fmt.Errorf("sync directory: %w", err)
	}
	return storage.ObjectInfo{
		Key:     key,
		Size:    n,
		ModTime: time.Unix(st.Mtim.Unix()),
		SHA256:  sum,
	}, nil
}

// renameNoReplace renames old to new in dfd unless new exists (EEXIST). It
// uses renameat2(RENAME_NOREPLACE) and falls back to link+unlink where the
// kernel or filesystem does not support that flag; both are atomic.
func renameNoReplace(dfd int, old, new string) error {
	err := unix.Renameat2(dfd, old, dfd, new, unix.RENAME_NOREPLACE)
	if !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOSYS) && !errors.Is(err, unix.EOPNOTSUPP) {
		return err
	}
	if err := unix.Linkat(dfd, old, dfd, new, 0); err != nil {
		return err
	}
	unix.Unlinkat(dfd, old, 0)
	return nil
}

// copyCtx copies src to dst, checking ctx between reads.
func copyCtx(ctx context.Context, dst io.Writer, src io.Reader) (int64, error) {
	buf := make([]byte, 1<<20)
	var n int64
	for {
		if err := ctx.Err(); err != nil {
			return n, err
		}
		m, rerr := src.Read(buf)
		if m > 0 {
			w, werr := dst.Write(buf[:m])
			n += int64(w)
			if werr != nil {
				return n, werr
			}
		}
		if rerr == io.EOF {
			return n, nil
		}
		if rerr != nil {
			return n, rerr
		}
	}
}

// openFile opens key for reading without following symlinks.
func (s *Store) openFile(key string) (*os.File, error) {
	dir, name := split(key)
	dfd, err := s.openDir(dir, false)
	if err != nil {
		if missing(err) {
			return nil, storage.ErrNotExist
		}
		return nil, err
	}
	defer unix.Close(dfd)
	fd, err := unix.Openat(dfd, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		if missing(err) {
			return nil, storage.ErrNotExist
		}
		return nil, symlinkError(err)
	}
	f := os.NewFile(uintptr(fd), filepath.Join(s.root, key))
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		f.Close()
		return nil, storage.ErrNotExist
	}
	return f, nil
}

// Get opens key and returns a reader for the requested range.
func (s *Store) Get(ctx context.Context, key string, offset, length int64) (io.ReadCloser, error) {
	if err := checkKey(key); err != nil {
		return nil, fmt.Errorf("fs: get: %w", err)
	}
	if offset < 0 || length < -1 {
		return nil, fmt.Errorf("fs: get %s: invalid range offset %d length %d", key, offset, length)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("fs: get %s: %w", key, err)
	}
	f, err := s.openFile(key)
	if err != nil {
		return nil, fmt.Errorf("fs: get %s: %w", key, err)
	}
	var r io.Reader = f
	if offset > 0 || length >= 0 {
		if length < 0 {
			length = 1<<63 - 1 - offset
		}
		r = io.NewSectionReader(f, offset, length)
	}
	return &reader{ctx: ctx, r: r, f: f}, nil
}

// reader reads an object's range and stops when ctx ends.
type reader struct {
	ctx context.Context
	r   io.Reader
	f   *os.File
}

func (r *reader) Read(p []byte) (int, error) {
	if err := r.ctx.Err(); err != nil {
		return 0, err
	}
	return r.r.Read(p)
}

func (r *reader) Close() error { return r.f.Close() }

// Stat returns key's size, modification time and, where kept, SHA-256.
func (s *Store) Stat(ctx context.Context, key string) (storage.ObjectInfo, error) {
	if err := checkKey(key); err != nil {
		return storage.ObjectInfo{}, fmt.Errorf("fs: stat: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return storage.ObjectInfo{}, fmt.Errorf("fs: stat %s: %w", key, err)
	}
	f, err := s.openFile(key)
	if err != nil {
		return storage.ObjectInfo{}, fmt.Errorf("fs: stat %s: %w", key, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return storage.ObjectInfo{}, fmt.Errorf("fs: stat %s: %w", key, err)
	}
	return storage.ObjectInfo{Key: key, Size: fi.Size(), ModTime: fi.ModTime(), SHA256: sha256Attr(int(f.Fd()))}, nil
}

// sha256Attr reads the SHA-256 kept with an open file, or "".
func sha256Attr(fd int) string {
	buf := make([]byte, 64)
	n, err := unix.Fgetxattr(fd, xattrSHA256, buf)
	if err != nil || n != 64 {
		return ""
	}
	return string(buf)
}

// List walks the tree below prefix in lexical key order.
func (s *Store) List(ctx context.Context, prefix string, fn func(storage.ObjectInfo) error) error {
	if p := strings.TrimSuffix(prefix, "/"); p != "" {
		if err := storage.CheckKey(p); err != nil {
			return fmt.Errorf("fs: list %s: %w", prefix, err)
		}
	}
	dir, rest := split(prefix)
	dfd, err := s.openDir(dir, false)
	if err != nil {
		if missing(err) {
			return nil
		}
		return fmt.Errorf("fs: list %s: %w", prefix, err)
	}
	if err := s.walk(ctx, dfd, dir, rest, fn); err != nil {
		return err
	}
	return nil
}

type entry struct {
	name string
	sort string // name, plus "/" for a directory
	dir  bool
}

// walk lists the directory dfd (key prefix dir), taking ownership of dfd.
// Only names starting with match are visited. Directories sort as name+"/"
// so the output is in lexical order of full keys.
func (s *Store) walk(ctx context.Context, dfd int, dir, match string, fn func(storage.ObjectInfo) error) error {
	f := os.NewFile(uintptr(dfd), filepath.Join(s.root, dir))
	defer f.Close()
	des, err := f.ReadDir(-1)
	if err != nil {
		return fmt.Errorf("fs: list %s: %w", dir, err)
	}
	entries := make([]entry, 0, len(des))
	for _, de := range des {
		name := de.Name()
		if !strings.HasPrefix(name, match) || strings.HasPrefix(name, TempPrefix) {
			continue
		}
		switch {
		case de.IsDir():
			entries = append(entries, entry{name: name, sort: name + "/", dir: true})
		case de.Type().IsRegular():
			entries = append(entries, entry{name: name, sort: name})
		}
	}
	slices.SortFunc(entries, func(a, b entry) int { return strings.Compare(a.sort, b.sort) })
	for _, e := range entries {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("fs: list %s: %w", dir, err)
		}
		key := e.name
		if dir != "" {
			key = dir + "/" + e.name
		}
		if e.dir {
			sub, err := unix.Openat(dfd, e.name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
			if err != nil {
				if missing(err) {
					continue // removed while listing
				}
				return fmt.Errorf("fs: list %s: %w", key, err)
			}
			if err := s.walk(ctx, sub, key, "", fn); err != nil {
				return err
			}
			continue
		}
		info, ok, err := statAt(dfd, e.name, key)
		if err != nil {
			return fmt.Errorf("fs: list %s: %w", key, err)
		}
		if !ok {
			continue
		}
		if err := fn(info); err != nil {
			return err
		}
	}
	return nil
}

// statAt returns the info of the regular file name in dfd; ok is false if it
// vanished or is not a regular file.
func statAt(dfd int, name, key string) (info storage.ObjectInfo, ok bool, err error) {
	fd, err := unix.Openat(dfd, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		if missing(err) || errors.Is(err, unix.ELOOP) {
			return info, false, nil
		}
		return info, false, err
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return info, false, err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return info, false, nil
	}
	return storage.ObjectInfo{
		Key:     key,
		Size:    st.Size,
		ModTime: time.Unix(st.Mtim.Unix()),
		SHA256:  sha256Attr(fd),
	}, true, nil
}

// Delete removes key; a missing key is not an error.
func (s *Store) Delete(ctx context.Context, key string) error {
	if err := checkKey(key); err != nil {
		return fmt.Errorf("fs: delete: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("fs: delete %s: %w", key, err)
	}
	dir, name := split(key)
	dfd, err := s.openDir(dir, false)
	if err != nil {
		if missing(err) {
			return nil
		}
		return fmt.Errorf("fs: delete %s: %w", key, err)
	}
	defer unix.Close(dfd)
	if err := unix.Unlinkat(dfd, name, 0); err != nil {
		if missing(err) {
			return nil
		}
		if errors.Is(err, unix.EISDIR) {
			return nil // a directory is no object
		}
		return fmt.Errorf("fs: delete %s: %w", key, err)
	}
	if err := unix.Fsync(dfd); err != nil {
		return fmt.Errorf("fs: delete %s: sync directory: %w", key, err)
	}
	return nil
}

var _ storage.Sweeper = (*Store)(nil)

// Sweep offers the temporary files of unfinished Puts (named with
// TempPrefix) in the directories below prefix whose every key is under
// prefix, in lexical order of their paths, and removes those fn accepts.
// ModTime is the file's last write: a Put writes its temporary file as the
// bytes come, then only syncs, closes and renames it. Removing the file of
// a Put still in progress makes its rename fail with ENOENT: that Put
// fails, and no partial object ever appears under its key.
func (s *Store) Sweep(ctx context.Context, prefix string, fn func(storage.Leftover) (bool, error)) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("fs: sweep %s: %w", prefix, err)
	}
	if p := strings.TrimSuffix(prefix, "/"); p != "" {
		if err := storage.CheckKey(p); err != nil {
			return fmt.Errorf("fs: sweep %s: %w", prefix, err)
		}
	}
	dir, rest := split(prefix)
	dfd, err := s.openDir(dir, false)
	if err != nil {
		if missing(err) {
			return nil
		}
		return fmt.Errorf("fs: sweep %s: %w", prefix, err)
	}
	return s.sweep(ctx, dfd, dir, rest, fn)
}

// sweep sweeps the directory dfd (key prefix dir), taking ownership of
// dfd: its subdirectories whose names start with match, and, when match is
// empty (every key in it is under the prefix), its temporary files.
func (s *Store) sweep(ctx context.Context, dfd int, dir, match string, fn func(storage.Leftover) (bool, error)) error {
	f := os.NewFile(uintptr(dfd), filepath.Join(s.root, dir))
	defer f.Close()
	des, err := f.ReadDir(-1)
	if err != nil {
		return fmt.Errorf("fs: sweep %s: %w", dir, err)
	}
	slices.SortFunc(des, func(a, b os.DirEntry) int { return strings.Compare(a.Name(), b.Name()) })
	for _, de := range des {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("fs: sweep %s: %w", dir, err)
		}
		name := de.Name()
		path := name
		if dir != "" {
			path = dir + "/" + name
		}
		temp := strings.HasPrefix(name, TempPrefix)
		switch {
		case de.IsDir() && !temp && strings.HasPrefix(name, match):
			sub, err := unix.Openat(dfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
			if err != nil {
				if missing(err) || errors.Is(err, unix.ELOOP) {
					continue // removed, or replaced by a symlink, while sweeping
				}
				return fmt.Errorf("fs: sweep %s: %w", path, err)
			}
			if err := s.sweep(ctx, sub, path, "", fn); err != nil {
				return err
			}
		case temp && match == "" && de.Type().IsRegular():
			var st unix.Stat_t
			if err := unix.Fstatat(dfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
				if missing(err) {
					continue // renamed into place, or removed
				}
				return fmt.Errorf("fs: sweep %s: %w", path, err)
			}
			remove, err := fn(storage.Leftover{Name: path, Size: st.Size, ModTime: time.Unix(st.Mtim.Unix())})
			if err != nil {
				return err
			}
			if !remove {
				continue
			}
			// By name: a file renamed into place since is no longer
			// under it (ENOENT), and names are never reused.
			if err := unix.Unlinkat(dfd, name, 0); err != nil && !missing(err) {
				return fmt.Errorf("fs: sweep %s: %w", path, err)
			}
		}
	}
	return nil
}
