package engine

import (
	"context"

	"github.com/writeguard/writeguard/policy"
)

// Hidden attempts. One driver call of a retryable write can be several
// attempts (retryable-writes spec; with a deadline or a client Timeout
// the driver retries until the time runs out), and the driver's error
// describes its last attempt only: mongo-go-driver v2.10.0
// x/mongo/driver/operation.go returns "not sent" or "nothing written"
// about a retry after an earlier attempt was sent and applied (the rows
// of policy.ReplyShapes whose Hidden proof differs from Failed, each
// with its driver lines). hiddenAttempts says when that can be.

// hiddenAttempts reports whether an earlier attempt of the driver call
// that sent batch may have been sent. It cannot when:
//
//   - the caller declared the client's retryable writes off
//     (Config.NoDriverRetries, writeguard.WithDriverRetryWrites(false));
//   - writeguard saw the context end before it called the driver
//     (callExt.doneAtSend): the driver's first check fails, nothing goes;
//   - the command is not a retryable write: a multi statement
//     (updateMany, deleteMany: mongo/bulk_write.go 570-650 createBatches
//     leaves canRetry false for their batches, and 226, 284, 435 set a
//     RetryMode only when canRetry; retryable-writes spec: "multi: true"
//     statements are not retryable);
//   - the deployment is a standalone (operation.go retryable:
//     retryWritesSupported is false for a standalone server).
//
// Unacknowledged writes (w: 0) and writes inside a transaction never
// reach route (ErrUnacked, Engine.InTransaction). The driver also
// re-sends any write after an overload reply labelled RetryableError
// (operation.go 876, 1010: olRetryErr) or a 391 ReauthenticationRequired
// (955-975): the server refused those before running the command
// (client-backpressure spec; the reauthentication check precedes the
// command), so they hide no applied attempt.
func (c *Call) hiddenAttempts(ctx context.Context, batch []*item) bool {
	switch {
	case c.e.cfg.NoDriverRetries, c.ext.doneAtSend:
		return false
	case len(batch) > 0 && (batch[0].cmd == cmdUpdateMany || batch[0].cmd == cmdDeleteMany):
		return false
	}
	return c.deployment(ctx) != DeploymentStandalone
}

// hiddenFor decides, for one attempt's failures, whether their proofs
// are read as after hidden attempts (their rows' Hidden proof): only
// when a whole-command failure's row says something else after an
// earlier attempt (the deployment is asked only then).
//
// With the command monitor installed (the attempt's wire record holds
// finished events), the events decide instead: wireProofs are the
// per-statement union of what each attempt proved (wire.union), and no
// hidden attempt is assumed. Without events the rules above hold:
// missing events never prove "not sent".
func (c *Call) hiddenFor(ctx context.Context, batch []*item, fails []policy.Failure) (bool, []policy.Proof) {
	for i := range fails {
		f := &fails[i]
		if f.Index == policy.WholeCommand && f.Shape.Row().Hidden != f.Proof() {
			if proofs, n := c.ext.wire.union(); n > 0 && len(proofs) == len(batch) {
				return false, proofs
			}
			return c.hiddenAttempts(ctx, batch), nil
		}
	}
	return false, nil
}

// sendWire calls the Spec's Send with what each attempt needs around it:
// whether the context had ended before the driver was called
// (callExt.doneAtSend), and the attempt's wire record in its context
// (monitor.go), read after the driver returns (noteWire).
func (c *Call) sendWire(ctx context.Context, b Batch) (any, error) {
	c.ext.doneAtSend = ctx.Err() != nil
	c.ext.wire.reset()
	if !c.e.wire.absent.Load() {
		ctx = tagWire(ctx, &c.ext.wire, len(b), c.ordered)
	}
	res, err := c.send(ctx, b)
	c.noteWire(ctx, err)
	return res, err
}

// wireVerdict is the verdict on a statement whose attempt failed as a
// whole with whole, when the wire's events proved p about it: applied by
// one of the driver's attempts (written, whatever the last one said),
// or p with whole as the failure that left it so.
func wireVerdict(whole *policy.Failure, p policy.Proof) verdict {
	if p == policy.Applied {
		return verdict{proof: p, sent: true}
	}
	return verdict{fail: whole, proof: p, sent: p != policy.NotSent, notOwn: true}
}
