package checkpoint

import (
	"cmp"
	"context"
	"sync"
	"sync/atomic"
)

// chunkBuffers are the chunk buffers that every upload and stream of one
// Uploader share: at most n exist at once, each made on first use. So
// Buffers bounds the chunks in memory across everything the Uploader
// does, and the final upload after a stream takes the stream's buffers
// instead of making as many again while the garbage collector has not yet
// freed the first ones (which doubled the process's peak memory at a
// stop). A holder of a buffer never waits for another one, so sharing
// cannot deadlock; uploads that run at once share the n buffers.
type chunkBuffers struct {
	once      sync.Once
	free      chan []byte // nil until a slot's buffer is first made
	allocated atomic.Int64
}

// buffers returns u's chunk buffers, made on first use with the
// configured number of slots.
func (u *Uploader) buffers() *chunkBuffers {
	b := &u.bufs
	b.once.Do(func() {
		n := max(cmp.Or(u.Buffers, cmp.Or(u.Workers, DefaultUploadWorkers)+2), 1)
		b.free = make(chan []byte, n)
		for range n {
			b.free <- nil
		}
	})
	return b
}

// take waits for a free buffer and returns it with length size; false
// when ctx ends or stop closes first (a nil stop never closes).
func (b *chunkBuffers) take(ctx context.Context, stop <-chan struct{}, size int) ([]byte, bool) {
	select {
	case buf := <-b.free:
		if cap(buf) < size {
			b.allocated.Add(1)
			buf = make([]byte, size)
		}
		return buf[:size], true
	case <-stop:
	case <-ctx.Done():
	}
	return nil, false
}

// give returns a buffer that take returned (or a slice of it).
func (b *chunkBuffers) give(buf []byte) { b.free <- buf }
