package pipeline

import (
	"context"
	"io"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/vbauerster/mpb/v8"
	"github.com/vbauerster/mpb/v8/decor"
	"golang.org/x/sys/unix"
)

// progress reports a restore's bytes: a bar on a terminal, or a log line
// every interval otherwise (a container's log). It is safe for the
// concurrent calls checkpoint.RestoreOptions.Progress makes.
type progress struct {
	done, total atomic.Int64
	start       atomic.Int64 // Unix ns when the current total began

	mu  sync.Mutex
	bar *mpb.Bar
	p   *mpb.Progress

	cancel context.CancelFunc
	loop   chan struct{}
}

// newProgress starts reporting to w (a bar, when w is a terminal) or to
// log. Stop ends it.
func newProgress(w io.Writer, log *slog.Logger, interval time.Duration) *progress {
	pr := &progress{loop: make(chan struct{})}
	pr.start.Store(time.Now().UnixNano())
	ctx, cancel := context.WithCancel(context.Background())
	pr.cancel = cancel
	if f, ok := w.(*os.File); ok && terminalWidth(f) > 0 {
		pr.p = mpb.New(mpb.WithOutput(w), mpb.WithWidth(40), mpb.WithRefreshRate(150*time.Millisecond))
		close(pr.loop)
		return pr
	}
	go func() {
		defer close(pr.loop)
		t := time.NewTicker(interval)
		defer t.Stop()
		var last int64 = -1
		for {
			select {
			case <-ctx.Done():
				if pr.total.Load() > 0 {
					pr.logLine(log, "resume.progress") // the final figures
				}
				return
			case <-t.C:
				if d := pr.done.Load(); d != last {
					last = d
					pr.logLine(log, "resume.progress")
				}
			}
		}
	}()
	return pr
}

func (pr *progress) logLine(log *slog.Logger, msg string) {
	d, t := pr.done.Load(), pr.total.Load()
	el := time.Since(time.Unix(0, pr.start.Load())).Seconds()
	pct := 0.0
	if t > 0 {
		pct = 100 * float64(d) / float64(t)
	}
	log.Info(msg, "bytes", d, "total_bytes", t, "percent", float64(int(pct*10))/10, "mb_per_s", float64(int(float64(d)/1e6/max(el, 1e-9)*10))/10)
}

// update is the RestoreOptions.Progress callback. A new total (a fallback
// to an older checkpoint) starts a new bar.
func (pr *progress) update(done, total int64) {
	if pr.total.Swap(total) != total {
		pr.start.Store(time.Now().UnixNano())
		pr.newBar(total)
	}
	for { // done only grows, whatever order the callbacks run in
		old := pr.done.Load()
		if done <= old || pr.done.CompareAndSwap(old, done) {
			break
		}
	}
	pr.mu.Lock()
	if pr.bar != nil {
		pr.bar.SetCurrent(done)
	}
	pr.mu.Unlock()
}

func (pr *progress) newBar(total int64) {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	pr.done.Store(0)
	if pr.p == nil {
		return
	}
	if pr.bar != nil {
		pr.bar.Abort(false)
	}
	pr.bar = pr.p.AddBar(total,
		mpb.PrependDecorators(decor.Name("restore "), decor.CountersKibiByte("% .1f / % .1f")),
		mpb.AppendDecorators(decor.Percentage(), decor.Name(" "), decor.AverageSpeed(decor.SizeB1024(0), "% .1f")))
}

// stop ends the reporting; the bar is completed or dropped.
func (pr *progress) stop() {
	pr.cancel()
	<-pr.loop
	pr.mu.Lock()
	defer pr.mu.Unlock()
	if pr.bar != nil && !pr.bar.Completed() {
		pr.bar.Abort(false)
	}
	if pr.p != nil {
		pr.p.Wait()
	}
}

// terminalWidth is f's terminal width in columns, 0 when f is not a
// terminal or reports no size (a bar needs one to draw).
func terminalWidth(f *os.File) int {
	ws, err := unix.IoctlGetWinsize(int(f.Fd()), unix.TIOCGWINSZ)
	if err != nil {
		return 0
	}
	return int(ws.Col)
}
