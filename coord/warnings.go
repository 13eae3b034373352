package coord

import "log/slog"

// warnings remembers which kinds of store request are failing, so that a
// streak of failures is logged once, and its end once.
type warnings map[string]bool

// failed logs op's failure err when it begins a streak, and op's recovery
// when err is nil after one. It reports whether err is set.
func (w warnings) failed(log *slog.Logger, op string, err error) bool {
	if err == nil {
		if w[op] {
			delete(w, op)
			log.Info("coord.store_recovered", "op", op)
		}
		return false
	}
	if !w[op] {
		w[op] = true
		log.Warn("coord.store_failed", "op", op, "err", err, "effect", "training goes on; retried every interval")
	}
	return true
}
