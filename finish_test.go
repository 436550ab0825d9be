package writeguard_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/writeguard/writeguard"
	"github.com/writeguard/writeguard/mocks"
)

// C62: an InsertMany of two documents without _id hits its deadline while
// the reply is in flight (the server applied them). Finishing the call
// with Report.Remaining stores nothing twice.
func TestC62FinishAfterDeadline(t *testing.T) {
	// In a synctest bubble the deadline passes only while the reply is
	// held (mocks.Hang), never before the command is sent.
	synctest.Test(t, func(t *testing.T) {
		fake := mocks.NewFake("db.c62").Script(mocks.Hang())
		fx := newFixture(t, fake)
		docs := []any{bson.D{{Key: "n", Value: 1}}, bson.D{{Key: "n", Value: 2}}}
		dctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
		_, err := fx.g.InsertMany(dctx, docs)
		cancel()
		var r *writeguard.Report
		if !errors.As(err, &r) || r.Count(writeguard.OutcomeUnknown) != 2 {
			t.Fatalf("err = %v, want a Report with 2 unknown", err)
		}
		rm := r.Remaining()
		if rm.Len() != 2 || len(rm.Documents) != 2 || len(rm.Left) != 0 {
			t.Fatalf("remaining %v (%d documents, left %v): want both documents", rm, len(rm.Documents), rm.Left)
		}
		for i, d := range rm.Documents {
			if id := d.(bson.Raw).Lookup("_id"); idString(t, r.Outcomes[rm.Indexes[i]].ID) != id.String() {
				t.Errorf("document %d carries _id %v, want the assigned %v", i, id, r.Outcomes[rm.Indexes[i]].ID)
			}
		}
		if _, err := fx.g.InsertMany(rm.Context(ctx), rm.Documents); err != nil {
			t.Fatalf("finishing: %v", err)
		}
		if n := len(fake.Docs()); n != 2 {
			t.Errorf("%d documents stored, want 2", n)
		}
		// The naive way, for contrast: the same slice again stores copies.
		if _, err := fx.g.InsertMany(ctx, docs); err != nil || len(fake.Docs()) != 4 {
			t.Errorf("re-sending the caller's slice: err %v, %d stored (the duplicates Remaining avoids)", err, len(fake.Docs()))
		}
	})
}

// Remaining of a BulkWrite: writeguard sends one command per run of one
// kind (insert; updates; deletes), so a deadline while the insert command
// is in flight leaves the insert unknown (applied, reply lost) and the
// update and delete commands never sent. Remaining gives back all four:
// the insert model with its assigned _id (its _id makes it safe), and the
// models never sent (nothing can have applied them).
func TestRemainingBulkWrite(t *testing.T) {
	// In a synctest bubble the deadline passes only while the reply is
	// held (mocks.Hang), never before the command is sent.
	synctest.Test(t, func(t *testing.T) {
		fake := seeded(t, "db.rem").Script(mocks.Hang())
		fx := newFixture(t, fake)
		inc := bson.D{{Key: "$inc", Value: bson.D{{Key: "n", Value: 1}}}}
		models := []mongo.WriteModel{
			mongo.NewInsertOneModel().SetDocument(bson.D{{Key: "s", Value: "new"}}),
			mongo.NewUpdateOneModel().SetFilter(by1).SetUpdate(inc),
			mongo.NewUpdateOneModel().SetFilter(bson.D{{Key: "_id", Value: 2}}).SetUpdate(setS("z")),
			mongo.NewDeleteOneModel().SetFilter(bson.D{{Key: "s", Value: "nobody"}}),
		}
		dctx, cancel := context.WithTimeout(writeguard.IdempotentModels(ctx, 2), 20*time.Millisecond)
		_, err := fx.g.BulkWrite(dctx, models, options.BulkWrite().SetOrdered(false))
		cancel()
		var r *writeguard.Report
		if !errors.As(err, &r) || r.Count(writeguard.OutcomeUnknown) != 1 || r.Count(writeguard.NotAttempted) != 3 {
			t.Fatalf("err = %v, want 1 unknown (the insert) and 3 not_attempted", err)
		}
		rm := r.Remaining()
		if fmt.Sprint(rm.Indexes) != "[0 1 2 3]" || len(rm.Models) != 4 || len(rm.Left) != 0 {
			t.Fatalf("remaining indexes %v, left %+v: want [0 1 2 3] and none left out", rm.Indexes, rm.Left)
		}
		im, ok := rm.Models[0].(*mongo.InsertOneModel)
		if !ok || idString(t, r.Outcomes[0].ID) != im.Document.(bson.Raw).Lookup("_id").String() {
			t.Fatalf("model 0 = %#v: want the insert with its assigned _id", rm.Models[0])
		}
		// A lost reply on the re-send of the insert: its own _id is read back.
		fake.Script(mocks.LoseReply())
		if _, err := fx.g.BulkWrite(rm.Context(ctx), rm.Models, options.BulkWrite().SetOrdered(false)); err != nil {
			t.Fatalf("finishing: %v", err)
		}
		news, incs := 0, 0
		for _, d := range fake.Docs() {
			if d.Lookup("s").StringValue() == "new" {
				news++
			}
			if v, err := d.LookupErr("n"); err == nil {
				incs += int(v.AsInt64())
			}
		}
		if news != 1 || incs != 1 {
			t.Errorf("%d inserted copies, $inc applied %d times: want 1 and 1", news, incs)
		}
	})
}

// Remaining leaves out a model that may have been applied and is not
// idempotent, and keeps (marked again by Context) one that is: two updates
// in one command whose reply the deadline cut.
func TestRemainingLeavesNotIdempotent(t *testing.T) {
	// In a synctest bubble the deadline passes only while the reply is
	// held (mocks.Hang), never before the command is sent.
	synctest.Test(t, func(t *testing.T) {
		fake := seeded(t, "db.rem2").Script(mocks.Hang())
		fx := newFixture(t, fake)
		inc := bson.D{{Key: "$inc", Value: bson.D{{Key: "n", Value: 1}}}}
		models := []mongo.WriteModel{
			mongo.NewUpdateOneModel().SetFilter(by1).SetUpdate(inc),
			mongo.NewUpdateOneModel().SetFilter(bson.D{{Key: "_id", Value: 2}}).SetUpdate(setS("z")),
		}
		dctx, cancel := context.WithTimeout(writeguard.IdempotentModels(ctx, 1), 20*time.Millisecond)
		_, err := fx.g.BulkWrite(dctx, models, options.BulkWrite().SetOrdered(false))
		cancel()
		var r *writeguard.Report
		if !errors.As(err, &r) || r.Count(writeguard.OutcomeUnknown) != 2 {
			t.Fatalf("err = %v, want 2 unknown", err)
		}
		rm := r.Remaining()
		if fmt.Sprint(rm.Indexes) != "[1]" || len(rm.Left) != 1 || rm.Left[0].Reason != writeguard.LeftNotIdempotent {
			t.Fatalf("remaining indexes %v, left %+v: want [1], and 0 left out as not idempotent", rm.Indexes, rm.Left)
		}
		// A lost reply on the re-send: the update goes again because Context
		// kept its mark (at its new index 0).
		fake.Script(mocks.LoseReply())
		if _, err := fx.g.BulkWrite(rm.Context(ctx), rm.Models, options.BulkWrite().SetOrdered(false)); err != nil {
			t.Fatalf("finishing: %v", err)
		}
	})
}

// WithUniqueID(false): an insert that may have been applied is left out.
func TestRemainingWithoutUniqueID(t *testing.T) {
	// The connection drops after sending: the insert may have been
	// applied, is never re-sent where _id is not unique, and its read-back
	// finds nothing.
	fake := mocks.NewFake("db.ts").Script(mocks.DropConnection())
	fx := newFixture(t, fake, writeguard.WithUniqueID(false))
	dctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	_, err := fx.g.InsertOne(dctx, bson.D{{Key: "n", Value: 1}})
	cancel()
	var r *writeguard.Report
	if !errors.As(err, &r) {
		t.Fatalf("err = %v", err)
	}
	rm := r.Remaining()
	if rm.Len() != 0 || len(rm.Left) != 1 || rm.Left[0].Reason != writeguard.LeftNoUniqueID {
		t.Errorf("remaining %v, left %+v: want the insert left out (no unique _id)", rm, rm.Left)
	}
}

// Idempotence per model: of a $inc and a $set whose replies are lost
// (unordered), only the $set (marked) is re-sent; the $inc ends unknown,
// applied once. (Ordered, the $set would end unknown too: the write stops
// at the unhandled $inc.)
func TestIdempotentModelsPerIndex(t *testing.T) {
	fake := seeded(t, "db.idm").Script(mocks.LoseReply())
	fx := newFixture(t, fake)
	models := []mongo.WriteModel{
		mongo.NewUpdateOneModel().SetFilter(by1).SetUpdate(bson.D{{Key: "$inc", Value: bson.D{{Key: "n", Value: 1}}}}),
		mongo.NewUpdateOneModel().SetFilter(bson.D{{Key: "_id", Value: 2}}).SetUpdate(setS("z")),
	}
	_, err := fx.g.BulkWrite(writeguard.IdempotentModels(ctx, 1, 7), models, options.BulkWrite().SetOrdered(false))
	var r *writeguard.Report
	if !errors.As(err, &r) {
		t.Fatalf("err = %v", err)
	}
	if got := fmt.Sprint(dispositions(r)); got != "[unknown written]" {
		t.Errorf("dispositions %s, want [unknown written]", got)
	}
	if !r.Outcomes[1].Idempotent || r.Outcomes[0].Idempotent {
		t.Errorf("Idempotent marks %v %v, want false true", r.Outcomes[0].Idempotent, r.Outcomes[1].Idempotent)
	}
	if n := len(fake.Calls()); n != 2 {
		t.Errorf("%d commands, want 2", n)
	}
	for _, d := range fake.Docs() {
		if d.Lookup("_id").Int32() == 1 && d.Lookup("n").AsInt64() != 1 {
			t.Errorf("$inc applied %d times", d.Lookup("n").AsInt64())
		}
	}
}

func hundred(prefix string) []any {
	docs := make([]any, 100)
	for i := range docs {
		docs[i] = bson.D{{Key: "_id", Value: fmt.Sprintf("%s%02d", prefix, i)}, {Key: "n", Value: int32(i)}}
	}
	return docs
}

const tooLarge = `{"ok":0,"code":10334,"codeName":"BSONObjectTooLarge","errmsg":"object to insert too large"}`

// C66: one poison document in a batch of 100 makes every command that
// carries it fail as a whole (a size rejection). The batch is halved until
// the document fails alone; it is then its own verdict (one statement):
// dead-lettered. The 99 others are written, ordered or not, within
// 1 + BisectBound(100) + 1 commands.
func TestC66PoisonDocumentNarrowedDown(t *testing.T) {
	for _, ordered := range []bool{false, true} {
		t.Run(fmt.Sprintf("ordered=%v", ordered), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				fake := mocks.NewFake("db.c66").Poison("p37", mocks.Reply(tooLarge))
				fx := newFixture(t, fake)
				_, err := fx.g.InsertMany(ctx, hundred("p"), options.InsertMany().SetOrdered(ordered))
				var r *writeguard.Report
				if !errors.As(err, &r) || !writeguard.Handled(err) {
					t.Fatalf("err = %v, want a handled Report", err)
				}
				if r.Count(writeguard.Written) != 99 || r.Outcomes[37].Disposition != writeguard.DeadLettered {
					t.Errorf("counts %v, poison %s: want 99 written and the poison dead-lettered", r.Counts(), r.Outcomes[37].Disposition)
				}
				if n := len(fake.Docs()); n != 99 {
					t.Errorf("%d stored, want 99", n)
				}
				// 1 command, BisectBound(100) = 8 to narrow down, 1 alone;
				// ordered, the rest after the dead-lettered one goes in
				// growing windows (engine.OrderedWindow: 16, 32, ...).
				limit := 10
				if ordered {
					limit += 3
				}
				if n := len(fake.Calls()); n > limit {
					t.Errorf("%d commands, want at most %d", n, limit)
				}
				if ordered {
					ids := storedIDs(t, fake)
					for i := 1; i < len(ids); i++ {
						if ids[i-1] > ids[i] {
							t.Fatalf("ordered write out of order: %v", ids)
						}
					}
				}
				t.Logf("%d commands", len(fake.Calls()))
			})
		})
	}
}

// C66 with a poison document that makes the server drop the connection:
// indistinguishable from an outage within the call, so the engine narrows
// the batch down only when the server executes other commands meanwhile
// (here another writer of the same Guarded). The good documents are
// written; the poison one, sent alone, earns its own disposition after its
// attempts (exhausted, MaybeWritten: read back and not found). Ordered:
// the documents before it are written, those after are not_attempted.
func TestC66PoisonConnectionDrop(t *testing.T) {
	for _, ordered := range []bool{false, true} {
		t.Run(fmt.Sprintf("ordered=%v", ordered), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				fake := mocks.NewFake("db.c66n").Poison("q37", mocks.DropConnection())
				fx := newFixture(t, fake)
				stopOther := anotherWriter(t, fx, true)
				_, err := fx.g.InsertMany(ctx, hundred("q"), options.InsertMany().SetOrdered(ordered))
				stopOther()
				var r *writeguard.Report
				if !errors.As(err, &r) {
					t.Fatalf("err = %v, want a Report", err)
				}
				p := r.Outcomes[37]
				// A dropped connection proves nothing: the poison may have
				// been applied, and nothing resolved it (exhausted would
				// claim every attempt proved it not applied).
				if p.Disposition != writeguard.OutcomeUnknown || !p.MaybeWritten {
					t.Errorf("poison %+v: want unknown, MaybeWritten", p)
				}
				want := 99
				if ordered {
					want = 37 // the write stops at the unhandled poison
				}
				if r.Count(writeguard.Written) != want || len(fake.Docs()) != want+countOthers(fake) {
					t.Errorf("counts %v: want %d written", r.Counts(), want)
				}
				for _, o := range r.Outcomes {
					switch {
					case o.Index < 37 || o.Index > 37 && !ordered:
						if o.Disposition != writeguard.Written {
							t.Errorf("good document %d: %s", o.Index, o.Disposition)
						}
					case o.Index > 37:
						// Sent in the commands that failed with the poison
						// (maybe applied), then stopped by the ordered
						// write: read back, not found, so unknown with
						// MaybeWritten; or never sent.
						if !(o.Disposition == writeguard.OutcomeUnknown && o.MaybeWritten) && o.Disposition != writeguard.NotAttempted {
							t.Errorf("document %d after the poison: %s (maybe %v)", o.Index, o.Disposition, o.MaybeWritten)
						}
					}
				}
			})
		})
	}
}

func countOthers(f *mocks.Fake) int {
	n := 0
	for _, d := range f.Docs() {
		if _, err := d.LookupErr("other"); err == nil {
			n++
		}
	}
	return n
}

// Bisection obeys the re-send rules: in an unordered BulkWrite whose
// poison insert drops the connection, the good inserts are narrowed out
// and written, and the non-idempotent updates, in a command of their own
// (one per run of one kind), are sent exactly once.
func TestC66BisectionKeepsResendRules(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fake := seeded(t, "db.c66r").Poison("p3", mocks.DropConnection())
		fx := newFixture(t, fake)
		stopOther := anotherWriter(t, fx, false)
		inc := bson.D{{Key: "$inc", Value: bson.D{{Key: "n", Value: 1}}}}
		var models []mongo.WriteModel
		for i := range 8 {
			models = append(models, mongo.NewInsertOneModel().SetDocument(bson.D{{Key: "_id", Value: fmt.Sprintf("p%d", i)}}))
		}
		models = append(models, mongo.NewUpdateOneModel().SetFilter(by1).SetUpdate(inc),
			mongo.NewUpdateOneModel().SetFilter(bson.D{{Key: "_id", Value: 2}}).SetUpdate(inc))
		_, err := fx.g.BulkWrite(ctx, models, options.BulkWrite().SetOrdered(false))
		stopOther()
		var r *writeguard.Report
		if !errors.As(err, &r) {
			t.Fatalf("err = %v", err)
		}
		for i, o := range r.Outcomes {
			switch {
			case i == 3:
				if o.Disposition != writeguard.OutcomeUnknown || !o.MaybeWritten {
					t.Errorf("poison: %s, want unknown with MaybeWritten", o.Disposition)
				}
			case i < 8:
				if o.Disposition != writeguard.Written {
					t.Errorf("insert %d: %s, want written", i, o.Disposition)
				}
			default:
				// The updates go in their own command (one per run of
				// one kind), which the poison does not sink: written,
				// sent once.
				if o.Disposition != writeguard.Written || o.Attempts != 1 {
					t.Errorf("update %d: %s after %d attempts, want written after 1", i, o.Disposition, o.Attempts)
				}
			}
		}
		updates := 0
		for _, c := range fake.Calls() {
			if c.Op == mocks.OpBulkWrite {
				updates += c.Models - len(c.IDs)
			}
		}
		if updates != 2 {
			t.Errorf("the updates were sent %d times in all, want 2 (once each)", updates)
		}
	})
}

// anotherWriter starts a writer of the same Guarded that inserts one
// document every 5 ms (the server stays healthy for it, so the engine can
// tell a poison document from an outage) and returns the function that
// stops it and waits for it. With mustSucceed, a failed insert is a test
// error.
func anotherWriter(t *testing.T, fx *fixture, mustSucceed bool) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-done:
				return
			case <-time.After(5 * time.Millisecond):
			}
			if _, err := fx.g.InsertOne(ctx, bson.D{{Key: "other", Value: i}}); err != nil && mustSucceed {
				t.Errorf("other writer: %v", err)
			}
		}
	}()
	return func() { close(done); wg.Wait() }
}
