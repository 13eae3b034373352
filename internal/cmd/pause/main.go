// Command pause is the sandbox ("pause") container of the one-node
// Kubernetes cluster that scripts/k8s-e2e.sh runs: it holds the pod's
// namespaces, reaps the orphans it inherits as PID 1 of a pod with
// shareProcessNamespace, and exits 0 on SIGTERM or SIGINT.
//
// It is built static (CGO_ENABLED=0) and imported into containerd as the
// sandbox image, so the cluster needs no registry.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGCHLD)
	for s := range sigs {
		if s != syscall.SIGCHLD {
			os.Exit(0)
		}
		reap()
	}
}

// reap collects every exited child without blocking.
func reap() {
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
		if pid <= 0 || err != nil {
			return
		}
	}
}
