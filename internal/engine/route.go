package engine

import (
	"context"

	"github.com/writeguard/writeguard/policy"
)

// verdict is what one attempt's reply says about one document of its batch.
type verdict struct {
	fail  *policy.Failure // nil: acknowledged, or an ordered write's unexecuted tail
	proof policy.Proof
	sent  bool // the server received it (false: never left the client, or an ordered write's unexecuted tail)
	tail  bool // after the first write error of an ordered write: not executed
	// notOwn: fail is not a verdict on this document (a whole-command
	// failure, or the write error before it in an ordered command).
	notOwn bool
}

// verdicts reads, for every document of batch, which failure of fails is
// its own and what the reply proved, every proof from the failure's row
// of policy.ReplyShapes: a whole-command failure covers every document
// (Failed); a write error covers its statement (Failed) and, in an ordered
// write, the statements after the first one (Tail: not executed after a
// verdict, maybe applied after a write error that proves nothing); the
// other documents have its Others proof, or the write concern error's. A
// write error whose index names no statement of batch covers every
// document as policy.ShapeWriteErrorNoStatement.
func (c *Call) verdicts(batch []*item, fails []policy.Failure) []verdict {
	perDoc := map[int]*policy.Failure{}
	var wce, whole *policy.Failure
	for i := range fails {
		f := &fails[i]
		switch {
		case f.Shape == policy.ShapeWriteConcernError:
			wce = f
		case f.Index >= 0 && f.Index < len(batch):
			perDoc[f.Index] = f
		case f.Index != policy.WholeCommand:
			f.Shape, f.Index, f.Ambiguous = policy.ShapeWriteErrorNoStatement, policy.WholeCommand, true
			whole = f
		case whole == nil:
			whole = f
		}
	}
	if whole != nil && c.loneVerdict(batch, whole) && c.oneStatement(batch, whole) {
		perDoc[0], whole = whole, nil
	}
	c.ext.whole, c.ext.wholeN = whole, len(batch)
	out := make([]verdict, len(batch))
	if whole != nil {
		c.wholeVerdicts(out, whole)
		return out
	}
	stop := len(batch)
	if c.ordered {
		for i := range batch {
			if perDoc[i] != nil {
				stop, c.stopAt = i, c.offset+i
				break
			}
		}
	}
	others := policy.Applied
	for _, f := range perDoc {
		others = f.Shape.Row().Others
		break
	}
	if wce != nil {
		others = wce.Proof()
	}
	for i := range out {
		switch {
		case perDoc[i] != nil:
			out[i] = verdict{fail: perDoc[i], proof: perDoc[i].Proof(), sent: true}
		case i > stop:
			out[i] = c.tailVerdict(perDoc[stop])
		case wce != nil:
			out[i] = verdict{fail: wce, proof: others, sent: true, notOwn: true}
		default:
			out[i] = verdict{proof: others, sent: true}
		}
	}
	return out
}

// wholeVerdicts sets every verdict of out to what the whole-command
// failure whole proved: its row's Failed proof, or Hidden after attempts
// the driver may have hidden (hidden.go), or per statement what the
// wire's events proved (wireVerdict).
func (c *Call) wholeVerdicts(out []verdict, whole *policy.Failure) {
	p := whole.ProofAfter(c.ext.hidden)
	for i := range out {
		out[i] = verdict{fail: whole, proof: p, sent: p != policy.NotSent, notOwn: true}
		if c.ext.wireProofs != nil {
			out[i] = wireVerdict(whole, c.ext.wireProofs[i])
		}
	}
}

// tailVerdict is the verdict on a statement after first, the write error
// that ended an ordered command (its row's Tail): not executed, still
// pending, after a verdict; otherwise what Tail proves, with first as the
// failure that left it so.
func (c *Call) tailVerdict(first *policy.Failure) verdict {
	p := first.Shape.Row().Tail
	if p == policy.NotApplied {
		return verdict{proof: p, tail: true}
	}
	return verdict{fail: first, proof: p, sent: true, notOwn: true}
}

// route applies what a failed attempt proved to every document of batch.
func (c *Call) route(ctx context.Context, batch []*item, fails []policy.Failure) {
	var td todo
	wrote := false
	c.readWriteErrors(ctx, batch, fails)
	c.ext.hidden, c.ext.wireProofs = c.hiddenFor(ctx, batch, fails)
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
			d := c.decide(ctx, it, v)
			if sk, ok := c.shardKeyMove(it, v, len(batch)); ok {
				d = sk
			}
			c.apply(it, d, &td)
		}
	}
	if wrote {
		c.e.cfg.Budget.Success()
	}
	c.carryOut(ctx, &td, "", c.maybeInserts(batch))
	if len(td.readBackEnd) > 0 {
		c.carryOut(ctx, &todo{readBack: td.readBackEnd}, ReadBackFallback(), nil)
		notRetried(td.readBackEnd)
	}
	if c.hint != "" {
		c.giveUp(ctx, c.rest(ctx), StopConfiguration)
		return
	}
	c.stopOrdered(ctx)
}

// decide records v's failure on it and asks policy.Route.
func (c *Call) decide(ctx context.Context, it *item, v verdict) Decision {
	cp := *v.fail
	cp.Index = it.index
	cp.Ambiguous = cp.Ambiguous || v.proof == policy.MaybeApplied
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
	if it.kind == KindInsert && it.mayBeApplied() {
		c.askUniqueID(ctx)
	}
	if d, ok := c.bisectDecision(v); ok {
		return d
	}
	return Route(Facts{
		Class: it.class, WholeCommand: v.notOwn || v.fail.Index == policy.WholeCommand, Proof: v.proof,
		Kind: it.kind, Upsert: it.upsert, Idempotent: c.idempotentItem(it), NoUniqueID: c.noUniqueID,
		EverMaybe: it.mayBeApplied(), Unconfirmed: it.ev == unconfirmed,
		UpsertRuns: it.upsertRuns(), MaxUpsertRuns: c.e.cfg.UpsertRetries,
		FromServer: v.fail.Origin == policy.OriginServer || v.fail.Origin == policy.OriginWriteConcern,
	})
}

// askUniqueID learns, once per call, whether _id is unique where the
// documents land (Config.UniqueID; nil: unique). A failed ask (a
// listCollections that met a dropped connection or a cleared pool) is
// retried as a read-back is (retrySide: the write backoff, 3 counted
// failures, checkout failures not counted, within MaxElapsed and ctx);
// only if it still fails does _id count as not unique for the call: no
// insert is re-sent on a guess, and what may have been applied is read
// back instead.
func (c *Call) askUniqueID(ctx context.Context) {
	if c.uniqueAsked {
		return
	}
	c.uniqueAsked = true
	f := c.e.cfg.UniqueID
	if f == nil {
		return
	}
	unique := false
	if err := c.retrySide(ctx, 3, func(int) (err error) {
		unique, err = f(ctx)
		return err
	}); err != nil {
		unique = false
	}
	c.noUniqueID = !unique
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

// notRetried gives ReasonNotRetried to the documents of its, read back
// because their failure is never retried (RuleReadBackStopping), that
// ended unstored and not in a conflict (unknown: nothing found): their
// Outcome.Reason says why they ended so (ReasonNone is for stored or
// handled inputs and conflicts; trial finding C4).
func notRetried(its []*item) {
	for _, it := range its {
		if it.state == done && it.reason == ReasonNone && !it.disp.Stored() && !it.disp.IsConflict() && !it.disp.Handled() {
			it.reason = ReasonNotRetried
		}
	}
}
