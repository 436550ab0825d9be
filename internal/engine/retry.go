package engine

import (
	"context"
	"time"

	"github.com/writeguard/writeguard/hooks"
)

// scheduleRetry decides, after an attempt, whether the items marked for
// retry go again, and waits the backoff. It returns the delay waited.
func (c *Call) scheduleRetry(ctx context.Context) time.Duration {
	e := c.e
	if !c.retrying { // a clean pass: nothing to look for
		c.stopOrdered(ctx)
		return 0
	}
	c.retrying = false // on return, none is left retrying: each is pending again or done
	d := c.retriesDue()
	retry, spent, serverDelay, charged, limit := d.retry, d.spent, d.serverDelay, d.charged, d.limit
	c.giveUp(ctx, spent, StopAttempts)
	c.stopOrdered(ctx)
	retry = stillPending(retry)
	if len(retry) == 0 {
		return 0
	}
	cause := retry[0]
	delay := max(e.cfg.Backoff.Delay(c.retries+1), serverDelay)
	if maxElapsed := e.cfg.Backoff.MaxElapsed; maxElapsed > 0 && e.cfg.Clock.Now().Add(delay).Sub(c.start) > maxElapsed {
		c.stopRetries(ctx, retry, StopElapsed)
		return 0
	}
	if charged && !e.cfg.Budget.Allow() {
		e.hooks.BudgetExhausted(ctx, &hooks.BudgetExhausted{Op: c.op, Documents: len(retry), Code: cause.fail.Code})
		e.logBudget(ctx, c.op.Name, len(retry))
		// The backoffs of the refused retries are still waited before the
		// call returns (policy.Backoff.RefusedWait): a caller that loops
		// on exhausted documents would otherwise turn the refusal into a
		// storm of first attempts.
		c.flushDeadLetters(ctx)
		c.waitRefused(ctx, max(delay, e.cfg.Backoff.RefusedWait(c.retries+1, limit)))
		c.stopRetries(ctx, retry, StopBudget)
		return 0
	}
	// Hand the gathered invalid documents to the sink before waiting:
	// the context may end during the wait.
	c.flushDeadLetters(ctx)
	e.hooks.RetryScheduled(ctx, &hooks.Retry{Op: c.op, Attempt: c.attempts + 1, Delay: delay, Documents: len(retry), Code: cause.fail.Code, Class: cause.class})
	if err := Wait(ctx, e.cfg.Clock, delay); err != nil {
		c.extra = append(c.extra, err)
		c.stopRetries(ctx, retry, StopContext)
		return 0
	}
	c.retries++
	for _, it := range retry {
		it.to(pending)
	}
	return delay
}

// waitRefused waits d, cut to the call's MaxElapsed and to the context's
// deadline (where policy.Wait would not wait at all).
func (c *Call) waitRefused(ctx context.Context, d time.Duration) {
	b := c.e.cfg.Backoff
	now := c.e.cfg.Clock.Now()
	if b.MaxElapsed > 0 {
		d = min(d, c.start.Add(b.MaxElapsed).Sub(now))
	}
	if dl, ok := ctx.Deadline(); ok {
		d = min(d, dl.Sub(now)-time.Millisecond)
	}
	if d > 0 {
		_ = Wait(ctx, c.e.cfg.Clock, d)
	}
}

// stopRetries gives up the documents marked for retry, then ends an ordered
// write after them.
func (c *Call) stopRetries(ctx context.Context, retry []*item, why StopReason) {
	c.giveUp(ctx, retry, why)
	c.stopOrdered(ctx)
}

func stillPending(its []*item) []*item {
	out := its[:0]
	for _, it := range its {
		if it.state != done {
			out = append(out, it)
		}
	}
	return out
}

// due is what the items marked for retry ask of scheduleRetry.
type due struct {
	retry, spent []*item       // those with attempts left, and those without
	serverDelay  time.Duration // the longest wait a server asked for
	charged      bool          // one of the retries spends a budget token
	limit        int           // the attempts the longest of them may still take, counted from the call's retries
}

// retriesDue reads every item marked for retry.
func (c *Call) retriesDue() due {
	e := c.e
	var d due
	for _, it := range c.items {
		if it.state != retrying {
			continue
		}
		itLimit := AttemptLimit(it.class, it.fail, e.cfg.Backoff, e.cfg.ThrottledAttempts)
		if it.tries >= itLimit {
			d.spent = append(d.spent, it)
			continue
		}
		d.limit = max(d.limit, itLimit-it.tries+c.retries+1)
		d.retry = append(d.retry, it)
		d.serverDelay = max(d.serverDelay, it.fail.RetryAfter)
		d.charged = d.charged || Charged(it.fail)
	}
	return d
}
