package faultproxy_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/event"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// txnLog records the txnNumber of every insert the driver starts.
type txnLog struct {
	mu   sync.Mutex
	nums []int64
}

func (l *txnLog) monitor() *event.CommandMonitor {
	return &event.CommandMonitor{Started: func(_ context.Context, e *event.CommandStartedEvent) {
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
	}}
}

func (l *txnLog) get() []int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]int64(nil), l.nums...)
}

// connectRS opens a client with retryable writes on, an app name and a
// txnNumber log.
func connectRS(t *testing.T, uri, app string) (*mongo.Client, *txnLog) {
	t.Helper()
	log := &txnLog{}
	c, err := mongo.Connect(options.Client().ApplyURI(uri).SetRetryWrites(true).SetAppName(app).
		SetMonitor(log.monitor()).SetServerSelectionTimeout(testTimeout))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Disconnect(context.Background()) })
	return c, log
}

// bg is the context of the calls whose attempts are counted: with a
// deadline the driver retries a retryable write as often as the deadline
// allows (client-side operation timeout), without one exactly once.
var bg = context.Background()

// failPoint runs configureFailPoint; a second time if the first met the
// pool cleared by an earlier dropped connection (RunCommand is not
// retried by the driver).
func failPoint(t *testing.T, c *mongo.Client, cmd bson.D) {
	t.Helper()
	err := c.Database("admin").RunCommand(opCtx(t), cmd).Err()
	if err != nil {
		err = c.Database("admin").RunCommand(opCtx(t), cmd).Err()
	}
	if err != nil {
		t.Fatalf("configureFailPoint: %v", err)
	}
}

func fc(mode any, data bson.D) bson.D {
	return bson.D{{Key: "configureFailPoint", Value: "failCommand"}, {Key: "mode", Value: mode}, {Key: "data", Value: data}}
}

func times(n int) bson.D { return bson.D{{Key: "times", Value: n}} }

func TestFailCommandErrorCodeAndRetry(t *testing.T) {
	p, rec := startReplicaSet(t)
	c, log := connectRS(t, p.URI(), "fp")
	coll := c.Database("app").Collection("users")

	// times 1: the first attempt fails with 91, the server adds
	// RetryableWriteError, the driver retries with the same txnNumber.
	failPoint(t, c, fc(times(1), bson.D{{Key: "failCommands", Value: bson.A{"insert"}}, {Key: "errorCode", Value: 91}}))
	if _, err := coll.InsertOne(bg, bson.D{{Key: "_id", Value: 1}}); err != nil {
		t.Fatalf("the retry must succeed: %v", err)
	}
	if got := log.get(); len(got) != 2 || got[0] != got[1] || got[0] < 1 {
		t.Errorf("txnNumbers %v, want the same one twice", got)
	}
	if got := rec.ids(); !cmp.Equal(got, idStrings(1)) {
		t.Errorf("upstream stored %v, want [1]", got)
	}

	// times 2: the retry fails too; the error carries the label.
	failPoint(t, c, fc(times(2), bson.D{{Key: "failCommands", Value: bson.A{"insert"}}, {Key: "errorCode", Value: 91}}))
	_, err := coll.InsertOne(bg, bson.D{{Key: "_id", Value: 2}})
	var ce mongo.CommandError
	if !errors.As(err, &ce) || ce.Code != 91 || ce.Name != "ShutdownInProgress" || !ce.HasErrorLabel("RetryableWriteError") {
		t.Errorf("err = %v, want 91 ShutdownInProgress with RetryableWriteError", err)
	}

	// errorLabels given: exactly those, so no retry.
	failPoint(t, c, fc("alwaysOn", bson.D{{Key: "failCommands", Value: bson.A{"insert"}}, {Key: "errorCode", Value: 91}, {Key: "errorLabels", Value: bson.A{}}}))
	before := len(log.get())
	_, err = coll.InsertOne(bg, bson.D{{Key: "_id", Value: 3}})
	if !errors.As(err, &ce) || ce.Code != 91 || ce.HasErrorLabel("RetryableWriteError") || len(log.get()) != before+1 {
		t.Errorf("err = %v after %d attempts, want 91 without a label and no retry", err, len(log.get())-before)
	}
	failPoint(t, c, fc("off", nil))
	if _, err := coll.InsertOne(bg, bson.D{{Key: "_id", Value: 4}}); err != nil {
		t.Errorf("mode off: %v", err)
	}
	// InsertMany is retried the same way.
	failPoint(t, c, fc(times(1), bson.D{{Key: "failCommands", Value: bson.A{"insert"}}, {Key: "errorCode", Value: 91}}))
	_, err = coll.InsertMany(bg, idDocs(5), options.InsertMany()) // still retryable
	if err != nil {
		t.Errorf("retryable InsertMany: %v", err)
	}
	if got := rec.ids(); !cmp.Equal(got, idStrings(4, 5)) {
		t.Errorf("upstream stored %v, want [4 5]", got)
	}
	if n := p.Stats().Faults["fail_point"]; n != 1+2+1+1 {
		t.Errorf("fail_point faults = %d, want 5", n)
	}
}

func TestFailCommandCloseBlockSkipAppName(t *testing.T) {
	p, rec := startReplicaSet(t)
	c, _ := connectRS(t, p.URI(), "fp")
	other, _ := connectRS(t, p.URI(), "other")
	coll := c.Database("app").Collection("users")

	// closeConnection on both attempts: network error, nothing stored.
	failPoint(t, c, fc(times(2), bson.D{{Key: "failCommands", Value: bson.A{"insert"}}, {Key: "closeConnection", Value: true}}))
	if _, err := coll.InsertOne(bg, bson.D{{Key: "_id", Value: 1}}); !mongo.IsNetworkError(err) {
		t.Errorf("err = %v, want a network error", err)
	}
	if got := rec.ids(); len(got) != 0 {
		t.Errorf("upstream stored %v, want nothing", got)
	}

	// blockConnection for the named application only.
	failPoint(t, c, fc("alwaysOn", bson.D{{Key: "failCommands", Value: bson.A{"insert"}}, {Key: "appName", Value: "fp"},
		{Key: "blockConnection", Value: true}, {Key: "blockTimeMS", Value: 300}}))
	t0 := time.Now()
	if _, err := other.Database("app").Collection("users").InsertOne(opCtx(t), bson.D{{Key: "_id", Value: 2}}); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(t0); d > 250*time.Millisecond {
		t.Errorf("another application was blocked %v", d)
	}
	t0 = time.Now()
	if _, err := coll.InsertOne(bg, bson.D{{Key: "_id", Value: 3}}); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(t0); d < 300*time.Millisecond {
		t.Errorf("blocked only %v, want ≥ 300ms", d)
	}

	// skip 1: the first matching command passes, the next ones fail.
	failPoint(t, c, fc(bson.D{{Key: "skip", Value: 1}}, bson.D{{Key: "failCommands", Value: bson.A{"delete"}}, {Key: "errorCode", Value: 2}}))
	if _, err := coll.DeleteOne(bg, bson.D{{Key: "_id", Value: 2}}); err != nil {
		t.Errorf("first delete: %v", err)
	}
	var ce mongo.CommandError
	if _, err := coll.DeleteOne(bg, bson.D{{Key: "_id", Value: 3}}); !errors.As(err, &ce) || ce.Code != 2 {
		t.Errorf("second delete: %v, want code 2", err)
	}
	failPoint(t, c, fc("off", nil))

	err := c.Database("admin").RunCommand(opCtx(t), bson.D{{Key: "configureFailPoint", Value: "noSuchFailPoint"}, {Key: "mode", Value: "alwaysOn"}}).Err()
	if !errors.As(err, &ce) || ce.Code != 2 {
		t.Errorf("unknown fail point: %v, want a BadValue error", err)
	}
}

// TestFailCommandWriteConcernError: the write runs, then the write concern
// error is added; with a retryable code the server labels it and the
// driver's retry is answered from the record.
func TestFailCommandWriteConcernError(t *testing.T) {
	p, rec := startReplicaSet(t)
	c, log := connectRS(t, p.URI(), "fp")
	coll := c.Database("app").Collection("users")
	failPoint(t, c, fc(times(1), bson.D{{Key: "failCommands", Value: bson.A{"insert"}},
		{Key: "writeConcernError", Value: bson.D{{Key: "code", Value: 91}, {Key: "errmsg", Value: "Replication is being shut down"}}}}))
	if _, err := coll.InsertOne(bg, bson.D{{Key: "_id", Value: 1}}); err != nil {
		t.Fatalf("the retry must succeed: %v", err)
	}
	if got := log.get(); len(got) != 2 || got[0] != got[1] {
		t.Errorf("txnNumbers %v, want the same one twice", got)
	}
	if got := rec.ids(); !cmp.Equal(got, idStrings(1)) {
		t.Errorf("upstream stored %v, want [1] once", got)
	}
	failPoint(t, c, fc(times(1), bson.D{{Key: "failCommands", Value: bson.A{"insert"}},
		{Key: "writeConcernError", Value: bson.D{{Key: "code", Value: 64}, {Key: "errmsg", Value: "waiting for replication timed out"},
			{Key: "errInfo", Value: bson.D{{Key: "wtimeout", Value: true}}}}}}))
	_, err := coll.InsertOne(bg, bson.D{{Key: "_id", Value: 2}})
	var we mongo.WriteException
	if !errors.As(err, &we) || we.WriteConcernError == nil || we.WriteConcernError.Code != 64 || we.HasErrorLabel("RetryableWriteError") {
		t.Errorf("err = %v, want the 64 write concern error, unlabelled", err)
	}
	if got := rec.ids(); !cmp.Equal(got, idStrings(2)) {
		t.Errorf("upstream stored %v, want [2]: the write ran", got)
	}
}

// TestOnPrimaryTransactionalWrite: the write commits, the connection
// closes, the retry is answered from the record.
func TestOnPrimaryTransactionalWrite(t *testing.T) {
	p, rec := startReplicaSet(t)
	c, log := connectRS(t, p.URI(), "fp")
	coll := c.Database("app").Collection("users")
	failPoint(t, c, bson.D{{Key: "configureFailPoint", Value: "onPrimaryTransactionalWrite"}, {Key: "mode", Value: times(1)}})
	res, err := coll.InsertMany(bg, idDocs(1, 2, 3))
	if err != nil || len(res.InsertedIDs) != 3 {
		t.Fatalf("InsertMany = %v, %v; want the retry to succeed", res, err)
	}
	if got := log.get(); len(got) != 2 || got[0] != got[1] {
		t.Errorf("txnNumbers %v, want the same one twice", got)
	}
	if got := rec.ids(); !cmp.Equal(got, idStrings(1, 2, 3)) {
		t.Errorf("upstream stored %v, want each document once", got)
	}
	// failBeforeCommitExceptionCode: nothing applied, the connection
	// closes, the retry applies the write.
	failPoint(t, c, bson.D{{Key: "configureFailPoint", Value: "onPrimaryTransactionalWrite"}, {Key: "mode", Value: times(1)},
		{Key: "data", Value: bson.D{{Key: "failBeforeCommitExceptionCode", Value: 1}}}})
	if _, err := coll.InsertOne(bg, bson.D{{Key: "_id", Value: 9}}); err != nil {
		t.Fatalf("InsertOne after a rolled-back attempt: %v", err)
	}
	if got := rec.ids(); !cmp.Equal(got, idStrings(9)) {
		t.Errorf("upstream stored %v, want [9] once", got)
	}
	// Not for writes without txnNumber.
	failPoint(t, c, bson.D{{Key: "configureFailPoint", Value: "onPrimaryTransactionalWrite"}, {Key: "mode", Value: "alwaysOn"}})
	plain := connect(t, p.URI(), false)
	if _, err := plain.Database("app").Collection("users").InsertOne(opCtx(t), bson.D{{Key: "_id", Value: 4}}); err != nil {
		t.Errorf("a write without txnNumber: %v", err)
	}
	if st := p.Stats(); st.Faults["fail_point"] != 2 {
		t.Errorf("fail_point faults = %d, want 2", st.Faults["fail_point"])
	}
}
