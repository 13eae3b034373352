package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"

	"github.com/lifeboat-project/lifeboat/coord"
	"github.com/lifeboat-project/lifeboat/pipeline"
	"github.com/lifeboat-project/lifeboat/supervisor"
)

// codeRankClaimed is lifeboat's exit code when another live pod claims
// its rank (EX_CONFIG): the ranks are misassigned, which a retry of the
// same pod does not fix.
const codeRankClaimed = 78

// claim claims this lifeboat's rank in the store (coord.Claim) when there
// is a store and --coord-interval is above 0, at every world size (two
// pods of a single-rank job mix as two pods of rank 1 do): the claim is
// written and the rank's claims listed before the agent commits anything,
// and every manifest waits for the claim's Fence. It returns nil when off.
func (o *coordOptions) claim(ctx context.Context, p *pipeline.Pipeline, log *slog.Logger) (*coord.Claim, error) {
	if p == nil || o.interval == 0 {
		return nil, nil
	}
	host, _ := os.Hostname()
	c, err := coord.NewClaim(coord.ClaimConfig{Store: p.Store, Rank: p.Rank, WorldSize: p.WorldSize, Host: host,
		Interval: o.interval, Started: processStarted, Log: log})
	if err != nil {
		return nil, err
	}
	c.Start(ctx)
	p.Uploader.Fence = c.Fence
	go c.Loop(ctx)
	return c, nil
}

// releaseClaim says this lifeboat is stopping: its final upload may
// overlap a replacement pod of its rank (coord.Claim.Release).
func releaseClaim(c *coord.Claim) {
	if c != nil {
		c.Release()
	}
}

// settleClaim releases the claim and waits, until ctx ends, for its
// deletion: at the exit, so that the next pod of the rank does not wait
// for it to go stale.
func settleClaim(ctx context.Context, c *coord.Claim) {
	if c != nil {
		c.Release()
		c.Wait(ctx)
	}
}

// claimNotices relays in, and adds a notice when another live pod claims
// this rank: the trainer is stopped as on preemption (its saves are no
// longer committed), and the pod gets a Warning event.
func claimNotices(ctx context.Context, in <-chan supervisor.Notice, c *coord.Claim, k *kubeOptions) <-chan supervisor.Notice {
	if c == nil {
		return in
	}
	out := make(chan supervisor.Notice, 2)
	go func() {
		defer close(out)
		twin := c.Conflict()
		for in != nil || twin != nil {
			var n supervisor.Notice
			select {
			case <-ctx.Done():
				return
			case cn, ok := <-in:
				if !ok {
					in = nil
					continue
				}
				n = cn
			case t := <-twin:
				twin = nil
				k.rankClaimed(c.Run(), t)
				n = supervisor.Notice{Source: "rank claim", Detail: fmt.Sprintf("another live pod claims this rank: run %s on %s", t.Run, t.Host)}
			}
			select {
			case out <- n:
			case <-ctx.Done():
				return
			}
		}
	}()
	return out
}

// claimedCode turns err into codeRankClaimed when another live pod
// claimed this rank, and writes why to the termination log (tlog) in place
// of the supervisor's line, which took the stop for a preemption.
func claimedCode(c *coord.Claim, err error, tlog func(msg string)) error {
	if c == nil {
		return err
	}
	t, ok := c.Twin()
	if !ok {
		return err
	}
	msg := fmt.Sprintf("another live pod claims this rank: run %s on %s (coord.rank_claimed); this pod committed nothing over it; give every pod its own rank", t.Run, t.Host)
	tlog("exit 78: " + msg)
	return &codeError{code: codeRankClaimed, err: errors.New(msg)}
}
