// Package resume owns the resume contract: what lifeboat tells the trainer
// about the checkpoint it is to resume from. `lifeboat run` sets it as the
// variables LIFEBOAT_RESUME_DIR, LIFEBOAT_RESUME_STEP, LIFEBOAT_RESUME_ID,
// LIFEBOAT_RESUME_SOURCE and LIFEBOAT_RESUME_REASON (Point.Env); a restore also writes it into the checkpoint directory as the
// resume file, so that a trainer started elsewhere (`lifeboat restore` in an
// init container, then `lifeboat run --restore never`) learns the same, and
// images/lifeboat.py reads that file when the variables are unset.
//
// The resume file is FileName (.lifeboat-resume.json) at the top of the
// checkpoint directory: one JSON object and a newline,
//
//	{"dir":"/ckpt/step-5","step":5,"id":"3f9c2a7b1d4e6f80","files":["step-5/model.pdparams","step-5/model.pdopt"]}
//
// with these members:
//
//   - dir: the absolute path of the directory to load from: the deepest
//     directory that holds every restored file, or, when every rank's files
//     were restored, the .lifeboat-ranks directory that holds them.
//   - step: the checkpoint's step.
//   - id: the ID of the manifest it was restored from; empty when the
//     checkpoint was already in the directory and nothing was restored.
//   - files: the checkpoint's files, as slash paths relative to the
//     checkpoint directory.
//   - line: the line of work the checkpoint belongs to (omitted for the
//     legacy line): the run continues it (docs/FORMAT.md).
//   - source: store (restored from the store), local (a checkpoint already
//     in the directory, newer than the store's by the line's rule) or init
//     (an earlier restore's file, handed on); reason: why that one.
//
// NewerLocal decides between a checkpoint already in the directory and the
// store's newest.
//
// A restore that finds nothing to restore removes the file, so that a
// trainer never resumes from what an earlier restore left. The file is
// replaced whole (written beside it, then renamed), so a reader sees the old
// file or the new one, never part of one. Unknown members are ignored by
// readers; members are only ever added.
package resume
