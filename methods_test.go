package writeguard_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/writeguard/writeguard"
	"github.com/writeguard/writeguard/mocks"
	"github.com/writeguard/writeguard/policy"
)

// writeMethod is one guarded method of one write, run against a store
// seeded with {_id: 1, s: "a"} and {_id: 2, s: "b"}.
type writeMethod struct {
	name string
	// run makes the call with s as the value the write sets (unused by
	// deletes) and returns its error (a SingleResult's Err, without
	// ErrNoDocuments).
	run func(ctx context.Context, g writeguard.Collection, s string) error
	// effect reports whether the store holds the write's effect with s.
	effect func(docs []bson.Raw, s string) bool
	// sets says the write writes s (validation and duplicate key can
	// meet it).
	sets bool
}

func sr(r *mongo.SingleResult) error {
	if err := r.Err(); err != nil && !errors.Is(err, mongo.ErrNoDocuments) {
		return err
	}
	return nil
}

func doc1Has(docs []bson.Raw, s string) bool {
	for _, d := range docs {
		if d.Lookup("_id").Int32() == 1 {
			return d.Lookup("s").StringValue() == s
		}
	}
	return false
}

func doc1Gone(docs []bson.Raw, _ string) bool {
	for _, d := range docs {
		if d.Lookup("_id").Int32() == 1 {
			return false
		}
	}
	return true
}

func allHave(docs []bson.Raw, s string) bool {
	for _, d := range docs {
		if d.Lookup("s").StringValue() != s {
			return false
		}
	}
	return len(docs) == 2
}

var (
	by1  = bson.D{{Key: "_id", Value: 1}}
	setS = func(s string) bson.D { return bson.D{{Key: "$set", Value: bson.D{{Key: "s", Value: s}}}} }
)

var writeMethods = []writeMethod{
	{name: "UpdateOne", sets: true, effect: doc1Has, run: func(ctx context.Context, g writeguard.Collection, s string) error {
		_, err := g.UpdateOne(ctx, by1, setS(s))
		return err
	}},
	{name: "UpdateByID", sets: true, effect: doc1Has, run: func(ctx context.Context, g writeguard.Collection, s string) error {
		_, err := g.UpdateByID(ctx, 1, setS(s))
		return err
	}},
	{name: "UpdateMany", sets: true, effect: allHave, run: func(ctx context.Context, g writeguard.Collection, s string) error {
		_, err := g.UpdateMany(ctx, bson.D{}, setS(s))
		return err
	}},
	{name: "ReplaceOne", sets: true, effect: doc1Has, run: func(ctx context.Context, g writeguard.Collection, s string) error {
		_, err := g.ReplaceOne(ctx, by1, bson.D{{Key: "s", Value: s}})
		return err
	}},
	{name: "DeleteOne", effect: doc1Gone, run: func(ctx context.Context, g writeguard.Collection, _ string) error {
		_, err := g.DeleteOne(ctx, by1)
		return err
	}},
	{name: "DeleteMany", effect: func(docs []bson.Raw, _ string) bool { return len(docs) == 0 }, run: func(ctx context.Context, g writeguard.Collection, _ string) error {
		_, err := g.DeleteMany(ctx, bson.D{})
		return err
	}},
	{name: "FindOneAndUpdate", sets: true, effect: doc1Has, run: func(ctx context.Context, g writeguard.Collection, s string) error {
		return sr(g.FindOneAndUpdate(ctx, by1, setS(s)))
	}},
	{name: "FindOneAndReplace", sets: true, effect: doc1Has, run: func(ctx context.Context, g writeguard.Collection, s string) error {
		return sr(g.FindOneAndReplace(ctx, by1, bson.D{{Key: "s", Value: s}}))
	}},
	{name: "FindOneAndDelete", effect: doc1Gone, run: func(ctx context.Context, g writeguard.Collection, _ string) error {
		return sr(g.FindOneAndDelete(ctx, by1))
	}},
}

func seeded(t *testing.T, ns string) *mocks.Fake {
	t.Helper()
	f := mocks.NewFake(ns)
	if err := f.Seed(bson.D{{Key: "_id", Value: 1}, {Key: "s", Value: "a"}}, bson.D{{Key: "_id", Value: 2}, {Key: "s", Value: "b"}}); err != nil {
		t.Fatal(err)
	}
	return f
}

func oneOutcome(t *testing.T, err error) writeguard.Outcome {
	t.Helper()
	var r *writeguard.Report
	if !errors.As(err, &r) || len(r.Outcomes) != 1 {
		t.Fatalf("err = %v, want a *Report with one Outcome", err)
	}
	return r.Outcomes[0]
}

const notPrimaryNoWrites = `{"ok":0,"code":10107,"codeName":"NotWritablePrimary","errmsg":"not primary","errorLabels":["RetryableWriteError","NoWritesPerformed"]}`

func TestWriteMethodsSuccess(t *testing.T) {
	for _, m := range writeMethods {
		t.Run(m.name, func(t *testing.T) {
			fx := newFixture(t, seeded(t, "db.ok"))
			if err := m.run(ctx, fx.g, "x"); err != nil {
				t.Fatalf("err = %v", err)
			}
			if !m.effect(fx.fake.Docs(), "x") {
				t.Errorf("store %v: the write is not applied", fx.fake.Docs())
			}
			if n := len(fx.fake.Calls()); n != 1 {
				t.Errorf("%d commands, want 1", n)
			}
			if ops := fx.rec.Operations(); len(ops) != 1 || ops[0].Op.Name == "" {
				t.Errorf("hooks saw %d operations, want 1", len(ops))
			}
		})
	}
}

// A transient failure that proves the write not applied (the pool was
// cleared before checkout: nothing sent; a reply labelled
// NoWritesPerformed) is retried, idempotent or not.
func TestWriteMethodsTransientRetried(t *testing.T) {
	for _, m := range writeMethods {
		t.Run(m.name, func(t *testing.T) {
			fx := newFixture(t, seeded(t, "db.tr").Script(mocks.PoolCleared(), mocks.Reply(notPrimaryNoWrites)))
			if err := m.run(ctx, fx.g, "x"); err != nil {
				t.Fatalf("err = %v", err)
			}
			if !m.effect(fx.fake.Docs(), "x") || len(fx.fake.Calls()) != 3 {
				t.Errorf("%d commands, store %v: want the write applied after 3 commands", len(fx.fake.Calls()), fx.fake.Docs())
			}
		})
	}
}

// A lost reply after the server applied the write: without a mark it ends
// unknown after one command (the write is applied once, the caller told);
// marked idempotent it is re-sent and the call succeeds.
func TestWriteMethodsLostReply(t *testing.T) {
	for _, m := range writeMethods {
		t.Run(m.name+"/not idempotent", func(t *testing.T) {
			fx := newFixture(t, seeded(t, "db.lr").Script(mocks.LoseReply()))
			err := m.run(ctx, fx.g, "x")
			o := oneOutcome(t, err)
			if o.Disposition != writeguard.OutcomeUnknown || !o.MaybeWritten || o.Model == nil || !mongo.IsNetworkError(err) {
				t.Errorf("outcome %+v, err %v: want unknown, MaybeWritten, the model, the network error reachable", o, err)
			}
			if len(fx.fake.Calls()) != 1 || !m.effect(fx.fake.Docs(), "x") {
				t.Errorf("%d commands: want 1, the write applied once", len(fx.fake.Calls()))
			}
		})
		for name, mark := range map[string]func(context.Context) context.Context{
			"WithIdempotent":      writeguard.WithIdempotent,
			"IdempotentModels(0)": func(ctx context.Context) context.Context { return writeguard.IdempotentModels(ctx, 0) },
		} {
			t.Run(m.name+"/"+name, func(t *testing.T) {
				fx := newFixture(t, seeded(t, "db.lri").Script(mocks.LoseReply()))
				if strings.HasPrefix(m.name, "FindOneAnd") {
					// Never sent again, marked or not: a second run would
					// return another document than the first's.
					o := oneOutcome(t, m.run(mark(ctx), fx.g, "x"))
					if o.Disposition != writeguard.OutcomeUnknown || !o.MaybeWritten || len(fx.fake.Calls()) != 1 || !m.effect(fx.fake.Docs(), "x") {
						t.Errorf("outcome %+v after %d commands: want unknown with MaybeWritten after 1, the write applied once", o, len(fx.fake.Calls()))
					}
					return
				}
				if err := m.run(mark(ctx), fx.g, "x"); err != nil {
					t.Fatalf("err = %v, want success after a re-send", err)
				}
				if len(fx.fake.Calls()) != 2 || !m.effect(fx.fake.Docs(), "x") {
					t.Errorf("%d commands: want 2 and the write applied", len(fx.fake.Calls()))
				}
			})
		}
	}
}

// A document that fails validation (121) is dead-lettered as the write's
// model, for update commands (a write error) and findAndModify (the
// command's error, made the statement's verdict by the one-statement rule);
// UpdateMany's may have changed other documents first: unknown (C70).
func TestWriteMethodsValidation(t *testing.T) {
	for _, m := range writeMethods {
		if !m.sets {
			continue
		}
		t.Run(m.name, func(t *testing.T) {
			fake := seeded(t, "db.val").Validator(func(doc bson.Raw) (bson.Raw, bool) {
				return nil, doc.Lookup("s").StringValue() == "bad"
			})
			fx := newFixture(t, fake)
			err := m.run(ctx, fx.g, "bad")
			o := oneOutcome(t, err)
			envs := fx.sink.Envelopes()
			if m.name == "UpdateMany" {
				// Issue 28 (C70): a multi statement may have changed
				// documents before the one refused: unknown, never
				// dead-lettered.
				if o.Disposition != writeguard.OutcomeUnknown || !o.MaybeWritten || len(envs) != 0 || len(fx.fake.Calls()) != 1 {
					t.Fatalf("outcome %+v, %d envelopes: want unknown, MaybeWritten, nothing dead-lettered, not re-sent", o, len(envs))
				}
				return
			}
			if o.Disposition != writeguard.DeadLettered || o.Failure.Code != 121 || len(envs) != 1 || !writeguard.Handled(err) {
				t.Fatalf("outcome %+v, %d envelopes: want dead_lettered 121 and one envelope", o, len(envs))
			}
			if envs[0].Code != 121 || len(envs[0].Original) == 0 {
				t.Errorf("envelope %+v: want code 121 and the model", envs[0])
			}
			if m.effect(fx.fake.Docs(), "bad") || len(fx.fake.Calls()) != 1 {
				t.Errorf("the rejected write was applied or re-sent")
			}
		})
	}
}

// A duplicate key on a unique index goes to the conflict handler (the
// default one: conflict), for update commands and findAndModify alike.
func TestWriteMethodsDuplicateKey(t *testing.T) {
	for _, m := range writeMethods {
		if !m.sets {
			continue
		}
		t.Run(m.name, func(t *testing.T) {
			fx := newFixture(t, seeded(t, "db.dup").Unique("s"))
			// UpdateMany meets doc 2 ("b") on doc 1's update.
			err := m.run(ctx, fx.g, "b")
			o := oneOutcome(t, err)
			if m.name == "UpdateMany" {
				// Issue 28 (C70): maybe applied, never a conflict.
				if o.Disposition != writeguard.OutcomeUnknown || !o.MaybeWritten || o.Failure.Code != 11000 {
					t.Errorf("outcome %+v: want unknown, MaybeWritten, 11000", o)
				}
				return
			}
			if !o.Disposition.IsConflict() || o.Class != policy.Conflict || o.Failure.Code != 11000 {
				t.Errorf("outcome %+v: want a conflict disposition, class conflict, 11000", o)
			}
			if len(fx.sink.Envelopes()) != 0 {
				t.Errorf("a duplicate key was dead-lettered")
			}
		})
	}
}

// Invalid arguments are refused before anything is sent, with the
// driver's errors, not a Report.
func TestWriteMethodsInvalidArguments(t *testing.T) {
	fx := newFixture(t, seeded(t, "db.arg"))
	var r *writeguard.Report
	for name, err := range map[string]error{
		"nil filter":            func() error { _, err := fx.g.UpdateOne(ctx, nil, setS("x")); return err }(),
		"update without $":      func() error { _, err := fx.g.UpdateOne(ctx, by1, bson.D{{Key: "s", Value: "x"}}); return err }(),
		"replacement with $":    func() error { _, err := fx.g.ReplaceOne(ctx, by1, setS("x")); return err }(),
		"nil id":                func() error { _, err := fx.g.UpdateByID(ctx, nil, setS("x")); return err }(),
		"nil delete filter":     func() error { _, err := fx.g.DeleteMany(ctx, nil); return err }(),
		"findOneAndUpdate no $": fx.g.FindOneAndUpdate(ctx, by1, bson.D{{Key: "s", Value: "x"}}).Err(),
	} {
		if err == nil || errors.As(err, &r) {
			t.Errorf("%s: err = %v, want an invalid-argument error", name, err)
		}
	}
	if n := len(fx.fake.Calls()); n != 0 {
		t.Errorf("%d commands sent", n)
	}
}

// C65: g.UpdateMany after a lost reply the server applied: classified,
// reported and seen by the hooks, never re-sent.
func TestC65EveryWriteMethodGuarded(t *testing.T) {
	fake := seeded(t, "db.c65").Script(mocks.LoseReply())
	fx := newFixture(t, fake)
	_, err := fx.g.UpdateMany(ctx, bson.D{}, bson.D{{Key: "$inc", Value: bson.D{{Key: "n", Value: 1}}}})
	o := oneOutcome(t, err)
	if o.Disposition != writeguard.OutcomeUnknown || o.Class != policy.Transient || !errors.Is(err, writeguard.ErrOutcomeUnknown) {
		t.Errorf("outcome %+v: want unknown, transient", o)
	}
	if ops := fx.rec.Operations(); len(ops) != 1 || ops[0].Op.Name != "updateMany" || ops[0].Err == nil {
		t.Errorf("hooks: %+v, want one updateMany operation that failed", ops)
	}
	for _, d := range fake.Docs() {
		if d.Lookup("n").Int64() != 1 {
			t.Errorf("document %v: $inc applied %d times, want once", d, d.Lookup("n").Int64())
		}
	}
	// Code written against the interface gets the guarded methods.
	var c writeguard.Collection = fx.g
	if _, err := c.DeleteOne(ctx, by1); err != nil {
		t.Errorf("DeleteOne through Collection: %v", err)
	}
}
