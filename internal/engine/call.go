package engine

import (
	"context"

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

// Len returns the number of inputs.
func (c *Call) Len() int { return len(c.items) }

// Disposition returns input i's terminal disposition (after Run).
func (c *Call) Disposition(i int) policy.Disposition { return c.items[i].disp }

// ID returns input i's _id as the driver returns it (inserts).
func (c *Call) ID(i int) any { return c.items[i].idValue() }

// IsInsert reports whether input i is an insert.
func (c *Call) IsInsert(i int) bool { return c.items[i].kind == KindInsert }
