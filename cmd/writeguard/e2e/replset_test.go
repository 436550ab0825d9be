package e2e

// Retryable writes through the bed in replica-set mode: the driver (v2)
// → faultproxy presenting the embedded FerretDB as the primary of a
// one-member replica set, doing the server's retryable-write bookkeeping
// and answering configureFailPoint. Under MONGODB_URI the same test bodies
// run against that server (a replica set is needed for retryable writes).

import (
	"context"
	"sync"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/event"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// rsTxnLog records the txnNumber of every insert the app client starts
// (-1 for none).
type rsTxnLog struct {
	mu   sync.Mutex
	nums []int64
}

func (l *rsTxnLog) option() cbOption {
	return cbClientOptions(func(o *options.ClientOptions) {
		prev := o.Monitor
		o.SetMonitor(&event.CommandMonitor{Started: func(ctx context.Context, e *event.CommandStartedEvent) {
			if prev != nil && prev.Started != nil {
				prev.Started(ctx, e)
			}
			if e.CommandName != "insert" {
				return
			}
			n := int64(-1)
			if v, err := e.Command.LookupErr("txnNumber"); err == nil {
				n = v.Int64()
			}
			l.mu.Lock()
			l.nums = append(l.nums, n)
			l.mu.Unlock()
		}})
	})
}

func (l *rsTxnLog) get() []int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]int64(nil), l.nums...)
}

// newRSBed starts the bed in replica-set mode with the driver's retryable
// writes on, or skips t under MONGODB_URI when that server is not a
// replica set.
func newRSBed(t *testing.T, opts ...cbOption) *caseBed {
	t.Helper()
	b := newCaseBed(t, append([]cbOption{cbRetryWrites(), cbReplicaSet()}, opts...)...)
	if !b.replicaSet {
		t.Skipf("backend %s: retryable writes need a replica set", b.backend())
	}
	t.Logf("backend: %s", b.backend())
	return b
}

// TestRetryableWriteThroughTheBed: the first attempt of an insert fails by
// a fail point, the driver retries with the same txnNumber, and the
// document is stored once. Two fail points: failCommand with 91
// ShutdownInProgress (not applied, retried), and
// onPrimaryTransactionalWrite (applied, connection closed, retried: the
// server answers the retry from its record).
func TestRetryableWriteThroughTheBed(t *testing.T) {
	for _, tc := range []struct {
		name string
		fp   bson.D
	}{
		{"failCommand 91", cbD("configureFailPoint", "failCommand", "mode", cbD("times", 1),
			"data", cbD("failCommands", bson.A{"insert"}, "errorCode", 91, "appName", "wg-e2e-rs"))},
		{"onPrimaryTransactionalWrite", cbD("configureFailPoint", "onPrimaryTransactionalWrite", "mode", cbD("times", 1))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			log := &rsTxnLog{}
			b := newRSBed(t, log.option(), cbClientOptions(func(o *options.ClientOptions) { o.SetAppName("wg-e2e-rs") }))
			if err := b.failPoint(tc.fp); err != nil {
				t.Fatalf("configureFailPoint on %s: %v", b.backend(), err)
			}
			// No deadline on the call: the driver then retries once,
			// as without a client-side operation timeout.
			res, err := b.db.Collection("rs").InsertMany(context.Background(), []any{cbD("_id", "a"), cbD("_id", "b")})
			if err != nil {
				t.Fatalf("InsertMany on %s: %v, want the driver's retry to succeed", b.backend(), err)
			}
			if len(res.InsertedIDs) != 2 {
				t.Errorf("InsertedIDs %v", res.InsertedIDs)
			}
			nums := log.get()
			if len(nums) != 2 || nums[0] != nums[1] || nums[0] < 1 {
				t.Errorf("insert txnNumbers %v, want two attempts with the same txnNumber", nums)
			}
			if diff := cbDiff(cbQuote("a", "b"), b.ids("rs")); diff != "" {
				t.Errorf("stored (-want +got):\n%s", diff)
			}
			if b.server != nil {
				if n := b.proxy.Stats().Faults["fail_point"]; n != 1 {
					t.Errorf("the proxy's fail point acted %d times, want 1", n)
				}
			}
		})
	}
}
