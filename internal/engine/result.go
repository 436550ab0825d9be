package engine

import (
	"context"
	"fmt"

	"github.com/writeguard/writeguard/hooks"
	"github.com/writeguard/writeguard/policy"
)

// finish builds the call's error (Config.Report of the call; nil when every input ended written or
// already_written, or unacknowledged when allowed) and reports the end of
// the call to the hooks.
func (c *Call) finish(ctx context.Context) error {
	e := c.e
	ok := true
	for _, it := range c.items {
		if it.disp != policy.Written && it.disp != policy.AlreadyWritten && !(it.disp == policy.Unacknowledged && e.cfg.AllowUnacked) {
			ok = false
			break
		}
	}
	if e.cfg.Settled != nil {
		dead := 0
		for _, it := range c.items {
			if it.disp == policy.DeadLettered {
				dead++
			}
		}
		if serr := e.cfg.Settled(ctx, len(c.items), dead); serr != nil {
			c.extra = append(c.extra, serr)
		}
	}
	var err error
	if !ok {
		err = e.cfg.Report(c.Result())
	}
	if e.observed {
		c.operationFinished(ctx, err)
	}
	return err
}

// operationFinished reports the end of the call to the hooks.
func (c *Call) operationFinished(ctx context.Context, err error) {
	e := c.e
	counts := map[policy.Disposition]int{}
	end := &hooks.OperationEnd{Op: c.op, Attempts: c.attempts, Retries: c.retries, Counts: counts, Duration: e.cfg.Clock.Now().Sub(c.start), Err: err}
	for _, it := range c.items {
		counts[it.disp]++
		if err != nil && !it.disp.Handled() && end.Code == 0 && it.fail != nil {
			end.Code, end.CodeName, end.Class = it.fail.Code, it.fail.CodeName, it.class
		}
	}
	end.MatchedNothing = c.ext.matchedNothing && counts[policy.Written] == len(c.items)
	e.hooks.OperationFinished(ctx, end)
}

// hintFor names the setting to fix after a Configuration failure.
func hintFor(f *policy.Failure) string {
	switch {
	case policy.RetryableWritesUnsupported(f.Code, f.Message):
		return "hint: the server does not support retryable writes (Azure Cosmos DB for MongoDB, Amazon DocumentDB): add retryWrites=false to the connection string"
	case f.Code == 20:
		return "hint: the deployment does not support retryable writes (a standalone server?): add retryWrites=false to the connection string"
	case f.Code == 79:
		return "hint: the write concern names a mode the replica set does not have: check the w setting"
	case f.Code == 100:
		return "hint: the write concern cannot be satisfied by this deployment (not enough data-bearing nodes): lower w"
	}
	return fmt.Sprintf("hint: configuration error %d %s", f.Code, f.CodeName)
}
