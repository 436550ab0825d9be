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
	"time"

	"github.com/writeguard/writeguard/policy"
)

// Operation identifies a wrapped call. It is shared by every event of the
// call.
type Operation struct {
	// Name is the driver method's command-level name: insertOne,
	// insertMany or bulkWrite.
	Name string
	// Database and Collection name the target ("" when unknown, e.g. a
	// fake target without a database).
	Database   string
	Collection string
	// BatchSize is the number of input documents or write models.
	BatchSize int
	// Ordered is the write's ordered option (driver default true).
	Ordered bool
	// InTransaction is true when the call runs inside a transaction:
	// writeguard then makes one attempt and routes nothing.
	InTransaction bool
}

// AttemptStart is sent before each attempt (one driver call).
type AttemptStart struct {
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
	Op      *Operation
	Attempt int
	// Documents is the number of documents or models sent.
	Documents int
	// Duration is the time the driver call took.
	Duration time.Duration
	// Err is the driver's error (nil on success).
	Err error
	// Code and Class describe the attempt's first failure (0 and Unknown on
	// success); Failures counts the failures Extract found.
	Code     int32
	Class    policy.Class
	Failures int
}

// Retry is sent when a retry is scheduled, before the wait.
type Retry struct {
	Op *Operation
	// Attempt is the number the retry will have.
	Attempt int
	// Delay is the wait before it.
	Delay time.Duration
	// Documents is the number of documents or models to re-send.
	Documents int
	// Code and Class are those of the failure that caused the retry.
	Code  int32
	Class policy.Class
}

// BudgetExhausted is sent when the retry budget refuses a retry.
type BudgetExhausted struct {
	Op *Operation
	// Documents is the number of documents that end "exhausted" because of
	// it.
	Documents int
	// Code is the failure code that asked for the retry.
	Code int32
}

// DeadLetterStart is sent before each dead-letter hand-off to a sink.
type DeadLetterStart struct {
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
	Op        *Operation
	Envelopes int
	Attempt   int
	Fallback  bool
	Duration  time.Duration
	// Err is the sink's error (nil when stored).
	Err error
}

// Disposition is sent once per input document or model, when its
// disposition is final.
type Disposition struct {
	Op *Operation
	// Index is the position in the caller's input.
	Index int
	// Disposition is the terminal outcome.
	Disposition policy.Disposition
	// Class, Code and CodeName describe the last failure (Unknown, 0, ""
	// when the document was written without one).
	Class    policy.Class
	Code     int32
	CodeName string
	// Attempts is the number of times it was sent.
	Attempts int
	// FailingKeywords are the dead-letter envelope's failing keywords for a
	// dead-lettered document, else nil.
	FailingKeywords []string
}

// OperationEnd is sent when the call returns.
type OperationEnd struct {
	Op *Operation
	// Attempts is the number of driver calls made; Retries the number of
	// those that were retries after a backoff.
	Attempts int
	Retries  int
	// Counts holds the number of inputs per disposition.
	Counts map[policy.Disposition]int
	// Duration is the call's wall time.
	Duration time.Duration
	// Err is what the call returned (nil, a *writeguard.Report, or the
	// driver's error inside a transaction).
	Err error
	// Code and Class are those of the failure that made the call fail as a
	// whole, when one did (0 and Unknown otherwise).
	Code  int32
	Class policy.Class
}

// Hooks is a set of optional callbacks. A nil func is skipped.
type Hooks struct {
	OperationStarted   func(ctx context.Context, op *Operation) context.Context
	AttemptStarted     func(ctx context.Context, ev *AttemptStart) context.Context
	AttemptFinished    func(ctx context.Context, ev *AttemptEnd)
	RetryScheduled     func(ctx context.Context, ev *Retry)
	BudgetExhausted    func(ctx context.Context, ev *BudgetExhausted)
	DeadLetterStarted  func(ctx context.Context, ev *DeadLetterStart) context.Context
	DeadLetterFinished func(ctx context.Context, ev *DeadLetterEnd)
	Disposition        func(ctx context.Context, ev *Disposition)
	OperationFinished  func(ctx context.Context, ev *OperationEnd)
}

// Compose returns Hooks that call each of hs in order. Context-returning
// callbacks are chained: each gets the context the previous returned. The
// result has every func set (to a no-op where no input has one), so callers
// never test for nil.
func Compose(hs ...Hooks) Hooks {
	return Hooks{
		OperationStarted: func(ctx context.Context, op *Operation) context.Context {
			for _, h := range hs {
				if h.OperationStarted != nil {
					ctx = keep(ctx, h.OperationStarted(ctx, op))
				}
			}
			return ctx
		},
		AttemptStarted: func(ctx context.Context, ev *AttemptStart) context.Context {
			for _, h := range hs {
				if h.AttemptStarted != nil {
					ctx = keep(ctx, h.AttemptStarted(ctx, ev))
				}
			}
			return ctx
		},
		AttemptFinished: func(ctx context.Context, ev *AttemptEnd) {
			for _, h := range hs {
				if h.AttemptFinished != nil {
					h.AttemptFinished(ctx, ev)
				}
			}
		},
		RetryScheduled: func(ctx context.Context, ev *Retry) {
			for _, h := range hs {
				if h.RetryScheduled != nil {
					h.RetryScheduled(ctx, ev)
				}
			}
		},
		BudgetExhausted: func(ctx context.Context, ev *BudgetExhausted) {
			for _, h := range hs {
				if h.BudgetExhausted != nil {
					h.BudgetExhausted(ctx, ev)
				}
			}
		},
		DeadLetterStarted: func(ctx context.Context, ev *DeadLetterStart) context.Context {
			for _, h := range hs {
				if h.DeadLetterStarted != nil {
					ctx = keep(ctx, h.DeadLetterStarted(ctx, ev))
				}
			}
			return ctx
		},
		DeadLetterFinished: func(ctx context.Context, ev *DeadLetterEnd) {
			for _, h := range hs {
				if h.DeadLetterFinished != nil {
					h.DeadLetterFinished(ctx, ev)
				}
			}
		},
		Disposition: func(ctx context.Context, ev *Disposition) {
			for _, h := range hs {
				if h.Disposition != nil {
					h.Disposition(ctx, ev)
				}
			}
		},
		OperationFinished: func(ctx context.Context, ev *OperationEnd) {
			for _, h := range hs {
				if h.OperationFinished != nil {
					h.OperationFinished(ctx, ev)
				}
			}
		},
	}
}

func keep(old, new context.Context) context.Context {
	if new == nil {
		return old
	}
	return new
}
