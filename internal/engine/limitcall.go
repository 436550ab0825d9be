package engine

import (
	"context"
	"errors"
	"time"

	"github.com/writeguard/writeguard/policy"
)

// sendLimited sends batch once (sendOnce) within the engine's adaptive
// limit (Config.Limit; nil: no limit): it waits for a slot, then tells the
// Limiter what the reply said, and, with writeguard.Monitor on the client,
// what the driver's hidden retries were told (an overloaded reply the
// driver retried itself: Limiter.ObserveOverload). A context that ends during the wait is the
// attempt's error, nothing sent.
func (c *Call) sendLimited(ctx context.Context, batch []*item) (any, error) {
	l := c.e.cfg.Limit
	if l == nil {
		return c.sendOnce(ctx, batch)
	}
	var until time.Time
	if m := c.e.cfg.Backoff.MaxElapsed; m > 0 {
		until = c.start.Add(m)
	}
	seq, err := l.acquire(ctx, c, c.e.cfg.Clock, until)
	if err != nil {
		return nil, err
	}
	res, err := c.sendOnce(ctx, batch)
	var fails []policy.Failure
	if err != nil && !errors.Is(err, ErrUnacked) {
		fails = policy.Extract(err)
	}
	sig := signalOf(err, fails, c.e.cfg.Classifier.Classify)
	if hidden := c.ext.wire.overloads(); hidden > 1 || hidden == 1 && sig != signalOverload {
		// the wire monitor saw overloaded replies the driver retried
		// inside this call (the final error repeats the last event, so
		// it is not counted twice): they lower the limit too.
		l.ObserveOverload(ctx)
	}
	l.release(ctx, c, seq, sig)
	return res, err
}

// leaveLimit ends c's part in the adaptive limit when its call ends (a
// probe role it held passes to the next waiter).
func (c *Call) leaveLimit() {
	if l := c.e.cfg.Limit; l != nil {
		l.leave(c)
	}
}

// primaryGone reports whether the last failure of any of its is a
// NotPrimaryError or ShutdownError category reply (notPrimaryCodes): the
// target had no primary when the call gave them up. giveUp then does not
// read back the possibly applied inserts: a read from the primary would be
// refused as well (or, on a server that still reads, cost a query while
// the writes are refused), and a read-back at a give-up can only move a
// document from unknown to already_written. They end unknown with
// MaybeWritten, and Report.Remaining sends them again: the duplicate key
// of the call's own _id then leads to a read-back, once a primary is back.
func primaryGone(its []*item) bool {
	for _, it := range its {
		if f := it.fail; f != nil && f.Origin == policy.OriginServer && notPrimaryCode(f.Code) {
			return true
		}
	}
	return false
}
