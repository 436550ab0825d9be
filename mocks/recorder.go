package mocks

import (
	"context"
	"sync"

	"github.com/writeguard/writeguard/hooks"
)

// Recorder keeps every hook event of the guarded collections it is given
// to (writeguard.WithHooks(rec.Hooks())), for tests to inspect. Safe for
// concurrent use; the zero value is ready. Accessors return copies.
type Recorder struct {
	mu       sync.Mutex
	attempts []hooks.AttemptStart
	ends     []hooks.AttemptEnd
	retries  []hooks.Retry
	disps    []hooks.Disposition
	dlq      []hooks.DeadLetterEnd
	ops      []hooks.OperationEnd
	budget   int
}

// Hooks returns hooks that record into r.
func (r *Recorder) Hooks() hooks.Hooks {
	return hooks.Hooks{
		AttemptStarted: func(ctx context.Context, ev *hooks.AttemptStart) context.Context {
			record(r, &r.attempts, *ev)
			return ctx
		},
		AttemptFinished:    func(_ context.Context, ev *hooks.AttemptEnd) { record(r, &r.ends, *ev) },
		RetryScheduled:     func(_ context.Context, ev *hooks.Retry) { record(r, &r.retries, *ev) },
		DeadLetterFinished: func(_ context.Context, ev *hooks.DeadLetterEnd) { record(r, &r.dlq, *ev) },
		Disposition:        func(_ context.Context, ev *hooks.Disposition) { record(r, &r.disps, *ev) },
		OperationFinished:  func(_ context.Context, ev *hooks.OperationEnd) { record(r, &r.ops, *ev) },
		BudgetExhausted: func(context.Context, *hooks.BudgetExhausted) {
			r.mu.Lock()
			r.budget++
			r.mu.Unlock()
		},
	}
}

func record[T any](r *Recorder, list *[]T, ev T) {
	r.mu.Lock()
	*list = append(*list, ev)
	r.mu.Unlock()
}

func snapshot[T any](r *Recorder, list []T) []T {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]T(nil), list...)
}

// Attempts returns the AttemptStarted events, in order.
func (r *Recorder) Attempts() []hooks.AttemptStart { return snapshot(r, r.attempts) }

// AttemptEnds returns the AttemptFinished events, in order.
func (r *Recorder) AttemptEnds() []hooks.AttemptEnd { return snapshot(r, r.ends) }

// Retries returns the RetryScheduled events, in order.
func (r *Recorder) Retries() []hooks.Retry { return snapshot(r, r.retries) }

// Dispositions returns the Disposition events, in order.
func (r *Recorder) Dispositions() []hooks.Disposition { return snapshot(r, r.disps) }

// DeadLetters returns the DeadLetterFinished events, in order.
func (r *Recorder) DeadLetters() []hooks.DeadLetterEnd { return snapshot(r, r.dlq) }

// Operations returns the OperationFinished events, in order.
func (r *Recorder) Operations() []hooks.OperationEnd { return snapshot(r, r.ops) }

// BudgetExhausted returns the number of BudgetExhausted events.
func (r *Recorder) BudgetExhausted() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.budget
}
