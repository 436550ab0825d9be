package writeguard_test

import (
	"errors"
	"strings"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/writeguard/writeguard"
	"github.com/writeguard/writeguard/mocks"
)

// A guarded w:0 write without WithUnacknowledged is sent (and, here,
// stored): it ends unacknowledged with MaybeWritten, one attempt, in a
// Report that wraps ErrUnacknowledged and is handled, so that neither
// Handled nor Remaining invites a re-send that would store a copy. An
// ordered write of two commands sends both.
func TestUnacknowledgedTellsTheTruth(t *testing.T) {
	fake := mocks.NewFake("db.w0").Script(mocks.Unacknowledged())
	fx := newFixture(t, fake)
	docs := []any{bson.D{{Key: "_id", Value: "a"}}, bson.D{{Key: "_id", Value: "b"}}}
	_, err := fx.g.InsertMany(ctx, docs)
	var r *writeguard.Report
	if !errors.As(err, &r) || !errors.Is(err, writeguard.ErrUnacknowledged) {
		t.Fatalf("err = %v, want a Report wrapping ErrUnacknowledged", err)
	}
	if !writeguard.Handled(err) {
		t.Error("the Report of a w:0 write is unhandled: it invites a re-send")
	}
	for _, o := range r.Outcomes {
		if o.Disposition != writeguard.Unacknowledged || !o.MaybeWritten || o.Attempts != 1 {
			t.Errorf("input %d: %s, MaybeWritten %v, %d attempts; want unacknowledged, true, 1", o.Index, o.Disposition, o.MaybeWritten, o.Attempts)
		}
	}
	if rm := r.Remaining(); len(rm.Indexes) != 0 {
		t.Errorf("Remaining would re-send %v", rm.Indexes)
	}
	if n := len(fake.Calls()); n != 1 || len(fake.Docs()) != 2 {
		t.Errorf("%d calls, %d stored; want 1 and 2", n, len(fake.Docs()))
	}

	// Ordered, two commands (an insert, then an update), every one w:0
	// and allowed: both are sent.
	fake = mocks.NewFake("db.w0b").Script(mocks.Unacknowledged(), mocks.Unacknowledged())
	if err := fake.Seed(bson.D{{Key: "_id", Value: 1}, {Key: "n", Value: 0}}); err != nil {
		t.Fatal(err)
	}
	fx = newFixture(t, fake, writeguard.WithUnacknowledged())
	res, err := fx.g.BulkWrite(ctx, []mongo.WriteModel{
		mongo.NewInsertOneModel().SetDocument(bson.D{{Key: "_id", Value: "c"}}),
		mongo.NewUpdateOneModel().SetFilter(bson.D{{Key: "_id", Value: 1}}).SetUpdate(bson.D{{Key: "$inc", Value: bson.D{{Key: "n", Value: 1}}}}),
	}, options.BulkWrite().SetOrdered(true))
	if err != nil || res == nil || res.Acknowledged {
		t.Fatalf("res %+v, err %v; want an unacknowledged result and no error", res, err)
	}
	if n := len(fake.Calls()); n != 2 {
		t.Errorf("%d commands sent, want 2: an unacknowledged command does not stop an ordered write", n)
	}
}

// New refuses a typed nil target with an error naming it, as Wrap and a
// nil Target are refused; nothing panics.
func TestNewTypedNil(t *testing.T) {
	g, err := writeguard.New((*mongo.Collection)(nil))
	if g != nil || err == nil || !strings.Contains(err.Error(), "*mongo.Collection") {
		t.Fatalf("New((*mongo.Collection)(nil)) = %v, %v; want an error naming *mongo.Collection", g, err)
	}
	if _, err := writeguard.New((*mocks.Fake)(nil)); err == nil || !strings.Contains(err.Error(), "*mocks.Fake") {
		t.Errorf("New((*mocks.Fake)(nil)): %v, want an error naming *mocks.Fake", err)
	}
}
