// Package supervisor is lifeboat's PID-1 core: it starts the trainer in its
// own process group, relays signals to it, reaps every process that ends up
// as lifeboat's child, enforces the grace budget that starts with the first
// termination signal, lets the rest of the tree finish when the main child
// exits, restarts a crashed trainer when asked to, runs the final flush,
// and turns what happened into one exit code.
//
// Everything runs in one flat loop (see Run), in the manner of tini: a
// signal arrives, a child is reaped, a timer fires or a hook returns, and
// the loop moves on. Where the supervision stands is a phase the loop reads
// (running, backoff, restarting, flushing, done); every timer (the grace
// deadline, the wait for killed processes, the restart's backoff, the end
// of a hook's time) and every hook's result is a case of the same select,
// so no phase can miss a signal or its deadline.
//
// What the supervisor needs of the rest of lifeboat is a small interface
// for each of those it works with, all optional. Checkpoints is the
// checkpoint pipeline, which it asks for a reserve of the grace budget, the
// work before a restart and the final upload. Job is the other ranks of a
// job that stops as one: told of this rank's stop and failure, asked
// whether a failure is part of a stop another rank began. Observer is told
// what happens (stops, restarts, OOM kills, reaped processes) and never
// blocks. BeforeRestart, Flush and PeerStop run in goroutines of their own
// under contexts the loop cancels; PID 1 never waits for one past its
// deadline. A stop's reason, signal, start and deadline are determined
// once, as a Stop, and handed to each.
//
// Exactly one place calls Wait4(-1); the main child's status is picked out
// by pid. The package imports the standard library and golang.org/x/sys/unix
// only.
package supervisor
