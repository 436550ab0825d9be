package e2e

import (
	"strings"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/writeguard/writeguard"
	"github.com/writeguard/writeguard/dlq"
	"github.com/writeguard/writeguard/envelope"
	"github.com/writeguard/writeguard/replay"
)

// TestDLMultiplicity (issue 30 item 3): three identical documents
// without _id rejected in one call become one envelope of multiplicity 3
// (not three envelopes, and not one document): the same slice sent again
// in a new call (the finishing pattern) leaves it at 3 ($max), and a
// replay writes three documents, a second replay none more. Documents
// that differ only in field order are identical for the fingerprint
// (envelope.Fingerprint sorts keys: a Go map marshals in any order), so
// they count as copies too: one envelope of multiplicity 2, two
// documents written back, both in the first capture's field order. Both
// sink modes (upserts and insert-first).
func TestDLMultiplicity(t *testing.T) {
	for _, insertFirst := range []bool{false, true} {
		name := "upserts"
		if insertFirst {
			name = "insert-first"
		}
		t.Run(name, func(t *testing.T) {
			b := newDLBed(t, dlSchema)
			if insertFirst {
				b.sink = dlq.NewMongoSink(b.dlq, dlq.WithInsertFirst())
			}
			slice := []any{dlDoc("sku", "A"), dlDoc("sku", "A"), dlDoc("sku", "A"), dlDoc("sku", "B"),
				dlDoc("sku", "O", "n", int32(1)), dlDoc("n", int32(1), "sku", "O")}
			for call := 0; call < 2; call++ {
				rep := b.capture(b.guard(), slice...)
				for i, o := range rep.Outcomes {
					if o.Disposition != writeguard.DeadLettered {
						t.Fatalf("call %d, document %d: %s", call, i, o.Disposition)
					}
				}
			}
			envs := b.envelopes()
			if len(envs) != 3 {
				t.Fatalf("%d envelopes, want 3 (A, B, O)", len(envs))
			}
			want := map[string]int{"A": 3, "B": 1, "O": 2}
			for _, e := range envs {
				sku := e.Original.Lookup("sku").StringValue()
				if e.Copies() != want[sku] {
					t.Errorf("envelope %s: multiplicity %d, want %d", sku, e.Multiplicity, want[sku])
				}
				if e.Attempts != 2*want[sku] {
					t.Errorf("envelope %s: attempts %d, want %d", sku, e.Attempts, 2*want[sku])
				}
			}
			b.setValidator(nil)
			res, err := replayRun(b, b.replayTarget())
			if err != nil || res.Replayed != 3 || res.Written != 6 {
				t.Fatalf("replay: %+v, %v; want 3 envelopes replayed, 6 documents written", res.Counts, err)
			}
			for sku, n := range want {
				if got := b.count(dlTarget, bson.D{{Key: "sku", Value: sku}}); got != int64(n) {
					t.Errorf("target holds %d documents of sku %s, want %d", got, sku, n)
				}
			}
			// Replaying the replayed envelopes again writes nothing more:
			// every copy's _id is the same on every replay.
			res, err = replayRun(b, b.replayTarget(), replay.WithFilter(dlq.Filter{Statuses: []string{envelope.StatusReplayed}}))
			if err != nil || res.Replayed != 3 || res.ReplayedByDuplicate != 3 || res.Written != 0 {
				t.Errorf("second replay: %+v, %v", res.Counts, err)
			}
			if got := b.count(dlTarget, bson.D{}); got != 6 {
				t.Errorf("target holds %d documents after a second replay, want 6", got)
			}
		})
	}
}

// TestDLMultiplicityForged (trial finding A1): a hand-edited multiplicity
// never amplifies a replay. Three envelopes: a caller-_id insert whose
// multiplicity was set to 1000 (writeguard stores 1 for it: its copies
// would be one document), a writeguard-_id insert set to
// envelope.MaxMultiplicity+1, and a genuine multiplicity 3 (three
// identical documents without _id). The replay refuses the first two
// (left pending, each named with its _id and reason), writes the third's
// three documents, and reports 3 documents written (Counts.Written) for
// 1 envelope replayed; the target holds 3 documents, not 1,003.
func TestDLMultiplicityForged(t *testing.T) {
	b := newDLBed(t, dlSchema)
	b.capture(b.guard(), dlDoc("_id", "line-1", "sku", "C"), dlDoc("sku", "H"),
		dlDoc("sku", "A"), dlDoc("sku", "A"), dlDoc("sku", "A"))
	edit := func(sku string, m int) bson.RawValue {
		t.Helper()
		var d bson.Raw
		if err := b.dlq.FindOneAndUpdate(b.ctx, bson.D{{Key: "original.sku", Value: sku}},
			bson.D{{Key: "$set", Value: bson.D{{Key: "multiplicity", Value: int32(m)}}}}).Decode(&d); err != nil {
			t.Fatalf("editing %s: %v", sku, err)
		}
		return d.Lookup("_id")
	}
	caller, huge := edit("C", 1000), edit("H", envelope.MaxMultiplicity+1)
	b.setValidator(nil)
	res, err := replayRun(b, b.replayTarget())
	if err != nil {
		t.Fatal(err)
	}
	if res.Replayed != 1 || res.Refused != 2 || res.Written != 3 {
		t.Errorf("replay %+v; want 1 envelope replayed, 3 documents written, 2 refused", res.Counts)
	}
	reasons := map[string]string{}
	for _, p := range res.Problems {
		if p.Outcome == "refused" {
			reasons[p.EnvelopeID.String()] = p.Reason
		}
	}
	if r := reasons[caller.String()]; !strings.Contains(r, "multiplicity 1000 on an insert whose _id the caller gave") {
		t.Errorf("caller-_id envelope %v: reason %q", caller, r)
	}
	if r := reasons[huge.String()]; !strings.Contains(r, "exceeds 100000") {
		t.Errorf("huge multiplicity envelope %v: reason %q", huge, r)
	}
	for sku, want := range map[string]int64{"A": 3, "C": 0, "H": 0} {
		if got := b.count(dlTarget, bson.D{{Key: "sku", Value: sku}}); got != want {
			t.Errorf("target holds %d documents of sku %s, want %d", got, sku, want)
		}
	}
	if n := b.count(dlDLQ, bson.D{{Key: "status", Value: envelope.StatusPending}}); n != 2 {
		t.Errorf("%d envelopes pending after the replay, want the 2 refused", n)
	}
}
