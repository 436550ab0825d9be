package engine_test

import (
	"context"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/writeguard/writeguard/internal/engine"
)

type ctxKey struct{}

// askTarget answers UniqueID and Hello on the context it is given, as a
// *mongo.Collection does, and records that context.
type askTarget struct{ seen []context.Context }

func (a *askTarget) UniqueID(ctx context.Context) (bool, error) {
	a.seen = append(a.seen, ctx)
	return true, ctx.Err()
}

func (a *askTarget) Hello(ctx context.Context) (bson.Raw, error) {
	a.seen = append(a.seen, ctx)
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return bson.Marshal(bson.D{{Key: "ok", Value: 1}, {Key: "maxWriteBatchSize", Value: int32(7)}})
}

// What the engine asks of its target is asked on a context of its own:
// a call context that already ended (a deadline right after the last
// write command) is not the reason of the answer; the caller's values
// are kept and the ask is bounded by AskBound.
func TestTargetAsksOnBoundedContextOfItsOwn(t *testing.T) {
	parent, cancel := context.WithCancel(context.WithValue(context.Background(), ctxKey{}, "call"))
	cancel()
	a := &askTarget{}
	unique, err := engine.UniqueID(a, nil)(parent)
	if err != nil || !unique {
		t.Errorf("UniqueID on an ended call context: %v, %v; want true, nil", unique, err)
	}
	if l := engine.LimitsOf(a)(parent); l.MaxWriteBatchSize != 7 {
		t.Errorf("limits on an ended call context: %+v; want the target's (maxWriteBatchSize 7)", l)
	}
	if len(a.seen) != 2 {
		t.Fatalf("asked %d times, want 2", len(a.seen))
	}
	for i, c := range a.seen {
		dl, ok := c.Deadline()
		if !ok || time.Until(dl) > engine.AskBound {
			t.Errorf("ask %d: deadline %v (set %v); want one within AskBound", i, dl, ok)
		}
		if c.Value(ctxKey{}) != "call" {
			t.Errorf("ask %d lost the call context's values", i)
		}
	}
}
