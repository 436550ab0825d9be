package writeguard

import (
	"context"
	"fmt"
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
func (c *call) verdicts(batch []*item, fails []policy.Failure) []verdict {
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
func (c *call) route(ctx context.Context, batch []*item, fails []policy.Failure) {
	var td todo
	wrote := false
	for i, v := range c.verdicts(batch, fails) {
		it := batch[i]
		if !v.sent {
			it.attempts-- // it did not reach the server this time
		}
		if v.tail || !policy.Charged(v.fail) {
			it.tries-- // not a try: see policy.Charged
		}
		switch {
		case v.fail == nil && v.proof == policy.Applied:
			wrote = true
			c.settle(it, Written)
		case v.fail == nil:
			// an ordered write's tail: pending, sent again next attempt
		default:
			c.apply(it, c.decide(ctx, it, v), &td)
		}
	}
	if wrote {
		c.g.cfg.budget.Success()
	}
	c.carryOut(ctx, &td, "", c.maybeInserts(batch))
	if c.hint != "" {
		c.giveUp(ctx, c.pending(), policy.StopConfiguration)
		return
	}
	c.stopOrdered(ctx)
}

// decide records v's failure on it and asks policy.Route.
func (c *call) decide(ctx context.Context, it *item, v verdict) policy.Decision {
	cp := *v.fail
	cp.Index = it.index
	it.fail = &cp
	it.class = c.g.classifier.Classify(*v.fail)
	switch v.proof {
	case policy.MaybeApplied:
		it.maybe = true
	case policy.AppliedUnconfirmed:
		it.maybe, it.unconf = true, true
	}
	switch it.class {
	case policy.Configuration:
		c.hint = hintFor(v.fail)
	case policy.Unknown:
		c.g.logUnknown(ctx, v.fail, c.op.Name)
	}
	return policy.Route(policy.Facts{
		Class: it.class, WholeCommand: v.fail.Index == policy.WholeCommand, Proof: v.proof,
		Kind: it.kind, Upsert: it.upsert, Idempotent: c.idempotent,
		EverMaybe: it.maybe, Unconfirmed: it.unconf,
		UpsertRuns: it.upsertRuns, MaxUpsertRuns: c.g.cfg.upsertRetries,
	})
}

// maybeInserts returns the pending inserts of batch that an attempt may
// have applied: a read-back made for other documents reads them too (an
// ordered write stops at the first duplicate, so without this each one
// would cost an attempt).
func (c *call) maybeInserts(batch []*item) []*item {
	var out []*item
	for _, it := range batch {
		if it.disp == "" && it.maybe && it.kind == policy.KindInsert {
			out = append(out, it)
		}
	}
	return out
}

// scheduleRetry decides, after an attempt, whether the items marked for
// retry go again, and waits the backoff. It returns the delay waited.
func (c *call) scheduleRetry(ctx context.Context) time.Duration {
	g := c.g
	var retry, spent []*item
	var serverDelay time.Duration
	charged, limit := false, 0
	for _, it := range c.items {
		if it.disp != "" || !it.retry {
			continue
		}
		itLimit := policy.AttemptLimit(it.class, it.fail, g.cfg.backoff, g.cfg.throttledAttempts)
		if it.tries >= itLimit {
			spent = append(spent, it)
			continue
		}
		limit = max(limit, itLimit-it.tries+c.retries+1)
		retry = append(retry, it)
		serverDelay = max(serverDelay, it.fail.RetryAfter)
		charged = charged || policy.Charged(it.fail)
	}
	c.giveUp(ctx, spent, policy.StopAttempts)
	c.stopOrdered(ctx)
	retry = stillPending(retry)
	if len(retry) == 0 {
		return 0
	}
	cause := retry[0]
	delay := max(g.cfg.backoff.Delay(c.retries+1), serverDelay)
	if maxElapsed := g.cfg.backoff.MaxElapsed; maxElapsed > 0 && g.cfg.clock.Now().Add(delay).Sub(c.start) > maxElapsed {
		c.stopRetries(ctx, retry, policy.StopElapsed)
		return 0
	}
	if charged && !g.cfg.budget.Allow() {
		g.hooks.BudgetExhausted(ctx, &hooks.BudgetExhausted{Op: c.op, Documents: len(retry), Code: cause.fail.Code})
		g.logBudget(ctx, c.op.Name, len(retry))
		// The backoffs of the refused retries are still waited before the
		// call returns (policy.Backoff.RefusedWait): a caller that loops
		// on exhausted documents would otherwise turn the refusal into a
		// storm of first attempts.
		c.flushDeadLetters(ctx)
		c.waitRefused(ctx, max(delay, g.cfg.backoff.RefusedWait(c.retries+1, limit)))
		c.stopRetries(ctx, retry, policy.StopBudget)
		return 0
	}
	// Hand the gathered invalid documents to the sink before waiting:
	// the context may end during the wait.
	c.flushDeadLetters(ctx)
	g.hooks.RetryScheduled(ctx, &hooks.Retry{Op: c.op, Attempt: c.attempts + 1, Delay: delay, Documents: len(retry), Code: cause.fail.Code, Class: cause.class})
	if err := policy.Wait(ctx, g.cfg.clock, delay); err != nil {
		c.extra = append(c.extra, err)
		c.stopRetries(ctx, retry, policy.StopContext)
		return 0
	}
	c.retries++
	for _, it := range retry {
		it.retry = false
	}
	return delay
}

// waitRefused waits d, cut to the call's MaxElapsed and to the context's
// deadline (where policy.Wait would not wait at all).
func (c *call) waitRefused(ctx context.Context, d time.Duration) {
	b := c.g.cfg.backoff
	now := c.g.cfg.clock.Now()
	if b.MaxElapsed > 0 {
		d = min(d, c.start.Add(b.MaxElapsed).Sub(now))
	}
	if dl, ok := ctx.Deadline(); ok {
		d = min(d, dl.Sub(now)-time.Millisecond)
	}
	if d > 0 {
		_ = policy.Wait(ctx, c.g.cfg.clock, d)
	}
}

// stopRetries gives up the documents marked for retry, then ends an ordered
// write after them.
func (c *call) stopRetries(ctx context.Context, retry []*item, why policy.StopReason) {
	c.giveUp(ctx, retry, why)
	c.stopOrdered(ctx)
}

func stillPending(its []*item) []*item {
	out := its[:0]
	for _, it := range its {
		if it.disp == "" {
			out = append(out, it)
		}
	}
	return out
}

// finish builds the call's error (nil when every input ended written or
// already_written, or unacknowledged when allowed) and reports the end of
// the call to the hooks.
func (c *call) finish(ctx context.Context) error {
	g := c.g
	ok := true
	for _, it := range c.items {
		if it.disp != Written && it.disp != AlreadyWritten && !(it.disp == Unacknowledged && g.cfg.allowUnacked) {
			ok = false
			break
		}
	}
	flood := c.deadLetterFlood(ctx) // breaker.go: counts every call, nil unless open and dead-lettering
	var r *Report
	var err error
	if !ok {
		r = &Report{Operation: c.op.Name, Namespace: g.Namespace(), Attempts: c.attempts, Err: c.lastErr, Hint: c.hint, extra: c.extra}
		if flood != nil {
			r.extra = append(r.extra, flood)
		}
		r.Outcomes = make([]Outcome, len(c.items))
		for i, it := range c.items {
			r.Outcomes[i] = c.outcome(it)
		}
		err = r
	}
	if g.observed {
		c.operationFinished(ctx, err)
	}
	return err
}

// operationFinished reports the end of the call to the hooks.
func (c *call) operationFinished(ctx context.Context, err error) {
	g := c.g
	counts := map[Disposition]int{}
	end := &hooks.OperationEnd{Op: c.op, Attempts: c.attempts, Retries: c.retries, Counts: counts, Duration: g.cfg.clock.Now().Sub(c.start), Err: err}
	for _, it := range c.items {
		counts[it.disp]++
		if err != nil && !it.disp.Handled() && end.Code == 0 && it.fail != nil {
			end.Code, end.CodeName, end.Class = it.fail.Code, it.fail.CodeName, it.class
		}
	}
	g.hooks.OperationFinished(ctx, end)
}

func (c *call) outcome(it *item) Outcome {
	o := Outcome{Index: it.index, ID: it.idValue(), Disposition: it.disp, Failure: it.fail, Attempts: it.attempts,
		MaybeWritten: it.maybe && !it.disp.Stored(), Document: it.doc, Model: it.model, Err: it.err}
	if it.kind != policy.KindInsert {
		o.ID = nil
	}
	if it.fail != nil {
		o.Class = it.class
	}
	return o
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
