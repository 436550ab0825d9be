package e2e

import (
	"sync"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/writeguard/writeguard/mocks/faultproxy"
)

// The bed keeps MongoDB's per-document atomicity: 16 writers' concurrent
// $inc of one document all count, through the replica-set and the sharded
// proxy. FerretDB alone loses some (it reads, updates in Go and writes the
// document back); the proxy sends updates upstream one at a time.
func TestBedConcurrentUpdatesAtomic(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts []cbOption
	}{
		{"plain", nil},
		{"sharded", []cbOption{cbProxyOptions(faultproxy.WithSharded(faultproxy.Sharding{}))}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := newCaseBed(t, tc.opts...)
			b.seed("atomic", cbD("_id", "c", "v", int64(0)))
			coll := b.db.Collection("atomic")
			const writers, each = 16, 10
			var mu sync.Mutex
			modified := int64(0)
			var wg sync.WaitGroup
			for range writers {
				wg.Go(func() {
					for range each {
						r, err := coll.UpdateOne(b.ctx, cbD("_id", "c"), cbD("$inc", cbD("v", int64(1))))
						if err != nil {
							t.Error(err)
							return
						}
						mu.Lock()
						modified += r.ModifiedCount
						mu.Unlock()
					}
				})
			}
			wg.Wait()
			var got struct{ V int64 }
			if err := coll.FindOne(b.ctx, bson.D{{Key: "_id", Value: "c"}}).Decode(&got); err != nil {
				t.Fatal(err)
			}
			if modified != writers*each || got.V != modified {
				t.Errorf("%d $inc acknowledged as modified, v = %d; want %d and %d", modified, got.V, writers*each, writers*each)
			}
		})
	}
}

// A cursor outlives the connection that opened it, as on MongoDB: a
// paged find (batches capped by the announced limits) whose connection a
// fault closes goes on with its getMore on another connection and returns
// every document (FerretDB alone closes the cursor with its connection,
// and a racing getMore may even end it silently empty).
func TestBedCursorOutlivesItsConnection(t *testing.T) {
	b := newCaseBed(t, cbProxyOptions(faultproxy.WithLimits(faultproxy.Limits{MaxMessageSizeBytes: 4096, MaxBsonObjectSize: 1024})))
	var docs []any
	for i := range 20 {
		docs = append(docs, cbD("_id", int32(i)))
	}
	b.seed("cur", docs...)
	coll := b.db.Collection("cur")
	cur, err := coll.Find(b.ctx, bson.D{})
	if err != nil {
		t.Fatal(err)
	}
	defer cur.Close(b.ctx)
	n := 0
	for n < cur.RemainingBatchLength() || n == 0 {
		if !cur.Next(b.ctx) {
			t.Fatalf("first batch ended after %d: %v", n, cur.Err())
		}
		n++
	}
	// The connection that opened the cursor is back in the pool: the next
	// command takes it, and the proxy closes it.
	b.script(faultproxy.On("ping").Do(faultproxy.CloseBeforeForward()))
	if err := b.db.RunCommand(b.ctx, cbD("ping", 1)).Err(); err == nil {
		t.Fatal("ping: want the closed connection's network error")
	}
	// The driver cleared its pool: wait until it serves commands again.
	deadline := time.Now().Add(10 * time.Second)
	for b.db.RunCommand(b.ctx, cbD("ping", 1)).Err() != nil {
		if time.Now().After(deadline) {
			t.Fatal("the driver's pool did not recover in 10s")
		}
		time.Sleep(50 * time.Millisecond)
	}
	for cur.Next(b.ctx) {
		n++
	}
	if err := cur.Err(); err != nil || n != len(docs) {
		t.Errorf("%d documents read (err %v), want %d", n, err, len(docs))
	}
}
