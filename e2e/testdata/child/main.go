// Command child is the trainer stand-in that lifeboat's end-to-end tests
// supervise. Each mode does one thing a real trainer (or its workers) does.
//
//	child record OUT EXITSIG [grandchild]  append each signal's name to OUT; exit 0 on EXITSIG
//	child orphans N                         start N processes that outlive it, print nothing, exit 0
//	child cleanup OUT DELAY                 on TERM wait DELAY, write "clean" to OUT, exit 0
//	child escape OUT                        double-fork a setsid process that ignores TERM; write its pid to OUT
//	child ignore-term [OUT]                 ignore TERM (then write OUT.ready) and sleep
//	child sleep D                           sleep D and exit 0
package main

import (
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"
)

func main() {
	if len(os.Args) < 2 {
		fatal("usage: child MODE ...")
	}
	switch os.Args[1] {
	case "record":
		record(os.Args[2], os.Args[3], len(os.Args) > 4 && os.Args[4] == "grandchild")
	case "orphans":
		n, _ := strconv.Atoi(os.Args[2])
		for i := 0; i < n; i++ {
			c := exec.Command(os.Args[0], "sleep", "300ms")
			if err := c.Start(); err != nil {
				fatal(err.Error())
			}
		}
	case "cleanup":
		d, _ := time.ParseDuration(os.Args[3])
		ch := make(chan os.Signal, 1)
		signal.Notify(ch, syscall.SIGTERM)
		ready(os.Args[2])
		<-ch
		time.Sleep(d)
		if err := os.WriteFile(os.Args[2], []byte("clean"), 0o644); err != nil {
			fatal(err.Error())
		}
	case "escape":
		// Ignore TERM before anyone can know we exist (the pid file below).
		signal.Ignore(syscall.SIGTERM)
		// First fork: a process that starts a new session, forks the
		// escapee, and exits, so the escapee is orphaned outside the group.
		c := exec.Command(os.Args[0], "escape-inner", os.Args[2])
		c.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
		if err := c.Run(); err != nil {
			fatal(err.Error())
		}
		sleepForever()
	case "escape-inner":
		c := exec.Command(os.Args[0], "ignore-term")
		if err := c.Start(); err != nil {
			fatal(err.Error())
		}
		// Atomically: the test reads it as soon as it exists.
		if err := os.WriteFile(os.Args[2]+".tmp", []byte(strconv.Itoa(c.Process.Pid)), 0o644); err != nil {
			fatal(err.Error())
		}
		if err := os.Rename(os.Args[2]+".tmp", os.Args[2]); err != nil {
			fatal(err.Error())
		}
	case "ignore-term":
		signal.Ignore(syscall.SIGTERM)
		if len(os.Args) > 2 {
			ready(os.Args[2])
		}
		sleepForever()
	case "sleep":
		d, _ := time.ParseDuration(os.Args[2])
		time.Sleep(d)
	default:
		fatal("unknown mode " + os.Args[1])
	}
}

// record appends the name of every signal it receives to out, and exits 0
// once it has recorded exitSig. The tests build the child with
// asynchronous preemption off, as lifeboat, so every SIGURG it records was
// sent to it.
func record(out, exitSig string, grandchild bool) {
	f, err := os.OpenFile(out, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		fatal(err.Error())
	}
	// os/signal drops a signal when the channel is full: room for every
	// signal of TestSignalFlood's 1000 and its TERM, even if this
	// process is not scheduled while they arrive.
	ch := make(chan os.Signal, 2048)
	signal.Notify(ch)
	if grandchild {
		c := exec.Command(os.Args[0], "record", out+".gc", exitSig)
		c.Stdout, c.Stderr = os.Stdout, os.Stderr
		if err := c.Start(); err != nil {
			fatal(err.Error())
		}
		waitFile(out + ".gc.ready")
	}
	ready(out)
	for s := range ch {
		sig := s.(syscall.Signal)
		if sig == syscall.SIGCHLD {
			continue
		}
		name := strings.ToUpper(strings.TrimPrefix(unixName(sig), "SIG"))
		fmt.Fprintln(f, name)
		if name == exitSig {
			f.Close()
			os.Exit(0)
		}
	}
}

func unixName(sig syscall.Signal) string {
	names := map[syscall.Signal]string{
		syscall.SIGHUP: "HUP", syscall.SIGINT: "INT", syscall.SIGQUIT: "QUIT", syscall.SIGUSR1: "USR1",
		syscall.SIGUSR2: "USR2", syscall.SIGTERM: "TERM", syscall.SIGWINCH: "WINCH", syscall.SIGCONT: "CONT",
		syscall.SIGALRM: "ALRM", syscall.SIGSEGV: "SEGV", syscall.SIGBUS: "BUS", syscall.SIGABRT: "ABRT",
		syscall.SIGPIPE: "PIPE", syscall.SIGTSTP: "TSTP", syscall.SIGPWR: "PWR", syscall.SIGSYS: "SYS",
		syscall.SIGTRAP: "TRAP", syscall.SIGFPE: "FPE", syscall.SIGILL: "ILL", syscall.SIGPROF: "PROF",
		syscall.SIGVTALRM: "VTALRM", syscall.SIGXCPU: "XCPU", syscall.SIGXFSZ: "XFSZ", syscall.SIGIO: "IO",
		syscall.SIGSTKFLT: "STKFLT", syscall.SIGURG: "URG",
	}
	if n, ok := names[sig]; ok {
		return n
	}
	return strconv.Itoa(int(sig))
}

// ready writes "pid pgid" to out+".ready" atomically.
func ready(out string) {
	tmp := out + ".ready.tmp"
	if err := os.WriteFile(tmp, []byte(fmt.Sprintf("%d %d", os.Getpid(), syscall.Getpgrp())), 0o644); err != nil {
		fatal(err.Error())
	}
	if err := os.Rename(tmp, out+".ready"); err != nil {
		fatal(err.Error())
	}
}

func waitFile(p string) {
	for {
		if _, err := os.Stat(p); err == nil {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func fatal(msg string) {
	fmt.Fprintln(os.Stderr, "child:", msg)
	os.Exit(99)
}

// sleepForever blocks without tripping Go's deadlock detector.
func sleepForever() {
	for {
		time.Sleep(time.Hour)
	}
}
