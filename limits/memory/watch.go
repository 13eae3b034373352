package memory

import (
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// pollInterval is how often the OOM kill counter is read even without an
// event: a v1 OOM eventfd fires when the cgroup runs out of memory, which
// can be just before the kill is counted.
const pollInterval = time.Second

// watcher turns increases of an OOM kill counter into one value per kill on
// out. It owns two goroutines: one blocked reading the event file, one
// reading the counter and delivering; stop ends both.
type watcher struct {
	path, key string
	base      uint64 // the counter when watching began
	last      uint64 // the counter last said; run's until it returns, then close's
	limit     int64  // for the log line
	log       *slog.Logger

	out  chan struct{}
	stop chan struct{}
	ev   *os.File // nil: polling only
	wg   sync.WaitGroup
}

// startWatcher starts watching path's key from its current value. ev, when
// not nil, is read to wake the watcher early; it is closed by stop.
func startWatcher(path, key string, ev *os.File, limit int64, log *slog.Logger) (*watcher, error) {
	base, _, err := readCounter(path, key)
	if err != nil {
		if ev != nil {
			ev.Close()
		}
		return nil, err
	}
	w := &watcher{path: path, key: key, base: base, last: base, limit: limit, log: log,
		out: make(chan struct{}), stop: make(chan struct{}), ev: ev}
	wake := make(chan struct{}, 1)
	if ev != nil {
		w.wg.Add(1)
		go func() {
			defer w.wg.Done()
			buf := make([]byte, 4096)
			for {
				if _, err := ev.Read(buf); err != nil {
					if !errors.Is(err, os.ErrClosed) {
						log.Debug("memory.events_read_failed", "path", ev.Name(), "err", err, "effect", "polling every "+pollInterval.String())
					}
					return
				}
				select {
				case wake <- struct{}{}:
				default:
				}
			}
		}()
	}
	w.wg.Add(1)
	go w.run(wake)
	return w, nil
}

// count returns the kills counted since watching began.
func (w *watcher) count() (uint64, error) {
	n, ok, err := readCounter(w.path, w.key)
	if err != nil || !ok || n < w.base {
		return 0, err
	}
	return n - w.base, nil
}

func (w *watcher) run(wake <-chan struct{}) {
	defer w.wg.Done()
	defer close(w.out)
	tick := time.NewTicker(pollInterval)
	defer tick.Stop()
	var pending uint64 // kills counted but not yet delivered
	for {
		var send chan<- struct{}
		if pending > 0 {
			send = w.out
		}
		select {
		case <-w.stop:
			return
		case send <- struct{}{}:
			pending--
			continue
		case <-wake:
		case <-tick.C:
		}
		pending += w.look()
	}
}

// look reads the counter and says the kills since the last look; it
// returns how many there were.
func (w *watcher) look() uint64 {
	n, ok, err := readCounter(w.path, w.key)
	if err != nil || !ok || n <= w.last {
		return 0
	}
	rose := n - w.last
	w.last = n
	w.log.Warn("memory.oom_kill", "cgroup", filepath.Dir(w.path), "kills", n-w.base, "trainer_limit", w.limit,
		"effect", "the kernel killed a process of the trainer's for exceeding its memory limit; lifeboat is unaffected")
	return rose
}

// close stops both goroutines and waits for them; out is closed. It
// looks at the counter once more, so a kill counted since the last poll
// (a worker OOM-killed less than pollInterval before the trainer exited)
// is still said.
func (w *watcher) close() {
	close(w.stop)
	if w.ev != nil {
		w.ev.Close()
	}
	w.wg.Wait()
	w.look()
}
