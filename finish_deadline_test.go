package writeguard_test

import (
	"context"
	"errors"
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

// ordinaryTarget is a Fake whose UniqueID and primary reads answer as a
// *mongo.Collection's listCollections and find do: on the context they
// are given, failing once that context has ended. It records the state of
// each context UniqueID was asked on.
type ordinaryTarget struct {
	*mocks.Fake
	mu   sync.Mutex
	asks []error // ctx.Err() of each ask
}

func (o *ordinaryTarget) UniqueID(ctx context.Context) (bool, error) {
	o.mu.Lock()
	o.asks = append(o.asks, ctx.Err())
	o.mu.Unlock()
	if err := ctx.Err(); err != nil {
		return false, err
	}
	return o.Fake.UniqueID(ctx)
}

// ReadPrimary returns the Fake's primary reads, failing on an ended
// context.
func (o *ordinaryTarget) ReadPrimary() interface {
	Find(ctx context.Context, filter any, opts ...options.Lister[options.FindOptions]) (*mongo.Cursor, error)
} {
	return ctxFinder{o.Fake.ReadPrimary()}
}

type ctxFinder struct {
	f interface {
		Find(ctx context.Context, filter any, opts ...options.Lister[options.FindOptions]) (*mongo.Cursor, error)
	}
}

func (c ctxFinder) Find(ctx context.Context, filter any, opts ...options.Lister[options.FindOptions]) (*mongo.Cursor, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return c.f.Find(ctx, filter, opts...)
}

// Issue 28 item 6, the README's "Finishing a call" recipe on an ordinary
// collection: the call's context expires right after its last write
// command (the server applied the inserts, the reply was in flight).
// Whether _id is unique is asked on a bounded context of its own, never
// concluded from the expired one, so Remaining hands back both in-flight
// inserts, and finishing stores each exactly once.
func TestFinishAfterDeadlineOrdinaryCollection(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		target := &ordinaryTarget{Fake: mocks.NewFake("db.orders").Script(mocks.Hang())}
		g, err := writeguard.New(target, writeguard.WithDeadLetter(&mocks.Sink{}))
		if err != nil {
			t.Fatal(err)
		}
		docs := []any{bson.D{{Key: "n", Value: 1}}, bson.D{{Key: "n", Value: 2}}}
		dctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
		_, err = g.InsertMany(dctx, docs)
		cancel()
		var r *writeguard.Report
		if !errors.As(err, &r) || r.Count(writeguard.OutcomeUnknown) != 2 {
			t.Fatalf("err = %v, want a Report with 2 unknown", err)
		}
		target.mu.Lock()
		asks := append([]error(nil), target.asks...)
		target.mu.Unlock()
		if len(asks) != 1 || asks[0] != nil {
			t.Fatalf("UniqueID asked %d times, on contexts ending with %v; want once, on a live context", len(asks), asks)
		}
		if r.NoUniqueID {
			t.Fatal("Report.NoUniqueID: concluded from the expired context")
		}
		rm := r.Remaining()
		if len(rm.Documents) != 2 || len(rm.Left) != 0 {
			t.Fatalf("remaining %v, left %v: want both in-flight inserts handed back", rm, rm.Left)
		}
		if _, err := g.InsertMany(rm.Context(ctx), rm.Documents); err != nil {
			t.Fatalf("finishing: %v", err)
		}
		if n := len(target.Docs()); n != 2 {
			t.Errorf("%d documents stored, want 2", n)
		}
	})
}
