// Package beneath creates, renames and removes files beneath a directory
// without ever following a symbolic link or leaving the directory.
//
// A Dir is a directory opened once (the caller's path to it may hold
// links: that is the caller's choice). Every path given to its methods is
// slash-separated and relative to it; "..", "." and empty segments are
// refused. Directories on the way are resolved with openat2(2) and
// RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS|RESOLVE_NO_MAGICLINKS where the kernel
// has it, and otherwise one segment at a time with openat(2) and
// O_DIRECTORY|O_NOFOLLOW, which refuses the same paths. The last segment
// is then used through the parent's descriptor with the *at calls:
// openat(O_NOFOLLOW), mkdirat, renameat, unlinkat, none of which follows a
// link there. A path that meets a symlink fails with an error wrapping
// ELOOP (ErrSymlink says so in words); a directory swapped for a link
// between two calls is met the same way, so nothing outside the directory
// is ever created, written, renamed or removed through it.
//
// Temporary files and directories get names no one can predict
// (crypto/rand) and are created with O_CREAT|O_EXCL|O_NOFOLLOW (mkdirat for
// directories), so a name planted in advance is never written through.
//
// It imports only the standard library and golang.org/x/sys/unix.
package beneath

import (
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// ErrSymlink wraps the ELOOP of a path that meets a symbolic link.
var ErrSymlink = errors.New("the path has a symbolic link, which lifeboat never follows inside the directory")

// Dir is an open directory; see the package doc.
type Dir struct {
	fd   int
	name string // for errors and os.File names
}

// Open opens the directory path.
func Open(path string) (*Dir, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: path, Err: err}
	}
	return &Dir{fd: fd, name: path}, nil
}

// Close closes d.
func (d *Dir) Close() error { return unix.Close(d.fd) }

// Name is the path d was opened by, with the relative path it was
// reached by, if any.
func (d *Dir) Name() string { return d.name }

// Fd is d's descriptor, owned by d.
func (d *Dir) Fd() int { return d.fd }

// Sync syncs d.
func (d *Dir) Sync() error { return unix.Fsync(d.fd) }

// join is the name of rel in d, for errors.
func (d *Dir) join(rel string) string {
	if rel == "" {
		return d.name
	}
	return strings.TrimSuffix(d.name, "/") + "/" + rel
}

// CheckPath fails unless rel is a relative slash path of plain segments
// ("" is d itself).
func CheckPath(rel string) error {
	if rel == "" {
		return nil
	}
	if strings.HasPrefix(rel, "/") {
		return fmt.Errorf("path %q is absolute", rel)
	}
	for _, seg := range strings.Split(rel, "/") {
		if seg == "" || seg == "." || seg == ".." {
			return fmt.Errorf("path %q has a segment %q", rel, seg)
		}
	}
	return nil
}

// split returns rel's parent ("" for d) and last segment.
func split(rel string) (string, string) {
	i := strings.LastIndexByte(rel, '/')
	if i < 0 {
		return "", rel
	}
	return rel[:i], rel[i+1:]
}

// wrap turns err of op on rel into a PathError, ELOOP into ErrSymlink too.
func (d *Dir) wrap(op, rel string, err error) error {
	if errors.Is(err, unix.ELOOP) && !errors.Is(err, ErrSymlink) {
		err = fmt.Errorf("%w: %w", ErrSymlink, err)
	}
	return &fs.PathError{Op: op, Path: d.join(rel), Err: err}
}

// noOpenat2 is true once the kernel (or a seccomp filter) refused
// openat2; tests set it to run the fallback.
var noOpenat2 atomic.Bool

const dirFlags = unix.O_RDONLY | unix.O_DIRECTORY | unix.O_NOFOLLOW | unix.O_CLOEXEC

// OpenDirAt opens the directory rel beneath the directory dfd, never
// following a symlink (an error wrapping ELOOP) nor leaving dfd. With
// create it makes the missing directories (mode 0755, less the umask).
// rel "" opens dfd itself again. The caller closes the descriptor.
func OpenDirAt(dfd int, rel string, create bool) (int, error) {
	if err := CheckPath(rel); err != nil {
		return -1, err
	}
	if rel == "" {
		return unix.Openat(dfd, ".", dirFlags, 0)
	}
	if !noOpenat2.Load() {
		fd, err := unix.Openat2(dfd, rel, &unix.OpenHow{Flags: dirFlags,
			Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS})
		switch {
		case err == nil:
			return fd, nil
		case errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.EPERM) || errors.Is(err, unix.E2BIG):
			noOpenat2.Store(true) // no openat2 here: walk
		case errors.Is(err, unix.ENOENT) && create:
			// walk, making what is missing
		case errors.Is(err, unix.ENOTDIR) || errors.Is(err, unix.EXDEV) || errors.Is(err, unix.EAGAIN):
			// walk, to tell a symlink (ELOOP) from a file
		default:
			return -1, err
		}
	}
	return walk(dfd, rel, create)
}

// walk opens rel beneath dfd one segment at a time with O_NOFOLLOW.
func walk(dfd int, rel string, create bool) (int, error) {
	fd, err := unix.Openat(dfd, ".", dirFlags, 0)
	if err != nil {
		return -1, err
	}
	for _, seg := range strings.Split(rel, "/") {
		next, err := unix.Openat(fd, seg, dirFlags, 0)
		if errors.Is(err, unix.ENOENT) && create {
			if err = unix.Mkdirat(fd, seg, 0o755); err == nil || errors.Is(err, unix.EEXIST) {
				next, err = unix.Openat(fd, seg, dirFlags, 0)
			}
		}
		if errors.Is(err, unix.ENOTDIR) && isSymlink(fd, seg) {
			err = unix.ELOOP // O_DIRECTORY|O_NOFOLLOW reports a symlink as ENOTDIR
		}
		unix.Close(fd)
		if err != nil {
			return -1, err
		}
		fd = next
	}
	return fd, nil
}

// isSymlink reports whether name in dfd is a symlink.
func isSymlink(dfd int, name string) bool {
	var st unix.Stat_t
	return unix.Fstatat(dfd, name, &st, unix.AT_SYMLINK_NOFOLLOW) == nil && st.Mode&unix.S_IFMT == unix.S_IFLNK
}

// OpenDir opens the directory rel beneath d (OpenDirAt).
func (d *Dir) OpenDir(rel string, create bool) (*Dir, error) {
	fd, err := OpenDirAt(d.fd, rel, create)
	if err != nil {
		return nil, d.wrap("open", rel, err)
	}
	return &Dir{fd: fd, name: d.join(rel)}, nil
}

// MkdirAll makes the directory rel and its missing parents beneath d.
func (d *Dir) MkdirAll(rel string) error {
	fd, err := OpenDirAt(d.fd, rel, true)
	if err != nil {
		return d.wrap("mkdir", rel, err)
	}
	return unix.Close(fd)
}

// parent opens rel's parent (making it with create) and returns it with
// rel's last segment.
func (d *Dir) parent(op, rel string, create bool) (int, string, error) {
	if err := CheckPath(rel); err != nil || rel == "" {
		if err == nil {
			err = errors.New("empty path")
		}
		return -1, "", d.wrap(op, rel, err)
	}
	dir, name := split(rel)
	fd, err := OpenDirAt(d.fd, dir, create)
	if err != nil {
		return -1, "", d.wrap(op, rel, err)
	}
	return fd, name, nil
}

// OpenFile opens the file rel beneath d with flag (O_NOFOLLOW and
// O_CLOEXEC are added: a symlink there is ELOOP) and, when it creates it,
// perm. With O_CREAT the parents must exist.
func (d *Dir) OpenFile(rel string, flag int, perm uint32) (*os.File, error) {
	pfd, name, err := d.parent("open", rel, false)
	if err != nil {
		return nil, err
	}
	defer unix.Close(pfd)
	fd, err := unix.Openat(pfd, name, flag|unix.O_NOFOLLOW|unix.O_CLOEXEC, perm)
	if err != nil {
		return nil, d.wrap("open", rel, err)
	}
	return os.NewFile(uintptr(fd), d.join(rel)), nil
}

// randomName is prefix and 26 random characters.
func randomName(prefix string) string { return prefix + rand.Text() }

// CreateTemp creates a new file in the directory dir beneath d, named
// prefix and random characters, O_CREAT|O_EXCL|O_NOFOLLOW with mode perm,
// open for reading and writing; it returns the file and its path relative
// to d.
func (d *Dir) CreateTemp(dir, prefix string, perm uint32) (*os.File, string, error) {
	pfd, err := OpenDirAt(d.fd, dir, false)
	if err != nil {
		return nil, "", d.wrap("createtemp", dir, err)
	}
	defer unix.Close(pfd)
	for range 10 {
		name := randomName(prefix)
		fd, err := unix.Openat(pfd, name, unix.O_RDWR|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, perm)
		if errors.Is(err, unix.EEXIST) {
			continue
		}
		rel := joinRel(dir, name)
		if err != nil {
			return nil, "", d.wrap("createtemp", rel, err)
		}
		return os.NewFile(uintptr(fd), d.join(rel)), rel, nil
	}
	return nil, "", d.wrap("createtemp", dir, unix.EEXIST)
}

// MkdirTemp creates a new directory in dir beneath d, named prefix and
// random characters, and returns its path relative to d.
func (d *Dir) MkdirTemp(dir, prefix string) (string, error) {
	pfd, err := OpenDirAt(d.fd, dir, false)
	if err != nil {
		return "", d.wrap("mkdirtemp", dir, err)
	}
	defer unix.Close(pfd)
	for range 10 {
		name := randomName(prefix)
		err := unix.Mkdirat(pfd, name, 0o700)
		if errors.Is(err, unix.EEXIST) {
			continue
		}
		rel := joinRel(dir, name)
		if err != nil {
			return "", d.wrap("mkdirtemp", rel, err)
		}
		return rel, nil
	}
	return "", d.wrap("mkdirtemp", dir, unix.EEXIST)
}

// joinRel joins two relative paths.
func joinRel(dir, name string) string {
	if dir == "" {
		return name
	}
	return dir + "/" + name
}

// Rename renames old to new, both beneath d: new's parents are made when
// missing, and new, when it exists and is not a non-empty directory, is
// replaced atomically (a symlink at new is replaced, never followed).
func (d *Dir) Rename(old, new string) error {
	ofd, oname, err := d.parent("rename", old, false)
	if err != nil {
		return err
	}
	defer unix.Close(ofd)
	nfd, nname, err := d.parent("rename", new, true)
	if err != nil {
		return err
	}
	defer unix.Close(nfd)
	if err := unix.Renameat(ofd, oname, nfd, nname); err != nil {
		return &os.LinkError{Op: "rename", Old: d.join(old), New: d.join(new), Err: err}
	}
	return nil
}

// Lstat returns what rel beneath d is, without following a link at rel.
func (d *Dir) Lstat(rel string) (unix.Stat_t, error) {
	var st unix.Stat_t
	if rel == "" {
		err := unix.Fstat(d.fd, &st)
		return st, err
	}
	pfd, name, err := d.parent("lstat", rel, false)
	if err != nil {
		return st, err
	}
	defer unix.Close(pfd)
	if err := unix.Fstatat(pfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return st, d.wrap("lstat", rel, err)
	}
	return st, nil
}

// Remove removes the file, link or empty directory rel beneath d.
func (d *Dir) Remove(rel string) error {
	pfd, name, err := d.parent("remove", rel, false)
	if err != nil {
		return err
	}
	defer unix.Close(pfd)
	err = unix.Unlinkat(pfd, name, 0)
	if errors.Is(err, unix.EISDIR) || errors.Is(err, unix.EPERM) {
		err = unix.Unlinkat(pfd, name, unix.AT_REMOVEDIR)
	}
	if err != nil {
		return d.wrap("remove", rel, err)
	}
	return nil
}

// RemoveAll removes rel beneath d and, when it is a directory (not a
// link to one), everything in it, never following a link. A missing rel
// is no error.
func (d *Dir) RemoveAll(rel string) error {
	pfd, name, err := d.parent("removeall", rel, false)
	if errors.Is(err, unix.ENOENT) {
		return nil
	}
	if err != nil {
		return err
	}
	defer unix.Close(pfd)
	if err := removeAllAt(pfd, name); err != nil && !errors.Is(err, unix.ENOENT) {
		return d.wrap("removeall", rel, err)
	}
	return nil
}

// removeAllAt removes name in pfd and, when it is a directory, its
// contents, through descriptors opened O_NOFOLLOW.
func removeAllAt(pfd int, name string) error {
	err := unix.Unlinkat(pfd, name, 0)
	if err == nil || errors.Is(err, unix.ENOENT) {
		return nil
	}
	if !errors.Is(err, unix.EISDIR) && !errors.Is(err, unix.EPERM) {
		return err
	}
	fd, err := unix.Openat(pfd, name, dirFlags, 0)
	if err != nil {
		return err
	}
	f := os.NewFile(uintptr(fd), name)
	names, err := f.Readdirnames(-1)
	if err == nil {
		for _, n := range names {
			if err = removeAllAt(fd, n); err != nil {
				break
			}
		}
	}
	f.Close()
	if err != nil {
		return err
	}
	return unix.Unlinkat(pfd, name, unix.AT_REMOVEDIR)
}

// ReadDir lists the names in the directory rel beneath d.
func (d *Dir) ReadDir(rel string) ([]fs.DirEntry, error) {
	sub, err := d.OpenDir(rel, false)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(sub.fd), sub.name)
	defer f.Close()
	return f.ReadDir(-1)
}

// ReadFile reads the regular file rel beneath d.
func (d *Dir) ReadFile(rel string, limit int64) ([]byte, error) {
	f, err := d.OpenFile(rel, unix.O_RDONLY|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, d.wrap("read", rel, errors.New("not a regular file"))
	}
	if fi.Size() > limit {
		return nil, d.wrap("read", rel, fmt.Errorf("%d bytes, more than %d", fi.Size(), limit))
	}
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, d.wrap("read", rel, err)
	}
	if int64(len(b)) > limit {
		return nil, d.wrap("read", rel, fmt.Errorf("more than %d bytes", limit))
	}
	return b, nil
}

// WriteFile replaces the file rel beneath d with data, atomically: data
// goes into a new temporary file beside it (prefix and random
// characters, O_CREAT|O_EXCL|O_NOFOLLOW), is synced, given perm and
// renamed over rel; then the directory is synced. A symlink at rel is
// replaced, never followed.
func (d *Dir) WriteFile(rel string, data []byte, perm uint32, prefix string) error {
	dir, _ := split(rel)
	f, tmp, err := d.CreateTemp(dir, prefix, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Chmod(fs.FileMode(perm))
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = d.Rename(tmp, rel)
	}
	if err != nil {
		d.Remove(tmp)
		return err
	}
	if pfd, err := OpenDirAt(d.fd, dir, false); err == nil {
		unix.Fsync(pfd)
		unix.Close(pfd)
	}
	return nil
}
