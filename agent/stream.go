package agent

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/lifeboat-project/lifeboat/checkpoint"
)

// Stopping tells the agent that a stop is under way: the trainer is about
// to write its last save. From now on the agent streams the chunks of the
// files the trainer holds open for writing as they are written
// (checkpoint.Uploader.Stream), so that the final upload finds them stored
// and only confirms them. Nothing is committed by the stream: the final
// upload decides, by the usual rules, what is whole. It returns at once;
// calling it again does nothing more.
//
// The stream begins once no background upload is in flight (one that is
// finishes first); a save that becomes whole meanwhile ends it, is
// uploaded in the background as without a stream, and the stream begins
// again after it: the chunks in memory stay within one upload's buffers.
func (a *Agent) Stopping() {
	select {
	case a.stopCh <- struct{}{}:
	default:
	}
}

// streamJob is a stream in progress (Run's goroutine owns it).
type streamJob struct {
	stop   chan struct{}
	cancel context.CancelFunc
	done   chan checkpoint.StreamResult
	t0     time.Time
}

// startStream starts streaming the files open for writing under the
// directory, under ctx.
func (a *Agent) startStream(ctx context.Context) *streamJob {
	ctx, cancel := context.WithCancel(ctx)
	j := &streamJob{stop: make(chan struct{}), cancel: cancel, done: make(chan checkpoint.StreamResult, 1), t0: a.cfg.Clock()}
	a.cfg.Log.Info("checkpoint.stream_started", "reason", "a stop is under way: the chunks of the files the trainer writes are stored as they are written")
	go func() {
		defer func() {
			if p := recover(); p != nil {
				j.done <- checkpoint.StreamResult{Err: fmt.Errorf("stream panicked: %v", p)}
			}
		}()
		j.done <- a.cfg.Uploader.Stream(ctx, a.cfg.Dir, j.stop, checkpoint.StreamOptions{Find: a.openForWrite})
	}()
	return j
}

// openForWrite lists the files under the directory that a process of the
// trainer holds open for writing.
func (a *Agent) openForWrite() []string {
	busy := a.cfg.Watcher.OpenForWrite()
	out := make([]string, 0, len(busy))
	for p := range busy {
		out = append(out, p)
	}
	slices.Sort(out)
	return out
}

// endStream stops j reading and waits, until ctx ends, for the chunks it
// read to be stored; then it logs what it did.
func (a *Agent) endStream(ctx context.Context, j *streamJob) {
	close(j.stop)
	var res checkpoint.StreamResult
	select {
	case res = <-j.done:
	case <-ctx.Done():
		j.cancel()
		res = <-j.done
	}
	j.cancel()
	args := []any{"files", res.Files, "chunks", res.Chunks, "bytes", res.Bytes, "uploaded_bytes", res.UploadedBytes,
		"restarted", res.Restarted, "seconds", a.cfg.Clock().Sub(j.t0).Seconds()}
	if res.Err != nil {
		args = append(args, "err", res.Err.Error(), "effect", "the final upload stores what the stream did not")
	}
	a.cfg.Log.Info("checkpoint.streamed", args...)
}
