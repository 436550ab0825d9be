package e2e

import (
	"sync"
	"testing"

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
