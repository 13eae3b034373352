package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"

	"github.com/lifeboat-project/lifeboat/coord"
	"github.com/lifeboat-project/lifeboat/pipeline"
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
