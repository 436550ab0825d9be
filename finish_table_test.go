package writeguard_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/writeguard/writeguard"
	"github.com/writeguard/writeguard/envelope"
)

// Remaining's table (its doc, the README's "What Remaining sends again"),
// row by row over every disposition, kind of input, MaybeWritten, the
// idempotence mark and a target without a unique _id; above all,
// Remaining never hands back an unknown or possibly applied write that is
// not idempotent.
func TestRemainingTable(t *testing.T) {
	all := []writeguard.Disposition{
		writeguard.Written, writeguard.AlreadyWritten, writeguard.WrittenUnconfirmed, writeguard.DeadLettered,
		writeguard.DeadLetterFailed, writeguard.Conflicted, writeguard.ConflictSkipped, writeguard.ConflictReplaced,
		writeguard.Failed, writeguard.Exhausted, writeguard.NotAttempted, writeguard.OutcomeUnknown, writeguard.Unacknowledged,
	}
	doc, _ := bson.Marshal(bson.D{{Key: "_id", Value: "d"}})
	kinds := map[string]func() writeguard.Outcome{
		"document": func() writeguard.Outcome { return writeguard.Outcome{Document: doc, Idempotent: true} },
		"insertModel": func() writeguard.Outcome {
			return writeguard.Outcome{Document: doc, Model: mongo.NewInsertOneModel().SetDocument(doc), Idempotent: true}
		},
		"update": func() writeguard.Outcome {
			return writeguard.Outcome{Model: mongo.NewUpdateOneModel().SetFilter(bson.D{}).SetUpdate(bson.D{{Key: "$inc", Value: bson.D{{Key: "n", Value: 1}}}})}
		},
		"idempotentUpdate": func() writeguard.Outcome {
			return writeguard.Outcome{Model: mongo.NewUpdateOneModel().SetFilter(bson.D{}).SetUpdate(bson.D{{Key: "$set", Value: bson.D{{Key: "n", Value: 1}}}}), Idempotent: true}
		},
	}
	for _, d := range all {
		for kind, mk := range kinds {
			for _, maybe := range []bool{false, true} {
				for _, noUnique := range []bool{false, true} {
					o := mk()
					o.Disposition, o.MaybeWritten = d, maybe
					r := &writeguard.Report{Operation: "bulkWrite", Outcomes: []writeguard.Outcome{o}, NoUniqueID: noUnique}
					if kind == "document" {
						r.Operation = "insertMany"
					}
					rm := r.Remaining()
					sent, left := rm.Len() == 1, len(rm.Left) == 1
					possibly := maybe || d == writeguard.OutcomeUnknown
					var want string
					switch {
					case d != writeguard.NotAttempted && d != writeguard.Exhausted && d != writeguard.OutcomeUnknown && d != writeguard.DeadLetterFailed:
						want = "none"
					case possibly && !o.Idempotent:
						want = "left: " + string(writeguard.LeftNotIdempotent)
					case possibly && (kind == "document" || kind == "insertModel") && noUnique:
						want = "left: " + string(writeguard.LeftNoUniqueID)
					default:
						want = "sent"
					}
					got := "none"
					switch {
					case sent && !left:
						got = "sent"
					case left && !sent:
						got = "left: " + string(rm.Left[0].Reason)
					case sent && left:
						got = "both"
					}
					name := fmt.Sprintf("%s/%s/maybe=%v/noUniqueID=%v", d, kind, maybe, noUnique)
					if got != want {
						t.Errorf("%s: %s, want %s", name, got, want)
					}
					if sent && possibly && !o.Idempotent {
						t.Errorf("%s: a possibly applied write that is not idempotent is handed back", name)
					}
				}
			}
		}
	}
}

// Issue 30 item 5: anything still dead_letter_failed is part of what
// Remaining hands back. A validator refuses one document and one update
// model; the first dead-letter Put fails (the sink is down), so both end
// dead_letter_failed. Remaining hands both back (the document with the
// _id writeguard gave it), and the call that finishes the first one
// dead-letters them: every input ends handled, none is stored twice.
func TestRemainingHandsBackDeadLetterFailed(t *testing.T) {
	fake := seeded(t, "db.dlf").Validator(func(doc bson.Raw) (bson.Raw, bool) {
		_, bad := doc.Lookup("bad").BooleanOK()
		return nil, bad
	})
	fx := newFixture(t, fake)
	fx.sink.Before = func(_ context.Context, n int, _ []envelope.Envelope) error {
		if n == 1 {
			return errors.New("13 Unauthorized")
		}
		return nil
	}
	setBad := bson.D{{Key: "$set", Value: bson.D{{Key: "bad", Value: true}}}}
	models := []mongo.WriteModel{
		mongo.NewInsertOneModel().SetDocument(bson.D{{Key: "s", Value: "good"}}),
		mongo.NewInsertOneModel().SetDocument(bson.D{{Key: "s", Value: "refused"}, {Key: "bad", Value: true}}),
		mongo.NewUpdateOneModel().SetFilter(by1).SetUpdate(setBad),
	}
	_, err := fx.g.BulkWrite(ctx, models)
	var r *writeguard.Report
	if !errors.As(err, &r) {
		t.Fatalf("err = %v, want a Report", err)
	}
	if got := dispositions(r); got[0] != writeguard.Written || got[1] != writeguard.DeadLetterFailed || got[2] != writeguard.DeadLetterFailed {
		t.Fatalf("dispositions %v, want [written dead_letter_failed dead_letter_failed]", got)
	}
	rm := r.Remaining()
	if len(rm.Models) != 2 || len(rm.Left) != 0 || rm.Indexes[0] != 1 || rm.Indexes[1] != 2 {
		t.Fatalf("remaining %v (indexes %v, left %v): want both dead_letter_failed inputs", rm, rm.Indexes, rm.Left)
	}
	ins, ok := rm.Models[0].(*mongo.InsertOneModel)
	if !ok || idString(t, r.Outcomes[1].ID) != ins.Document.(bson.Raw).Lookup("_id").String() {
		t.Fatalf("the refused insert is handed back as %#v, want its document with the _id %v", rm.Models[0], r.Outcomes[1].ID)
	}
	_, err = fx.g.BulkWrite(rm.Context(ctx), rm.Models)
	var r2 *writeguard.Report
	if !errors.As(err, &r2) || !r2.Handled() || r2.Count(writeguard.DeadLettered) != 2 {
		t.Fatalf("finishing: %v; want both dead-lettered, handled", err)
	}
	if n := len(fx.sink.Envelopes()); n != 2 {
		t.Errorf("%d envelopes stored, want 2", n)
	}
	if n := len(fake.Docs()); n != 3 {
		t.Errorf("%d documents stored, want 3 (2 seeded, the good insert once)", n)
	}
}
