package e2e

import (
	"errors"
	"testing"

	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/writeguard/writeguard"
	"github.com/writeguard/writeguard/mocks/faultproxy"
)

// C71 with the real driver: an UpdateOne setting email to a value another
// document holds meets 11000 on email_1. Under MONGODB_URI the unique
// index answers; on the bed the proxy answers as MongoDB 4.2+ does
// (FerretDB's embedded backend reports a unique violation on update as 1
// InternalError, "UNIQUE constraint failed", not as 11000).
// ConflictSkip leaves it "conflict" (not handled), with the driver's
// duplicate-key error reachable; ConflictSkipAll skips it. The stored
// document is unchanged either way.
func TestC71UpdateConflictBed(t *testing.T) {
	for _, tc := range []struct {
		name    string
		handler writeguard.ConflictHandler
		want    writeguard.Disposition
	}{
		{"ConflictSkip", writeguard.ConflictSkip(), writeguard.Conflicted},
		{"ConflictSkipAll", writeguard.ConflictSkipAll(), writeguard.ConflictSkipped},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := newCaseBed(t)
			b.seed("c71", cbD("_id", "u-1", "email", "a@example.com"), cbD("_id", "u-2", "email", "b@example.com"))
			b.unique("c71", "email")
			g := b.guard("c71", writeguard.WithConflictHandler(tc.handler))
			if cbRealURI() == "" {
				b.script(faultproxy.On("update").In(b.ns("c71")).Do(faultproxy.RejectDocuments(faultproxy.DocumentID("u-2"), faultproxy.WriteError{
					Code: 11000, KeyPattern: cbD("email", int32(1)), KeyValue: cbD("email", "a@example.com"),
					Message: `E11000 duplicate key error collection: ` + b.ns("c71") + ` index: email_1 dup key: { email: "a@example.com" }`,
				})))
			}
			_, err := g.UpdateOne(b.ctx, cbD("_id", "u-2"), cbD("$set", cbD("email", "a@example.com")))
			r := cbReport(t, err)
			if d := r.Outcomes[0].Disposition; d != tc.want || writeguard.Handled(err) != (tc.want != writeguard.Conflicted) {
				t.Fatalf("disposition %s, Handled %v (failure %+v, err %v); want %s", d, writeguard.Handled(err), r.Outcomes[0].Failure, r.Err, tc.want)
			}
			if !mongo.IsDuplicateKeyError(err) || !errors.Is(err, writeguard.ErrConflict) {
				t.Errorf("IsDuplicateKeyError %v, errors.Is(ErrConflict) %v; want both", mongo.IsDuplicateKeyError(err), errors.Is(err, writeguard.ErrConflict))
			}
			for _, d := range b.docs("c71") {
				if d.Lookup("_id").StringValue() == "u-2" && d.Lookup("email").StringValue() != "b@example.com" {
					t.Errorf("u-2 changed: %v", d)
				}
			}
		})
	}
}
