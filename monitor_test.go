package writeguard_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/event"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.mongodb.org/mongo-driver/v2/x/mongo/driver"

	"github.com/writeguard/writeguard"
	"github.com/writeguard/writeguard/mocks"
)

// wireTarget is a Fake whose UpdateOne first publishes, through the
// monitor, the finished events the driver would have published for the
// hidden attempts of its call (on the call's context, as the driver
// does: operation.go publishFinishedEvent(ctx, ...)).
type wireTarget struct {
	*mocks.Fake
	mon    *event.CommandMonitor
	events [][]func(ctx context.Context, m *event.CommandMonitor)
}

func (w *wireTarget) UpdateOne(ctx context.Context, filter, update any, opts ...options.Lister[options.UpdateOneOptions]) (*mongo.UpdateResult, error) {
	if len(w.events) > 0 {
		for _, ev := range w.events[0] {
			ev(ctx, w.mon)
		}
		w.events = w.events[1:]
	}
	return w.Fake.UpdateOne(ctx, filter, update, opts...)
}

func succeeded(id int64, reply string) func(context.Context, *event.CommandMonitor) {
	return func(ctx context.Context, m *event.CommandMonitor) {
		var raw bson.Raw
		if err := bson.UnmarshalExtJSON([]byte(reply), false, &raw); err != nil {
			panic(err)
		}
		m.Succeeded(ctx, &event.CommandSucceededEvent{CommandFinishedEvent: event.CommandFinishedEvent{CommandName: "update", RequestID: id, ConnectionID: "c1"}, Reply: raw})
	}
}

func failed(id int64, err error) func(context.Context, *event.CommandMonitor) {
	return func(ctx context.Context, m *event.CommandMonitor) {
		m.Failed(ctx, &event.CommandFailedEvent{CommandFinishedEvent: event.CommandFinishedEvent{CommandName: "update", RequestID: id, ConnectionID: fmt.Sprint("c", id)}, Failure: err})
	}
}

var (
	errDeadlineBeforeSend = fmt.Errorf("%w: rtt 2ms", driver.ErrDeadlineWouldBeExceeded)
	errLostReply          = driver.Error{Message: "connection reset by peer", Labels: []string{"NetworkError"}, Wrapped: io.EOF}
)

type evs = []func(context.Context, *event.CommandMonitor)

func wireFixture(t *testing.T, events ...evs) (*wireTarget, *fixture) {
	t.Helper()
	fake := mocks.NewFake("db.wire").Topology(mocks.ReplicaSet)
	if err := fake.Seed(bson.D{{Key: "_id", Value: "acct-1"}, {Key: "balance", Value: int64(0)}}); err != nil {
		t.Fatal(err)
	}
	wt := &wireTarget{Fake: fake, mon: writeguard.Monitor(nil), events: events}
	fx := &fixture{fake: fake, sink: &mocks.Sink{}, rec: &mocks.Recorder{}}
	g, err := writeguard.New(wt, writeguard.WithDeadLetter(fx.sink), writeguard.WithHooks(fx.rec.Hooks()))
	if err != nil {
		t.Fatal(err)
	}
	fx.g = g
	return wt, fx
}

// With the monitor, the hidden-attempt shapes are decided by the events:
// a deadline before the retry's send after a first attempt whose reply
// was lost (a network error event) leaves the update maybe applied:
// unknown, never sent again.
func TestMonitorHiddenLostReplyUnknown(t *testing.T) {
	_, fx := wireFixture(t, evs{failed(1, errLostReply), failed(2, errDeadlineBeforeSend)})
	fx.fake.Script(mocks.AppliedThen(errDeadlineBeforeSend))
	o := oneOutcome(t, updateInc(fx.g))
	if o.Disposition != writeguard.OutcomeUnknown || !o.MaybeWritten || len(fx.fake.Calls()) != 1 {
		t.Errorf("outcome %s MaybeWritten %v after %d calls, want unknown after 1", o.Disposition, o.MaybeWritten, len(fx.fake.Calls()))
	}
	if ends := fx.rec.AttemptEnds(); len(ends) != 1 || ends[0].WireCommands != 1 {
		t.Errorf("attempt ends %+v, want one with WireCommands 1", ends)
	}
}

// The only finished event is a pre-send error: nothing was sent on any
// attempt; the update is sent again and applied once (balance 100).
func TestMonitorPreSendOnlyNotSent(t *testing.T) {
	_, fx := wireFixture(t, evs{failed(1, errDeadlineBeforeSend)})
	fx.fake.Script(mocks.Fail(errDeadlineBeforeSend))
	if err := updateInc(fx.g); err != nil {
		t.Fatalf("err = %v, want the update re-sent and written", err)
	}
	if b := balance(t, fx.fake, "acct-1"); b != 100 || len(fx.fake.Calls()) != 2 {
		t.Errorf("balance %d after %d calls, want 100 after 2", b, len(fx.fake.Calls()))
	}
	if ends := fx.rec.AttemptEnds(); len(ends) != 2 || ends[0].WireCommands != 0 {
		t.Errorf("attempt ends %+v, want 2, the first with WireCommands 0", ends)
	}
}

// A hidden first attempt whose reply shows the update applied (n: 1, a
// retryable write concern error made the driver retry) and a retry cut
// by the deadline: the update was written by the first attempt, not
// sent again; the write concern error keeps it unconfirmed.
func TestMonitorHiddenReplyApplied(t *testing.T) {
	_, fx := wireFixture(t, evs{
		succeeded(1, `{"ok":1,"n":1,"nModified":1,"writeConcernError":{"code":91,"errmsg":"shutting down"},"errorLabels":["RetryableWriteError"]}`),
		failed(2, errDeadlineBeforeSend)})
	fx.fake.Script(mocks.AppliedThen(errDeadlineBeforeSend))
	o := oneOutcome(t, updateInc(fx.g))
	if o.Disposition != writeguard.WrittenUnconfirmed || len(fx.fake.Calls()) != 1 || balance(t, fx.fake, "acct-1") != 100 {
		t.Errorf("outcome %s after %d calls, want written_unconfirmed after 1", o.Disposition, len(fx.fake.Calls()))
	}
	// Without the write concern error the first attempt's reply proves
	// the update written: the call succeeds.
	_, fx = wireFixture(t, evs{succeeded(1, `{"ok":1,"n":1,"nModified":1}`), failed(2, errDeadlineBeforeSend)})
	fx.fake.Script(mocks.AppliedThen(errDeadlineBeforeSend))
	if err := updateInc(fx.g); err != nil || len(fx.fake.Calls()) != 1 {
		t.Errorf("err %v after %d calls, want written after 1", err, len(fx.fake.Calls()))
	}
}

// An event told twice (same request and connection id) counts once.
func TestMonitorEventsCountedOnce(t *testing.T) {
	_, fx := wireFixture(t, evs{failed(1, errLostReply), failed(1, errLostReply), failed(2, errDeadlineBeforeSend)})
	fx.fake.Script(mocks.AppliedThen(errDeadlineBeforeSend))
	_ = updateInc(fx.g)
	if ends := fx.rec.AttemptEnds(); len(ends) != 1 || ends[0].WireCommands != 1 {
		t.Errorf("attempt ends %+v, want WireCommands 1", ends)
	}
}

// Without the monitor on the client, an attempt with a server reply and
// no event is noticed and logged once; the rules without the wire hold
// (the update after a hidden attempt is unknown).
func TestMonitorNotInstalledLoggedOnce(t *testing.T) {
	var buf bytes.Buffer
	fake := mocks.NewFake("db.nomon").Topology(mocks.ReplicaSet)
	if err := fake.Seed(bson.D{{Key: "_id", Value: "acct-1"}, {Key: "balance", Value: int64(0)}}); err != nil {
		t.Fatal(err)
	}
	g, err := writeguard.New(fake, writeguard.WithLogger(slog.New(slog.NewTextHandler(&buf, nil))))
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if err := updateInc(g); err != nil {
			t.Fatal(err)
		}
	}
	if n := strings.Count(buf.String(), "no writeguard.Monitor"); n != 1 {
		t.Errorf("logged %d times, want once:\n%s", n, buf.String())
	}
	fake.Script(mocks.AppliedThen(errDeadlineBeforeSend))
	if o := oneOutcome(t, updateInc(g)); o.Disposition != writeguard.OutcomeUnknown {
		t.Errorf("outcome %s, want unknown (rule without the wire)", o.Disposition)
	}
}

// Monitor composes with the caller's monitor: every event reaches it, and
// its Started callback is kept.
func TestMonitorComposes(t *testing.T) {
	var started, ok, bad int
	inner := &event.CommandMonitor{
		Started:   func(context.Context, *event.CommandStartedEvent) { started++ },
		Succeeded: func(context.Context, *event.CommandSucceededEvent) { ok++ },
		Failed:    func(context.Context, *event.CommandFailedEvent) { bad++ },
	}
	m := writeguard.Monitor(inner)
	m.Started(context.Background(), &event.CommandStartedEvent{})
	m.Succeeded(context.Background(), &event.CommandSucceededEvent{})
	m.Failed(context.Background(), &event.CommandFailedEvent{Failure: io.EOF})
	if started != 1 || ok != 1 || bad != 1 {
		t.Errorf("inner saw %d/%d/%d, want 1/1/1", started, ok, bad)
	}
	if writeguard.Monitor(nil).Started != nil {
		t.Error("Monitor(nil) sets Started: the driver would copy every command")
	}
}

// Events of other commands on an attempt's context (client-side
// encryption's key vault find, say) say nothing about the write: a
// succeeded find does not make the update written.
func TestMonitorIgnoresOtherCommands(t *testing.T) {
	find := func(ctx context.Context, m *event.CommandMonitor) {
		var raw bson.Raw
		if err := bson.UnmarshalExtJSON([]byte(`{"ok":1,"cursor":{"id":0,"ns":"keyvault.datakeys","firstBatch":[]}}`), false, &raw); err != nil {
			panic(err)
		}
		m.Succeeded(ctx, &event.CommandSucceededEvent{CommandFinishedEvent: event.CommandFinishedEvent{CommandName: "find", RequestID: 9, ConnectionID: "c9"}, Reply: raw})
	}
	_, fx := wireFixture(t, evs{find, failed(1, errLostReply), failed(2, errDeadlineBeforeSend)})
	fx.fake.Script(mocks.AppliedThen(errDeadlineBeforeSend))
	o := oneOutcome(t, updateInc(fx.g))
	if o.Disposition != writeguard.OutcomeUnknown || len(fx.fake.Calls()) != 1 {
		t.Errorf("outcome %s after %d calls, want unknown after 1", o.Disposition, len(fx.fake.Calls()))
	}
	if ends := fx.rec.AttemptEnds(); len(ends) != 1 || ends[0].WireCommands != 1 {
		t.Errorf("attempt ends %+v, want WireCommands 1 (the find not counted)", ends)
	}
}
