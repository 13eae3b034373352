// Package reserved names the entries lifeboat and its Python helper
// (images/lifeboat.py) keep beside the trainer's files: every one starts
// with Prefix, and the watcher skips every such name except the marker, so
// none of them is ever taken for, or stored as part of, a checkpoint.
//
// The names, and who writes them:
//
//   - Marker (.lifeboat-commit), the default --marker: the helper's
//     commit() writes it last into a checkpoint directory, holding the
//     step (package watch reads it).
//   - StopFile (.lifeboat-stop.json): package coord writes it into --dir
//     when a job-wide stop begins, and again with the agreed step; the
//     helper's stop_requested() and stop_step() read it.
//   - StepRequestFile (.lifeboat-stop-request.json): the helper's
//     stop_step() writes it beside StopFile; package coord reads it.
//   - CoordTempPrefix (.lifeboat-tmp-coord-*): the temporary files coord and
//     the helper's stop_step() write StopFile and StepRequestFile through,
//     renamed into place; coord removes leftovers at start.
//   - TempPrefix (.lifeboat-tmp-*): the temporary file each Put of
//     package storage/fs writes and renames (a file store may lie inside
//     --dir), and the one the helper's commit() writes the marker through.
//   - RestoreTempPrefix (.lifeboat-restore-*): the directories package
//     checkpoint restores into before moving the files into place, and the
//     ones an old RanksDir is moved aside into, and the temporary file
//     package resume writes ResumeFile through; checkpoint's Upload skips
//     them and RemoveStaleRestores removes them.
//   - RanksDir (.lifeboat-ranks): package checkpoint restores every rank's
//     files into it (RestoreOptions.AllRanks), so the rank that restored
//     them never uploads them as its own checkpoint.
//   - RestoreRecord (.lifeboat-restoring.json): package checkpoint writes
//     it before a restore moves its first file into place and removes it
//     after the last; the next start finishes a restore it names.
//   - AsideDir (.lifeboat-aside): package checkpoint moves the files a
//     restored checkpoint's directory held beyond the snapshot into
//     AsideDir/<UTC time>-*/, at their paths; nothing there is read,
//     uploaded or deleted by lifeboat.
//   - ResumeFile (.lifeboat-resume.json): package resume writes it after a
//     restore, through a RestoreTempPrefix file renamed into place; the
//     helper's resume_dir() and friends read it.
//
// It imports only the standard library, so every package can use it.
package reserved

import "strings"

// Prefix starts every reserved name.
const Prefix = ".lifeboat-"

// The reserved names (see the package doc for who writes each).
const (
	Marker            = Prefix + "commit"
	StopFile          = Prefix + "stop.json"
	StepRequestFile   = Prefix + "stop-request.json"
	CoordTempPrefix   = Prefix + "tmp-coord-"
	TempPrefix        = Prefix + "tmp-"
	RestoreTempPrefix = Prefix + "restore-"
	RanksDir          = Prefix + "ranks"
	ResumeFile        = Prefix + "resume.json"
	RestoreRecord     = Prefix + "restoring.json"
	AsideDir          = Prefix + "aside"
)

// Is reports whether name, a base name, is reserved: it starts with Prefix.
func Is(name string) bool { return strings.HasPrefix(name, Prefix) }
