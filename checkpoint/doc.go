// Package checkpoint owns the checkpoint rules: what a snapshot is, its
// manifest, how one is uploaded and committed, which step is the latest
// complete one, and how snapshots are restored, verified and pruned.
//
// A snapshot is the set of regular files of one checkpoint directory, for one
// (step, rank). File contents are cut into fixed-size chunks stored once by
// their SHA-256 under chunks/; a JSON manifest per (step, rank) under
// snapshots/ lists every file and its chunks and is written last, create-only.
// When a committed step's files change, they are committed as the next
// revision of that step and rank; a rank's snapshot of a step is its highest
// revision. A step is complete when the manifests of all ranks 0..n-1 exist,
// decode, and provably describe one iteration (docs/FORMAT.md). The rank
// whose commit completes a step writes a completion record beside its
// folder (record.go), and so does a restore that read a complete step
// without one in full; a restore finds the records and the step folders
// in one listing one level deep, lists only the folder of the step it
// takes, and takes a step whose record holds for that listing without
// reading the other ranks' manifests (choose.go).
// Files are read only as the regular files scanned, unchanged while read,
// and whole by the checks of package format. The storage layout and the
// rules that make concurrent upload and prune safe are in docs/FORMAT.md.
//
// The package depends on storage.Store only, never on a backend's client.
// It does not retry: the Store it is given is expected to be wrapped in
// storage.Retry, which retries each transient failure of a store call
// (resuming a cut download, never delivering a listed key twice). Given a
// Store that is not, every store call is made once, and its first
// transient failure fails the upload, restore, prune or verify.
package checkpoint
