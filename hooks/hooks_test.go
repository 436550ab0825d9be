package hooks_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/writeguard/writeguard/hooks"
	"github.com/writeguard/writeguard/policy"
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

func TestComposeTraceIDs(t *testing.T) {
	none := hooks.Hooks{TraceIDs: func(context.Context) (string, string) { return "", "" }}
	ids := hooks.Hooks{TraceIDs: func(context.Context) (string, string) { return "t1", "s1" }}
	other := hooks.Hooks{TraceIDs: func(context.Context) (string, string) { return "t2", "s2" }}
	if tid, sid := hooks.Compose(none, hooks.Hooks{}, ids, other).TraceIDs(context.Background()); tid != "t1" || sid != "s1" {
		t.Errorf("TraceIDs = %q, %q; want the first non-empty, t1 s1", tid, sid)
	}
	if tid, sid := hooks.Compose(none).TraceIDs(context.Background()); tid != "" || sid != "" {
		t.Errorf("TraceIDs with no ids = %q, %q; want empty", tid, sid)
	}
	if tid, _ := hooks.Compose().TraceIDs(context.Background()); tid != "" {
		t.Errorf("Compose() TraceIDs = %q, want empty", tid)
	}
}

func TestCommandName(t *testing.T) {
	cases := []struct {
		op   *hooks.Operation
		want string
	}{
		{&hooks.Operation{Name: "insertOne"}, "insert"},
		{&hooks.Operation{Name: "insertMany"}, "insert"},
		{&hooks.Operation{Name: "bulkWrite"}, "bulkWrite"},
		{&hooks.Operation{Name: "bulkWrite", Command: "update"}, "update"},
		{nil, ""},
	}
	for _, c := range cases {
		if got := c.op.CommandName(); got != c.want {
			t.Errorf("%+v.CommandName() = %q, want %q", c.op, got, c.want)
		}
	}
}

func TestBulkCommand(t *testing.T) {
	ins := mongo.NewInsertOneModel()
	upd := mongo.NewUpdateOneModel()
	rep := mongo.NewReplaceOneModel()
	del := mongo.NewDeleteManyModel()
	cases := []struct {
		models []mongo.WriteModel
		want   string
	}{
		{[]mongo.WriteModel{ins, ins}, "insert"},
		{[]mongo.WriteModel{upd, rep, mongo.NewUpdateManyModel()}, "update"},
		{[]mongo.WriteModel{del, mongo.NewDeleteOneModel()}, "delete"},
		{[]mongo.WriteModel{ins, del}, ""},
		{nil, ""},
	}
	for i, c := range cases {
		if got := hooks.BulkCommand(c.models); got != c.want {
			t.Errorf("case %d: BulkCommand = %q, want %q", i, got, c.want)
		}
	}
}

func TestErrorType(t *testing.T) {
	cases := []struct {
		code  int32
		class policy.Class
		want  string
	}{
		{11000, policy.Conflict, "11000"},
		{189, policy.Transient, "189"},
		{0, policy.Transient, "transient"},
		{0, policy.Unknown, "_OTHER"},
	}
	for _, c := range cases {
		if got := hooks.ErrorType(c.code, c.class); got != c.want {
			t.Errorf("ErrorType(%d, %v) = %q, want %q", c.code, c.class, got, c.want)
		}
	}
}

type handledErr bool

func (h handledErr) Error() string { return "report" }
func (h handledErr) Handled() bool { return bool(h) }

func TestHandled(t *testing.T) {
	cases := []struct {
		err  error
		want bool
	}{
		{nil, true},
		{handledErr(true), true},
		{fmt.Errorf("wrapped: %w", handledErr(true)), true},
		{handledErr(false), false},
		{errors.New("driver error"), false},
	}
	for _, c := range cases {
		if got := hooks.Handled(c.err); got != c.want {
			t.Errorf("Handled(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}
