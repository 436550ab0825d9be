package writeguard_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/writeguard/writeguard"
	"github.com/writeguard/writeguard/envelope"
	"github.com/writeguard/writeguard/mocks"
	"github.com/writeguard/writeguard/policy"
)

func TestConflictHandlers(t *testing.T) {
	seed := bson.D{{Key: "_id", Value: "a"}, {Key: "email", Value: "x@y"}, {Key: "v", Value: 1}}
	doc := bson.D{{Key: "_id", Value: "b"}, {Key: "email", Value: "x@y"}, {Key: "v", Value: 2}}
	t.Run("skip", func(t *testing.T) {
		fake := mocks.NewFake("db.h").Unique("email")
		_ = fake.Seed(seed)
		fx := newFixture(t, fake, writeguard.WithConflictHandler(writeguard.ConflictSkip()))
		_, err := fx.g.InsertOne(ctx, doc)
		var r *writeguard.Report
		if !errors.As(err, &r) || r.Outcomes[0].Disposition != writeguard.ConflictSkipped || !writeguard.Handled(err) {
			t.Fatalf("err = %v, want a handled conflict_skipped", err)
		}
	})
	t.Run("replace by the conflicting key", func(t *testing.T) {
		fake := mocks.NewFake("db.h").Unique("email")
		_ = fake.Seed(seed)
		fx := newFixture(t, fake, writeguard.WithConflictHandler(writeguard.ConflictReplace()))
		_, err := fx.g.InsertOne(ctx, doc)
		var r *writeguard.Report
		if !errors.As(err, &r) || r.Outcomes[0].Disposition != writeguard.ConflictReplaced {
			t.Fatalf("err = %v, want conflict_replaced", err)
		}
		docs := fake.Docs()
		if len(docs) != 1 || docs[0].Lookup("_id").StringValue() != "a" || docs[0].Lookup("v").Int32() != 2 {
			t.Errorf("stored %v, want the document with _id a replaced by v 2", docs)
		}
	})
	t.Run("user func and a bad disposition", func(t *testing.T) {
		fake := mocks.NewFake("db.h").Unique("email")
		_ = fake.Seed(seed)
		var got *writeguard.Conflict
		h := writeguard.ConflictHandlerFunc(func(_ context.Context, c *writeguard.Conflict) (policy.Disposition, error) {
			got = c
			return "merged", nil // not conflict_<verb>
		})
		fx := newFixture(t, fake, writeguard.WithConflictHandler(h))
		_, err := fx.g.InsertOne(ctx, doc)
		var r *writeguard.Report
		if !errors.As(err, &r) || r.Outcomes[0].Disposition != writeguard.Conflicted || r.Outcomes[0].Err == nil {
			t.Fatalf("err = %v, want conflict with the handler's mistake named", err)
		}
		if got == nil || got.KeyValue.Lookup("email").StringValue() != "x@y" || got.Index != 0 || got.Document == nil {
			t.Errorf("handler saw %+v", got)
		}
	})
}

// C13: the dead-letter sink fails. Nothing is lost: the document is in the
// report with both errors; a fallback sink takes it; transient sink errors
// are retried.
func TestDeadLetterSinkFailure(t *testing.T) {
	rejectAll := func(bson.Raw) (bson.Raw, bool) { return nil, true }
	dlqErr := mocks.ReplyError(mocks.OpInsertMany, mustMarshal(bson.D{{Key: "ok", Value: 1}, {Key: "n", Value: 0},
		{Key: "writeErrors", Value: bson.A{bson.D{{Key: "index", Value: 0}, {Key: "code", Value: 121}, {Key: "errmsg", Value: "Document failed validation"}}}}}))
	t.Run("deterministic sink failure", func(t *testing.T) {
		fake := mocks.NewFake("db.c13").Validator(rejectAll)
		fx := newFixture(t, fake)
		fx.sink.Before = func(_ context.Context, _ int, _ []envelope.Envelope) error { return dlqErr }
		_, err := fx.g.InsertOne(ctx, bson.D{{Key: "_id", Value: 9}})
		var r *writeguard.Report
		if !errors.As(err, &r) {
			t.Fatalf("err = %v", err)
		}
		o := r.Outcomes[0]
		if o.Disposition != writeguard.DeadLetterFailed || o.Document == nil || o.Failure.Code != 121 || o.Err == nil {
			t.Fatalf("outcome %+v, want dead_letter_failed with the document, the 121 and the sink error", o)
		}
		if fx.sink.Puts() != 1 {
			t.Errorf("sink called %d times, want 1 (its 121 is not retried)", fx.sink.Puts())
		}
		if !errors.Is(err, writeguard.ErrDeadLetterFailed) || writeguard.Handled(err) {
			t.Error("sentinels wrong")
		}
	})
	t.Run("transient sink failure is retried", func(t *testing.T) {
		fake := mocks.NewFake("db.c13b").Validator(rejectAll)
		fx := newFixture(t, fake)
		fx.sink.Before = func(_ context.Context, n int, _ []envelope.Envelope) error {
			if n == 1 {
				return mocks.NetworkError(mocks.OpBulkWrite)
			}
			return nil
		}
		_, err := fx.g.InsertOne(ctx, bson.D{{Key: "_id", Value: 9}})
		if !errors.Is(err, writeguard.ErrDeadLettered) || !writeguard.Handled(err) || len(fx.sink.Envelopes()) != 1 {
			t.Fatalf("err = %v, %d envelopes; want one dead_lettered", err, len(fx.sink.Envelopes()))
		}
	})
	t.Run("fallback sink", func(t *testing.T) {
		fake := mocks.NewFake("db.c13c").Validator(rejectAll)
		fallback := &mocks.Sink{}
		fx := newFixture(t, fake, writeguard.WithFallbackDeadLetter(fallback))
		fx.sink.Before = func(_ context.Context, _ int, _ []envelope.Envelope) error { return dlqErr }
		_, err := fx.g.InsertOne(ctx, bson.D{{Key: "_id", Value: 9}})
		if !errors.Is(err, writeguard.ErrDeadLettered) || len(fallback.Envelopes()) != 1 {
			t.Fatalf("err = %v, fallback has %d; want dead_lettered into the fallback", err, len(fallback.Envelopes()))
		}
		if len(fake.Docs()) != 0 {
			t.Error("the main collection changed")
		}
	})
}

func mustMarshal(v any) bson.Raw {
	b, err := bson.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

// A cancelled context ends the backoff at once and keeps the last server
// error visible.
func TestCancelDuringBackoff(t *testing.T) {
	// In a testing/synctest bubble: the backoff waits and deadlines
	// run on the bubble's clock and take no real time.
	synctest.Test(t, func(t *testing.T) {
		// 91 labelled NoWritesPerformed: transient, and proof that nothing
		// was applied (issue 28: a whole-command 6 HostUnreachable no
		// longer is one; mongos loses a shard's reply as 6).
		fake := mocks.NewFake("db.cancel").Script(mocks.Reply(`{"ok":0,"code":91,"codeName":"ShutdownInProgress","errmsg":"shutting down","errorLabels":["RetryableWriteError","NoWritesPerformed"]}`))
		g, err := writeguard.New(fake, writeguard.WithBackoff(policy.Backoff{Base: time.Hour, Cap: time.Hour, MaxElapsed: -1, Jitter: func() float64 { return 0.99 }}))
		if err != nil {
			t.Fatal(err)
		}
		cctx, cancel := context.WithCancel(ctx)
		time.AfterFunc(50*time.Millisecond, cancel)
		t0 := time.Now()
		_, err = g.InsertOne(cctx, bson.D{{Key: "_id", Value: 1}})
		if d := time.Since(t0); d > 5*time.Second {
			t.Fatalf("returned after %v", d)
		}
		var ce mongo.CommandError
		if !errors.As(err, &ce) || ce.Code != 91 {
			t.Errorf("err = %v, want the last server error (91) reachable", err)
		}
		if !errors.Is(err, context.Canceled) || !errors.Is(err, writeguard.ErrExhausted) {
			t.Errorf("err = %v, want context.Canceled and ErrExhausted", err)
		}
	})
}

// Update models are re-sent after a lost reply only when marked
// idempotent; insert models always are.
func TestIdempotentModels(t *testing.T) {
	models := func() []mongo.WriteModel {
		return []mongo.WriteModel{
			mongo.NewInsertOneModel().SetDocument(bson.D{{Key: "n", Value: 1}}),
			mongo.NewUpdateOneModel().SetFilter(bson.D{{Key: "_id", Value: "s"}}).SetUpdate(bson.D{{Key: "$set", Value: bson.D{{Key: "x", Value: 1}}}}),
		}
	}
	for _, marked := range []bool{false, true} {
		// One command per kind (C60): the insert goes through, the
		// update's reply is lost.
		fake := mocks.NewFake("db.idem").Script(mocks.Pass(), mocks.LoseReply())
		_ = fake.Seed(bson.D{{Key: "_id", Value: "s"}})
		fx := newFixture(t, fake)
		c := ctx
		if marked {
			c = writeguard.WithIdempotent(ctx)
		}
		res, err := fx.g.BulkWrite(c, models())
		if marked {
			if err != nil {
				t.Fatalf("marked: err = %v", err)
			}
			// The update is sent again.
			if len(fake.Calls()) != 3 || res.InsertedCount != 1 || len(fake.Docs()) != 2 {
				t.Errorf("marked: %d calls, result %+v, %d docs", len(fake.Calls()), res, len(fake.Docs()))
			}
			continue
		}
		var r *writeguard.Report
		if !errors.As(err, &r) {
			t.Fatalf("unmarked: err = %v", err)
		}
		if diff := cmp.Diff([]writeguard.Disposition{"written", "unknown"}, dispositions(r)); diff != "" {
			t.Errorf("unmarked (-want +got):\n%s", diff)
		}
		if len(fake.Docs()) != 2 {
			t.Errorf("%d documents, want 2 (the insert once)", len(fake.Docs()))
		}
	}
}

// Unknown codes are logged (rate-limited) and counted, never retried. An
// unknown whole-command code proves nothing about the write (issue 28): the
// insert is read back, and ends unknown when it is not found.
func TestUnknownIsLoud(t *testing.T) {
	var buf bytes.Buffer
	logger := slog.New(slog.NewTextHandler(&buf, nil))
	unknown := mocks.Reply(`{"ok":0,"code":8000,"codeName":"AtlasError","errmsg":"user is not allowed to do action [insert]"}`)
	fake := mocks.NewFake("db.loud").Script(unknown, unknown)
	fx := newFixture(t, fake, writeguard.WithLogger(logger))
	for i := 0; i < 2; i++ {
		_, err := fx.g.InsertOne(ctx, bson.D{{Key: "_id", Value: i}})
		if !errors.Is(err, writeguard.ErrOutcomeUnknown) {
			t.Fatalf("err = %v", err)
		}
	}
	if len(fake.Calls()) != 2 {
		t.Errorf("%d calls, want 2 (one per InsertOne, no retry)", len(fake.Calls()))
	}
	if n := strings.Count(buf.String(), "code=8000"); n != 1 {
		t.Errorf("logged %d times, want once (rate-limited):\n%s", n, buf.String())
	}
	if strings.Contains(buf.String(), "not allowed") {
		t.Error("the log carries the server's message; it must carry codes only")
	}
}

func TestReportError(t *testing.T) {
	fake := mocks.NewFake("db.rep").Validator(func(bson.Raw) (bson.Raw, bool) { return nil, true })
	fx := newFixture(t, fake)
	_, err := fx.g.InsertMany(ctx, []any{bson.D{{Key: "ssn", Value: "123-45-6789"}}}, options.InsertMany())
	msg := err.Error()
	for _, want := range []string{"insertMany", "db.rep", "1 dead_lettered", "121"} {
		if !strings.Contains(msg, want) {
			t.Errorf("%q lacks %q", msg, want)
		}
	}
	if strings.Contains(msg, "123-45") {
		t.Error("the error message carries a document value")
	}
}

func TestOptionsValidated(t *testing.T) {
	fake := mocks.NewFake("db.o")
	bad := map[string]writeguard.Option{
		"nil sink":        writeguard.WithDeadLetter(nil),
		"nil classifier":  writeguard.WithClassifier(nil),
		"backoff":         writeguard.WithBackoff(policy.Backoff{Multiplier: 0.5}),
		"throttled":       writeguard.WithThrottledAttempts(0),
		"fallback alone":  writeguard.WithFallbackDeadLetter(&mocks.Sink{}),
		"nil option":      nil,
		"negative upsert": writeguard.WithUpsertConflictRetries(-1),
	}
	for name, o := range bad {
		if _, err := writeguard.New(fake, o); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if _, err := writeguard.Wrap(nil); err == nil {
		t.Error("Wrap(nil) accepted")
	}
	g, err := writeguard.New(fake)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := g.InsertMany(ctx, "not a slice"); !errors.Is(err, mongo.ErrNotSlice) {
		t.Errorf("InsertMany(string): %v", err)
	}
	if _, err := g.InsertMany(ctx, []any{}); !errors.Is(err, mongo.ErrEmptySlice) {
		t.Errorf("InsertMany(empty): %v", err)
	}
	if _, err := g.BulkWrite(ctx, []mongo.WriteModel{nil}); err == nil {
		t.Error("nil model accepted")
	}
	if g.Namespace() != "db.o" {
		t.Errorf("Namespace %q", g.Namespace())
	}
}

// A document that cannot be marshalled, or is over 16 MiB, never reaches
// the server; the rest of the batch is written.
func TestPrepareFailures(t *testing.T) {
	fake := mocks.NewFake("db.prep")
	fx := newFixture(t, fake)
	big := bson.D{{Key: "_id", Value: "big"}, {Key: "blob", Value: strings.Repeat("x", policy.MaxBSONSize)}}
	_, err := fx.g.InsertMany(ctx, []any{bson.D{{Key: "_id", Value: 1}}, make(chan int), big, bson.D{{Key: "_id", Value: 2}}},
		options.InsertMany().SetOrdered(false))
	var r *writeguard.Report
	if !errors.As(err, &r) {
		t.Fatalf("err = %v", err)
	}
	if diff := cmp.Diff([]writeguard.Disposition{"written", "failed", "dead_lettered", "written"}, dispositions(r)); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	if r.Outcomes[2].Failure.Code != 10334 {
		t.Errorf("oversized: code %d, want 10334", r.Outcomes[2].Failure.Code)
	}
	if calls := fake.Calls(); len(calls) != 1 || calls[0].Models != 2 {
		t.Errorf("calls %+v, want one with the 2 good documents", calls)
	}
	var envs []envelope.Envelope = fx.sink.Envelopes()
	if len(envs) != 1 || envs[0].Code != 10334 {
		t.Errorf("DLQ %+v", envs)
	}
}

// An update model rejected by the validator is dead-lettered whole
// (format 2: envelope.ModelDocument, every option of the model), with
// the call's options, and rebuilds into the same model.
func TestDeadLetteredModelEnvelope(t *testing.T) {
	fake := mocks.NewFake("db.models").Validator(func(doc bson.Raw) (bson.Raw, bool) {
		_, err := doc.LookupErr("qty")
		return nil, err != nil
	})
	_ = fake.Seed(bson.D{{Key: "_id", Value: "k"}, {Key: "qty", Value: int32(1)}})
	fx := newFixture(t, fake)
	_, err := fx.g.BulkWrite(ctx, []mongo.WriteModel{
		mongo.NewUpdateOneModel().SetFilter(bson.D{{Key: "_id", Value: "k"}}).
			SetUpdate(bson.D{{Key: "$unset", Value: bson.D{{Key: "qty", Value: ""}}}}).SetUpsert(true).
			SetHint("k_1").SetCollation(&options.Collation{Locale: "en", Strength: 2}),
	}, options.BulkWrite().SetLet(bson.D{{Key: "v", Value: int32(1)}}).SetBypassDocumentValidation(false))
	if !errors.Is(err, writeguard.ErrDeadLettered) {
		t.Fatalf("err = %v, want the update dead-lettered", err)
	}
	env := fx.sink.Envelopes()[0]
	if env.Kind != envelope.KindUpdateOne || env.Original.Lookup("op").StringValue() != "updateOne" {
		t.Errorf("kind %q, original %s", env.Kind, env.Original)
	}
	if _, err := env.Original.LookupErr("update", "$unset", "qty"); err != nil || !env.Original.Lookup("upsert").Boolean() ||
		env.Original.Lookup("hint").StringValue() != "k_1" || env.Original.Lookup("collation", "strength").Int32() != 2 {
		t.Errorf("original %s lacks the update, upsert, hint or collation", env.Original)
	}
	if env.CallOptions.Lookup("let", "v").Int32() != 1 || env.CallOptions.Lookup("bypassDocumentValidation").Boolean() {
		t.Errorf("call options %s", env.CallOptions)
	}
	m, err := envelope.ParseModel(env.Kind, env.Original)
	if err != nil {
		t.Fatal(err)
	}
	if um, ok := m.(*mongo.UpdateOneModel); !ok || um.Hint == nil || um.Collation.Locale != "en" || !*um.Upsert {
		t.Errorf("rebuilt %#v", m)
	}
}

// When retries run out after replies were lost, the possibly applied
// inserts are read back: found, they are written; not found (the lost write
// may still be in flight), they are unknown with MaybeWritten, never
// exhausted (C63).
func TestExhaustedAfterLostRepliesReadsBack(t *testing.T) {
	fake := mocks.NewFake("db.lost").Script(mocks.LoseReply(), mocks.LoseReply(), mocks.LoseReply())
	fx := newFixture(t, fake, writeguard.WithBackoff(policy.Backoff{MaxAttempts: 3, Jitter: func() float64 { return 0 }}))
	_, err := fx.g.InsertMany(ctx, []any{bson.D{{Key: "n", Value: 1}}, bson.D{{Key: "n", Value: 2}}})
	if err != nil {
		t.Fatalf("err = %v, want success: both documents were stored by the first attempt", err)
	}
	if len(fake.Calls()) != 3 || len(fake.Docs()) != 2 {
		t.Errorf("%d calls, %d stored; want 3 and 2", len(fake.Calls()), len(fake.Docs()))
	}
	t.Run("read fails", func(t *testing.T) {
		fake := mocks.NewFake("db.lost2").Script(mocks.DropConnection(), mocks.DropConnection(), mocks.DropConnection())
		fx := newFixture(t, fake, writeguard.WithBackoff(policy.Backoff{MaxAttempts: 3}))
		_, err := fx.g.InsertOne(ctx, bson.D{{Key: "n", Value: 1}})
		var r *writeguard.Report
		if !errors.As(err, &r) || r.Outcomes[0].Disposition != writeguard.OutcomeUnknown || !r.Outcomes[0].MaybeWritten ||
			r.Outcomes[0].Reason != writeguard.ReasonAttemptsSpent {
			t.Fatalf("err = %v, want unknown, flagged MaybeWritten, attempts_spent", err)
		}
	})
}

// What a careless caller can pass must not crash the write path: a nil
// context (the driver accepts one), a typed-nil sink, a panicking handler
// or sink.
func TestMisuseDoesNotPanic(t *testing.T) {
	g, err := writeguard.New(mocks.NewFake("db.nilctx"))
	if err != nil {
		t.Fatal(err)
	}
	//lint:ignore SA1012 a nil context is what is being tested
	if _, err := g.InsertOne(nil, bson.D{{Key: "x", Value: 1}}); err != nil { //nolint:staticcheck
		t.Errorf("nil context: %v", err)
	}
	var typedNil *mocks.Sink
	if _, err := writeguard.New(mocks.NewFake("db.tn"), writeguard.WithDeadLetter(typedNil)); err == nil {
		t.Error("a typed-nil sink was accepted")
	}
	fake := mocks.NewFake("db.panic")
	_ = fake.Seed(bson.D{{Key: "_id", Value: 1}})
	boom := writeguard.ConflictHandlerFunc(func(context.Context, *writeguard.Conflict) (policy.Disposition, error) { panic("boom") })
	g, _ = writeguard.New(fake, writeguard.WithConflictHandler(boom))
	_, err = g.InsertMany(ctx, []any{bson.D{{Key: "_id", Value: 1}}, bson.D{{Key: "_id", Value: 2}}}, options.InsertMany().SetOrdered(false))
	var r *writeguard.Report
	if !errors.As(err, &r) || r.Outcomes[0].Disposition != writeguard.Conflicted || r.Outcomes[1].Disposition != writeguard.Written ||
		r.Outcomes[0].Err == nil || !strings.Contains(r.Outcomes[0].Err.Error(), "panicked: boom") {
		t.Fatalf("err = %v, want the panic as the conflict's error and the other document written", err)
	}
	sink := &mocks.Sink{Before: func(context.Context, int, []envelope.Envelope) error { panic("disk on fire") }}
	g, _ = writeguard.New(mocks.NewFake("db.sinkpanic").Validator(func(bson.Raw) (bson.Raw, bool) { return nil, true }), writeguard.WithDeadLetter(sink))
	_, err = g.InsertOne(ctx, bson.D{{Key: "x", Value: 1}})
	if !errors.Is(err, writeguard.ErrDeadLetterFailed) {
		t.Fatalf("err = %v, want dead_letter_failed", err)
	}
}

// A recovered panic of user code keeps its stack: the PanicError in the
// Outcome (reached with errors.As through the Report) names what panicked
// and holds the stack of the goroutine that panicked, down to the
// callback's own frame.
func TestRecoveredPanicKeepsStack(t *testing.T) {
	ctx := context.Background()
	fake := mocks.NewFake("db.panicstack")
	_ = fake.Seed(bson.D{{Key: "_id", Value: 1}})
	boom := writeguard.ConflictHandlerFunc(func(context.Context, *writeguard.Conflict) (policy.Disposition, error) { panic("boom") })
	g, err := writeguard.New(fake, writeguard.WithConflictHandler(boom))
	if err != nil {
		t.Fatal(err)
	}
	_, err = g.InsertOne(ctx, bson.D{{Key: "_id", Value: 1}})
	var pe *writeguard.PanicError
	if !errors.As(err, &pe) {
		t.Fatalf("err = %v, want a PanicError reachable with errors.As", err)
	}
	if pe.What != "conflict handler" || pe.Value != "boom" || !strings.Contains(string(pe.Stack()), "TestRecoveredPanicKeepsStack") {
		t.Errorf("PanicError{What: %q, Value: %v}, stack:\n%s\nwant the handler named, its value and the test's frame in the stack", pe.What, pe.Value, pe.Stack())
	}

	sink := &mocks.Sink{Before: func(context.Context, int, []envelope.Envelope) error { panic("disk on fire") }}
	g, _ = writeguard.New(mocks.NewFake("db.sinkpanicstack").Validator(func(bson.Raw) (bson.Raw, bool) { return nil, true }), writeguard.WithDeadLetter(sink))
	_, err = g.InsertOne(ctx, bson.D{{Key: "x", Value: 1}})
	if !errors.As(err, &pe) || pe.What != "dead-letter sink" || !strings.Contains(string(pe.Stack()), "TestRecoveredPanicKeepsStack") {
		t.Fatalf("err = %v, want the sink's panic with its stack", err)
	}
}

// The *PanicError a recovered panic becomes is the root's type wherever
// it goes: in the hooks' events as in the Report (the engine builds it
// through the root's Config.Panicked, so that errors.As reaches it from a
// hook as from the call's error).
func TestPanicErrorInHookEvents(t *testing.T) {
	ctx := context.Background()
	var rec mocks.Recorder
	g, err := writeguard.New(panickingTarget{mocks.NewFake("db.panichook")}, writeguard.WithHooks(rec.Hooks()))
	if err != nil {
		t.Fatal(err)
	}
	_, _ = g.BulkWrite(ctx, []mongo.WriteModel{mongo.NewInsertOneModel().SetDocument(bson.D{{Key: "_id", Value: 1}})})
	var pe *writeguard.PanicError
	ends := rec.AttemptEnds()
	if len(ends) == 0 || !errors.As(ends[0].Err, &pe) || pe.What != "target" {
		t.Errorf("attempt ends %+v: want the target's *writeguard.PanicError in the first", ends)
	}

	rec = mocks.Recorder{}
	sink := &mocks.Sink{Before: func(context.Context, int, []envelope.Envelope) error { panic("disk on fire") }}
	g, _ = writeguard.New(mocks.NewFake("db.panichooksink").Validator(func(bson.Raw) (bson.Raw, bool) { return nil, true }),
		writeguard.WithDeadLetter(sink), writeguard.WithHooks(rec.Hooks()))
	_, _ = g.InsertOne(ctx, bson.D{{Key: "x", Value: 1}})
	dl := rec.DeadLetters()
	if len(dl) == 0 || !errors.As(dl[0].Err, &pe) || pe.What != "dead-letter sink" || pe.Value != "disk on fire" {
		t.Errorf("dead-letter ends %+v: want the sink's *writeguard.PanicError", dl)
	}
}

// The nil rule: an option whose feature can be absent takes nil as none.
// WithLogger(nil) is no logging (as otelhook.WithLogger(nil)), and an
// unclassified code still ends the call as it would with a logger.
func TestNilLoggerIsNoLogging(t *testing.T) {
	fake := mocks.NewFake("db.nillog")
	fake.Script(mocks.Reply(`{"ok":0,"code":424242,"errmsg":"new"}`))
	g, err := writeguard.New(fake, writeguard.WithLogger(nil))
	if err != nil {
		t.Fatalf("WithLogger(nil): %v, want no logging and no error", err)
	}
	_, err = g.InsertOne(context.Background(), bson.D{{Key: "x", Value: 1}})
	var r *writeguard.Report
	// An unknown code proves nothing (issue 28): the insert is read back,
	// not found, unknown.
	if !errors.As(err, &r) || r.Outcomes[0].Disposition != writeguard.OutcomeUnknown || r.Outcomes[0].Class != policy.Unknown {
		t.Fatalf("err = %v, want the unclassified code unknown", err)
	}
}

// TestReasonWithoutSink: an invalid document ends failed with reason
// not_retried when no dead-letter sink is set, whether the server rejected
// it (121) or the client did (over 16 MiB); a conflict the default handler
// leaves is ReasonNone (the disposition says it all).
func TestReasonWithoutSink(t *testing.T) {
	fake := mocks.NewFake("db.nosink").Validator(func(doc bson.Raw) (bson.Raw, bool) {
		_, err := doc.LookupErr("bad")
		return nil, err == nil
	})
	if err := fake.Seed(bson.D{{Key: "_id", Value: "taken"}}); err != nil {
		t.Fatal(err)
	}
	g, err := writeguard.New(fake)
	if err != nil {
		t.Fatal(err)
	}
	huge := bson.D{{Key: "pad", Value: strings.Repeat("x", 17<<20)}}
	_, err = g.InsertMany(ctx, []any{bson.D{{Key: "bad", Value: 1}}, huge, bson.D{{Key: "_id", Value: "taken"}}, bson.D{{Key: "ok", Value: 1}}},
		options.InsertMany().SetOrdered(false))
	var r *writeguard.Report
	if !errors.As(err, &r) {
		t.Fatalf("err %v, want a Report", err)
	}
	want := []struct {
		d      writeguard.Disposition
		reason writeguard.Reason
	}{
		{writeguard.Failed, writeguard.ReasonNotRetried},
		{writeguard.Failed, writeguard.ReasonNotRetried},
		{writeguard.Conflicted, writeguard.ReasonNone},
		{writeguard.Written, writeguard.ReasonNone},
	}
	for i, w := range want {
		if o := r.Outcomes[i]; o.Disposition != w.d || o.Reason != w.reason {
			t.Errorf("input %d: %s/%q, want %s/%q", i, o.Disposition, o.Reason, w.d, w.reason)
		}
	}
}
