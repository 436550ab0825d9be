package e2e

import (
	"context"
	"errors"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/writeguard/writeguard"
	"github.com/writeguard/writeguard/mocks/faultproxy"
)

// Issue 28 item 6, the README's "Finishing a call" recipe with the real
// driver on an ordinary collection: the server applies an InsertMany,
// then the caller's context ends while the reply is in flight (the proxy
// cancels it after forwarding and closes the connection instead of
// replying: decided by that event, not by a timer). The call learns on a
// bounded context of its own that _id is unique (listCollections), so it
// does not conclude from the ended context that it is not: Remaining
// hands back every in-flight insert, and finishing stores each exactly
// once.
func TestFinishAfterDeadlineBed(t *testing.T) {
	b := newCaseBed(t)
	g := b.guard("finish")
	ns := b.ns("finish")
	cctx, cancel := context.WithCancel(b.ctx)
	defer cancel()
	b.script(faultproxy.On("insert").In(ns).Do(faultproxy.Custom(
		func(cmd *faultproxy.Command, forward func(*faultproxy.Command) (bson.Raw, error)) (bson.Raw, error) {
			if _, err := forward(cmd); err != nil {
				return nil, err
			}
			cancel() // the caller's context ends right after its last write command
			return nil, faultproxy.ErrCloseConnection
		})))
	var docs []any
	for i := range 4 {
		docs = append(docs, cbD("n", int32(i)))
	}
	_, err := g.InsertMany(cctx, docs)
	var r *writeguard.Report
	if !errors.As(err, &r) {
		t.Fatalf("err = %v, want a Report", err)
	}
	if cctx.Err() == nil {
		t.Fatal("the caller's context did not end: the fault did not fire")
	}
	if r.NoUniqueID {
		t.Fatal("Report.NoUniqueID on an ordinary collection: concluded from the ended context")
	}
	rm := r.Remaining()
	if len(rm.Documents) != len(docs) || len(rm.Left) != 0 {
		t.Fatalf("remaining %v (left %v), dispositions %v: want every in-flight insert handed back", rm, rm.Left, cbDisps(r))
	}
	_, err = g.InsertMany(rm.Context(b.ctx), rm.Documents)
	if err != nil {
		t.Fatalf("finishing: %v", err)
	}
	stored := map[string]int{}
	for _, d := range b.docs("finish") {
		stored[d.Lookup("_id").String()]++
	}
	for _, o := range r.Outcomes {
		if n := stored[bsonIDString(t, o.ID)]; n != 1 {
			t.Errorf("document %d (_id %v) stored %d times, want once", o.Index, o.ID, n)
		}
	}
	if len(stored) != len(docs) {
		t.Errorf("%d documents stored, want %d", len(stored), len(docs))
	}
}

// bsonIDString renders an _id as bson.RawValue.String does.
func bsonIDString(t *testing.T, id any) string {
	t.Helper()
	raw, err := bson.Marshal(bson.D{{Key: "_id", Value: id}})
	if err != nil {
		t.Fatal(err)
	}
	return bson.Raw(raw).Lookup("_id").String()
}
