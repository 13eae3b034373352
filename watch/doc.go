// Package watch notices the checkpoints an unmodified trainer writes into a
// directory and says when each one is complete.
//
// # The directory
//
// The watched directory (--dir) is resolved once, when the Watcher is made:
// made absolute and its symlinks followed (logged as watch.dir_resolved when
// that changes it), because the kernel names open files by their real path.
// Entries whose names start with ".lifeboat-" are lifeboat's own and are
// skipped, except the marker.
//
// # Which files count
//
// A file matching one of the exclude patterns (Config.Exclude, default
// DefaultExclude: *.log, *.log.[0-9]*, *.tmp, *.temp, *.swp, *.part,
// *.partial, *.lock, *.pid, nohup.out, events.out.tfevents.*, .nfs*, *~) is
// part of no checkpoint, wherever it lies. A pattern is matched with
// path.Match against the file's base name, or, when it holds a '/', against
// its slash-separated path relative to the directory ("*" does not cross a
// '/'). Patterns match files, not directories. An empty, non-nil list
// excludes nothing.
//
// A checkpoint is regular files. Symlinks, FIFOs, sockets and devices are
// never stored; each is logged once (at Warn, checkpoint.skipped_special,
// with its path, its type and the candidate it lies in).
//
// A directory the scan may not list (permission denied) does not fail the
// scan: the candidate it lies in is withheld, since what it holds is
// unknown and the checkpoint would not be whole without it, and it is
// logged once (at Warn, checkpoint.unreadable_dir, with its path, the
// candidate and lifeboat's uid). The other candidates are returned as
// usual, and the withheld one once the directory can be listed. An
// exclude pattern that matches the directory's name (lost+found) leaves
// it out silently.
//
// # Grouping
//
// Three ways of saving are recognised, in this order of precedence:
//
//  1. Marker: a directory that holds the marker file (".lifeboat-commit" by
//     default, written last by the Python helper's commit()) is one
//     checkpoint; the marker's content is its step.
//  2. One subdirectory per checkpoint ("step-000100/", "epoch_3/"): each
//     subdirectory of the watched directory is one checkpoint, its step taken
//     from its name. A subdirectory whose name has no number ("backup/", whose
//     "latest.pdparams" is overwritten in place) is one checkpoint without a
//     step.
//  3. Files at the top ("epoch_3.pdparams", "epoch_3.pdopt"): files whose
//     names carry the same number form one checkpoint; files without a number
//     form one more, without a step.
//
// # Which groups are checkpoints
//
// Marker directories and numbered subdirectories always are. The groups of
// files at the top of the directory (numbered or not: loose numbered files
// are as often logs and configs as checkpoints) and subdirectories without
// a number are checkpoints only when at least one of their files has the
// name of a checkpoint format: .pdparams .pkl .pickle .distcp .metadata .pt
// .pth .npz .zip .safetensors .pdmodel .pdiparams .pdiparams.info .pdopt
// .npy .bin .ckpt .h5 .onnx .pb .msgpack .params. So train.log or
// config.yaml next to step-000100/ is not a checkpoint, while
// epoch_3.pdparams with epoch_3.json is one. Names decide only this: which
// format check a file gets, and whether it is whole, is its content's
// (package format).
//
// # Survey
//
// Watcher.Survey, behind `lifeboat check`, scans once as a stop's final
// scan would and runs every check on every file: each candidate, its step
// and where the step came from, each file's format and verdict, whether
// it would be committed and why not, and the files part of no checkpoint.
//
// Once a marker has been seen in the Watcher's life (or from the start with
// Config.MarkerOnly, --marker-only), only marker directories are
// checkpoints: the half-written, unmarked directory of a trainer that
// marks its checkpoints is never taken for one.
//
// A group that is not a checkpoint is never returned. It is logged once
// while it exists, at Info, when it would otherwise have been complete:
// checkpoint.not_a_checkpoint or checkpoint.unmarked_ignored, with its id,
// its number of files, one of its paths and why.
//
// # Steps
//
// A checkpoint's step comes from its marker or its name. One without (an
// unnumbered directory or top-level group) takes the newest named step
// known: the highest step of a named checkpoint seen in any scan, or the
// step given to SetLastStep (the newest in the store, or the one restored),
// whichever is higher, 0 when there is none. Ready.Counter marks it, and
// storage keeps it as a new revision of that step, so it never takes a
// number the trainer's next named checkpoint would collide with. The same
// content keeps the same number. To get real steps, name checkpoints with
// their number, write the step into the marker, or call the Python helper's
// commit(path, step).
//
// # Complete
//
// A checkpoint is complete when no process has any of its files open for
// writing (read from /proc/PID/fd and fdinfo) and neither its files'
// sizes, modification times nor change times (ctime, which no program can
// set back) have changed for the settle time. A marker checkpoint needs
// only the first condition, and so does every checkpoint at the final scan,
// when the trainer is gone, unless the trainer's processes cannot be seen
// (Config.WritersInvisible, see Watcher.WritersVisible): then markers,
// format checks and the settle time are all there is.
package watch
