// Package fs is the directory backend of storage.Store: a local disk or a
// mounted volume (PVC, NFS).
//
// Each key is a file under the root; "a/b/c" lives at ROOT/a/b/c. Writes go
// to a temporary file in the target directory (named with TempPrefix), are
// fsynced, and renamed into place, and the directory is fsynced, so a crash
// never leaves a partial object under its final name; the temporary file a
// killed Put leaves behind is offered by Sweep (storage.Sweeper). Create-only Puts use
// renameat2(RENAME_NOREPLACE), or link+unlink where the filesystem lacks it,
// so of two concurrent create-only Puts exactly one wins. Paths are resolved
// one segment at a time with O_NOFOLLOW relative to the root's descriptor,
// so neither a key nor a symlink planted in the tree can reach outside the
// root. The SHA-256 computed while writing is kept in the extended
// attribute user.lifeboat.sha256 where the filesystem supports it.
package fs
