// Package pipeline is the assembled product below cmd: what one lifeboat
// does with checkpoints between its flags and the supervisor.
//
// It owns the resume decision: at start-up, which checkpoint the trainer
// resumes from (a restore a kill cut short, finished now; a checkpoint
// already in the directory that is newer than the store's by the line's
// rule; the store's newest complete one; an init container's resume file)
// or why it starts fresh, and what a restore that finds nothing, or
// nothing it can hold, means. Decide and AfterRestore make that decision
// from data alone, so every branch has a table test; Restore, RestoreStep
// and FinishInterrupted do what it says (store calls, file writes, the
// log lines a user greps for: resume.restored, resume.fresh_start,
// resume.fallback, resume.moved_aside, resume.interrupted_restore_finished).
//
// A restore that finds nothing to restore removes the resume file, so that
// a trainer never resumes from what an earlier restore left; a fresh start
// beside complete steps in the store is said loudly, and nothing in the
// store is deleted to make room for the new run's checkpoints.
//
// Errors that a user can fix by changing an option are *FieldError values
// naming the Options field; the caller (cmd) names its flags.
package pipeline
