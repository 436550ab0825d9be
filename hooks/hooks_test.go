package hooks_test

import (
	"context"
	"testing"

	"github.com/writeguard/writeguard/hooks"
)

type key string

func TestComposeOrderAndContext(t *testing.T) {
	var order []string
	a := hooks.Hooks{
		AttemptStarted: func(ctx context.Context, ev *hooks.AttemptStart) context.Context {
			order = append(order, "a")
			return context.WithValue(ctx, key("a"), 1)
		},
		Disposition: func(context.Context, *hooks.Disposition) { order = append(order, "a-disp") },
	}
	b := hooks.Hooks{
		AttemptStarted: func(ctx context.Context, ev *hooks.AttemptStart) context.Context {
			order = append(order, "b")
			if ctx.Value(key("a")) != 1 {
				t.Error("b did not get the context a returned")
			}
			return nil // keeps the context
		},
	}
	h := hooks.Compose(a, b, hooks.Hooks{})
	ctx := h.AttemptStarted(context.Background(), &hooks.AttemptStart{Attempt: 1})
	if ctx.Value(key("a")) != 1 {
		t.Error("composed context lost a's value")
	}
	h.Disposition(ctx, &hooks.Disposition{})
	// Every func is set, so callers never test for nil.
	h.OperationFinished(ctx, &hooks.OperationEnd{})
	h.RetryScheduled(ctx, &hooks.Retry{})
	h.BudgetExhausted(ctx, &hooks.BudgetExhausted{})
	h.AttemptFinished(ctx, &hooks.AttemptEnd{})
	h.DeadLetterFinished(h.DeadLetterStarted(ctx, &hooks.DeadLetterStart{}), &hooks.DeadLetterEnd{})
	if got := h.OperationStarted(ctx, &hooks.Operation{}); got != ctx {
		t.Error("OperationStarted with no hook changed the context")
	}
	want := []string{"a", "b", "a-disp"}
	if len(order) != len(want) {
		t.Fatalf("order %v, want %v", order, want)
	}
	for i := range want {
		if order[i] != want[i] {
			t.Fatalf("order %v, want %v", order, want)
		}
	}
}
