package writeguard_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"testing/synctest"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/writeguard/writeguard"
	"github.com/writeguard/writeguard/envelope"
	"github.com/writeguard/writeguard/hooks"
	"github.com/writeguard/writeguard/mocks"
	"github.com/writeguard/writeguard/policy"
)

// panicking returns Hooks whose func name panics with "boom <name>".
func panicking(name string) hooks.Hooks {
	boom := "boom " + name
	var h hooks.Hooks
	switch name {
	case "OperationStarted":
		h.OperationStarted = func(context.Context, *hooks.Operation) context.Context { panic(boom) }
	case "AttemptStarted":
		h.AttemptStarted = func(context.Context, *hooks.AttemptStart) context.Context { panic(boom) }
	case "AttemptFinished":
		h.AttemptFinished = func(context.Context, *hooks.AttemptEnd) { panic(boom) }
	case "RetryScheduled":
		h.RetryScheduled = func(context.Context, *hooks.Retry) { panic(boom) }
	case "DeadLetterStarted":
		h.DeadLetterStarted = func(context.Context, *hooks.DeadLetterStart) context.Context { panic(boom) }
	case "DeadLetterFinished":
		h.DeadLetterFinished = func(context.Context, *hooks.DeadLetterEnd) { panic(boom) }
	case "Disposition":
		h.Disposition = func(context.Context, *hooks.Disposition) { panic(boom) }
	case "OperationFinished":
		h.OperationFinished = func(context.Context, *hooks.OperationEnd) { panic(boom) }
	case "TraceIDs":
		h.TraceIDs = func(context.Context) (string, string) { panic(boom) }
	}
	return h
}

// Callbacks cannot break a call: a panic in any hook is recovered like
// the conflict handler's and the sink's. The call (a first attempt that
// drops the connection, a retry, one document rejected and dead-lettered)
// still ends with its Report: the two good documents written and in
// InsertedIDs, the rejected one dead-lettered; the panic is a
// *writeguard.PanicError naming the hook, with the stack down to it.
func TestHookPanics(t *testing.T) {
	for _, name := range []string{"OperationStarted", "AttemptStarted", "AttemptFinished", "RetryScheduled",
		"DeadLetterStarted", "DeadLetterFinished", "Disposition", "OperationFinished", "TraceIDs"} {
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				fake := mocks.NewFake("db.hookpanic").Script(mocks.DropConnection()).Validator(func(d bson.Raw) (bson.Raw, bool) {
					return nil, d.Lookup("_id").StringValue() == "bad"
				})
				sink := &mocks.Sink{}
				g, err := writeguard.New(fake, writeguard.WithDeadLetter(sink), writeguard.WithHooks(panicking(name)),
					writeguard.WithBackoff(policy.Backoff{Jitter: func() float64 { return 0.5 }}))
				if err != nil {
					t.Fatal(err)
				}
				res, err := g.InsertMany(ctx, []any{bson.D{{Key: "_id", Value: "a"}}, bson.D{{Key: "_id", Value: "bad"}}, bson.D{{Key: "_id", Value: "c"}}})
				var r *writeguard.Report
				var pe *writeguard.PanicError
				if !errors.As(err, &r) || !errors.As(err, &pe) {
					t.Fatalf("err = %v, want a Report with a *PanicError", err)
				}
				if pe.What != "hook "+name || pe.Value != "boom "+name || !strings.Contains(string(pe.Stack()), "panicking") {
					t.Errorf("PanicError{What: %q, Value: %v}; want hook %s, its value, the hook's frame in the stack", pe.What, pe.Value, name)
				}
				want := []writeguard.Disposition{writeguard.Written, writeguard.DeadLettered, writeguard.Written}
				for i, d := range dispositions(r) {
					if d != want[i] {
						t.Errorf("input %d: %s, want %s", i, d, want[i])
					}
				}
				if res == nil || len(res.InsertedIDs) != 2 {
					t.Errorf("result %+v, want the two InsertedIDs", res)
				}
				if len(fake.Docs()) != 2 || len(sink.Envelopes()) != 1 {
					t.Errorf("%d stored, %d dead-lettered; want 2 and 1", len(fake.Docs()), len(sink.Envelopes()))
				}
			})
		})
	}
}

// errors.As reaches a *PanicError from the call's error for every kind
// of callback: the target, the dead-letter sink, the conflict handler,
// a hook.
func TestPanicErrorEverywhere(t *testing.T) {
	check := func(t *testing.T, err error, what string) {
		t.Helper()
		var pe *writeguard.PanicError
		if !errors.As(err, &pe) || pe.What != what || len(pe.Stack()) == 0 {
			t.Fatalf("err = %v, want a *PanicError of %q with its stack", err, what)
		}
	}
	t.Run("target", func(t *testing.T) {
		g, _ := writeguard.New(panickingTarget{mocks.NewFake("db.pe1")})
		_, err := g.BulkWrite(ctx, []mongo.WriteModel{mongo.NewInsertOneModel().SetDocument(bson.D{{Key: "_id", Value: 1}})})
		check(t, err, "target")
	})
	t.Run("sink", func(t *testing.T) {
		sink := &mocks.Sink{Before: func(context.Context, int, []envelope.Envelope) error { panic("disk on fire") }}
		g, _ := writeguard.New(mocks.NewFake("db.pe2").Validator(func(bson.Raw) (bson.Raw, bool) { return nil, true }), writeguard.WithDeadLetter(sink))
		_, err := g.InsertOne(ctx, bson.D{{Key: "x", Value: 1}})
		check(t, err, "dead-letter sink")
	})
	t.Run("conflict handler", func(t *testing.T) {
		fake := mocks.NewFake("db.pe3")
		_ = fake.Seed(bson.D{{Key: "_id", Value: 1}})
		boom := writeguard.ConflictHandlerFunc(func(context.Context, *writeguard.Conflict) (policy.Disposition, error) { panic("boom") })
		g, _ := writeguard.New(fake, writeguard.WithConflictHandler(boom))
		_, err := g.InsertOne(ctx, bson.D{{Key: "_id", Value: 1}})
		check(t, err, "conflict handler")
	})
	t.Run("hook", func(t *testing.T) {
		g, _ := writeguard.New(mocks.NewFake("db.pe4"), writeguard.WithHooks(panicking("AttemptFinished")))
		res, err := g.InsertOne(ctx, bson.D{{Key: "_id", Value: 1}})
		check(t, err, "hook AttemptFinished")
		if res == nil || res.InsertedID == nil {
			t.Errorf("result %+v, want the InsertedID of the written document", res)
		}
	})
	t.Run("hook inside a transaction", func(t *testing.T) {
		sctx, end := transactionContext(t)
		defer end()
		g, _ := writeguard.New(mocks.NewFake("db.pe5"), writeguard.WithHooks(panicking("OperationFinished")))
		_, err := g.InsertOne(sctx, bson.D{{Key: "_id", Value: 1}})
		check(t, err, "hook OperationFinished")
	})
}
