// Package pipeline is the assembled product below cmd: what one lifeboat
// does with checkpoints between its flags and the supervisor.
//
// Open takes typed Options (which cmd fills from flags and variables and
// validates once) and builds the pipeline of one rank: the store stack
// (OpenStore: the backend for the location's scheme, paced by the upload
// limit, a panic in a client made an error, every call retried after a
// transient failure, the one layer of retries), the conditional-write
// probe of an S3 store (CheckConditionalWrites), the checkpoint directory
// (created, its links resolved, never the store's own), the watcher, the
// uploader and the agent, and the trainer's LIFEBOAT_* variables. It
// restores before it returns; the caller starts the agent.
//
// It owns the resume decision: at start-up, which checkpoint the trainer
// resumes from (a restore a kill cut short, finished now; a checkpoint
// already in the directory that is newer than the store's by the line's
// rule; the store's newest complete one; an init container's resume file)
// or why it starts fresh, and what a restore that finds nothing, or
// nothing it can hold, means. Decide and AfterRestore make that decision
// from data alone, so every branch has a table test; Open, Restore,
// RestoreStep, FinishInterrupted and Pipeline.BeforeRestart do what it
// says (store calls, file writes, the log lines a user greps for:
// resume.restored, resume.fresh_start, resume.fallback, resume.moved_aside,
// resume.local_newer, resume.interrupted_restore_finished, resume.line).
//
// A restore that finds nothing to restore removes the resume file, so that
// a trainer never resumes from what an earlier restore left; a fresh start
// beside complete steps in the store is said loudly, and nothing in the
// store is deleted to make room for the new run's checkpoints.
//
// It owns the stop-and-flush sequence, one for run and the sidecar
// (Stopper): when a stop begins, the agent streams the trainer's last
// save, this rank's claim is released, the job-wide stop's record is
// written (JobStop), the grace budget's metric counts down and the pod
// records the stop; the final upload runs until the stop's FlushEnd (the
// grace budget less supervisor.ExitMargin), a sidecar's waiting first for
// a trainer still writing; then the job-wide stop's common step, the
// pod's record of the upload, and the waits for the claim's deletion and
// the stop record. For run the supervisor drives it (Stopper is its
// Checkpoints and Observer, JobStop its Job); the sidecar drives it with
// Stopper.StopSidecar. What it needs of the agent and the pod is a small
// interface each (Agent, Pod), so package tests drive it with fakes.
//
// What Open finds wrong with its options is a *FieldError naming the
// Options field; the caller names its flags and variables.
package pipeline
