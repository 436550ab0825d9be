package engine

import (
	"context"

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
