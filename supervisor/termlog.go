package supervisor

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
)

// WriteTerminationLog writes msg as the one line of the file where
// Kubernetes reads why a container stopped (terminationMessagePath). The
// file is created only with create; otherwise a missing file (no
// Kubernetes) is left alone silently. A failure is logged (log may be
// nil), never fatal: PID 1 exits with its code either way.
func WriteTerminationLog(path string, create bool, msg string, log *slog.Logger) {
	if path == "" {
		return
	}
	flags := os.O_WRONLY | os.O_TRUNC
	if create {
		flags |= os.O_CREATE
	}
	f, err := os.OpenFile(path, flags, 0o644)
	if err != nil {
		if (create || !errors.Is(err, os.ErrNotExist)) && log != nil {
			log.Warn("supervisor.termination_log_failed", "path", path, "err", err)
		}
		return
	}
	defer f.Close()
	if _, err := fmt.Fprintln(f, msg); err != nil && log != nil {
		log.Warn("supervisor.termination_log_failed", "path", path, "err", err)
	}
}
