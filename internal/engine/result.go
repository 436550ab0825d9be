package engine

import (
	"context"
	"fmt"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/writeguard/writeguard/hooks"
	"github.com/writeguard/writeguard/policy"
)

// Result is what a call that did not end all written hands to
// Config.Report: the call's figures and one Outcome per input.
type Result struct {
	Operation string
	Namespace string
	Outcomes  []Outcome // one per input, Outcomes[i].Index == i
	Attempts  int       // driver calls made
	LastErr   error     // the driver's last error, nil when none
	Hint      string    // the setting to fix after a Configuration failure
	Extra     []error   // context errors, ErrUnacknowledged
}

// Outcome is what happened to one input (the root's Outcome documents
// each field).
type Outcome struct {
	Index        int
	ID           any // the _id as the driver returns it (inserts), nil otherwise
	Disposition  policy.Disposition
	Class        policy.Class
	Failure      *policy.Failure
	Attempts     int
	MaybeWritten bool
	Document     bson.Raw
	Model        mongo.WriteModel
	Err          error
}

// finish builds the call's error (Config.Report of its Result; nil when every input ended written or
// already_written, or unacknowledged when allowed) and reports the end of
// the call to the hooks.
func (c *Call) finish(ctx context.Context) error {
	e := c.e
	ok := true
	for _, it := range c.items {
		if it.disp != policy.Written && it.disp != policy.AlreadyWritten && !(it.disp == policy.Unacknowledged && e.cfg.AllowUnacked) {
			ok = false
			break
		}
	}
	var err error
	if !ok {
		r := &Result{Operation: c.op.Name, Namespace: e.Namespace(), Attempts: c.attempts, LastErr: c.lastErr, Hint: c.hint, Extra: c.extra}
		r.Outcomes = make([]Outcome, len(c.items))
		for i, it := range c.items {
			r.Outcomes[i] = c.outcome(it)
		}
		err = e.cfg.Report(r)
	}
	if e.observed {
		c.operationFinished(ctx, err)
	}
	return err
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
	e.hooks.OperationFinished(ctx, end)
}

func (c *Call) outcome(it *item) Outcome {
	o := Outcome{Index: it.index, ID: it.idValue(), Disposition: it.disp, Failure: it.fail, Attempts: it.attempts,
		MaybeWritten: it.mayBeApplied() && !it.disp.Stored(), Document: it.doc, Model: it.model, Err: it.err}
	if it.kind != KindInsert {
		o.ID = nil
	}
	if it.fail != nil {
		o.Class = it.class
	}
	return o
}

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
