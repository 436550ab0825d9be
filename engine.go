package writeguard

import (
	"context"
	"errors"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/writeguard/writeguard/envelope"
	"github.com/writeguard/writeguard/hooks"
	"github.com/writeguard/writeguard/policy"
)

// The write loop. Each attempt sends the pending documents, reads what the
// reply proves about each (policy.Extract, Failure.Proof), asks
// policy.Route what to do with each, and applies the decisions: settle,
// retry, read back, dead-letter, hand to the conflict handler. Documents
// whose retries stop are decided by policy.GiveUp. Every decision is in
// policy; this file only carries them out.

// item is one input document or write model on its way through the chain.
type item struct {
	index      int
	kind       policy.Kind
	doc        bson.Raw      // insert: the prepared document; replace: the replacement
	boxed      any           // insert: doc as the driver takes it, boxed once per call
	id         bson.RawValue // insert: the _id
	model      mongo.WriteModel
	send       mongo.WriteModel // bulk: the model to send
	upsert     bool
	disp       Disposition
	fail       *policy.Failure
	class      policy.Class
	attempts   int  // attempts that sent it to the server
	tries      int  // attempts counted against its limit (not an ordered write's unexecuted tail, not a checkout failure)
	maybe      bool // an attempt may have applied it (lost reply, interruption, write concern error)
	unconf     bool // an attempt applied it with a write concern error
	upsertRuns int
	retry      bool // scheduled for the next attempt
	parked     bool // invalid, waiting for the gathered dead-letter Put
	err        error
	keywords   []string
	prefail    bool // failed in prepare, never sent
	idAssigned bool // writeguard gave the document its _id
}

// idValue is the _id as the driver returns it (policy.IDValue).
func (it *item) idValue() any { return policy.IDValue(it.id) }

// call is the state of one guarded call.
type call struct {
	g          *Guarded
	op         *hooks.Operation
	ctx        context.Context // the operation context (hooks)
	ordered    bool
	idempotent bool
	callOpts   envelope.CallOptions // the call's options an envelope keeps
	items      []*item
	send       func(ctx context.Context, batch []*item) (any, error)

	start    time.Time
	attempts int
	retries  int
	lastErr  error
	hint     string
	extra    []error
	parked   []*item // invalid items waiting for the dead-letter sink
	window   int     // ordered: documents per attempt (0: all pending)
	stopAt   int     // ordered: batch position of the last attempt's first write error, -1 when none
}

// todo collects the actions decided for the documents of one attempt that
// need more than a settle.
type todo struct {
	readBack, deadLetter, conflict []*item
}

func (g *Guarded) newCall(name string, ordered bool) *call {
	return &call{
		g:       g,
		ordered: ordered,
		op:      &hooks.Operation{Name: name, Database: g.database, Collection: g.collection, Ordered: ordered},
	}
}

// run drives the call to a terminal disposition for every item. It returns
// the driver's result of the first attempt when that attempt succeeded for
// every item (so the caller gets exactly what the driver returns), and nil
// or a *Report.
func (c *call) run(ctx context.Context) (any, error) {
	g := c.g
	c.op.BatchSize = len(c.items)
	c.start = g.cfg.clock.Now()
	if g.observed {
		ctx = g.hooks.OperationStarted(ctx, c.op)
	}
	c.ctx = ctx

	var first any
	c.routePrefailed(ctx)
	delay := time.Duration(0)
	for {
		batch := c.pending()
		if len(batch) == 0 {
			break
		}
		if c.ordered && c.window > 0 && len(batch) > c.window {
			batch = batch[:c.window]
		}
		if err := ctx.Err(); err != nil {
			// Nothing more leaves the client: the documents never sent
			// are not_attempted, whatever stopped them.
			c.extra = append(c.extra, err)
			c.giveUp(ctx, batch, policy.StopContext)
			break
		}
		c.stopAt = -1
		res, err := c.attempt(ctx, batch, delay)
		if c.attempts == 1 && (err == nil || errors.Is(err, errUnacked)) {
			first = res
		}
		if c.ordered {
			c.window = policy.OrderedWindow(c.window, len(batch), c.stopAt)
		}
		delay = c.scheduleRetry(ctx)
	}
	c.flushDeadLetters(ctx)
	return first, c.finish(ctx)
}

// attempt sends batch once and routes every document by what the reply
// proved. Hook events are built only when hooks are installed.
func (c *call) attempt(ctx context.Context, batch []*item, delay time.Duration) (any, error) {
	g := c.g
	c.attempts++
	for _, it := range batch {
		it.tries++
		it.attempts++
	}
	actx := ctx
	var t0 time.Time
	if g.observed {
		actx = g.hooks.AttemptStarted(ctx, &hooks.AttemptStart{Op: c.op, Attempt: c.attempts, Documents: len(batch), Delay: delay})
		t0 = g.cfg.clock.Now()
	}
	res, err := c.send(actx, batch)
	var fails []policy.Failure
	if err != nil && !errors.Is(err, errUnacked) {
		fails = policy.Extract(err)
	}
	if g.observed {
		c.attemptFinished(actx, len(batch), t0, err, fails)
	}
	switch {
	case err == nil:
		g.cfg.budget.Success()
		for _, it := range batch {
			c.settle(it, Written)
		}
	case errors.Is(err, errUnacked):
		for _, it := range batch {
			c.settle(it, Unacknowledged)
		}
		if !g.cfg.allowUnacked {
			c.extra = append(c.extra, ErrUnacknowledged)
		}
	default:
		c.lastErr = err
		c.route(ctx, batch, fails)
	}
	return res, err
}

// attemptFinished reports the end of an attempt to the hooks.
func (c *call) attemptFinished(actx context.Context, docs int, t0 time.Time, err error, fails []policy.Failure) {
	g := c.g
	end := &hooks.AttemptEnd{Op: c.op, Attempt: c.attempts, Documents: docs, Duration: g.cfg.clock.Now().Sub(t0), Err: err}
	if errors.Is(err, errUnacked) {
		end.Err = nil
	} else if len(fails) > 0 {
		end.Code, end.Class, end.Failures = fails[0].Code, g.classifier.Classify(fails[0]), len(fails)
	}
	g.hooks.AttemptFinished(actx, end)
}

// pending returns the items still to send, in input order.
func (c *call) pending() []*item {
	var out []*item
	for _, it := range c.items {
		if it.disp == "" && !it.parked {
			out = append(out, it)
		}
	}
	return out
}

// settle gives it its terminal disposition and reports it.
func (c *call) settle(it *item, d Disposition) {
	if it.disp != "" {
		return
	}
	it.disp, it.retry = d, false
	if !c.g.observed {
		return
	}
	ev := &hooks.Disposition{Op: c.op, Index: it.index, Disposition: d, Attempts: it.attempts, FailingKeywords: it.keywords}
	if it.kind == policy.KindInsert {
		ev.ID = it.idValue()
	}
	if it.fail != nil && d != Written {
		ev.Failed = true
		ev.Class, ev.Code, ev.CodeName = it.class, it.fail.Code, it.fail.CodeName
	}
	c.g.hooks.Disposition(c.ctx, ev)
}

// apply carries out one decision for it; actions that need I/O are
// collected in td.
func (c *call) apply(it *item, d policy.Decision, td *todo) {
	switch d.Action {
	case policy.Settle:
		c.settle(it, d.Disposition)
	case policy.Retry:
		it.retry = true
		if d.Rule == policy.RuleUpsertRace {
			it.upsertRuns++
		}
	case policy.ReadBack:
		td.readBack = append(td.readBack, it)
	case policy.DeadLetter:
		td.deadLetter = append(td.deadLetter, it)
	case policy.HandleConflict:
		td.conflict = append(td.conflict, it)
	}
}

// carryOut runs the collected actions: read-backs first (a read-back can
// end in the conflict handler), then conflicts, then the dead-letter
// hand-off. fallback is the disposition of a possibly applied document
// whose read-back finds nothing or fails when the call stops retrying it
// ("" after a duplicate key: see policy.AfterReadBack).
func (c *call) carryOut(ctx context.Context, td *todo, fallback Disposition, others []*item) {
	c.readBackAll(ctx, td, fallback, others)
	for _, it := range td.conflict {
		if !c.conflictIdentifiable(it) {
			continue
		}
		c.handleConflict(ctx, it)
	}
	c.park(ctx, td.deadLetter)
}

// routePrefailed routes the documents that failed before any attempt
// (marshal errors, oversized documents): a client-side verdict on one
// document is Invalid (dead-lettered when there are bytes to store).
func (c *call) routePrefailed(ctx context.Context) {
	var invalid []*item
	for _, it := range c.items {
		if !it.prefail {
			continue
		}
		it.class = c.g.classifier.Classify(*it.fail)
		if it.class == policy.Invalid && it.doc != nil {
			invalid = append(invalid, it)
			continue
		}
		c.settle(it, Failed)
	}
	c.park(ctx, invalid)
	c.stopOrdered(ctx)
}

// stopOrdered ends an ordered write at its first unhandled document: the
// pending documents after it are given up (policy.GiveUp, StopOrdered).
func (c *call) stopOrdered(ctx context.Context) {
	if !c.ordered {
		return
	}
	var tail []*item
	stop := false
	for _, it := range c.items {
		if stop && it.disp == "" && !it.parked {
			tail = append(tail, it)
			continue
		}
		if it.disp != "" && !it.disp.Handled() && !it.disp.Stored() {
			stop = true
		}
	}
	c.giveUp(ctx, tail, policy.StopOrdered)
}

// giveUp ends items that will not be sent again, as policy.GiveUp decides.
func (c *call) giveUp(ctx context.Context, its []*item, why policy.StopReason) {
	if len(its) == 0 {
		return
	}
	var td todo
	canRead := ctx.Err() == nil
	fallback := policy.ReadBackFallback(why)
	for _, it := range its {
		if it.disp != "" || it.parked {
			continue
		}
		c.apply(it, policy.GiveUp(policy.GiveUpFacts{Reason: why, Kind: it.kind, Sent: it.attempts > 0,
			EverMaybe: it.maybe, Unconfirmed: it.unconf, CanRead: canRead}), &td)
	}
	c.carryOut(ctx, &td, fallback, nil)
	for _, it := range its {
		if !it.parked {
			c.settle(it, fallback) // a read-back that could not decide
		}
	}
}
