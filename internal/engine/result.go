package engine

import (
	"context"
	"fmt"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/writeguard/writeguard/hooks"
	"github.com/writeguard/writeguard/policy"
)

// finish builds the call's error (Config.Report of the call; nil when every input ended written or
// already_written, or unacknowledged when allowed) and reports the end of
// the call to the hooks.
func (c *Call) finish(ctx context.Context) error {
	e := c.e
	ok := c.notOK == 0 && c.settled == len(c.items) // every item written, already written or (allowed) unacknowledged
	if e.cfg.Settled != nil {
		dead := 0
		for _, it := range c.items {
			if it.disp == policy.DeadLettered {
				dead++
			}
		}
		if serr := e.cfg.Settled(ctx, len(c.items), dead); serr != nil {
			c.extra = append(c.extra, serr)
		}
	}
	var err error
	if c.takePanics() || !ok {
		err = e.cfg.Report(Result{c})
	}
	if e.observed {
		c.operationFinished(ctx, err)
		if c.takePanics() {
			err = e.cfg.Report(Result{c}) // OperationFinished panicked
		}
	}
	return err
}

// takePanics moves the hooks' recovered panics into the call's errors
// and reports whether there were any since the last take: a call whose
// hook panicked ends with its Report, whatever it wrote.
func (c *Call) takePanics() bool {
	hp := c.panics.take()
	c.extra = append(c.extra, hp...)
	return len(hp) > 0
}

// operationFinished reports the end of the call to the hooks.
func (c *Call) operationFinished(ctx context.Context, err error) {
	e := c.e
	counts := map[policy.Disposition]int{}
	end := &hooks.OperationEnd{Op: c.op, Attempts: c.attempts, Retries: c.retries, Counts: counts, Duration: e.cfg.Clock.Now().Sub(c.start), Err: err}
	for _, it := range c.items {
		counts[it.disp]++
		if err != nil && !it.disp.Handled() && end.Code == 0 && it.fail != nil {
			end.Code, end.CodeName, end.Class = it.fail.Code, it.fail.CodeName, it.class
		}
	}
	end.MatchedNothing = c.ext.matchedNothing && counts[policy.Written] == len(c.items)
	e.hooks.OperationFinished(ctx, end)
}

// Result is what a finished call proved, for the root's results and its
// *Report (Config.Report): the call's figures, then one answer per input i
// (0 ≤ i < Len(), in input order). It is a view of the call: read it after
// Run.
type Result struct{ c *Call }

// First returns the driver's result of the call's first attempt when that
// attempt was its only one and wrote every input (or the driver reported
// the write unacknowledged), so that the caller gets exactly what the
// driver returns; nil otherwise.
func (r Result) First() any { return r.c.first }

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
// that may have applied it: an insert (its _id makes it idempotent), or a
// model the caller marked (Spec.Idempotent, Spec.IdempotentModels).
func (r Result) Idempotent(i int) bool {
	it := r.c.items[i]
	return it.kind == KindInsert || r.c.idempotentItem(it)
}

// NoUniqueID reports whether the call learned (or was told) that _id is
// not unique where its documents land.
func (r Result) NoUniqueID() bool { return r.c.noUniqueID }

// Document returns input i as prepared (with its _id) for an insert that
// did not end written or already_written (release), nil for a stored
// insert and for another model.
func (r Result) Document(i int) bson.Raw { return r.c.items[i].doc }

// Model returns the caller's write model of input i (BulkWrite only).
func (r Result) Model(i int) mongo.WriteModel { return r.c.items[i].model() }

// Err returns the error of writeguard's own handling of input i (the
// sink's, the conflict handler's, the read-back's), nil otherwise.
func (r Result) Err(i int) error { return r.c.items[i].err() }

// hintFor names the setting to fix after a Configuration failure.
func hintFor(f *policy.Failure) string {
	switch {
	case policy.RetryableWritesUnsupported(f.Code, f.Message):
		return "hint: the server does not support retryable writes (Azure Cosmos DB for MongoDB, Amazon DocumentDB): add retryWrites=false to the connection string"
	case f.Code == 20:
		return "hint: the deployment does not support retryable writes (a standalone server?): add retryWrites=false to the connection string"
	case f.Code == 79:
		return "hint: the write concern names a mode the replica set does not have: check the w setting"
	case f.Code == 100:
		return "hint: the write concern cannot be satisfied by this deployment (not enough data-bearing nodes): lower w"
	}
	return fmt.Sprintf("hint: configuration error %d %s", f.Code, f.CodeName)
}
