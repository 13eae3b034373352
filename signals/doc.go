// Package signals relays the signals that PID 1 receives to the trainer.
//
// It owns which signals are forwarded (every catchable one except SIGCHLD,
// which belongs to the reaper, SIGURG, which belongs to the Go runtime, and
// SIGTTIN/SIGTTOU, which the kernel sends about lifeboat's own terminal use),
// how they are named on the command line ("TERM", "SIGTERM", "15"), and the
// rewrite rules that deliver a different signal to the child than the one
// received ("TERM:USR1"). It imports the standard library and
// golang.org/x/sys/unix only.
package signals
