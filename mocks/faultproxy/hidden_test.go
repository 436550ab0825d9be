package faultproxy

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/event"
)

func TestHoldUntilDeadline(t *testing.T) {
	var inner int
	m := HoldUntilDeadline(&event.CommandMonitor{Failed: func(context.Context, *event.CommandFailedEvent) { inner++ }})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	m.Failed(ctx, &event.CommandFailedEvent{Failure: errors.New("other failure")})
	if ctx.Err() != nil {
		t.Fatalf("an event without the marker was held")
	}
	m.Failed(ctx, &event.CommandFailedEvent{Failure: errors.New("(InterruptedDueToReplStateChange) operation was interrupted; " + RetryCutMarker)})
	if ctx.Err() == nil {
		t.Errorf("the marked event returned before the deadline")
	}
	m.Failed(context.Background(), &event.CommandFailedEvent{Failure: errors.New(RetryCutMarker)}) // no deadline: not held
	if inner != 3 {
		t.Errorf("inner monitor called %d times, want 3", inner)
	}
	if HoldUntilDeadline(nil).Failed == nil {
		t.Errorf("HoldUntilDeadline(nil) has no Failed")
	}
}

func TestRetryKey(t *testing.T) {
	cmd := func(body bson.D) *Command {
		raw, err := bson.Marshal(body)
		if err != nil {
			t.Fatal(err)
		}
		c := &Command{Body: raw}
		c.fillNames()
		return c
	}
	lsid := bson.D{{Key: "id", Value: bson.Binary{Subtype: 4, Data: []byte("0123456789abcdef")}}}
	a, ok := retryKey(cmd(bson.D{{Key: "update", Value: "c"}, {Key: "lsid", Value: lsid}, {Key: "txnNumber", Value: int64(7)}}))
	if !ok {
		t.Fatalf("no key for a retryable write")
	}
	b, _ := retryKey(cmd(bson.D{{Key: "update", Value: "c"}, {Key: "lsid", Value: lsid}, {Key: "txnNumber", Value: int64(8)}}))
	if a == b {
		t.Errorf("two txnNumbers share the key %q", a)
	}
	if _, ok := retryKey(cmd(bson.D{{Key: "update", Value: "c"}, {Key: "lsid", Value: lsid}})); ok {
		t.Errorf("a key without txnNumber (not a retryable write)")
	}
	if _, ok := retryKey(cmd(bson.D{{Key: "find", Value: "c"}, {Key: "lsid", Value: lsid}, {Key: "txnNumber", Value: int64(7)}})); ok {
		t.Errorf("a key for a find")
	}
}

func TestHiddenFaultsValidate(t *testing.T) {
	p, err := New()
	if err != nil {
		t.Fatal(err)
	}
	h := NewHiddenAttempts(p)
	if _, err := NewScript(h.Retries(), On("update").Do(h.ReplyLost(RetryOverloaded)), On("update").Do(RefuseMultiAt(2, WriteError{Code: 121})),
		On("update").Do(ShardKeyMove(0)), On("findAndModify").Do(ShardReplyLost(89))); err != nil {
		t.Fatalf("NewScript: %v", err)
	}
	if f := ShardReplyLost(9001); f.Kind() != FaultApplyThenError || f.cmdErr.CodeName != "SocketException" {
		t.Errorf("ShardReplyLost(9001) = %v %+v", f.Kind(), f.cmdErr)
	}
}
