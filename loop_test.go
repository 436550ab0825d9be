package writeguard_test

import (
	"errors"
	"fmt"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/writeguard/writeguard"
	"github.com/writeguard/writeguard/mocks"
)

// checkOutcomes holds the invariants every Report keeps (C68): a
// statement that was sent is never not_attempted, and not_attempted
// comes with neither MaybeWritten nor attempts.
func checkOutcomes(t *testing.T, r *writeguard.Report) {
	t.Helper()
	for _, o := range r.Outcomes {
		if o.Disposition == writeguard.NotAttempted && (o.MaybeWritten || o.Attempts > 0) {
			t.Errorf("input %d: not_attempted with MaybeWritten %v, %d attempts", o.Index, o.MaybeWritten, o.Attempts)
		}
	}
}

const wce79 = "No write concern mode named 'majorty' found in replica set configuration"

// C68: a two-command BulkWrite [InsertOne, UpdateOne{$inc}] whose every
// command gets writeConcernError 79. The first command's configuration
// failure ends the call, so the second command is never sent: the insert
// is written_unconfirmed, the update not_attempted (never sent, never
// applied, no attempts, not MaybeWritten). Kindred: a configuration
// refusal of the first command and a success scripted for the second; the
// second is not sent, and Remaining applies the update exactly once.
func TestC68StopStops(t *testing.T) {
	inc := bson.D{{Key: "$inc", Value: bson.D{{Key: "n", Value: 1}}}}
	models := func() []mongo.WriteModel {
		return []mongo.WriteModel{
			mongo.NewInsertOneModel().SetDocument(bson.D{{Key: "_id", Value: "c1"}}),
			mongo.NewUpdateOneModel().SetFilter(bson.D{{Key: "_id", Value: 1}}).SetUpdate(inc),
		}
	}
	refusal := mocks.Reply(`{"ok":0,"code":20,"codeName":"IllegalOperation","errmsg":"Transaction numbers are only allowed on a replica set member or mongos"}`)
	for _, tc := range []struct {
		name       string
		faults     []mocks.Fault
		insertDisp writeguard.Disposition
	}{
		{"wce79 on every command", []mocks.Fault{mocks.WriteConcernError(79, "UnknownReplWriteConcern", wce79), mocks.WriteConcernError(79, "UnknownReplWriteConcern", wce79)}, writeguard.WrittenUnconfirmed},
		{"refusal then success", []mocks.Fault{refusal, mocks.Pass()}, writeguard.Failed},
	} {
		for _, ordered := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/ordered=%v", tc.name, ordered), func(t *testing.T) {
				fake := mocks.NewFake("db.c68").Script(tc.faults...)
				if err := fake.Seed(bson.D{{Key: "_id", Value: 1}, {Key: "n", Value: 0}}); err != nil {
					t.Fatal(err)
				}
				fx := newFixture(t, fake)
				_, err := fx.g.BulkWrite(ctx, models(), options.BulkWrite().SetOrdered(ordered))
				var r *writeguard.Report
				if !errors.As(err, &r) || !errors.Is(err, writeguard.ErrConfiguration) {
					t.Fatalf("err = %v, want a Report with a configuration error", err)
				}
				checkOutcomes(t, r)
				if n := len(fake.Calls()); n != 1 {
					t.Errorf("%d commands sent, want 1 (the call ended after the first)", n)
				}
				ins, upd := r.Outcomes[0], r.Outcomes[1]
				if ins.Disposition != tc.insertDisp {
					t.Errorf("insert: %s, want %s", ins.Disposition, tc.insertDisp)
				}
				if upd.Disposition != writeguard.NotAttempted || upd.Attempts != 0 || upd.MaybeWritten {
					t.Errorf("update: %s, %d attempts, MaybeWritten %v; want not_attempted, 0, false", upd.Disposition, upd.Attempts, upd.MaybeWritten)
				}
				if n := counterOf(t, fake); n != 0 {
					t.Errorf("the update was applied (n = %d)", n)
				}
				rm := r.Remaining()
				if len(rm.Indexes) == 0 || rm.Indexes[len(rm.Indexes)-1] != 1 {
					t.Errorf("Remaining %v does not hold the update", rm.Indexes)
				}
			})
		}
	}
}

// counterOf returns the field n of the document _id 1.
func counterOf(t *testing.T, f *mocks.Fake) int32 {
	t.Helper()
	for _, d := range f.Docs() {
		if v, ok := d.Lookup("_id").AsInt64OK(); ok && v == 1 {
			n, _ := d.Lookup("n").AsInt64OK()
			return int32(n)
		}
	}
	t.Fatal("document _id 1 is gone")
	return 0
}
