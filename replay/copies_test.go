package replay

import (
	"strings"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/writeguard/writeguard/envelope"
)

// TestCopiesFold (issue 30 item 3): an envelope of multiplicity n is
// sent as n writes (an insert's copies with envelope.CopyID _ids, a
// model's as the model again); it is replayed only when all n were; an
// update some of whose copies were applied is held, an insert takes the
// failing copy's outcome (its next replay meets the written copies by
// _id).
func TestCopiesFold(t *testing.T) {
	ins := insertEnv(t, bson.D{{Key: "_id", Value: bson.NewObjectID()}, {Key: "sku", Value: "A"}}, true)
	ins.Multiplicity = 3
	upd := &stored{Envelope: envelope.Envelope{Kind: envelope.KindUpdateOne, Multiplicity: 2}}
	es := entriesFor(t, ins)
	es = append(es, &entry{env: upd, model: mongo.NewUpdateOneModel().SetFilter(bson.D{}).SetUpdate(bson.D{{Key: "$inc", Value: bson.D{{Key: "n", Value: 1}}}})})
	all, of := withCopies(es)
	if len(all) != 5 || len(of) != 3 {
		t.Fatalf("%d writes, %d copies; want 5 and 3", len(all), len(of))
	}
	ids := map[string]bool{}
	for _, e := range all[:3] {
		if !e.insert || ids[string(e.docID.Value)] || !bytesEqual(e.env.Original.Lookup("_id").Value, e.docID.Value) {
			t.Fatalf("insert copy %v: not an insert of its own _id", e.docID)
		}
		ids[string(e.docID.Value)] = true
	}
	// Insert: copies 0 and 1 written, copy 2 rejected. Update: copy 0
	// applied, copy 1 rejected.
	outs := []outcome{outReplayed, outReplayedDup, outInvalid, outReplayed, outInvalid}
	for i, e := range all {
		e.out = outs[i]
		if e.out == outInvalid {
			e.code, e.reason = 121, "still invalid"
		}
	}
	foldCopies(all, of)
	if es[0].out != outInvalid || !strings.HasPrefix(es[0].reason, "2 of 3 copies written") {
		t.Errorf("insert: %s %q", es[0].out, es[0].reason)
	}
	if es[1].out != outHeld || !strings.HasPrefix(es[1].reason, holdPartialCopies) {
		t.Errorf("update: %s %q, want held", es[1].out, es[1].reason)
	}
	// All copies written: replayed.
	es = entriesFor(t, ins)
	all, of = withCopies(es)
	for _, e := range all {
		e.out = outReplayed
	}
	foldCopies(all, of)
	if es[0].out != outReplayed {
		t.Errorf("all copies written: %s", es[0].out)
	}
}

func bytesEqual(a, b []byte) bool { return string(a) == string(b) }

// TestProblemReasonScrubbed (issue 30 item 6): a replay problem names
// the index and key fields of a duplicate, never their values.
func TestProblemReasonScrubbed(t *testing.T) {
	r := &runner{}
	e := entriesFor(t, insertEnv(t, bson.D{{Key: "_id", Value: 1}, {Key: "email", Value: "carol@example.com"}}, false))[0]
	e.out, e.code = outConflict, 11000
	e.reason = `duplicate key on another unique index: E11000 duplicate key error collection: db.c index: email_1 dup key: { email: "carol@example.com" }`
	r.problem(e, "conflict")
	got := r.res.Problems[0].Reason
	if strings.Contains(got, "carol@example.com") || !strings.Contains(got, "index: email_1 dup key: { email: ? }") {
		t.Errorf("Problem.Reason = %q", got)
	}
}
