package writeguard

import (
	"context"
	"fmt"

	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/writeguard/writeguard/internal/engine"
)

// reportFor returns the engine's Config.Report: newReport, with
// Report.NoUniqueID set when the caller declared the target without a
// unique _id (WithUniqueID(false)) or the call learned it.
func reportFor(declared *bool) func(engine.Result) error {
	return func(res engine.Result) error {
		r := newReport(res).(*Report)
		r.NoUniqueID = declared != nil && !*declared || res.NoUniqueID()
		return r
	}
}

// Remaining is the unfinished part of a guarded call, ready to pass to the
// same method again with Context(ctx) (Report.Remaining): the inputs that
// ended unknown, exhausted, not_attempted or dead_letter_failed and may be
// sent again without storing a
// document twice or applying an update twice, and, apart, those that may
// not, with why.
type Remaining struct {
	// Operation is the method of the first call (Report.Operation).
	Operation string
	// Indexes[i] is the first call's index of the i-th input to send
	// again (of Documents[i] or Models[i]).
	Indexes []int
	// Documents are the documents to insert again, with the _id writeguard
	// gave them, as bson.Raw (insertOne, insertMany): pass them to
	// InsertMany (or Documents[0] to InsertOne).
	Documents []any
	// Models are the write models to send again (bulkWrite, and the
	// methods of one write, whose write is one model): pass them to
	// BulkWrite. An insert model carries its document with the _id
	// writeguard gave it.
	Models []mongo.WriteModel
	// Left are the inputs that ended unknown, exhausted, not_attempted or
	// dead_letter_failed but are not sent again, with why.
	Left []Left

	idempotent []int // positions in Models marked idempotent
	maybe      []int // positions that an attempt of the first call may have applied
}

// Left is an input that Remaining leaves out.
type Left struct {
	// Index is the first call's index.
	Index int
	// Disposition is its disposition in the first call.
	Disposition Disposition
	// Reason says why it is not sent again.
	Reason LeftReason
}

// LeftReason says why Remaining leaves an input out (Left.Reason): one of
// the constants below, each a sentence a person can read.
type LeftReason string

// The reasons of Left.
const (
	// LeftNotIdempotent: an update, replace or delete that an attempt may
	// have applied and that the caller did not mark idempotent; sending it
	// again could apply it twice. Reconcile it by reading.
	LeftNotIdempotent LeftReason = "may have been applied and is not marked idempotent"
	// LeftNoUniqueID: an insert that an attempt may have applied, into a
	// target without a unique _id (WithUniqueID(false), a time-series
	// collection, or a target whose answer was not learned within
	// 5 seconds and is then counted as not unique); sending it again
	// could store it twice. Reconcile it by reading.
	LeftNoUniqueID LeftReason = "may have been applied and the target has no unique _id"
	// LeftNoInput: the input cannot be rebuilt (it failed before it was
	// marshalled).
	LeftNoInput LeftReason = "no document or model to send"
)

// Len returns the number of inputs to send again.
func (rm *Remaining) Len() int { return len(rm.Indexes) }

// Context returns ctx for the call that finishes the first one: it marks
// the Models that the first call marked idempotent (IdempotentModels with
// their new indexes), and the inputs that an attempt of the first call may
// have applied, so that the new call treats them as its own earlier
// attempts would: an insert that meets a duplicate key on its own _id is
// read back (already_written when it is the document sent) instead of
// going to the conflict handler. Without it finishing is still safe
// (nothing is stored twice), but such an insert ends as a conflict.
func (rm *Remaining) Context(ctx context.Context) context.Context {
	if len(rm.idempotent) > 0 {
		ctx = IdempotentModels(ctx, rm.idempotent...)
	}
	if len(rm.maybe) > 0 {
		ctx = context.WithValue(ctx, maybeAppliedKey{}, rm.maybe)
	}
	return ctx
}

type maybeAppliedKey struct{}

// maybeApplied returns the inputs ctx marks as maybe applied by an
// earlier call (Remaining.Context), for engine.Spec.MaybeApplied.
func maybeApplied(ctx context.Context) []int {
	v, _ := ctx.Value(maybeAppliedKey{}).([]int)
	return v
}

// Remaining returns the unfinished part of the call, ready to pass to the
// same method again: the inputs whose disposition is unknown, exhausted,
// not_attempted or dead_letter_failed, with the _ids writeguard assigned,
// in input order. Sending them again can never store a document twice or
// apply an update twice. What it returns, per disposition (the README's
// table):
//
//	disposition         insert (document or model)      update, replace, delete
//	not_attempted       sent again                      sent again
//	exhausted           sent again                      sent again
//	unknown             sent again, read back on its    left out (LeftNotIdempotent)
//	                    own _id; left out where _id     unless marked idempotent
//	                    is not unique (LeftNoUniqueID)
//	dead_letter_failed  sent again (the new call        sent again, unless an attempt
//	                    dead-letters it anew)           may have applied it (as unknown)
//	any other           neither sent nor listed: it ended for good
//
// In detail:
//
//   - an insert keeps its _id: if an earlier attempt stored it, the new
//     call meets a duplicate key on its own _id and reads it back
//     (already_written), unless the target has no unique _id (declared
//     with WithUniqueID(false), learned from the target, or not learned
//     within 5 seconds: then counted as not unique): then an insert
//     that may have been applied is left out (LeftNoUniqueID);
//   - an update, replace or delete that may have been applied
//     (MaybeWritten, or unknown) is sent again only when it was marked
//     idempotent (Context keeps the mark); otherwise it is left out
//     (LeftNotIdempotent): Remaining never hands back an unknown or
//     possibly applied write that is not idempotent;
//   - an input not sent (not_attempted), or proved not applied
//     (exhausted without MaybeWritten), is always sent again;
//   - a dead_letter_failed input (the server refused it, and the
//     dead-letter sink did not store it: issue 30) is sent again by the
//     same rules, so that the call that finishes this one (on the
//     caller's new context) is refused again and dead-letters it anew.
//
// Inputs with any other disposition (written, dead_lettered, conflict_*,
// failed, written_unconfirmed, unacknowledged) are neither sent again nor
// listed in Left: they ended for good. A call made again with Remaining
// returns its own Report, whose indexes are Remaining's positions
// (Indexes maps them back).
func (r *Report) Remaining() *Remaining {
	rm := &Remaining{Operation: r.Operation}
	for i := range r.Outcomes {
		o := &r.Outcomes[i]
		switch o.Disposition {
		case OutcomeUnknown, Exhausted, NotAttempted, DeadLetterFailed:
		default:
			continue
		}
		maybe := o.MaybeWritten || o.Disposition == OutcomeUnknown
		if why, left := leftReason(o, maybe, r.NoUniqueID); left {
			rm.Left = append(rm.Left, Left{Index: o.Index, Disposition: o.Disposition, Reason: why})
			continue
		}
		rm.add(o, maybe)
	}
	return rm
}

// leftReason says whether Remaining leaves o out, and why: no input to
// send; possibly applied (maybe) and not idempotent; a possibly applied
// insert where _id is not unique (noUniqueID).
func leftReason(o *Outcome, maybe, noUniqueID bool) (LeftReason, bool) {
	insert := o.Model == nil || isInsert(o.Model)
	switch {
	case o.Model == nil && o.Document == nil, insert && o.Document == nil:
		return LeftNoInput, true
	case maybe && !o.Idempotent:
		return LeftNotIdempotent, true
	case maybe && insert && noUniqueID:
		return LeftNoUniqueID, true
	}
	return "", false
}

// add appends o to the inputs to send again: its document (insertOne,
// insertMany), an insert model with its document, or its model, marked
// idempotent and maybe applied at its new position.
func (rm *Remaining) add(o *Outcome, maybe bool) {
	rm.Indexes = append(rm.Indexes, o.Index)
	if maybe {
		rm.maybe = append(rm.maybe, len(rm.Indexes)-1)
	}
	switch {
	case o.Model == nil:
		rm.Documents = append(rm.Documents, o.Document)
	case isInsert(o.Model):
		rm.Models = append(rm.Models, mongo.NewInsertOneModel().SetDocument(o.Document))
	default:
		if o.Idempotent {
			rm.idempotent = append(rm.idempotent, len(rm.Models))
		}
		rm.Models = append(rm.Models, o.Model)
	}
}

func isInsert(m mongo.WriteModel) bool {
	_, ok := m.(*mongo.InsertOneModel)
	return ok
}

// String summarises rm: how many inputs to send again and how many left
// out.
func (rm *Remaining) String() string {
	return fmt.Sprintf("%s: %d to send again, %d left out", rm.Operation, rm.Len(), len(rm.Left))
}
