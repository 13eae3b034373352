package checkpoint

import (
	"context"

	"golang.org/x/sync/errgroup"
)

// Restore, Verify and Upload run their chunks through an errgroup.Group made
// by errgroup.WithContext and bounded by SetLimit: the first error a chunk's
// function returns cancels the group's context, so that the others stop,
// and is the error the operation returns.

// waitCause waits for g, whose context gctx errgroup.WithContext derived
// from ctx, and returns what ended the work early: the first error of g's
// functions, or ctx's cause when ctx ended before any of them failed. It
// is nil when the work ran to its end.
func waitCause(ctx, gctx context.Context, g *errgroup.Group) error {
	if err := g.Wait(); err != nil {
		return context.Cause(gctx)
	}
	return context.Cause(ctx)
}

// scratchPool holds the fetchBuffer-sized buffers of a download's chunks,
// one per worker, each allocated on first use: a group of n workers takes
// at most n at once, so get never waits.
type scratchPool chan []byte

func newScratchPool(workers int) scratchPool {
	p := make(scratchPool, workers)
	for range workers {
		p <- nil
	}
	return p
}

func (p scratchPool) get() []byte {
	if b := <-p; b != nil {
		return b
	}
	return make([]byte, fetchBuffer)
}

func (p scratchPool) put(b []byte) { p <- b }
