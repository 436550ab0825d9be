package demo

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.mongodb.org/mongo-driver/v2/x/mongo/driver"

	"github.com/writeguard/writeguard"
	"github.com/writeguard/writeguard/hooks"
	"github.com/writeguard/writeguard/mocks"
)

// cancelMany cancels the call's context as the driver returns: the
// deadline ended while the driver was retrying behind the call.
type cancelMany struct {
	*mocks.Fake
	cancel context.CancelFunc
}

func (c cancelMany) InsertMany(ctx context.Context, docs any, opts ...options.Lister[options.InsertManyOptions]) (*mongo.InsertManyResult, error) {
	defer c.cancel()
	return c.Fake.InsertMany(ctx, docs, opts...)
}

// A batch whose call ends with its inserts unknown and MaybeWritten (the
// first attempt applied, the driver's retry cut by the deadline) is
// finished once through Report.Remaining: each is read back on its own
// _id and ends already_written, stored once, so the demo's accounting
// does not count a transient fault's row as unknown.
func TestFinishUnknownReadsBack(t *testing.T) {
	fake := mocks.NewFake("db.orders").Topology(mocks.ReplicaSet).
		Script(mocks.AppliedThen(fmt.Errorf("%w: rtt 2ms", driver.ErrDeadlineWouldBeExceeded)))
	out := make([]rowOutcome, 3)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	g, err := writeguard.New(cancelMany{fake, cancel}, writeguard.WithHooks(hooks.Hooks{Disposition: recordDisposition(out)}))
	if err != nil {
		t.Fatal(err)
	}
	docs := []any{bson.D{{Key: "_id", Value: "r-0"}}, bson.D{{Key: "_id", Value: "r-1"}}, bson.D{{Key: "_id", Value: "r-2"}}}
	_, err = g.InsertMany(context.WithValue(ctx, batchKey{}, 0), docs)
	var rep *writeguard.Report
	if !errors.As(err, &rep) || len(rep.Outcomes) != 3 {
		t.Fatalf("first call: %v, want a Report of 3", err)
	}
	for i, o := range rep.Outcomes {
		if o.Disposition != writeguard.OutcomeUnknown || !o.MaybeWritten {
			t.Fatalf("outcome %d: %s MaybeWritten %v, want unknown with MaybeWritten", i, o.Disposition, o.MaybeWritten)
		}
		out[i].disp = o.Disposition
	}
	finishUnknown(context.Background(), g, out, span{lo: 0, hi: 3}, rep)
	for i, r := range out {
		if r.disp != writeguard.AlreadyWritten {
			t.Errorf("row %d: %s, want already_written (read back on its own _id)", i, r.disp)
		}
	}
	if n := len(fake.Docs()); n != 3 {
		t.Errorf("%d stored, want 3 (each once)", n)
	}
}
