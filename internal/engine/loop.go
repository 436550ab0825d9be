package engine

import (
	"context"
	"errors"
	"runtime/debug"
	"time"

	"github.com/writeguard/writeguard/hooks"
	"github.com/writeguard/writeguard/policy"
)

// run drives the call to a terminal disposition for every item: passes
// of the loop (prepare ahead, choose the batch, send it in commands,
// schedule the retries) until nothing is pending, then the gathered
// dead-letter hand-off and finish. It returns nil or Config.Report's
// error; Call.first keeps the driver's result of a first attempt that
// wrote every item (pass).
func (c *Call) run(ctx context.Context) error {
	e := c.e
	c.op.BatchSize = len(c.items)
	c.start = e.cfg.Clock.Now()
	if e.observed {
		ctx = e.hooks.OperationStarted(withPanics(ctx, &c.panics), c.op)
	}
	c.ctx = ctx

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
		batch := c.narrow(c.windowed(all))
		if err := ctx.Err(); err != nil {
			// Nothing more leaves the client: the documents never sent
			// are not_attempted, whatever stopped them.
			c.extra = append(c.extra, err)
			c.giveUp(ctx, c.rest(ctx), StopContext)
			break
		}
		c.pass(ctx, batch, len(batch) == len(all), delay)
		delay = c.scheduleRetry(ctx)
	}
	c.flushDeadLetters(ctx)
	return c.finish(ctx)
}

// windowed cuts the pending documents all to an ordered write's window
// (OrderedWindow; 0: all of them).
func (c *Call) windowed(all []*item) []*item {
	if c.ordered && c.window > 0 && len(all) > c.window {
		return all[:c.window]
	}
	return all
}

// pass sends batch in the server commands the driver would send
// (commands), one attempt each, the first after delay; an ordered write
// stops at a command that did not write all, and the rest stays pending
// for the next pass. whole says that batch is every pending document.
// Bisection reads each command's failure (observe), and an ordered
// write's window follows where the pass stopped.
func (c *Call) pass(ctx context.Context, batch []*item, whole bool, delay time.Duration) {
	c.stopAt = -1
	cmds := c.commands(ctx, batch)
	if len(cmds) > 1 && whole && c.next < len(c.items) {
		// The last command is the part of the documents prepared
		// ahead that did not fill one: it goes with the next ones.
		cmds = cmds[:len(cmds)-1]
	}
	c.offset = 0
	for k, cmd := range cmds {
		if k > 0 && (c.stopped || ctx.Err() != nil || !allLive(cmd) || c.ordered && !wroteAll(cmds[k-1])) {
			// The stop rule: once the call is ended (a configuration
			// failure, the context) or a statement of this command has
			// its disposition, the command is not sent; the rest stays
			// pending for the next pass, or was given up.
			break
		}
		res, err := c.attempt(ctx, cmd, delay)
		if c.attempts == 1 && len(cmds) == 1 && c.next == len(c.items) && (err == nil || errors.Is(err, ErrUnacked)) {
			c.first = res
		}
		delay, c.offset = 0, c.offset+len(cmd)
		c.observe(cmd, err) // bisection reads each command's failure (bisect.go)
	}
	if c.ordered {
		c.nextWindow(len(batch)) // window.go
	}
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
	res, err := c.sendLimited(actx, batch) // limitcall.go: the adaptive limit, then sendOnce
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
		if c.ext.matched != nil {
			c.ext.matchedNothing = c.ext.matched(res)
		}
		for _, it := range batch {
			c.settle(it, policy.Written)
		}
	case errors.Is(err, ErrUnacked):
		// Sent, and the server reported nothing (w: 0): each statement
		// may be stored (MaybeWritten), nothing more can be proved, and
		// a re-send could store a copy.
		for _, it := range batch {
			it.ev = max(it.ev, maybe)
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
// becomes the attempt's error, Config.Panicked's (the root's *PanicError,
// with its stack): an error of
// no driver shape, so every document of the batch is maybe applied
// (policy.ShapeUnrecognized) and the process lives on.
func (c *Call) sendOnce(ctx context.Context, batch []*item) (res any, err error) {
	defer func() {
		if r := recover(); r != nil {
			res, err = nil, c.e.cfg.Panicked("target", r, debug.Stack())
		}
	}()
	return c.sendWire(ctx, batch) // hidden.go
}

// attemptFinished reports the end of an attempt to the hooks.
func (c *Call) attemptFinished(actx context.Context, docs int, t0 time.Time, err error, fails []policy.Failure) {
	e := c.e
	end := &hooks.AttemptEnd{Op: c.op, Attempt: c.attempts, Documents: docs, Duration: e.cfg.Clock.Now().Sub(t0), Err: err}
	end.WireCommands = c.ext.wire.sentCommands() // monitor.go (issue 28)
	if errors.Is(err, ErrUnacked) {
		end.Err = nil
	} else if len(fails) > 0 {
		end.Code, end.Class, end.Failures = fails[0].Code, e.cfg.Classifier.Classify(fails[0]), len(fails)
	}
	e.hooks.AttemptFinished(actx, end)
}

// routePrefailed routes the documents that failed before any attempt
// (marshal errors, oversized documents): a client-side verdict on one
// document is Invalid (dead-lettered when there are bytes to store).
//
// An ordered write ends at the first of them that ends unhandled: those
// after it stay prefailed, part of the tail stopOrdered gives up.
func (c *Call) routePrefailed(ctx context.Context, its []*item) {
	if !c.anyPrefailed { // no document failed to prepare: nothing to route
		return
	}
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
