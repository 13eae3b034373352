// Package signals relays the signals that PID 1 receives to the trainer.
//
// It owns which signals are forwarded (every catchable one except SIGCHLD,
// which belongs to the reaper, SIGTTIN/SIGTTOU, which the kernel sends about
// lifeboat's own terminal use, and SIGPIPE), how they are named on the
// command line ("TERM", "SIGTERM", "15"), and the rewrite rules that deliver
// a different signal to the child than the one received ("TERM:USR1").
//
// SIGURG is forwarded too when lifeboat is built as it ships, with
// LinkFlag, which turns the Go runtime's asynchronous preemption off. With
// preemption on (Go's default, a plain `go build`, or
// GODEBUG=asyncpreemptoff=0) the runtime sends itself SIGURG to preempt
// goroutines, a SIGURG received cannot be told from those, and it is not
// forwarded. main decides which holds at start-up (AsyncPreemptOff) and
// says so with SetRuntimeOwnsURG.
//
// SIGPIPE is never forwarded. When the reader of lifeboat's stderr goes
// away (a log shipper dies, `lifeboat run ... 2>&1 | head -1` exits), the
// kernel sends lifeboat a SIGPIPE for its own write; lifeboat cannot tell
// that one from a SIGPIPE sent with kill(2), and no one stops a trainer
// with SIGPIPE, so relaying it would only kill the trainer over a dead log
// reader. The trainer keeps its own stdout and stderr and gets its own
// SIGPIPE from the kernel when it writes to a closed pipe.
//
// It imports the standard library and golang.org/x/sys/unix only.
package signals
