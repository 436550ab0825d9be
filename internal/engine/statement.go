package engine

import (
	"github.com/writeguard/writeguard/policy"
)

// callExt is the state of a call that the per-model idempotence marks, the
// one-statement rule and bisection (bisect.go) keep beside the loop's.
type callExt struct {
	idem   map[int]bool    // inputs marked idempotent one by one (Spec.IdempotentModels)
	whole  *policy.Failure // the last attempt's whole-command failure (verdicts), nil when none
	wholeN int             // the number of documents of that attempt
	bis    bisection
	// matched reads a successful attempt's result (Spec.MatchedNothing);
	// matchedNothing is its answer on the attempt that wrote the input.
	matched        func(result any) bool
	matchedNothing bool
	// doneAtSend: the context had ended when the last attempt called the
	// driver (wrapSend); hidden: the last attempt's failures are read as
	// after hidden attempts (hiddenFor).
	doneAtSend, hidden bool
	// wire is the last attempt's record of finished command events
	// (monitor.go); wireProofs the per-statement proofs it gave the
	// last attempt's whole-command failure (hiddenFor), nil when none.
	wire       wire
	wireProofs []policy.Proof
}

// neverResend takes back every idempotence mark of the call
// (Spec.NeverResend): a write that may have been applied is not sent
// again, whatever the caller marked.
func (c *Call) neverResend() {
	c.idempotent = false
	c.ext.idem = nil
}

// markIdempotent marks the inputs at indexes (positions in the caller's
// input) safe to re-send after an ambiguous failure (Spec.IdempotentModels),
// beside Spec.Idempotent which marks all of them. Indexes out of range are
// ignored.
func (c *Call) markIdempotent(indexes []int) {
	for _, i := range indexes {
		if i < 0 || i >= len(c.items) {
			continue
		}
		if c.ext.idem == nil {
			c.ext.idem = map[int]bool{}
		}
		c.ext.idem[i] = true
	}
}

// idempotentItem reports whether the caller marked it idempotent.
func (c *Call) idempotentItem(it *item) bool { return c.idempotent || c.ext.idem[it.index] }

// oneStatement applies DESIGN's rule for one-statement commands to the
// whole-command failure of an attempt of batch: when the command carried
// exactly one statement and the failure is a command rejection
// (policy.ShapeCommandRejected: not an interruption, a configuration or
// an authorization reply) whose class is a per-document verdict
// (policy.Invalid: 121, 2, 10334, ...; policy.Conflict: 11000, ...), it
// is that statement's verdict, and oneStatement makes it the statement's
// own failure (Index 0). It reports whether it did.
//
// Source: findAndModify carries one statement (stmtId 0) and reports its
// failure as the command's: src/mongo/db/commands/find_and_modify.cpp,
// CmdFindAndModify::run and advanceExecutor, which raises the plan
// executor's failure (a duplicate key, a document that fails validation)
// with uassertStatusOKWithContext(..., "Plan executor error during
// findAndModify") instead of a writeErrors entry (read at mongodb/mongo
// commit 00d0b83b; clients see the command error "Plan executor error
// during findAndModify :: caused by :: E11000 duplicate key error ...",
// code 11000). An insert, update or
// delete command of one statement that the server rejects as a whole for
// a per-document reason (10334 BSONObjectTooLarge on its one document)
// has likewise nothing else to blame. Commands of two or more statements
// never get this reading: their whole-command failure is never a verdict
// on the documents (Route, rule 2).
func (c *Call) oneStatement(batch []*item, whole *policy.Failure) bool {
	if len(batch) != 1 || whole.Shape != policy.ShapeCommandRejected {
		return false
	}
	switch c.e.cfg.Classifier.Classify(*whole) {
	case policy.Invalid, policy.Conflict:
		whole.Index = 0
		return true
	}
	return false
}

// markMaybeApplied records that an earlier call may have applied the
// inputs at indexes (Spec.MaybeApplied): they start with the evidence
// "maybe applied", as if an earlier attempt of this call had sent them.
// Indexes out of range are ignored.
func (c *Call) markMaybeApplied(indexes []int) {
	for _, i := range indexes {
		if i >= 0 && i < len(c.items) {
			c.items[i].ev = max(c.items[i].ev, maybe)
		}
	}
}
