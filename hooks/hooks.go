// Package hooks lets code observe every step of a guarded write: the
// operation, each attempt, each scheduled retry, each dead-letter hand-off
// and each document's disposition. Hooks is a struct of optional funcs,
// like the driver's event.CommandMonitor, with one event struct per
// callback; otelhook turns them into OpenTelemetry spans and metrics.
//
// Callbacks run synchronously on the write path: keep them fast, and never
// block. The funcs that return a context (OperationStarted, AttemptStarted,
// DeadLetterStarted) may return a derived context (one that carries a span,
// say); writeguard uses it for the rest of that step, so the driver's own
// command spans nest under the attempt that sent them. Returning nil keeps
// the given context.
//
// Events carry codes, classes, dispositions and counts, never document
// values or errInfo contents.
package hooks

import (
	"context"
	"errors"
	"strconv"
	"time"

	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/writeguard/writeguard/policy"
)

// Operation identifies a wrapped call. It is shared by every event of the
// call.
type Operation struct {
	// Name is the guarded method, as the driver's CRUD API names it:
	// insertOne, insertMany, bulkWrite, updateOne, updateByID,
	// updateMany, replaceOne, deleteOne, deleteMany, findOneAndUpdate,
	// findOneAndReplace or findOneAndDelete.
	Name string
	// Command is the server command the driver sends for the call, when
	// the caller of the hooks knows it: "update", "delete" or
	// "findAndModify" for the methods of one write, BulkCommand's for a
	// bulkWrite; "" otherwise. Read it through CommandName, which fills
	// in the commands of insertOne and insertMany.
	Command string
	// Database and Collection name the target ("" when unknown, e.g. a
	// fake target without a database).
	Database string
	// Collection is the collection's name.
	Collection string
	// BatchSize is the number of input documents or write models.
	BatchSize int
	// Ordered is the write's ordered option (driver default true).
	Ordered bool
	// InTransaction is true when the call runs inside a transaction:
	// writeguard then makes one attempt and routes nothing.
	InTransaction bool
}

// CommandName returns the name of the server command the call sends, as
// the MongoDB wire protocol and the database semantic conventions
// (db.operation.name) name it: "insert" for insertOne and insertMany;
// Command when set (for a bulkWrite whose models are all of one kind:
// "insert", "update" or "delete"); else the method name ("bulkWrite": a
// bulk write that mixes kinds sends one command per run of one kind, and
// the semantic conventions let a batch of different operations use a
// system-specific term).
func (op *Operation) CommandName() string {
	switch {
	case op == nil:
		return ""
	case op.Command != "":
		return op.Command
	case op.Name == "insertOne", op.Name == "insertMany":
		return "insert"
	}
	return op.Name
}

// BulkCommand returns the server command a Collection.BulkWrite of models
// sends when they are all of one kind: "insert" (InsertOneModel),
// "update" (UpdateOneModel, UpdateManyModel, ReplaceOneModel: the update
// command carries replacements too) or "delete" (DeleteOneModel,
// DeleteManyModel). For no models, or models of several kinds (the driver
// then sends one command per run of one kind), it returns "".
func BulkCommand(models []mongo.WriteModel) string {
	cmd := ""
	for _, m := range models {
		var c string
		switch m.(type) {
		case *mongo.InsertOneModel:
			c = "insert"
		case *mongo.UpdateOneModel, *mongo.UpdateManyModel, *mongo.ReplaceOneModel:
			c = "update"
		case *mongo.DeleteOneModel, *mongo.DeleteManyModel:
			c = "delete"
		default:
			return ""
		}
		if cmd != "" && c != cmd {
			return ""
		}
		cmd = c
	}
	return cmd
}

// ErrorTypeOther is the error type of a failure with neither a code nor a
// known class: the semantic conventions' fallback value of error.type.
const ErrorTypeOther = "_OTHER"

// ErrorType returns a bounded, low-cardinality description of a failure
// for error.type (OpenTelemetry semantic conventions, "Recording errors"):
// the server error code in decimal ("11000") when it has one, else its
// class ("transient", "network") when it is known, else ErrorTypeOther.
// It never describes the error's text or Go type.
func ErrorType(code int32, class policy.Class) string {
	switch {
	case code != 0:
		return strconv.Itoa(int(code))
	case class != policy.Unknown:
		return class.String()
	}
	return ErrorTypeOther
}

// Handled reports whether err, an OperationEnd's Err, ends the call with
// every input handled: nil, or an error that is or wraps a value with a
// Handled() bool method returning true (a *writeguard.Report does). A
// driver error returned inside a transaction is not handled.
func Handled(err error) bool {
	if err == nil {
		return true
	}
	var h interface{ Handled() bool }
	if errors.As(err, &h) {
		return h.Handled()
	}
	return false
}

// AttemptStart is sent before each attempt (one driver call).
type AttemptStart struct {
	// Op is the call the attempt belongs to.
	Op *Operation
	// Attempt counts the call's attempts, from 1.
	Attempt int
	// Documents is the number of documents or models sent.
	Documents int
	// Delay is the backoff that was waited before this attempt (0 for the
	// first attempt and for ordered continuations after a handled
	// document).
	Delay time.Duration
}

// AttemptEnd is sent after each attempt.
type AttemptEnd struct {
	// Op is the call the attempt belongs to.
	Op *Operation
	// Attempt counts the call's attempts, from 1.
	Attempt int
	// Documents is the number of documents or models sent.
	Documents int
	// Duration is the time the driver call took.
	Duration time.Duration
	// Err is the driver's error exactly as the driver returned it (nil on
	// success): a mongo.WriteException, BulkWriteException, CommandError or
	// network error. Its text may quote document values (a duplicate key's
	// value, errInfo's consideredValue): record its codes (Code, Class),
	// not its text.
	Err error
	// Code and Class describe the attempt's first failure (0 and Unknown on
	// success); Failures counts the failures Extract found.
	Code int32
	// Class is the class of that failure.
	Class policy.Class
	// Failures is the number of failures the attempt returned.
	Failures int
	// WireCommands is the number of commands the driver sent for this
	// attempt as the command monitor saw them (writeguard.Monitor): its
	// finished events that carry a reply or an error other than a
	// pre-send one, hidden retries included. 0 when the monitor is not
	// installed (no event is seen), and for an attempt that sent nothing.
	WireCommands int
}

// Retry is sent when a retry is scheduled, before the wait.
type Retry struct {
	// Op is the call being retried.
	Op *Operation
	// Attempt is the number the retry will have.
	Attempt int
	// Delay is the wait before it.
	Delay time.Duration
	// Documents is the number of documents or models to re-send.
	Documents int
	// Code and Class are those of the failure that caused the retry.
	Code int32
	// Class is the class of that failure (transient, throttled or conflict
	// for an upsert run again).
	Class policy.Class
}

// BudgetExhausted is sent when the retry budget refuses a retry.
type BudgetExhausted struct {
	// Op is the call whose retry was refused.
	Op *Operation
	// Documents is the number of documents that end "exhausted" because of
	// it.
	Documents int
	// Code is the failure code that asked for the retry.
	Code int32
}

// LimitChange is sent when the adaptive limit of a Guarded on the driver
// calls in flight to its collection changes (writeguard.WithAdaptiveLimit).
type LimitChange struct {
	// Database and Collection name the target the limit is for.
	Database, Collection string
	// Limit is the limit after the change, in driver calls in flight (1
	// while a failover closes the target to one probing call).
	Limit int
	// InFlight is the number of driver calls in flight at the change.
	InFlight int
	// Reason is "overload" (halved: a reply labelled SystemOverloadedError
	// or a throttled failure), "overload_observed" (halved on evidence of a
	// wire command monitor), "clean" (raised by clean commands),
	// "not_primary" (a NotPrimary or Shutdown category reply closed the
	// target to one probe) or "primary" (a reply from a primary reopened
	// it).
	Reason string
}

// DeadLetterStart is sent before each dead-letter hand-off to a sink.
type DeadLetterStart struct {
	// Op is the call whose documents are dead-lettered.
	Op *Operation
	// Envelopes is the number of envelopes in the batch.
	Envelopes int
	// Attempt counts the sink attempts of this batch, from 1.
	Attempt int
	// Fallback is true for the fallback sink.
	Fallback bool
}

// DeadLetterEnd is sent after each dead-letter hand-off.
type DeadLetterEnd struct {
	// Op, Envelopes, Attempt and Fallback are those of the matching
	// DeadLetterStart.
	Op        *Operation
	Envelopes int  // envelopes in the batch
	Attempt   int  // sink attempt, from 1
	Fallback  bool // true for the fallback sink
	// Duration is the time the sink's Put took.
	Duration time.Duration
	// Err is the sink's error (nil when stored). A MongoDB sink's error is
	// the driver's and may quote the envelope's values (a duplicate key):
	// record its code, not its text.
	Err error
}

// Disposition is sent once per input document or model, when its
// disposition is final.
type Disposition struct {
	// Op is the call the document belongs to.
	Op *Operation
	// Index is the position in the caller's input.
	Index int
	// Disposition is the terminal outcome.
	Disposition policy.Disposition
	// Failed is true when the document had a failure (Class, Code and
	// CodeName then describe the last one; an unclassified failure without
	// a code has Class Unknown and Code 0).
	Failed bool
	// Class, Code and CodeName describe the last failure (Unknown, 0, ""
	// when the document was written without one).
	Class    policy.Class
	Code     int32  // server error code of the last failure
	CodeName string // its codeName, when the server sent one
	// Attempts is the number of times it was sent.
	Attempts int
	// FailingKeywords are the dead-letter envelope's failing keywords for a
	// dead-lettered document, else nil.
	FailingKeywords []string
	// ID is the document's _id as the driver returns it (the same Go value
	// as InsertManyResult.InsertedIDs and Report's Outcome.ID: a string, a
	// bson.ObjectID, ...), nil for update, replace and delete models. It is
	// a document value: a hook that exports telemetry must not record it.
	ID any
}

// OperationEnd is sent when the call returns.
type OperationEnd struct {
	// Op is the call that ended.
	Op *Operation
	// Attempts is the number of driver calls made; Retries the number of
	// those that were retries after a backoff.
	Attempts int
	Retries  int // attempts that followed a backoff wait
	// Counts holds the number of inputs per disposition.
	Counts map[policy.Disposition]int
	// Duration is the call's wall time.
	Duration time.Duration
	// Err is what the call returned (nil, a *writeguard.Report, or the
	// driver's error inside a transaction). A Report's Error() carries no
	// document value; the driver's error it wraps (errors.As) may.
	Err error
	// Code and Class are those of the failure that made the call fail as a
	// whole, when one did (0 and Unknown otherwise).
	Code     int32
	CodeName string       // codeName of that failure, when the server sent one
	Class    policy.Class // class of that failure
	// MatchedNothing is true when a method of one write (UpdateOne,
	// UpdateByID, UpdateMany, ReplaceOne, DeleteOne, DeleteMany, the
	// FindOneAnd* methods) ended written and the acknowledged reply of the
	// attempt that wrote it matched no document: MatchedCount 0 without an
	// upsert, DeletedCount 0, or a findAndModify whose result is
	// mongo.ErrNoDocuments. The disposition stays written (the command
	// succeeded; writeguard does not judge filters). As the driver's
	// result, it describes that attempt only: after a re-send that
	// followed a lost reply, the first attempt may have matched. Always
	// false for the insert methods, BulkWrite and calls inside a
	// transaction.
	MatchedNothing bool
}

// Hooks is a set of optional callbacks. A nil func is skipped.
type Hooks struct {
	// OperationStarted runs when a guarded call starts; the context it
	// returns is the call's context for every later callback.
	OperationStarted func(ctx context.Context, op *Operation) context.Context
	// AttemptStarted runs before each driver call; the context it returns
	// is passed to the driver (so command spans nest under the attempt).
	AttemptStarted func(ctx context.Context, ev *AttemptStart) context.Context
	// AttemptFinished runs after each driver call, with AttemptStarted's
	// context.
	AttemptFinished func(ctx context.Context, ev *AttemptEnd)
	// RetryScheduled runs before each backoff wait.
	RetryScheduled func(ctx context.Context, ev *Retry)
	// BudgetExhausted runs when the retry budget refuses a retry.
	BudgetExhausted func(ctx context.Context, ev *BudgetExhausted)
	// DeadLetterStarted runs before each sink Put; the context it returns
	// is passed to the sink.
	DeadLetterStarted func(ctx context.Context, ev *DeadLetterStart) context.Context
	// DeadLetterFinished runs after each sink Put.
	DeadLetterFinished func(ctx context.Context, ev *DeadLetterEnd)
	// Disposition runs once per input document or model, when its
	// disposition is final.
	Disposition func(ctx context.Context, ev *Disposition)
	// OperationFinished runs when the call returns, always, even after
	// the context was cancelled.
	OperationFinished func(ctx context.Context, ev *OperationEnd)
	// LimitChanged runs when the adaptive limit changes, with the context
	// of the call whose reply changed it.
	LimitChanged func(ctx context.Context, ev *LimitChange)
	// TraceIDs returns the trace and span ids (lower-case hex, 32 and 16
	// digits) of the trace ctx belongs to, or two empty strings. writeguard
	// calls it with the call's context when it dead-letters documents, and
	// stamps the ids on the envelopes (envelope.Envelope.TraceID, SpanID),
	// so a dead letter leads back to its trace. otelhook sets it; without
	// it envelopes carry no ids.
	TraceIDs func(ctx context.Context) (traceID, spanID string)
}

// Compose returns Hooks that call each of hs in order. Context-returning
// callbacks are chained: each gets the context the previous returned.
// TraceIDs returns the first non-empty trace id any of hs returns. The
// result has every func set (to a no-op where no input has one), so callers
// never test for nil.
func Compose(hs ...Hooks) Hooks {
	return Hooks{
		OperationStarted:   chain(hs, func(h Hooks) func(context.Context, *Operation) context.Context { return h.OperationStarted }),
		AttemptStarted:     chain(hs, func(h Hooks) func(context.Context, *AttemptStart) context.Context { return h.AttemptStarted }),
		AttemptFinished:    each(hs, func(h Hooks) func(context.Context, *AttemptEnd) { return h.AttemptFinished }),
		RetryScheduled:     each(hs, func(h Hooks) func(context.Context, *Retry) { return h.RetryScheduled }),
		BudgetExhausted:    each(hs, func(h Hooks) func(context.Context, *BudgetExhausted) { return h.BudgetExhausted }),
		DeadLetterStarted:  chain(hs, func(h Hooks) func(context.Context, *DeadLetterStart) context.Context { return h.DeadLetterStarted }),
		DeadLetterFinished: each(hs, func(h Hooks) func(context.Context, *DeadLetterEnd) { return h.DeadLetterFinished }),
		Disposition:        each(hs, func(h Hooks) func(context.Context, *Disposition) { return h.Disposition }),
		OperationFinished:  each(hs, func(h Hooks) func(context.Context, *OperationEnd) { return h.OperationFinished }),
		LimitChanged:       each(hs, func(h Hooks) func(context.Context, *LimitChange) { return h.LimitChanged }),
		TraceIDs: func(ctx context.Context) (string, string) {
			for _, h := range hs {
				if h.TraceIDs != nil {
					if tid, sid := h.TraceIDs(ctx); tid != "" {
						return tid, sid
					}
				}
			}
			return "", ""
		},
	}
}

// each returns one callback that calls the field get reads from every set
// of hs that has it, in order.
func each[E any](hs []Hooks, get func(Hooks) func(context.Context, E)) func(context.Context, E) {
	return func(ctx context.Context, ev E) {
		for _, h := range hs {
			if f := get(h); f != nil {
				f(ctx, ev)
			}
		}
	}
}

// chain is each for the callbacks that return a context: each callback
// gets the context the previous one returned (nil keeps it).
func chain[E any](hs []Hooks, get func(Hooks) func(context.Context, E) context.Context) func(context.Context, E) context.Context {
	return func(ctx context.Context, ev E) context.Context {
		for _, h := range hs {
			if f := get(h); f != nil {
				ctx = keep(ctx, f(ctx, ev))
			}
		}
		return ctx
	}
}

func keep(old, new context.Context) context.Context {
	if new == nil {
		return old
	}
	return new
}
