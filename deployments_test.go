package writeguard_test

// Tests of the third round's cases that are about what a reply proves on
// every deployment (testdata/CASES.md C52, C55, C59, C60, C63), against the
// scripted fake.

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/writeguard/writeguard"
	"github.com/writeguard/writeguard/mocks"
	"github.com/writeguard/writeguard/policy"
)

// mongosUnavailable is mongos's reply after it lost a shard's reply to a
// batch of n statements (one write error per statement; ordered: one, on
// the first): batch_write_op.cpp noteBatchError.
func mongosUnavailable(code int32, indexes ...int) mocks.Fault {
	var wes []string
	for _, i := range indexes {
		wes = append(wes, fmt.Sprintf(`{"index":%d,"code":%d,"codeName":"HostUnreachable","errmsg":"Write results unavailable from shard01 :: caused by :: Connection reset by peer"}`, i, code))
	}
	return mocks.Reply(`{"ok":1,"n":0,"writeErrors":[` + strings.Join(wes, ",") + `]}`)
}

// C52: mongos reports a shard's lost reply as a write error on every
// statement, after the shard applied all or part of them. Such a write
// error proves nothing: the inserts are re-sent and their own _ids read
// back (already_written), nothing is stored twice, nothing is reported
// never sent or conflicting.
func TestC52MongosWriteErrorsProveNothing(t *testing.T) {
	for _, tc := range []struct {
		name    string
		ordered bool
		applied int
		fault   mocks.Fault
	}{
		{"unordered, all applied", false, 6, mongosUnavailable(6, 0, 1, 2, 3, 4, 5)},
		{"unordered, 3 of 6 applied", false, 3, mongosUnavailable(9001, 0, 1, 2, 3, 4, 5)},
		{"ordered, 3 of 6 applied", true, 3, mongosUnavailable(11602, 0)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				fake := mocks.NewFake("db.c52").Script(mocks.ApplyFirst(tc.applied, tc.fault))
				fx := newFixture(t, fake)
				res, err := fx.g.InsertMany(ctx, sixDocs("d"), options.InsertMany().SetOrdered(tc.ordered))
				if err != nil {
					t.Fatalf("err = %v, want every document stored and reported so", err)
				}
				if len(res.InsertedIDs) != 6 || len(fake.Docs()) != 6 {
					t.Fatalf("%d ids returned, %d documents stored; want 6 and 6", len(res.InsertedIDs), len(fake.Docs()))
				}
				if n := len(fx.sink.Envelopes()); n != 0 {
					t.Errorf("%d documents dead-lettered", n)
				}
			})
		})
	}
	t.Run("a non-idempotent update is not re-sent", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			fake := mocks.NewFake("db.c52u")
			_ = fake.Seed(bson.D{{Key: "_id", Value: 1}, {Key: "n", Value: 0}})
			fake.Script(mocks.ApplyFirst(1, mongosUnavailable(6, 0)))
			fx := newFixture(t, fake)
			_, err := fx.g.BulkWrite(ctx, []mongo.WriteModel{
				mongo.NewUpdateOneModel().SetFilter(bson.D{{Key: "_id", Value: 1}}).SetUpdate(bson.D{{Key: "$inc", Value: bson.D{{Key: "n", Value: 1}}}}),
			})
			var r *writeguard.Report
			if !errors.As(err, &r) || r.Outcomes[0].Disposition != writeguard.OutcomeUnknown || !r.Outcomes[0].MaybeWritten {
				t.Fatalf("err = %v, want unknown with MaybeWritten", err)
			}
			if n := fake.Docs()[0].Lookup("n").AsInt64(); n != 1 {
				t.Errorf("n = %d, want the $inc applied once", n)
			}
		})
	})
}

// C63: an insert whose reply was lost meets its own _id on every re-send,
// and every read-back fails: when its attempts run out it may well be
// stored, so it is unknown with MaybeWritten and says why it stopped,
// never exhausted (which claims every attempt proved it not applied).
func TestC63MaybeStoredIsNeverExhausted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fake := mocks.NewFake("db.c63").Script(mocks.LoseReply())
		for range 10 {
			fake.FailReads(errors.New("cursor lost"))
		}
		fx := newFixture(t, fake, writeguard.WithBackoff(policy.Backoff{MaxAttempts: 3}))
		_, err := fx.g.InsertOne(ctx, bson.D{{Key: "_id", Value: "o-1"}})
		var r *writeguard.Report
		if !errors.As(err, &r) {
			t.Fatalf("err = %v, want a Report", err)
		}
		o := r.Outcomes[0]
		if o.Disposition != writeguard.OutcomeUnknown || !o.MaybeWritten || o.Reason != writeguard.ReasonAttemptsSpent || o.Err == nil {
			t.Errorf("outcome %+v, want unknown, MaybeWritten, attempts_spent, the read error kept", o)
		}
		if errors.Is(err, writeguard.ErrExhausted) || len(fake.Docs()) != 1 {
			t.Errorf("ErrExhausted %v, %d stored; want no exhausted and the document stored once", errors.Is(err, writeguard.ErrExhausted), len(fake.Docs()))
		}
	})
}

// C63: a driver-side argument error (an update document without an
// operator, refused by the driver before anything is sent) never left the
// client: failed or not_attempted, never unknown with MaybeWritten.
func TestArgumentErrorIsNotSent(t *testing.T) {
	client, err := mongo.Connect(options.Client().ApplyURI("mongodb://127.0.0.1:1").SetServerSelectionTimeout(100 * time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = client.Disconnect(ctx) }()
	g, err := writeguard.Wrap(client.Database("db").Collection("args"))
	if err != nil {
		t.Fatal(err)
	}
	_, err = g.BulkWrite(ctx, []mongo.WriteModel{
		mongo.NewUpdateOneModel().SetFilter(bson.D{{Key: "_id", Value: 1}}).SetUpdate(bson.D{{Key: "n", Value: 1}}),
	})
	var r *writeguard.Report
	if !errors.As(err, &r) {
		t.Fatalf("err = %v, want a Report", err)
	}
	o := r.Outcomes[0]
	if (o.Disposition != writeguard.Failed && o.Disposition != writeguard.NotAttempted) || o.MaybeWritten || o.Attempts != 0 {
		t.Errorf("outcome %+v, want failed or not_attempted, not MaybeWritten, never sent", o)
	}
}

// panickingTarget is a Target whose BulkWrite applies the models to the
// fake, then panics, as the driver does when a reply's write error names
// an index outside its models.
type panickingTarget struct{ *mocks.Fake }

func (p panickingTarget) BulkWrite(ctx context.Context, models []mongo.WriteModel, opts ...options.Lister[options.BulkWriteOptions]) (*mongo.BulkWriteResult, error) {
	_, _ = p.Fake.BulkWrite(ctx, models, opts...)
	var idx []int
	_ = idx[len(models)] // index out of range
	return nil, nil
}

// A reply that does not fit its command proves nothing: a write error
// whose index names no statement is never a verdict on any document (not
// dead-lettered, not a conflict), and a panic raised while the Target runs
// is recovered as that attempt's failure, its documents maybe applied.
func TestRepliesThatDoNotFit(t *testing.T) {
	t.Run("write error naming no statement", func(t *testing.T) {
		fake := mocks.NewFake("db.stray").Script(mocks.ApplyFirst(1,
			mocks.Reply(`{"ok":1,"n":1,"writeErrors":[{"index":7,"code":121,"errmsg":"Document failed validation"}]}`)))
		fx := newFixture(t, fake)
		_, err := fx.g.InsertMany(ctx, []any{bson.D{{Key: "_id", Value: 1}}, bson.D{{Key: "_id", Value: 2}}})
		var r *writeguard.Report
		if !errors.As(err, &r) {
			t.Fatalf("err = %v, want a Report", err)
		}
		// Issue 28: the inserts are read back: the one the server stored
		// is already_written, the other unknown.
		for _, o := range r.Outcomes {
			if o.Failure == nil || o.Failure.Shape != policy.ShapeWriteErrorNoStatement {
				t.Errorf("outcome %+v, want the write_error_no_statement failure kept", o)
			}
			if want := map[int]writeguard.Disposition{0: writeguard.AlreadyWritten, 1: writeguard.OutcomeUnknown}[o.Index]; o.Disposition != want {
				t.Errorf("outcome %d: %s, want %s", o.Index, o.Disposition, want)
			}
			if o.Index == 1 && !o.MaybeWritten {
				t.Errorf("outcome %+v, want MaybeWritten", o)
			}
		}
		if n := len(fx.sink.Envelopes()); n != 0 {
			t.Errorf("%d documents dead-lettered, one of them stored", n)
		}
	})
	t.Run("target panics", func(t *testing.T) {
		fake := mocks.NewFake("db.panic")
		g, err := writeguard.New(panickingTarget{fake})
		if err != nil {
			t.Fatal(err)
		}
		_, err = g.BulkWrite(ctx, []mongo.WriteModel{mongo.NewInsertOneModel().SetDocument(bson.D{{Key: "_id", Value: 1}})})
		var r *writeguard.Report
		var pe *writeguard.PanicError
		if !errors.As(err, &r) || !errors.As(err, &pe) || pe.What != "target" || len(pe.Stack()) == 0 {
			t.Fatalf("err = %v, want a Report with the target's PanicError", err)
		}
		if o := r.Outcomes[0]; o.Disposition != writeguard.OutcomeUnknown || !o.MaybeWritten {
			t.Errorf("outcome %+v, want unknown, MaybeWritten (the panic came after the write)", o)
		}
	})
}

// C59: the collection reads a secondary that has not replicated the first
// attempt's write (Lag); the re-send meets 11000 on every _id. The
// read-back that decides "own write or someone else's" reads the primary
// (mocks.Fake.ReadPrimary, a Clone with read preference primary and read
// concern local for a *mongo.Collection): every document is
// already_written, none a conflict.
func TestC59ReadBackReadsThePrimary(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fake := mocks.NewFake("db.c59").Script(mocks.LoseReply()).Lag(4)
		fx := newFixture(t, fake)
		docs := []any{bson.D{{Key: "_id", Value: 1}}, bson.D{{Key: "_id", Value: 2}}, bson.D{{Key: "_id", Value: 3}}, bson.D{{Key: "_id", Value: 4}}}
		_, err := fx.g.InsertMany(ctx, docs, options.InsertMany().SetOrdered(false))
		if err != nil {
			t.Fatalf("err = %v, want all four already_written", err)
		}
		primary, other := fake.Reads()
		if primary == 0 || other != 0 {
			t.Errorf("%d reads of the primary, %d through the collection's read preference; want only the primary", primary, other)
		}
		if len(fake.Docs()) != 4 {
			t.Errorf("%d stored, want 4", len(fake.Docs()))
		}
	})
}

// C55: a time-series collection has no unique _id. Attempt 1 of an
// InsertMany is applied and its reply lost: the measurements are read back
// (already_written), never re-sent; nothing is stored twice. A lost
// InsertOne that did not land ends unknown with MaybeWritten, not re-sent.
// WithUniqueID(false) declares the same for any target.
func TestC55TimeSeriesNeverResends(t *testing.T) {
	measurements := func() []any {
		return []any{bson.D{{Key: "t", Value: 1}}, bson.D{{Key: "t", Value: 2}}, bson.D{{Key: "t", Value: 3}}}
	}
	t.Run("learned from the target", func(t *testing.T) {
		fake := mocks.NewFake("db.c55").TimeSeries().Script(mocks.LoseReply())
		fx := newFixture(t, fake)
		if _, err := fx.g.InsertMany(ctx, measurements()); err != nil {
			t.Fatalf("err = %v, want every measurement already_written", err)
		}
		if n := len(fake.Docs()); n != 3 || len(fake.Calls()) != 1 {
			t.Errorf("%d stored in %d calls, want 3 in 1", n, len(fake.Calls()))
		}
	})
	t.Run("declared", func(t *testing.T) {
		fake := mocks.NewFake("db.c55d").Script(mocks.LoseReply())
		fx := newFixture(t, fake, writeguard.WithUniqueID(false))
		if _, err := fx.g.InsertMany(ctx, measurements()); err != nil || len(fake.Calls()) != 1 {
			t.Fatalf("err = %v after %d calls, want already_written after 1", err, len(fake.Calls()))
		}
	})
	t.Run("not found", func(t *testing.T) {
		fake := mocks.NewFake("db.c55n").TimeSeries().Script(mocks.DropConnection())
		fx := newFixture(t, fake)
		_, err := fx.g.InsertOne(ctx, bson.D{{Key: "t", Value: 1}})
		var r *writeguard.Report
		if !errors.As(err, &r) || r.Outcomes[0].Disposition != writeguard.OutcomeUnknown || !r.Outcomes[0].MaybeWritten ||
			r.Outcomes[0].Reason != writeguard.ReasonNotResendable {
			t.Fatalf("err = %v, want unknown, MaybeWritten, not_resendable", err)
		}
		if len(fake.Calls()) != 1 || len(fake.Docs()) != 0 {
			t.Errorf("%d calls, %d stored; want 1 and 0", len(fake.Calls()), len(fake.Docs()))
		}
	})
}

// flakyUniqueID is a Fake whose first asks whether _id is unique fail, as
// a listCollections does when it meets a dropped connection.
type flakyUniqueID struct {
	*mocks.Fake
	fails, asks int
}

func (f *flakyUniqueID) UniqueID(ctx context.Context) (bool, error) {
	f.asks++
	if f.fails > 0 {
		f.fails--
		return false, mongo.CommandError{Code: 91, Name: "ShutdownInProgress", Message: "The server is in quiesce mode and will shut down"}
	}
	return f.Fake.UniqueID(ctx)
}

// A failed ask whether _id is unique is asked again, as a read-back is:
// the insert whose connection dropped is re-sent and written once the
// target answers (unique), not ended unknown on a guess. An ask that
// never succeeds counts as not unique: the insert is never re-sent.
func TestUniqueIDAskedAgain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &flakyUniqueID{Fake: mocks.NewFake("db.ask").Script(mocks.DropConnection()), fails: 2}
		g, err := writeguard.New(f, writeguard.WithBackoff(policy.Backoff{Jitter: func() float64 { return 0.5 }}))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := g.InsertOne(ctx, bson.D{{Key: "_id", Value: 1}}); err != nil {
			t.Fatalf("err = %v, want written after the ask succeeded", err)
		}
		if f.asks != 3 || len(f.Calls()) != 2 || len(f.Docs()) != 1 {
			t.Errorf("%d asks, %d calls, %d stored; want 3 asks, 2 calls, 1 stored", f.asks, len(f.Calls()), len(f.Docs()))
		}

		never := &flakyUniqueID{Fake: mocks.NewFake("db.never").Script(mocks.DropConnection()), fails: 1000}
		g, err = writeguard.New(never, writeguard.WithBackoff(policy.Backoff{Jitter: func() float64 { return 0.5 }}))
		if err != nil {
			t.Fatal(err)
		}
		_, err = g.InsertOne(ctx, bson.D{{Key: "_id", Value: 1}})
		var r *writeguard.Report
		if !errors.As(err, &r) || r.Outcomes[0].Disposition != writeguard.OutcomeUnknown || !r.Outcomes[0].MaybeWritten {
			t.Fatalf("err = %v, want unknown with MaybeWritten", err)
		}
		if len(never.Calls()) != 1 || never.asks != 3 {
			t.Errorf("%d calls after %d asks; want 1 call (never re-sent) after 3 asks", len(never.Calls()), never.asks)
		}
	})
}

// Where _id is not unique, another document found under the _id of a
// possibly applied insert proves nothing about it (nothing refuses a
// second one): unknown, and MaybeWritten stays.
func TestNoUniqueIDForeignDocumentKeepsMaybe(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fake := mocks.NewFake("db.ts").TimeSeries().Script(mocks.DropConnection())
		if err := fake.Seed(bson.D{{Key: "_id", Value: 1}, {Key: "t", Value: "someone else's"}}); err != nil {
			t.Fatal(err)
		}
		fx := newFixture(t, fake)
		_, err := fx.g.InsertOne(ctx, bson.D{{Key: "_id", Value: 1}, {Key: "t", Value: "ours"}})
		var r *writeguard.Report
		if !errors.As(err, &r) || r.Outcomes[0].Disposition != writeguard.OutcomeUnknown || !r.Outcomes[0].MaybeWritten {
			t.Fatalf("err = %v, want unknown with MaybeWritten", err)
		}
		if len(fake.Calls()) != 1 {
			t.Errorf("%d calls, want 1 (never re-sent)", len(fake.Calls()))
		}
	})
}

// C60: one driver call, one server command. A BulkWrite of two inserts and
// an update goes out as two commands (one per command kind, as the driver
// sends it); the update's command is refused (13 Unauthorized). What that
// command proved belongs to its statement only: the inserts are written,
// the update failed. The same holds for an InsertMany split by the
// server's maxWriteBatchSize: a later command's failure says nothing
// against the documents of earlier ones.
func TestC60OneCallOneCommand(t *testing.T) {
	unauthorized := `{"ok":0,"code":13,"codeName":"Unauthorized","errmsg":"not authorized on db to execute command { update: ... }"}`
	models := []mongo.WriteModel{
		mongo.NewInsertOneModel().SetDocument(bson.D{{Key: "_id", Value: "o-1"}}),
		mongo.NewInsertOneModel().SetDocument(bson.D{{Key: "_id", Value: "o-2"}}),
		mongo.NewUpdateOneModel().SetFilter(bson.D{{Key: "_id", Value: "u-1"}}).SetUpdate(bson.D{{Key: "$set", Value: bson.D{{Key: "x", Value: 1}}}}),
	}
	for _, ordered := range []bool{true, false} {
		fake := mocks.NewFake("db.c60").Script(mocks.Pass(), mocks.Reply(unauthorized))
		fx := newFixture(t, fake)
		res, err := fx.g.BulkWrite(ctx, models, options.BulkWrite().SetOrdered(ordered))
		var r *writeguard.Report
		if !errors.As(err, &r) {
			t.Fatalf("ordered %v: err = %v, want a Report", ordered, err)
		}
		want := []writeguard.Disposition{writeguard.Written, writeguard.Written, writeguard.Failed}
		if got := dispositions(r); fmt.Sprint(got) != fmt.Sprint(want) || r.Outcomes[2].MaybeWritten {
			t.Errorf("ordered %v: %v, want %v", ordered, got, want)
		}
		if len(fake.Calls()) != 2 || fake.Calls()[0].Models != 2 || fake.Calls()[1].Models != 1 || res.InsertedCount != 2 {
			t.Errorf("ordered %v: calls %+v, result %+v; want 2 commands (2 inserts, 1 update), 2 inserted", ordered, fake.Calls(), res)
		}
	}
	for _, ordered := range []bool{true, false} {
		fake := mocks.NewFake("db.c60m").Limits(2, 0).Script(mocks.Pass(), mocks.Reply(`{"ok":0,"code":13,"codeName":"Unauthorized","errmsg":"not authorized"}`))
		fx := newFixture(t, fake)
		_, err := fx.g.InsertMany(ctx, sixDocs("m")[:5], options.InsertMany().SetOrdered(ordered))
		var r *writeguard.Report
		if !errors.As(err, &r) {
			t.Fatalf("ordered %v: err = %v, want a Report", ordered, err)
		}
		want := []writeguard.Disposition{"written", "written", "failed", "failed", "not_attempted"}
		if !ordered {
			want[4] = "written"
		}
		if got := dispositions(r); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("ordered %v: %v, want %v", ordered, got, want)
		}
		for _, c := range fake.Calls() {
			if c.Models > 2 {
				t.Errorf("ordered %v: a command of %d statements, over maxWriteBatchSize 2", ordered, c.Models)
			}
		}
	}
}
