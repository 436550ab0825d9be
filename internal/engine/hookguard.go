package engine

import (
	"context"

	"github.com/writeguard/writeguard/hooks"
)

// guardHooks returns h with every func set wrapped so that a panic of it
// is recovered (panic.go): the call goes on, the panic joins its errors.
func (e *Engine) guardHooks(h hooks.Hooks) hooks.Hooks {
	g := h
	if f := h.OperationStarted; f != nil {
		g.OperationStarted = func(ctx context.Context, ev *hooks.Operation) (out context.Context) {
			out = ctx
			defer func() {
				if r := recover(); r != nil {
					e.hookPanicked(ctx, "OperationStarted", r)
				}
			}()
			return keepPanics(ctx, f(ctx, ev))
		}
	}
	if f := h.AttemptStarted; f != nil {
		g.AttemptStarted = func(ctx context.Context, ev *hooks.AttemptStart) (out context.Context) {
			out = ctx
			defer func() {
				if r := recover(); r != nil {
					e.hookPanicked(ctx, "AttemptStarted", r)
				}
			}()
			return keepPanics(ctx, f(ctx, ev))
		}
	}
	if f := h.DeadLetterStarted; f != nil {
		g.DeadLetterStarted = func(ctx context.Context, ev *hooks.DeadLetterStart) (out context.Context) {
			out = ctx
			defer func() {
				if r := recover(); r != nil {
					e.hookPanicked(ctx, "DeadLetterStarted", r)
				}
			}()
			return keepPanics(ctx, f(ctx, ev))
		}
	}
	g.AttemptFinished = guardEvent(e, "AttemptFinished", h.AttemptFinished)
	g.RetryScheduled = guardEvent(e, "RetryScheduled", h.RetryScheduled)
	g.BudgetExhausted = guardEvent(e, "BudgetExhausted", h.BudgetExhausted)
	g.DeadLetterFinished = guardEvent(e, "DeadLetterFinished", h.DeadLetterFinished)
	g.Disposition = guardEvent(e, "Disposition", h.Disposition)
	g.OperationFinished = guardEvent(e, "OperationFinished", h.OperationFinished)
	if f := h.TraceIDs; f != nil {
		g.TraceIDs = func(ctx context.Context) (traceID, spanID string) {
			defer func() {
				if r := recover(); r != nil {
					traceID, spanID = "", ""
					e.hookPanicked(ctx, "TraceIDs", r)
				}
			}()
			return f(ctx)
		}
	}
	return g
}

// guardEvent wraps f, a hook of one event (nil stays nil), so that a
// panic of it is recovered and recorded as hook name's.
func guardEvent[T any](e *Engine, name string, f func(context.Context, T)) func(context.Context, T) {
	if f == nil {
		return nil
	}
	return func(ctx context.Context, ev T) {
		defer func() {
			if r := recover(); r != nil {
				e.hookPanicked(ctx, name, r)
			}
		}()
		f(ctx, ev)
	}
}
