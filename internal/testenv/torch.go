package testenv

import (
	"os/exec"
	"sync"
	"testing"
)

// Python is the interpreter that sees Debian's python3-torch.
const Python = "/usr/bin/python3"

var torchOnce struct {
	sync.Once
	err error
}

// RequireTorch skips (or fails, see Skip) unless Python can import torch
// (Debian's python3-torch, which scripts/test.sh installs).
func RequireTorch(t testing.TB) {
	t.Helper()
	torchOnce.Do(func() {
		out, err := exec.Command(Python, "-c", "import torch, torch.utils.data, torch.distributed").CombinedOutput()
		if err != nil {
			torchOnce.err = &torchError{err: err, out: string(out)}
		}
	})
	if torchOnce.err != nil {
		Skip(t, Python+" cannot import torch (install python3-torch and python3-numpy): "+torchOnce.err.Error())
	}
}

type torchError struct {
	err error
	out string
}

func (e *torchError) Error() string { return e.err.Error() + ": " + e.out }
