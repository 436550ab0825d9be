package engine

import (
	"context"
	"time"

	"github.com/writeguard/writeguard/hooks"
	"github.com/writeguard/writeguard/policy"
)

// verdict is what one attempt's reply says about one document of its batch.
type verdict struct {
	fail  *policy.Failure // nil: acknowledged
	proof policy.Proof
	sent  bool // the server received it (false: never left the client, or an ordered write's tail)
	tail  bool // after the first write error of an ordered write: not executed
}

// verdicts reads, for every document of batch, which failure of fails is
// its own and what the reply proved: a whole-command failure covers every
// document; a write error covers its document; in an ordered write the
// documents after the first write error were not executed; a write concern
// error covers the documents applied.
func (c *Call) verdicts(batch []*item, fails []policy.Failure) []verdict {
	perDoc := map[int]*policy.Failure{}
	var wce, whole *policy.Failure
	for i := range fails {
		f := &fails[i]
		switch {
		case f.Index >= 0 && f.Index < len(batch):
			perDoc[f.Index] = f
		case f.Shape == policy.ShapeWriteConcernError:
			wce = f
		default:
			whole = f
		}
	}
	out := make([]verdict, len(batch))
	if whole != nil {
		p := whole.Proof()
		for i := range out {
			out[i] = verdict{fail: whole, proof: p, sent: p != policy.NotSent}
		}
		return out
	}
	stop := len(batch)
	if c.ordered {
		for i := range batch {
			if perDoc[i] != nil {
				stop, c.stopAt = i, i
				break
			}
		}
	}
	for i := range out {
		switch {
		case perDoc[i] != nil:
			out[i] = verdict{fail: perDoc[i], proof: policy.NotApplied, sent: true}
		case i > stop:
			out[i] = verdict{proof: policy.NotApplied, tail: true} // never executed: still pending
		case wce != nil:
			out[i] = verdict{fail: wce, proof: policy.AppliedUnconfirmed, sent: true}
		default:
			out[i] = verdict{proof: policy.Applied, sent: true}
		}
	}
	return out
}

// route applies what a failed attempt proved to every document of batch.
func (c *Call) route(ctx context.Context, batch []*item, fails []policy.Failure) {
	var td todo
	wrote := false
	for i, v := range c.verdicts(batch, fails) {
		it := batch[i]
		if !v.sent {
			it.attempts-- // it did not reach the server this time
		}
		if v.tail || !Charged(v.fail) {
			it.tries-- // not a try: see Charged
		}
		switch {
		case v.fail == nil && v.proof == policy.Applied:
			wrote = true
			c.settle(it, policy.Written)
		case v.fail == nil:
			// an ordered write's tail: pending, sent again next attempt
		default:
			c.apply(it, c.decide(ctx, it, v), &td)
		}
	}
	if wrote {
		c.e.cfg.Budget.Success()
	}
	c.carryOut(ctx, &td, "", c.maybeInserts(batch))
	if c.hint != "" {
		c.giveUp(ctx, c.pending(), StopConfiguration)
		return
	}
	c.stopOrdered(ctx)
}

// decide records v's failure on it and asks policy.Route.
func (c *Call) decide(ctx context.Context, it *item, v verdict) Decision {
	cp := *v.fail
	cp.Index = it.index
	it.fail = &cp
	it.class = c.e.cfg.Classifier.Classify(*v.fail)
	switch v.proof {
	case policy.MaybeApplied:
		it.ev = max(it.ev, maybe)
	case policy.AppliedUnconfirmed:
		it.ev = unconfirmed
	}
	switch it.class {
	case policy.Configuration:
		c.hint = hintFor(v.fail)
	case policy.Unknown:
		c.e.logUnknown(ctx, v.fail, c.op.Name)
	}
	return Route(Facts{
		Class: it.class, WholeCommand: v.fail.Index == policy.WholeCommand, Proof: v.proof,
		Kind: it.kind, Upsert: it.upsert, Idempotent: c.idempotent,
		EverMaybe: it.mayBeApplied(), Unconfirmed: it.ev == unconfirmed,
		UpsertRuns: it.upsertRuns, MaxUpsertRuns: c.e.cfg.UpsertRetries,
	})
}

// maybeInserts returns the pending inserts of batch that an attempt may
// have applied: a read-back made for other documents reads them too (an
// ordered write stops at the first duplicate, so without this each one
// would cost an attempt).
func (c *Call) maybeInserts(batch []*item) []*item {
	var out []*item
	for _, it := range batch {
		if it.state != done && it.mayBeApplied() && it.kind == KindInsert {
			out = append(out, it)
		}
	}
	return out
}

// scheduleRetry decides, after an attempt, whether the items marked for
// retry go again, and waits the backoff. It returns the delay waited.
func (c *Call) scheduleRetry(ctx context.Context) time.Duration {
	e := c.e
	var retry, spent []*item
	var serverDelay time.Duration
	charged, limit := false, 0
	for _, it := range c.items {
		if it.state != retrying {
			continue
		}
		itLimit := AttemptLimit(it.class, it.fail, e.cfg.Backoff, e.cfg.ThrottledAttempts)
		if it.tries >= itLimit {
			spent = append(spent, it)
			continue
		}
		limit = max(limit, itLimit-it.tries+c.retries+1)
		retry = append(retry, it)
		serverDelay = max(serverDelay, it.fail.RetryAfter)
		charged = charged || Charged(it.fail)
	}
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
