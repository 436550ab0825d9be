package e2e

import (
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
			if err != nil || res.Replayed != 3 {
				t.Fatalf("replay: %+v, %v", res.Counts, err)
			}
			for sku, n := range want {
				if got := b.count(dlTarget, bson.D{{Key: "sku", Value: sku}}); got != int64(n) {
					t.Errorf("target holds %d documents of sku %s, want %d", got, sku, n)
				}
			}
			// Replaying the replayed envelopes again writes nothing more:
			// every copy's _id is the same on every replay.
			res, err = replayRun(b, b.replayTarget(), replay.WithFilter(dlq.Filter{Statuses: []string{envelope.StatusReplayed}}))
			if err != nil || res.Replayed != 3 || res.ReplayedByDuplicate != 3 {
				t.Errorf("second replay: %+v, %v", res.Counts, err)
			}
			if got := b.count(dlTarget, bson.D{}); got != 6 {
				t.Errorf("target holds %d documents after a second replay, want 6", got)
			}
		})
	}
}
