package engine

import (
	"context"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/writeguard/writeguard/hooks"
	"github.com/writeguard/writeguard/policy"
)

// Send makes one attempt: it sends batch (the documents still pending, in
// input order) to the driver and returns the driver's result and error;
// ErrUnacked, with the result, when the driver reports the write
// unacknowledged.
type Send func(ctx context.Context, batch Batch) (any, error)

// Batch is the documents of one attempt.
type Batch []*item

// Doc returns the i-th document as prepared for the driver (inserts).
func (b Batch) Doc(i int) any { return b[i].boxed }

// Model returns the i-th write model to send (BulkWrite).
func (b Batch) Model(i int) mongo.WriteModel { return b[i].send }

// Index returns the i-th document's position in the caller's input.
func (b Batch) Index(i int) int { return b[i].index }

// NewCall starts a call of operation name (insertOne, insertMany,
// bulkWrite, ...) over n inputs.
func (e *Engine) NewCall(name string, ordered bool, n int) *Call {
	c := &Call{
		e:       e,
		ordered: ordered,
		op:      &hooks.Operation{Name: name, Database: e.cfg.Database, Collection: e.cfg.Collection, Ordered: ordered},
	}
	slab := make([]item, n)
	c.items = make([]*item, n)
	for i := range slab {
		slab[i].index = i
		c.items[i] = &slab[i]
	}
	return c
}

// SetIdempotent marks the call's non-insert models safe to re-send after
// an ambiguous failure (writeguard.WithIdempotent).
func (c *Call) SetIdempotent(v bool) { c.idempotent = v }

// SetCommand names the command kinds of a bulk write for the hooks
// (hooks.Operation.Command).
func (c *Call) SetCommand(cmd string) { c.op.Command = cmd }

// Run drives every input to its terminal disposition, sending each attempt
// with send. It returns the driver's result of the first attempt when that
// attempt succeeded for every input (so the caller gets exactly what the
// driver returns), and nil or Config.Report's error.
func (c *Call) Run(ctx context.Context, send Send) (first any, err error) {
	c.send = send
	return c.run(ctx)
}

// What a finished call proved, for the root's results and its *Report
// (Config.Report): the call's figures, then one answer per input i
// (0 ≤ i < Len(), in input order).

// Operation returns the call's name (insertOne, insertMany, bulkWrite, ...).
func (c *Call) Operation() string { return c.op.Name }

// Namespace returns "<database>.<collection>".
func (c *Call) Namespace() string { return c.e.cfg.Namespace }

// Attempts returns the number of driver calls the call made.
func (c *Call) Attempts() int { return c.attempts }

// LastErr returns the driver's last error, nil when none failed.
func (c *Call) LastErr() error { return c.lastErr }

// Hint names the setting to fix after a Configuration failure ("" when
// there was none).
func (c *Call) Hint() string { return c.hint }

// Extra returns the call's errors that belong to no input (a context
// error, ErrUnacknowledged).
func (c *Call) Extra() []error { return c.extra }

// Len returns the number of inputs.
func (c *Call) Len() int { return len(c.items) }

// Disposition returns input i's terminal disposition.
func (c *Call) Disposition(i int) policy.Disposition { return c.items[i].disp }

// ID returns input i's _id as the driver returns it (policy.IDValue) for
// an insert, nil for another model.
func (c *Call) ID(i int) any {
	if c.items[i].kind != KindInsert {
		return nil
	}
	return c.items[i].idValue()
}

// IsInsert reports whether input i is an insert.
func (c *Call) IsInsert(i int) bool { return c.items[i].kind == KindInsert }

// Failure returns input i's last failure, nil when it had none.
func (c *Call) Failure(i int) *policy.Failure { return c.items[i].fail }

// Class returns the class of input i's failure (policy.Unknown without
// one).
func (c *Call) Class(i int) policy.Class {
	if c.items[i].fail == nil {
		return policy.Unknown
	}
	return c.items[i].class
}

// Sent returns how many attempts sent input i to the server.
func (c *Call) Sent(i int) int { return c.items[i].attempts }

// MaybeWritten reports whether an attempt may have applied input i and
// nothing proved it stored or absent.
func (c *Call) MaybeWritten(i int) bool {
	it := c.items[i]
	return it.mayBeApplied() && !it.disp.Stored()
}

// Document returns input i as prepared (with its _id) for an insert, nil
// for another model.
func (c *Call) Document(i int) bson.Raw { return c.items[i].doc }

// Model returns the caller's write model of input i (BulkWrite only).
func (c *Call) Model(i int) mongo.WriteModel { return c.items[i].model }

// Err returns the error of writeguard's own handling of input i (the
// sink's, the conflict handler's, the read-back's), nil otherwise.
func (c *Call) Err(i int) error { return c.items[i].err }
