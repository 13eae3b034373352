package supervisor

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// spawn starts argv as the leader of a new process group, with lifeboat's
// stdin, stdout and stderr, cwd and the given environment. When stdin is a
// terminal whose foreground group is lifeboat's, the child's group takes the
// foreground, so an interactive shell behaves as if started directly.
//
// The child starts with default signal dispositions: Go resets every handler
// it installed, and lifeboat installs one for every signal before spawning.
func spawn(argv, env []string) (int, error) {
	path, err := resolve(argv[0], env)
	if err != nil {
		return 0, err
	}
	sys := &syscall.SysProcAttr{Setpgid: true}
	if foregroundTTY() {
		sys.Foreground = true
		sys.Ctty = 0 // the child's fd 0
	}
	pid, err := syscall.ForkExec(path, argv, &syscall.ProcAttr{
		Env:   env,
		Files: []uintptr{0, 1, 2},
		Sys:   sys,
	})
	if err != nil {
		return 0, execError(argv[0], path, err)
	}
	return pid, nil
}

// resolve finds argv0 the way a shell would: as a path when it contains a
// slash, else in PATH (taken from env, as the child will see it).
func resolve(argv0 string, env []string) (string, error) {
	if argv0 == "" {
		return "", &ExitError{Err: errors.New("lifeboat: the command is empty"), Code: CodeNotFound}
	}
	if strings.Contains(argv0, "/") {
		fi, err := os.Stat(argv0)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			return "", &ExitError{Err: fmt.Errorf("lifeboat: %s: no such file", argv0), Code: CodeNotFound}
		case err != nil:
			return "", &ExitError{Err: fmt.Errorf("lifeboat: %s: %w", argv0, err), Code: CodeNotExecutable}
		case fi.IsDir():
			return "", &ExitError{Err: fmt.Errorf("lifeboat: %s is a directory, not a program", argv0), Code: CodeNotExecutable}
		case fi.Mode()&0o111 == 0:
			return "", &ExitError{Err: fmt.Errorf("lifeboat: %s is not executable (mode %v); chmod +x it or run it through its interpreter", argv0, fi.Mode().Perm()), Code: CodeNotExecutable}
		}
		return argv0, nil
	}
	pathEnv := os.Getenv("PATH")
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			pathEnv = v
		}
	}
	var nonExec string
	for _, dir := range strings.Split(pathEnv, ":") {
		if dir == "" {
			dir = "."
		}
		p := dir + "/" + argv0
		fi, err := os.Stat(p)
		if err != nil || fi.IsDir() {
			continue
		}
		if fi.Mode()&0o111 != 0 {
			return p, nil
		}
		if nonExec == "" {
			nonExec = p
		}
	}
	if nonExec != "" {
		return "", &ExitError{Err: fmt.Errorf("lifeboat: %s is not executable; chmod +x it or run it through its interpreter", nonExec), Code: CodeNotExecutable}
	}
	return "", &ExitError{Err: fmt.Errorf("lifeboat: %s: command not found in PATH (%s)", argv0, pathEnv), Code: CodeNotFound}
}

// execError maps an exec failure to 127 (not found, e.g. a missing
// interpreter named by a #! line) or 126 (found but not executable).
func execError(argv0, path string, err error) error {
	code := CodeNotExecutable
	var hint string
	switch {
	case errors.Is(err, unix.ENOENT):
		code = CodeNotFound
		hint = " (is the interpreter on its #! line installed?)"
	case errors.Is(err, unix.ENOEXEC):
		hint = " (not a binary for this machine, and no #! line)"
	case errors.Is(err, unix.EACCES):
		hint = " (permission denied: check its mode and the filesystem's noexec option)"
	}
	what := argv0
	if path != argv0 {
		what = fmt.Sprintf("%s (%s)", argv0, path)
	}
	return &ExitError{Err: fmt.Errorf("lifeboat: cannot execute %s: %v%s", what, err, hint), Code: code}
}

// foregroundTTY reports whether stdin is a terminal whose foreground process
// group is lifeboat's own, so the child may take it over.
func foregroundTTY() bool {
	fg, err := unix.IoctlGetInt(0, unix.TIOCGPGRP)
	if err != nil {
		return false
	}
	return fg == unix.Getpgrp()
}

// becomeSubreaper makes lifeboat the reaper of orphaned descendants when it
// is not PID 1 (docker run --init, shareProcessNamespace).
func becomeSubreaper() error {
	if os.Getpid() == 1 {
		return nil
	}
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("become child subreaper: %w", err)
	}
	return nil
}
