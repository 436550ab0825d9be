package engine

import (
	"context"
	"errors"
	"runtime/debug"
	"time"

	"github.com/writeguard/writeguard/envelope"
	"github.com/writeguard/writeguard/hooks"
	"github.com/writeguard/writeguard/policy"
)

// Call is the state of one guarded call: made by Engine.NewCall, prepared
// (PrepareDocs, PrepareModels), then Run once. Not safe for concurrent use.
type Call struct {
	e          *Engine
	op         *hooks.Operation
	ctx        context.Context // the operation context (hooks)
	ordered    bool
	idempotent bool
	callOpts   envelope.CallOptions // the call's options an envelope keeps
	items      []*item
	send       Send
	// Insert calls prepare their documents as they go (prepareAhead):
	// items[:next] are prepared, inputs[next:] wait; enc is the call's
	// encoder meanwhile; spread is set when they took more than one step,
	// and then a stored document's _id is copied into ids (keepID) so that
	// its prepared bytes can go.
	inputs []any
	next   int
	enc    *docEncoder
	spread bool
	ids    []byte

	start    time.Time
	attempts int
	retries  int
	lastErr  error
	hint     string
	extra    []error
	parked   []*item // invalid items waiting for the dead-letter sink
	window   int     // ordered: documents per attempt (0: all pending)
	offset   int     // position of the current command's first statement in its pass
	lim      *Limits // the server's limits, once asked (commands.go)
	// noUniqueID: _id is not unique where the documents land (asked of
	// Config.UniqueID once, when an insert may have been applied).
	noUniqueID, uniqueAsked bool
	stopAt                  int     // ordered: batch position of the last attempt's first write error, -1 when none
	ext                     callExt // per-model idempotence, one-statement rule, bisection (statement.go, bisect.go)
}

// SetCallOptions records the call's options that an envelope keeps (let,
// bypassDocumentValidation, ordered, ...). err, a bad option, is ignored:
// the driver reports it itself on the first attempt.
func (c *Call) SetCallOptions(o envelope.CallOptions, err error) {
	if err == nil {
		c.callOpts = o
	}
}

// todo collects the actions decided for the documents of one attempt that
// need more than a settle.
type todo struct {
	readBack, deadLetter, conflict []*item
}

// run drives the call to a terminal disposition for every item. It returns
// the driver's result of the first attempt when that attempt succeeded for
// every item (so the caller gets exactly what the driver returns), and nil
// or a *Report.
func (c *Call) run(ctx context.Context) (any, error) {
	e := c.e
	c.op.BatchSize = len(c.items)
	c.start = e.cfg.Clock.Now()
	if e.observed {
		ctx = e.hooks.OperationStarted(ctx, c.op)
	}
	c.ctx = ctx

	var first any
	c.routePrefailed(ctx, c.items[:c.next]) // the models of a bulk write, prepared at once
	delay := time.Duration(0)
	for {
		c.prepareAhead(ctx, false)
		c.stopOrdered(ctx) // at a document that failed to prepare
		all := c.pending()
		if len(all) == 0 {
			if c.next == len(c.items) {
				break
			}
			continue // every document just prepared failed to: prepare more
		}
		batch := all
		if c.ordered && c.window > 0 && len(batch) > c.window {
			batch = batch[:c.window]
		}
		batch = c.narrow(batch)
		if err := ctx.Err(); err != nil {
			// Nothing more leaves the client: the documents never sent
			// are not_attempted, whatever stopped them.
			c.extra = append(c.extra, err)
			c.giveUp(ctx, c.rest(ctx), StopContext)
			break
		}
		c.stopAt = -1
		cmds := c.commands(ctx, batch)
		if len(cmds) > 1 && len(batch) == len(all) && c.next < len(c.items) {
			// The last command is the part of the documents prepared
			// ahead that did not fill one: it goes with the next ones.
			cmds = cmds[:len(cmds)-1]
		}
		c.offset = 0
		for k, cmd := range cmds {
			if k > 0 && (ctx.Err() != nil || c.ordered && !wroteAll(cmds[k-1])) {
				break // the rest stays pending: the next pass sends it, or gives it up
			}
			res, err := c.attempt(ctx, cmd, delay)
			if c.attempts == 1 && len(cmds) == 1 && c.next == len(c.items) && (err == nil || errors.Is(err, ErrUnacked)) {
				first = res
			}
			delay, c.offset = 0, c.offset+len(cmd)
			c.observe(cmd, err) // bisection reads each command's failure (bisect.go)
		}
		if c.ordered {
			c.window = OrderedWindow(c.window, len(batch), c.stopAt)
		}
		delay = c.scheduleRetry(ctx)
	}
	c.flushDeadLetters(ctx)
	return first, c.finish(ctx)
}

// release lets the prepared bytes of a stored insert go: nothing reads
// them again (Outcome.Document is nil for written and already_written).
// Its _id stays, copied out of the arena when the call prepares its
// documents in several steps, so that the arena's chunks go with the
// documents they hold.
func (c *Call) release(it *item) {
	it.doc = nil
	if c.spread {
		it.id.Value = c.keepID(it.id.Value)
	}
}

// keepID copies v into the call's store of kept _ids (chunks of
// idChunk bytes) and returns the copy.
func (c *Call) keepID(v []byte) []byte {
	if cap(c.ids)-len(c.ids) < len(v) {
		c.ids = make([]byte, 0, max(len(v), idChunk))
	}
	start := len(c.ids)
	c.ids = append(c.ids, v...)
	return c.ids[start:len(c.ids):len(c.ids)]
}

// idChunk is the size of a chunk of kept _ids (16 KiB: about 1,300
// ObjectIDs).
const idChunk = 16 << 10

// rest prepares every document not prepared yet and returns the items
// still to send: what a call gives up when it stops as a whole.
func (c *Call) rest(ctx context.Context) []*item {
	c.prepareAhead(ctx, true)
	return c.pending()
}

// attempt sends batch once and routes every document by what the reply
// proved. Hook events are built only when hooks are installed.
func (c *Call) attempt(ctx context.Context, batch []*item, delay time.Duration) (any, error) {
	e := c.e
	c.attempts++
	for _, it := range batch {
		it.tries++
		it.attempts++
	}
	actx := ctx
	var t0 time.Time
	if e.observed {
		actx = e.hooks.AttemptStarted(ctx, &hooks.AttemptStart{Op: c.op, Attempt: c.attempts, Documents: len(batch), Delay: delay})
		t0 = e.cfg.Clock.Now()
	}
	res, err := c.sendOnce(actx, batch)
	var fails []policy.Failure
	if err != nil && !errors.Is(err, ErrUnacked) {
		fails = policy.Extract(err)
	}
	if e.observed {
		c.attemptFinished(actx, len(batch), t0, err, fails)
	}
	switch {
	case err == nil:
		e.cfg.Budget.Success()
		for _, it := range batch {
			c.settle(it, policy.Written)
		}
	case errors.Is(err, ErrUnacked):
		for _, it := range batch {
			c.settle(it, policy.Unacknowledged)
		}
		if !e.cfg.AllowUnacked {
			c.extra = append(c.extra, ErrUnacknowledged)
		}
	default:
		c.lastErr = err
		c.route(ctx, batch, fails)
	}
	return res, err
}

// sendOnce calls Send. A panic raised while the Target runs (the driver
// indexes its models by the index the server sent, and a reply that does
// not fit its command can make it index out of range) is recovered and
// becomes the attempt's error, a *PanicError with its stack: an error of
// no driver shape, so every document of the batch is maybe applied
// (policy.ShapeUnrecognized) and the process lives on.
func (c *Call) sendOnce(ctx context.Context, batch []*item) (res any, err error) {
	defer func() {
		if r := recover(); r != nil {
			res, err = nil, &PanicError{What: "target", Value: r, stack: debug.Stack()}
		}
	}()
	return c.send(ctx, batch)
}

// attemptFinished reports the end of an attempt to the hooks.
func (c *Call) attemptFinished(actx context.Context, docs int, t0 time.Time, err error, fails []policy.Failure) {
	e := c.e
	end := &hooks.AttemptEnd{Op: c.op, Attempt: c.attempts, Documents: docs, Duration: e.cfg.Clock.Now().Sub(t0), Err: err}
	if errors.Is(err, ErrUnacked) {
		end.Err = nil
	} else if len(fails) > 0 {
		end.Code, end.Class, end.Failures = fails[0].Code, e.cfg.Classifier.Classify(fails[0]), len(fails)
	}
	e.hooks.AttemptFinished(actx, end)
}

// pending returns the items still to send, in input order.
func (c *Call) pending() []*item {
	out := make([]*item, 0, c.next) // one allocation, not one per doubling
	for _, it := range c.items[:c.next] {
		if it.live() {
			out = append(out, it)
		}
	}
	return out
}

// settle gives it its terminal disposition and reports it.
func (c *Call) settle(it *item, d policy.Disposition) {
	if it.state == done {
		return
	}
	it.disp = d
	it.to(done)
	if it.kind == KindInsert && (d == policy.Written || d == policy.AlreadyWritten) {
		c.release(it)
	}
	if !c.e.observed {
		return
	}
	ev := &hooks.Disposition{Op: c.op, Index: it.index, Disposition: d, Attempts: it.attempts, FailingKeywords: it.keywords}
	if it.kind == KindInsert {
		ev.ID = it.idValue()
	}
	if it.fail != nil && d != policy.Written {
		ev.Failed = true
		ev.Class, ev.Code, ev.CodeName = it.class, it.fail.Code, it.fail.CodeName
	}
	c.e.hooks.Disposition(c.ctx, ev)
}

// apply carries out one decision for it; actions that need I/O are
// collected in td.
func (c *Call) apply(it *item, d Decision, td *todo) {
	switch d.Action {
	case Settle:
		if d.Reason != ReasonNone {
			it.reason = d.Reason
		}
		c.settle(it, d.Disposition)
	case Retry:
		it.to(retrying)
		if d.Rule == RuleUpsertRace {
			it.upsertRuns++
		}
	case ReadBack:
		td.readBack = append(td.readBack, it)
	case DeadLetter:
		td.deadLetter = append(td.deadLetter, it)
	case HandleConflict:
		td.conflict = append(td.conflict, it)
	}
}

// carryOut runs the collected actions: read-backs first (a read-back can
// end in the conflict handler), then conflicts, then the dead-letter
// hand-off. fallback is the disposition of a possibly applied document
// whose read-back finds nothing or fails when the call stops retrying it
// ("" after a duplicate key: see policy.AfterReadBack).
func (c *Call) carryOut(ctx context.Context, td *todo, fallback policy.Disposition, others []*item) {
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
//
// An ordered write ends at the first of them that ends unhandled: those
// after it stay prefailed, part of the tail stopOrdered gives up.
func (c *Call) routePrefailed(ctx context.Context, its []*item) {
	var invalid []*item
	for _, it := range its {
		if it.state != prefailed {
			continue
		}
		it.class = c.e.cfg.Classifier.Classify(*it.fail)
		if it.class == policy.Invalid && it.doc != nil {
			invalid = append(invalid, it)
			continue
		}
		it.reason = ReasonNotSent
		c.settle(it, policy.Failed)
		if c.ordered {
			break
		}
	}
	c.park(ctx, invalid)
}

// stopOrdered ends an ordered write at its first unhandled document: the
// documents after it that are not done are given up (policy.GiveUp,
// StopOrdered: not_attempted), prepared first so that the Report has each
// one's _id and bytes; one that fails to prepare is given up as well,
// with that failure, since the write never reached it.
func (c *Call) stopOrdered(ctx context.Context) {
	if !c.ordered {
		return
	}
	stop := -1
	for i, it := range c.items[:c.next] {
		if it.state == done && !it.disp.Handled() && !it.disp.Stored() {
			stop = i
			break
		}
	}
	if stop < 0 {
		return
	}
	c.prepareNext(ctx, true)
	var tail []*item
	for _, it := range c.items[stop+1:] {
		if it.live() || it.state == prefailed {
			tail = append(tail, it)
		}
	}
	c.giveUp(ctx, tail, StopOrdered)
}

// giveUp ends items that will not be sent again, as policy.GiveUp decides.
func (c *Call) giveUp(ctx context.Context, its []*item, why StopReason) {
	if len(its) == 0 {
		return
	}
	var td todo
	canRead := ctx.Err() == nil
	fallback := ReadBackFallback()
	for _, it := range its {
		if !it.live() && it.state != prefailed {
			continue
		}
		it.reason = why.Reason()
		c.apply(it, GiveUp(GiveUpFacts{Reason: why, Kind: it.kind, Sent: it.attempts > 0,
			EverMaybe: it.mayBeApplied(), Unconfirmed: it.ev == unconfirmed, CanRead: canRead}), &td)
	}
	c.carryOut(ctx, &td, fallback, nil)
	for _, it := range its {
		if it.state != parked {
			c.settle(it, fallback) // a read-back that could not decide
		}
	}
}
