// Package watch notices the checkpoints an unmodified trainer writes into a
// directory and says when each one is complete.
//
// Three ways of saving are recognised, in this order of precedence:
//
//  1. Marker: a directory that holds the marker file (".lifeboat-commit" by
//     default, written last by the Python helper's commit()) is one
//     checkpoint; the marker's content is its step.
//  2. One subdirectory per checkpoint ("step-000100/", "epoch_3/"): each
//     subdirectory of the watched directory is one checkpoint, its step taken
//     from its name. A subdirectory whose name has no number ("backup/", whose
//     "latest.pdparams" is overwritten in place) is one checkpoint that gets
//     a new step from a counter each time its content changes.
//  3. Files at the top ("epoch_3.pdparams", "epoch_3.pdopt"): files whose
//     names carry the same number form one checkpoint; files without a number
//     form one more, with counter steps.
//
// A checkpoint is complete when no process has any of its files open for
// writing (read from /proc/PID/fd and fdinfo) and its files' sizes and
// modification times have not changed for the settle time. A marker
// checkpoint needs only the first condition.
package watch
