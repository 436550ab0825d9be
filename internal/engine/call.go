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

// Doc returns the i-th document as prepared for the driver (inserts): a
// bson.Marshaler over its prepared bytes (see sendDoc).
func (b Batch) Doc(i int) any { return sendDoc{&b[i].doc} }

// sendDoc is how an insert's prepared document is handed to the driver: a
// bson.Marshaler whose MarshalBSON returns the item's bytes. It is one
// pointer wide, so it sits in an interface without a heap box (a bson.Raw
// is a slice header: boxing it allocates 24 bytes per document), and the
// driver's Encoder.Encode takes its Marshaler branch, which copies the
// bytes once, without the second box rawEncodeValue makes through
// reflect.Value.Interface (driver v2.10 bson/encoder.go,
// bson/primitive_codecs.go).
type sendDoc struct{ doc *bson.Raw }

// MarshalBSON returns the prepared bytes (not a copy; the driver copies
// them into its command).
func (d sendDoc) MarshalBSON() ([]byte, error) { return *d.doc, nil }

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
		next:    n, // PrepareDocs sets it back to 0
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

// SetMatchedNothing records whether the acknowledged reply of the
// attempt that succeeded matched no document (a method of one write);
// the OperationFinished hook reports it (hooks.OperationEnd.MatchedNothing)
// when the input ended written.
func (c *Call) SetMatchedNothing(v bool) { c.ext.matchedNothing = v }

// Run drives every input to its terminal disposition, sending each attempt
// with send. It returns the driver's result of the first attempt when that
// attempt succeeded for every input (so the caller gets exactly what the
// driver returns), and nil or Config.Report's error.
func (c *Call) Run(ctx context.Context, send Send) (first any, err error) {
	c.send = send
	return c.run(ctx)
}

// Result is what a finished call proved, for the root's results and its
// *Report (Config.Report): the call's figures, then one answer per input i
// (0 ≤ i < Len(), in input order). It is a view of the call: read it after
// Run.
type Result struct{ c *Call }

// Result returns the view of what the call proved.
func (c *Call) Result() Result { return Result{c} }

// Operation returns the call's name (insertOne, insertMany, bulkWrite, ...).
func (r Result) Operation() string { return r.c.op.Name }

// Namespace returns "<database>.<collection>".
func (r Result) Namespace() string { return r.c.e.cfg.Namespace }

// Attempts returns the number of driver calls the call made.
func (r Result) Attempts() int { return r.c.attempts }

// LastErr returns the driver's last error, nil when none failed.
func (r Result) LastErr() error { return r.c.lastErr }

// Hint names the setting to fix after a Configuration failure ("" when
// there was none).
func (r Result) Hint() string { return r.c.hint }

// Extra returns the call's errors that belong to no input (a context
// error, ErrUnacknowledged).
func (r Result) Extra() []error { return r.c.extra }

// Len returns the number of inputs.
func (r Result) Len() int { return len(r.c.items) }

// Disposition returns input i's terminal disposition.
func (r Result) Disposition(i int) policy.Disposition { return r.c.items[i].disp }

// ID returns input i's _id as the driver returns it (policy.IDValue) for
// an insert, nil for another model.
func (r Result) ID(i int) any {
	if r.c.items[i].kind != KindInsert {
		return nil
	}
	return r.c.items[i].idValue()
}

// IsInsert reports whether input i is an insert.
func (r Result) IsInsert(i int) bool { return r.c.items[i].kind == KindInsert }

// Failure returns input i's last failure, nil when it had none.
func (r Result) Failure(i int) *policy.Failure { return r.c.items[i].fail }

// Class returns the class of input i's failure (policy.Unknown without
// one).
func (r Result) Class(i int) policy.Class {
	if r.c.items[i].fail == nil {
		return policy.Unknown
	}
	return r.c.items[i].class
}

// Reason returns why input i ended unstored and unhandled (ReasonNone
// for a stored or handled input).
func (r Result) Reason(i int) Reason {
	if d := r.c.items[i].disp; d.Stored() || d.Handled() {
		return ReasonNone
	}
	return r.c.items[i].reason
}

// Sent returns how many attempts sent input i to the server.
func (r Result) Sent(i int) int { return r.c.items[i].attempts }

// MaybeWritten reports whether an attempt may have applied input i and
// nothing proved it stored or absent.
func (r Result) MaybeWritten(i int) bool {
	it := r.c.items[i]
	return it.mayBeApplied() && !it.disp.Stored()
}

// Idempotent reports whether input i may be re-sent after an attempt
// that may have applied it (Call.Idempotent).
func (r Result) Idempotent(i int) bool { return r.c.Idempotent(i) }

// NoUniqueID reports whether the call learned (or was told) that _id is
// not unique where its documents land.
func (r Result) NoUniqueID() bool { return r.c.noUniqueID }

// Document returns input i as prepared (with its _id) for an insert that
// did not end written or already_written (release), nil for a stored
// insert and for another model.
func (r Result) Document(i int) bson.Raw { return r.c.items[i].doc }

// Model returns the caller's write model of input i (BulkWrite only).
func (r Result) Model(i int) mongo.WriteModel { return r.c.items[i].model }

// Err returns the error of writeguard's own handling of input i (the
// sink's, the conflict handler's, the read-back's), nil otherwise.
func (r Result) Err(i int) error { return r.c.items[i].err }
