package engine

import (
	"context"
	"fmt"

	"github.com/writeguard/writeguard/policy"
)

// retrySide runs op, a side operation of the call (a dead-letter Put, a
// read-back), until it succeeds, fails with an error that does not
// classify as retryable, or limit attempts failed, waiting the write
// backoff between attempts. A connection checkout failure (the driver's
// pool is cleared and stays paused until the server is seen again) is not
// counted (Charged); the call's MaxElapsed and ctx bound every
// attempt.
func (c *Call) retrySide(ctx context.Context, limit int, op func(attempt int) error) error {
	e := c.e
	counted := 0
	for attempt := 1; ; attempt++ {
		err := op(attempt)
		if err == nil {
			return nil
		}
		fs := policy.Extract(err)
		if len(fs) == 0 || !e.cfg.Classifier.Classify(fs[0]).Retryable() {
			return err
		}
		if Charged(&fs[0]) {
			counted++
		}
		delay := e.cfg.Backoff.Delay(attempt)
		if max := e.cfg.Backoff.MaxElapsed; counted >= limit || max > 0 && e.cfg.Clock.Now().Add(delay).Sub(c.start) > max {
			return err
		}
		if werr := Wait(ctx, e.cfg.Clock, delay); werr != nil {
			return fmt.Errorf("%w (retry stopped: %w)", err, werr)
		}
	}
}
