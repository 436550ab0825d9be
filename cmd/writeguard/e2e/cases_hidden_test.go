package e2e

// Cases C67, C69, C70 and C71 (the reported cases of the fourth round, restated in each test):
// what the driver's hidden attempts, a multi update refused midway and a
// duplicate key met by an update must end as. Each test asserts the
// correct behaviour the case describes; the faults come from
// mocks/faultproxy (hidden.go, multi.go).

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/writeguard/writeguard"
	"github.com/writeguard/writeguard/mocks/faultproxy"
)

// hiddenBed is the replica-set bed with the driver's retryable writes on,
// HoldUntilDeadline (faultproxy.RetryCutByDeadline) around the bed's
// command counter and, when monitor is true, the wire monitor
// (wireMonitor) around both; it returns the bed and the proxy's
// hidden-attempt state.
func hiddenBed(t *testing.T, monitor bool, opts ...cbOption) (*caseBed, *faultproxy.HiddenAttempts) {
	t.Helper()
	opts = append([]cbOption{cbReplicaSet(), cbRetryWrites(), cbClientOptions(func(o *options.ClientOptions) {
		m := faultproxy.HoldUntilDeadline(o.Monitor)
		if monitor {
			m = wireMonitor(m)
		}
		o.SetMonitor(m)
	})}, opts...)
	b := newCaseBed(t, opts...)
	if b.server == nil {
		t.Skipf("%s: the hidden-attempt faults need the bed's proxy (faultproxy replica set over embedded FerretDB)", b.backend())
	}
	return b, faultproxy.NewHiddenAttempts(b.proxy)
}

// hiddenOutcome runs write and returns its one Outcome (written when err
// is nil).
func hiddenOutcome(t *testing.T, err error) (writeguard.Outcome, *writeguard.Report) {
	t.Helper()
	if err == nil {
		return writeguard.Outcome{Disposition: writeguard.Written}, nil
	}
	r := cbReport(t, err)
	if len(r.Outcomes) != 1 {
		t.Fatalf("%d outcomes, want 1: %v", len(r.Outcomes), err)
	}
	return r.Outcomes[0], r
}

// balance reads acct's balance directly.
func balance(t *testing.T, b *caseBed, coll, id string) int64 {
	t.Helper()
	var d bson.M
	if err := b.ddb.Collection(coll).FindOne(b.ctx, cbD("_id", id)).Decode(&d); err != nil {
		t.Fatalf("read %s: %v", id, err)
	}
	v, _ := d["balance"].(int64)
	if i, ok := d["balance"].(int32); ok {
		v = int64(i)
	}
	return v
}

// hiddenUpdate runs UpdateOne {$inc: {balance: 100}} on acct-1 under a
// ReplyLost(fate) on its first update command, within deadline, and checks
// C67/C69's rule: unknown with MaybeWritten, applied once, never handed
// back by Remaining.
func hiddenUpdate(t *testing.T, fate faultproxy.RetryFate, deadline time.Duration) {
	for _, monitor := range []bool{false, true} {
		t.Run(fmt.Sprintf("monitor=%v", monitor), func(t *testing.T) { hiddenUpdateOnce(t, fate, deadline, monitor) })
	}
}

func hiddenUpdateOnce(t *testing.T, fate faultproxy.RetryFate, deadline time.Duration, monitor bool) {
	b, h := hiddenBed(t, monitor)
	const coll = "accounts"
	b.seed(coll, cbD("_id", "acct-1", "balance", int64(0)))
	b.script(h.Retries(), faultproxy.On("update").In(b.ns(coll)).Do(h.ReplyLost(fate)))
	g := b.guard(coll)
	ctx, cancel := context.WithTimeout(b.ctx, deadline)
	defer cancel()
	t0 := time.Now()
	_, err := g.UpdateOne(ctx, cbD("_id", "acct-1"), cbD("$inc", cbD("balance", int64(100))))
	t.Logf("UpdateOne returned after %v", time.Since(t0).Round(time.Millisecond))
	o, r := hiddenOutcome(t, err)
	lost, retries := h.Counts()
	t.Logf("%s: %s maybe=%v attempts=%d reason=%s; err %v; lost %v, retries answered %v", fate, o.Disposition, o.MaybeWritten, o.Attempts, o.Reason, err, lost, retries)
	if lost[fate] != 1 {
		t.Fatalf("the fault did not fire: lost %v", lost)
	}
	if got := balance(t, b, coll, "acct-1"); got != 100 {
		t.Errorf("balance %d, want 100: the $inc was applied %d times", got, got/100)
	}
	if o.Disposition != writeguard.OutcomeUnknown || !o.MaybeWritten {
		t.Errorf("outcome %s maybe=%v, want unknown with MaybeWritten: the first attempt was applied, the driver's error describes its retry only", o.Disposition, o.MaybeWritten)
	}
	if r != nil && slices.Contains(r.Remaining().Indexes, 0) {
		t.Errorf("Remaining hands the applied, non-idempotent update back (Indexes %v): finishing the call would apply it twice", r.Remaining().Indexes)
	}
}

// hiddenInsert runs InsertOne {_id: "ins-1"} under ReplyLost(fate) and
// checks that it is read back: stored, not a conflict on its own _id.
func hiddenInsert(t *testing.T, fate faultproxy.RetryFate, deadline time.Duration) {
	for _, monitor := range []bool{false, true} {
		t.Run(fmt.Sprintf("monitor=%v", monitor), func(t *testing.T) { hiddenInsertOnce(t, fate, deadline, monitor) })
	}
}

func hiddenInsertOnce(t *testing.T, fate faultproxy.RetryFate, deadline time.Duration, monitor bool) {
	b, h := hiddenBed(t, monitor)
	const coll = "inserts"
	b.script(h.Retries(), faultproxy.On("insert").In(b.ns(coll)).Do(h.ReplyLost(fate)))
	g := b.guard(coll)
	ctx, cancel := context.WithTimeout(b.ctx, deadline)
	defer cancel()
	_, err := g.InsertOne(ctx, cbD("_id", "ins-1", "qty", 1))
	o, r := hiddenOutcome(t, err)
	lost, _ := h.Counts()
	t.Logf("%s insert: %s maybe=%v attempts=%d; err %v", fate, o.Disposition, o.MaybeWritten, o.Attempts, err)
	if lost[fate] != 1 {
		t.Fatalf("the fault did not fire: lost %v", lost)
	}
	if ids := b.ids(coll); len(ids) != 1 {
		t.Fatalf("stored %v, want ins-1 once", ids)
	}
	if o.Disposition == writeguard.OutcomeUnknown && o.MaybeWritten && ctx.Err() != nil && r != nil {
		// the deadline ended the call: nothing can be read on the caller's
		// context, so the insert is unknown with MaybeWritten; finishing it
		// (Remaining, README "Finishing a call") reads it back on its _id.
		o = finishHidden(t, b, g.Guarded, r)
	}
	if !o.Disposition.Stored() || o.Disposition == writeguard.Conflicted || o.Disposition == writeguard.ConflictSkipped {
		t.Errorf("insert %s, want it read back as stored (written or already_written): it is in the collection, applied by the driver's first attempt", o.Disposition)
	}
	if ids := b.ids(coll); len(ids) != 1 {
		t.Errorf("stored %v after finishing, want ins-1 once", ids)
	}
}

// finishHidden finishes a call that the deadline ended, as the README's
// "Finishing a call" does, and returns the outcome of its one input.
func finishHidden(t *testing.T, b *caseBed, g *writeguard.Guarded, r *writeguard.Report) writeguard.Outcome {
	t.Helper()
	rest := r.Remaining()
	if rest.Len() != 1 {
		t.Fatalf("Remaining hands back %d inputs, want the possibly applied insert (its _id makes it safe)", rest.Len())
	}
	_, err := g.InsertMany(rest.Context(b.ctx), rest.Documents)
	o, _ := hiddenOutcome(t, err) // err == nil: stored (the caller counts it once)
	t.Logf("finished: %s", o.Disposition)
	return o
}

// TestC67DriverRetryCutByDeadlineUpdate: UpdateOne $inc with a deadline;
// the first attempt is applied and its reply lost; the deadline ends as
// the driver is about to send its retry (its calculateMaxTimeMS / context
// check fails before the send).
func TestC67DriverRetryCutByDeadlineUpdate(t *testing.T) {
	hiddenUpdate(t, faultproxy.RetryCutByDeadline, time.Second)
}

// TestC67DriverRetryCutByDeadlineInsert: the same for an insert: read
// back, not a conflict on its own _id.
func TestC67DriverRetryCutByDeadlineInsert(t *testing.T) {
	hiddenInsert(t, faultproxy.RetryCutByDeadline, time.Second)
}

// TestC67DriverRetryRefusedByPoolClear: the driver's retry is refused by
// a pool clear (its checkout gets poolClearedError, returned as the
// call's error): the same rule.
func TestC67DriverRetryRefusedByPoolClear(t *testing.T) {
	hiddenUpdate(t, faultproxy.RetryPoolCleared, time.Second)
}

// TestC67DriverRetryOverloadedNoWritesPerformed: the driver's retry is
// answered 462 labelled NoWritesPerformed and its overload backoff is cut
// short by the deadline: the driver returns that retry's error.
func TestC67DriverRetryOverloadedNoWritesPerformed(t *testing.T) {
	hiddenUpdate(t, faultproxy.RetryOverloaded, time.Second)
}

// TestC69IncompleteHistoryOnRetry: the retry's reply is 217
// IncompleteTransactionHistory: maybe applied.
func TestC69IncompleteHistoryOnRetry(t *testing.T) {
	hiddenUpdate(t, faultproxy.RetryIncompleteHistory, 30*time.Second)
}

// TestC69IncompleteHistoryInsertReadBack: an insert whose retry meets 217
// is read back.
func TestC69IncompleteHistoryInsertReadBack(t *testing.T) {
	hiddenInsert(t, faultproxy.RetryIncompleteHistory, 30*time.Second)
}

// multiRefused runs UpdateMany({}, {$inc: {n: 1}}) over a (n 0), b (n 1),
// c (n 0), refused on its second document with we after a was updated.
func multiRefused(t *testing.T, we faultproxy.WriteError) {
	b := newCaseBed(t)
	if b.server == nil {
		t.Skipf("%s: RefuseMultiAt needs the bed's proxy", b.backend())
	}
	const coll = "multi"
	b.seed(coll, cbD("_id", "a", "n", int64(0)), cbD("_id", "b", "n", int64(1)), cbD("_id", "c", "n", int64(0)))
	b.script(faultproxy.On("update").In(b.ns(coll)).Always().Do(faultproxy.RefuseMultiAt(2, we)))
	g := b.guard(coll, writeguard.WithConflictHandler(writeguard.ConflictSkip()))
	_, err := g.UpdateMany(b.ctx, bson.D{}, cbD("$inc", cbD("n", int64(1))))
	o, _ := hiddenOutcome(t, err)
	t.Logf("code %d: %s maybe=%v handled=%v attempts=%d; err %v", we.Code, o.Disposition, o.MaybeWritten, writeguard.Handled(err), o.Attempts, err)
	got := map[string]int64{}
	for _, d := range b.docs(coll) {
		got[d.Lookup("_id").StringValue()] = d.Lookup("n").AsInt64()
	}
	if got["a"] != 1 {
		t.Errorf("a.n = %d, want 1 (the refused statement changed a once; it must never be applied again)", got["a"])
	}
	switch o.Disposition {
	case writeguard.DeadLettered, writeguard.Conflicted, writeguard.ConflictSkipped:
		t.Errorf("outcome %s: a write error on a multi statement proves nothing about the documents it changed first; want maybe applied", o.Disposition)
	}
	if !o.MaybeWritten {
		t.Errorf("MaybeWritten false, want true: document a was changed before the refusal")
	}
	if n := len(b.dlq(g.dlqColl)); n != 0 {
		t.Errorf("%d dead-letter entries: replaying one applies the $inc to a again", n)
	}
}

// TestC70MultiUpdateRefusedByValidator: 121 on the second document.
func TestC70MultiUpdateRefusedByValidator(t *testing.T) {
	multiRefused(t, faultproxy.WriteError{Code: 121, Message: "Document failed validation"})
}

// TestC70MultiUpdateRefusedByDuplicateKey: 11000 on the second document.
func TestC70MultiUpdateRefusedByDuplicateKey(t *testing.T) {
	multiRefused(t, faultproxy.WriteError{Code: 11000, Message: "E11000 duplicate key error collection: app.multi index: email_1 dup key: { email: \"a@example.com\" }",
		KeyPattern: cbD("email", 1), KeyValue: cbD("email", "a@example.com")})
}

// TestC71SkipHandlerDoesNotDropAnUpdate: UpdateOne $set of a unique email
// to a taken value, ConflictSkip: a conflict the caller sees, not
// conflict_skipped. FerretDB answers an update that meets its unique index
// with 1 InternalError, not 11000 (measured): the proxy refuses the
// statement with mongod's 11000 write error instead.
func TestC71SkipHandlerDoesNotDropAnUpdate(t *testing.T) {
	b := newCaseBed(t)
	const coll = "users"
	b.seed(coll, cbD("_id", "u-1", "email", "a@example.com"), cbD("_id", "u-2", "email", "b@example.com"))
	b.script(faultproxy.On("update").In(b.ns(coll)).Always().Do(faultproxy.RejectDocuments(cbIDs("u-2"), faultproxy.WriteError{Code: 11000,
		Message:    "E11000 duplicate key error collection: app.users index: email_1 dup key: { email: \"a@example.com\" }",
		KeyPattern: cbD("email", 1), KeyValue: cbD("email", "a@example.com")})))
	g := b.guard(coll, writeguard.WithConflictHandler(writeguard.ConflictSkip()))
	_, err := g.UpdateOne(b.ctx, cbD("_id", "u-2"), cbD("$set", cbD("email", "a@example.com")))
	if err == nil {
		t.Fatalf("UpdateOne succeeded: the unique index on email did not refuse it (%s)", b.backend())
	}
	o, _ := hiddenOutcome(t, err)
	t.Logf("%s handled=%v; IsDuplicateKeyError %v; err %v", o.Disposition, writeguard.Handled(err), mongo.IsDuplicateKeyError(err), err)
	if o.Disposition != writeguard.Conflicted {
		t.Errorf("outcome %s, want conflict: a duplicate key met by an update is not \"the document is already there\"", o.Disposition)
	}
	if writeguard.Handled(err) {
		t.Errorf("Handled(err) true: the caller must see the dropped update")
	}
	if !mongo.IsDuplicateKeyError(err) {
		t.Errorf("mongo.IsDuplicateKeyError(err) false for a call that ended in a conflict")
	}
	var d bson.M
	if err := b.ddb.Collection(coll).FindOne(b.ctx, cbD("_id", "u-2")).Decode(&d); err != nil || d["email"] != "b@example.com" {
		t.Errorf("u-2 = %v (%v), want its email unchanged", d, err)
	}
}
