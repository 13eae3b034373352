// Package supervisor is lifeboat's PID-1 core: it starts the trainer in its
// own process group, relays signals to it, reaps every process that ends up
// as lifeboat's child, enforces the grace budget that starts with the first
// termination signal, lets the rest of the tree finish when the main child
// exits, and turns what happened into one exit code.
//
// Everything runs in one flat loop (see Run), in the manner of tini: a
// signal arrives, a child is reaped, or the deadline passes. Exactly one
// place calls Wait4(-1); the main child's status is picked out by pid.
// The package imports the standard library and golang.org/x/sys/unix only.
package supervisor
