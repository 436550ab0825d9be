package writeguard

import (
	"context"
	"fmt"
	"time"

	"github.com/writeguard/writeguard/envelope"
	"github.com/writeguard/writeguard/hooks"
	"github.com/writeguard/writeguard/policy"
)

// deadLetterGather is how many invalid documents of one call are gathered
// before they are handed to the sink in one Put; the rest go before the
// call waits a backoff, and at its end. An ordered write that meets many invalid documents ends one
// command at each of them, and one Put per command would multiply the
// sink's writes.
const deadLetterGather = 256

// park sets invalid items aside for the sink: they leave the write (an
// ordered write resumes after them, as after any handled document) and are
// handed to the sink in gathered Puts (flushDeadLetters). Without a sink
// they end failed at once.
func (c *call) park(ctx context.Context, its []*item) {
	if len(its) == 0 {
		return
	}
	if c.g.cfg.sink == nil {
		for _, it := range its {
			c.settle(it, Failed)
		}
		return
	}
	for _, it := range its {
		it.parked = true
	}
	c.parked = append(c.parked, its...)
	if len(c.parked) >= deadLetterGather {
		c.flushDeadLetters(ctx)
	}
}

// flushDeadLetters hands the parked items to the sink.
func (c *call) flushDeadLetters(ctx context.Context) {
	its := c.parked
	c.parked = nil
	c.deadLetter(ctx, its)
}

// deadLetter hands Invalid items to the sink as one batch. Without a sink
// they end "failed". A failing Put is retried with the write backoff while
// its error classifies as retryable; then the fallback sink is tried; what
// no sink stored ends "dead_letter_failed", its document kept in the
// Report.
func (c *call) deadLetter(ctx context.Context, its []*item) {
	if len(its) == 0 {
		return
	}
	g := c.g
	if g.cfg.sink == nil {
		for _, it := range its {
			c.settle(it, Failed)
		}
		return
	}
	now := g.cfg.clock.Now().UTC().Truncate(time.Millisecond)
	envs := make([]envelope.Envelope, len(its))
	var traceID, spanID string
	if g.hooks.TraceIDs != nil {
		traceID, spanID = g.hooks.TraceIDs(ctx)
	}
	for i, it := range its {
		envs[i] = c.envelopeFor(it, now, traceID, spanID)
		it.keywords = envs[i].FailingKeywords
	}
	err := c.put(ctx, g.cfg.sink, envs, false)
	if err != nil && g.cfg.fallback != nil {
		if ferr := c.put(ctx, g.cfg.fallback, envs, true); ferr == nil {
			err = nil
		} else {
			err = fmt.Errorf("%w; fallback sink: %w", err, ferr)
		}
	}
	for _, it := range its {
		if err != nil {
			it.err = fmt.Errorf("writeguard: dead-letter sink: %w", err)
			c.settle(it, DeadLetterFailed)
		} else {
			c.settle(it, DeadLettered)
		}
	}
}

// put calls sink.Put, retrying retryable errors with the write backoff.
func (c *call) put(ctx context.Context, sink envelope.Sink, envs []envelope.Envelope, fallback bool) error {
	g := c.g
	return c.retrySide(ctx, g.cfg.backoff.MaxAttempts, func(attempt int) error {
		dctx := ctx
		var t0 time.Time
		if g.observed {
			dctx = g.hooks.DeadLetterStarted(ctx, &hooks.DeadLetterStart{Op: c.op, Envelopes: len(envs), Attempt: attempt, Fallback: fallback})
			t0 = g.cfg.clock.Now()
		}
		err := recovered("dead-letter sink", func() error { return sink.Put(dctx, envs) })
		if g.observed {
			g.hooks.DeadLetterFinished(dctx, &hooks.DeadLetterEnd{Op: c.op, Envelopes: len(envs), Attempt: attempt, Fallback: fallback, Duration: g.cfg.clock.Now().Sub(t0), Err: err})
		}
		return err
	})
}

// retrySide runs op, a side operation of the call (a dead-letter Put, a
// read-back), until it succeeds, fails with an error that does not
// classify as retryable, or limit attempts failed, waiting the write
// backoff between attempts. A connection checkout failure (the driver's
// pool is cleared and stays paused until the server is seen again) is not
// counted (policy.Charged); the call's MaxElapsed and ctx bound every
// attempt.
func (c *call) retrySide(ctx context.Context, limit int, op func(attempt int) error) error {
	g := c.g
	counted := 0
	for attempt := 1; ; attempt++ {
		err := op(attempt)
		if err == nil {
			return nil
		}
		fs := policy.Extract(err)
		if len(fs) == 0 || !g.classifier.Classify(fs[0]).Retryable() {
			return err
		}
		if policy.Charged(&fs[0]) {
			counted++
		}
		delay := g.cfg.backoff.Delay(attempt)
		if max := g.cfg.backoff.MaxElapsed; counted >= limit || max > 0 && g.cfg.clock.Now().Add(delay).Sub(c.start) > max {
			return err
		}
		if werr := policy.Wait(ctx, g.cfg.clock, delay); werr != nil {
			return fmt.Errorf("%w (retry stopped: %w)", err, werr)
		}
	}
}

// envelopeFor builds the envelope of an Invalid item (envelope.New: the
// model→envelope conversion lives in package envelope); traceID and
// spanID come from the hooks (hooks.Hooks.TraceIDs), empty without them.
func (c *call) envelopeFor(it *item, now time.Time, traceID, spanID string) envelope.Envelope {
	capture := envelope.Capture{
		Document: it.doc, DocumentID: it.id, IDAssigned: it.idAssigned, Call: c.callOpts, Failure: it.fail,
		Namespace: c.g.Namespace(), Operation: c.op.Name, BatchIndex: it.index, Now: now, TraceID: traceID, SpanID: spanID,
	}
	if it.kind != policy.KindInsert {
		capture.Model = it.model
	}
	return envelope.New(capture)
}
