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
// so no phase can miss a signal or its deadline. BeforeRestart and
// AfterExit run in goroutines of their own under contexts the loop
// cancels; PID 1 never waits for one past its deadline.
//
// Exactly one place calls Wait4(-1); the main child's status is picked out
// by pid. The package imports the standard library and golang.org/x/sys/unix
// only.
package supervisor
