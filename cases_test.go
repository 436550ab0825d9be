package writeguard_test

// Tests of the reported failures in testdata/CASES.md (C01...C29), against the
// scripted fake. Their end-to-end versions, with the real driver, the
// fault proxy and a server, live in cmd/writeguard/e2e.

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/google/go-cmp/cmp"

	"github.com/writeguard/writeguard"
	"github.com/writeguard/writeguard/mocks"
	"github.com/writeguard/writeguard/policy"
)

var ctx = context.Background()

func requireQty(doc bson.Raw) (bson.Raw, bool) {
	if _, err := doc.LookupErr("qty"); err == nil {
		return nil, false
	}
	id := doc.Lookup("_id")
	info, _ := bson.Marshal(bson.D{{Key: "failingDocumentId", Value: id}, {Key: "details", Value: bson.D{
		{Key: "operatorName", Value: "$jsonSchema"},
		{Key: "schemaRulesNotSatisfied", Value: bson.A{bson.D{
			{Key: "operatorName", Value: "required"},
			{Key: "specifiedAs", Value: bson.D{{Key: "required", Value: bson.A{"qty"}}}},
			{Key: "missingProperties", Value: bson.A{"qty"}},
		}}},
	}}})
	return info, true
}

// C01: the caller's documents have no _id; attempt 1 is applied but its
// reply is lost. writeguard assigns ids once, so attempt 2's duplicates are
// resolved as its own writes: 3 documents, success, ids in input order.
func TestC01RetryWithoutIDMakesNoDuplicates(t *testing.T) {
	for _, ordered := range []bool{true, false} {
		t.Run(fmt.Sprintf("ordered=%v", ordered), func(t *testing.T) {
			fake := mocks.NewFake("db.c01").Script(mocks.LoseReply())
			fx := newFixture(t, fake)
			docs := []bson.M{{"n": 1}, {"n": 2}, {"n": 3}}
			res, err := fx.g.InsertMany(ctx, docs, options.InsertMany().SetOrdered(ordered))
			if err != nil {
				t.Fatalf("InsertMany: %v", err)
			}
			if got := len(fake.Docs()); got != 3 {
				t.Fatalf("stored %d documents, want 3", got)
			}
			stored := storedIDs(t, fake)
			var returned []string
			for _, id := range res.InsertedIDs {
				returned = append(returned, idString(t, id))
			}
			if diff := cmp.Diff(stored, returned); diff != "" {
				t.Errorf("returned ids differ from stored ids in input order (-stored +returned):\n%s", diff)
			}
			if calls := fake.Calls(); len(calls) != 2 {
				t.Errorf("%d write calls, want 2 (one lost, one that meets its own writes)", len(calls))
			}
			if len(fx.sink.Envelopes()) != 0 {
				t.Error("dead-letter queue is not empty")
			}
			for _, d := range fx.rec.Dispositions() {
				if d.Disposition != writeguard.AlreadyWritten {
					t.Errorf("document %d: %s, want already_written", d.Index, d.Disposition)
				}
			}
			if _, has := docs[0]["_id"]; has {
				t.Error("the caller's document was modified")
			}
		})
	}
}

// C02: a retry meets its own first attempt. Variant B: another writer
// stored a different document under the same _id: a genuine conflict.
func TestC02OwnWriteVersusForeignDocument(t *testing.T) {
	t.Run("own write", func(t *testing.T) {
		fake := mocks.NewFake("db.c02").Script(mocks.LoseReply())
		fx := newFixture(t, fake)
		res, err := fx.g.InsertOne(ctx, bson.D{{Key: "_id", Value: "m-1"}, {Key: "body", Value: "x"}})
		if err != nil {
			t.Fatalf("InsertOne: %v", err)
		}
		if res.InsertedID.(string) != "m-1" {
			t.Errorf("InsertedID = %v", res.InsertedID)
		}
		if n := len(fake.Docs()); n != 1 {
			t.Errorf("%d documents stored, want 1", n)
		}
	})
	t.Run("variant B: foreign document", func(t *testing.T) {
		fake := mocks.NewFake("db.c02b").Script(mocks.LoseReply())
		if err := fake.Seed(bson.D{{Key: "_id", Value: "m-1"}, {Key: "body", Value: "OTHER"}}); err != nil {
			t.Fatal(err)
		}
		fx := newFixture(t, fake)
		_, err := fx.g.InsertOne(ctx, bson.D{{Key: "_id", Value: "m-1"}, {Key: "body", Value: "x"}})
		var r *writeguard.Report
		if !errors.As(err, &r) {
			t.Fatalf("err = %v, want a *Report", err)
		}
		if d := r.Outcomes[0].Disposition; d != writeguard.Conflicted {
			t.Errorf("disposition %s, want conflict", d)
		}
		if !errors.Is(err, writeguard.ErrConflict) || !mongo.IsDuplicateKeyError(err) {
			t.Errorf("errors.Is(ErrConflict)=%v, IsDuplicateKeyError=%v; want both", errors.Is(err, writeguard.ErrConflict), mongo.IsDuplicateKeyError(err))
		}
		if body := fake.Docs()[0].Lookup("body").StringValue(); body != "OTHER" {
			t.Errorf("stored body %q, want OTHER untouched", body)
		}
	})
	t.Run("duplicate on the first attempt is never success", func(t *testing.T) {
		fake := mocks.NewFake("db.c02c")
		if err := fake.Seed(bson.D{{Key: "_id", Value: "m-1"}, {Key: "body", Value: "x"}}); err != nil {
			t.Fatal(err)
		}
		fx := newFixture(t, fake)
		_, err := fx.g.InsertOne(ctx, bson.D{{Key: "_id", Value: "m-1"}, {Key: "body", Value: "x"}})
		if !errors.Is(err, writeguard.ErrConflict) {
			t.Fatalf("err = %v, want ErrConflict: an identical stored document is not ours unless our earlier attempt was ambiguous", err)
		}
	})
}

// C03: a partly applied unordered batch retried: own writes and a genuine
// conflict on a secondary unique index, mixed.
func TestC03OwnWritesAndRealConflictsMixed(t *testing.T) {
	fake := mocks.NewFake("db.c03").Unique("sku").Script(mocks.LoseReply())
	if err := fake.Seed(bson.D{{Key: "_id", Value: "p0"}, {Key: "sku", Value: "S9"}}); err != nil {
		t.Fatal(err)
	}
	fx := newFixture(t, fake)
	var docs []any
	for i, sku := range []string{"S1", "S2", "S3", "S4", "S9"} {
		docs = append(docs, bson.D{{Key: "_id", Value: fmt.Sprintf("p%d", i+1)}, {Key: "sku", Value: sku}})
	}
	res, err := fx.g.InsertMany(ctx, docs, options.InsertMany().SetOrdered(false))
	var r *writeguard.Report
	if !errors.As(err, &r) {
		t.Fatalf("err = %v, want *Report", err)
	}
	want := []writeguard.Disposition{"already_written", "already_written", "already_written", "already_written", "conflict"}
	if diff := cmp.Diff(want, dispositions(r)); diff != "" {
		t.Errorf("dispositions (-want +got):\n%s", diff)
	}
	if kp := r.Outcomes[4].Failure.KeyPattern; kp == nil || kp.String() != `{"sku": {"$numberInt":"1"}}` {
		t.Errorf("conflict keyPattern = %v, want {sku: 1}", kp)
	}
	if diff := cmp.Diff([]string{`"p0"`, `"p1"`, `"p2"`, `"p3"`, `"p4"`}, storedIDs(t, fake)); diff != "" {
		t.Errorf("stored (-want +got):\n%s", diff)
	}
	if len(res.InsertedIDs) != 4 {
		t.Errorf("InsertedIDs has %d ids, want 4", len(res.InsertedIDs))
	}
	if n := len(fake.Calls()); n != 2 {
		t.Errorf("%d attempts, want 2 (no third attempt)", n)
	}
	if len(fx.sink.Envelopes()) != 0 {
		t.Error("DLQ not empty")
	}
}

// C04: a duplicate key is classified by its numeric code: no backoff, one
// command, keyPattern and keyValue for the caller.
func TestC04DuplicateKeyIsNeverRetried(t *testing.T) {
	fake := mocks.NewFake("db.c04").Unique("email")
	if err := fake.Seed(bson.D{{Key: "_id", Value: 1}, {Key: "email", Value: "a@x"}}); err != nil {
		t.Fatal(err)
	}
	fx := newFixture(t, fake, writeguard.WithBackoff(policy.Backoff{Base: 100 * time.Millisecond, MaxAttempts: 5}))
	_, err := fx.g.InsertOne(ctx, bson.D{{Key: "_id", Value: 2}, {Key: "email", Value: "a@x"}})
	var r *writeguard.Report
	if !errors.As(err, &r) {
		t.Fatalf("err = %v", err)
	}
	o := r.Outcomes[0]
	if o.Disposition != writeguard.Conflicted || o.Class != policy.Conflict {
		t.Errorf("outcome %s/%s, want conflict/conflict", o.Disposition, o.Class)
	}
	if got := o.Failure.KeyValue.String(); got != `{"email": "a@x"}` {
		t.Errorf("keyValue %s", got)
	}
	if n := len(fake.Calls()); n != 1 {
		t.Errorf("%d commands, want 1", n)
	}
	if s := fx.sleeps(); len(s) != 0 {
		t.Errorf("slept %v, want no backoff", s)
	}
}

// C07: a mixed unordered batch is routed per index, not as a whole.
func TestC07MixedBatchRoutedPerIndex(t *testing.T) {
	fake := mocks.NewFake("db.c07").Unique("sku").Validator(requireQty)
	if err := fake.Seed(bson.D{{Key: "_id", Value: 0}, {Key: "sku", Value: "S2"}, {Key: "qty", Value: 1}}); err != nil {
		t.Fatal(err)
	}
	fx := newFixture(t, fake)
	docs := []any{
		bson.D{{Key: "_id", Value: 1}, {Key: "sku", Value: "S1"}},
		bson.D{{Key: "_id", Value: 2}, {Key: "sku", Value: "S3"}, {Key: "qty", Value: 1}},
		bson.D{{Key: "_id", Value: 3}, {Key: "sku", Value: "S2"}, {Key: "qty", Value: 1}},
		bson.D{{Key: "_id", Value: 4}, {Key: "sku", Value: "S4"}, {Key: "qty", Value: 1}},
	}
	_, err := fx.g.InsertMany(ctx, docs, options.InsertMany().SetOrdered(false))
	var r *writeguard.Report
	if !errors.As(err, &r) {
		t.Fatalf("err = %v", err)
	}
	want := []writeguard.Disposition{"dead_lettered", "written", "conflict", "written"}
	if diff := cmp.Diff(want, dispositions(r)); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	envs := fx.sink.Envelopes()
	if len(envs) != 1 || envs[0].DocumentID.Int32() != 1 || envs[0].ErrInfo == nil {
		t.Fatalf("DLQ = %+v, want exactly document 1 with errInfo", envs)
	}
	if diff := cmp.Diff([]string{"required"}, envs[0].FailingKeywords); diff != "" {
		t.Errorf("failing keywords (-want +got):\n%s", diff)
	}
	if n := len(fake.Calls()); n != 1 {
		t.Errorf("%d commands, want 1 (nothing retried)", n)
	}
	if !errors.Is(err, writeguard.ErrDeadLettered) || !errors.Is(err, writeguard.ErrConflict) || writeguard.Handled(err) {
		t.Errorf("Is(ErrDeadLettered)=%v Is(ErrConflict)=%v Handled=%v", errors.Is(err, writeguard.ErrDeadLettered), errors.Is(err, writeguard.ErrConflict), writeguard.Handled(err))
	}
}

// C08: an ordered insert resumes after the dead-lettered document with the
// same ids; nothing after it is lost or reported failed.
func TestC08OrderedResumesAfterDeadLetter(t *testing.T) {
	fake := mocks.NewFake("db.c08").Validator(requireQty)
	fx := newFixture(t, fake)
	var docs []any
	for _, id := range []string{"a", "b", "c", "d", "e"} {
		d := bson.D{{Key: "_id", Value: id}, {Key: "qty", Value: 1}}
		if id == "b" {
			d = d[:1]
		}
		docs = append(docs, d)
	}
	res, err := fx.g.InsertMany(ctx, docs)
	var r *writeguard.Report
	if !errors.As(err, &r) {
		t.Fatalf("err = %v", err)
	}
	want := []writeguard.Disposition{"written", "dead_lettered", "written", "written", "written"}
	if diff := cmp.Diff(want, dispositions(r)); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	if !writeguard.Handled(err) {
		t.Error("Handled = false; every document reached a handled disposition")
	}
	if diff := cmp.Diff([]string{`"a"`, `"c"`, `"d"`, `"e"`}, storedIDs(t, fake)); diff != "" {
		t.Errorf("stored (-want +got):\n%s", diff)
	}
	var ids []string
	for _, id := range res.InsertedIDs {
		ids = append(ids, id.(string))
	}
	if diff := cmp.Diff([]string{"a", "c", "d", "e"}, ids); diff != "" {
		t.Errorf("InsertedIDs (-want +got):\n%s", diff)
	}
	calls := fake.Calls()
	if len(calls) != 2 || calls[1].Models != 3 {
		t.Errorf("calls = %+v, want 2 with the second sending c, d, e", calls)
	}
	if s := fx.sleeps(); len(s) != 0 {
		t.Errorf("slept %v: resuming after a handled document is not a retry", s)
	}

	t.Run("unhandled stops the ordered write", func(t *testing.T) {
		fake := mocks.NewFake("db.c08b").Validator(requireQty)
		g, err := writeguard.New(fake) // no dead-letter sink: invalid means failed
		if err != nil {
			t.Fatal(err)
		}
		_, err = g.InsertMany(ctx, docs)
		var r *writeguard.Report
		if !errors.As(err, &r) {
			t.Fatalf("err = %v", err)
		}
		want := []writeguard.Disposition{"written", "failed", "not_attempted", "not_attempted", "not_attempted"}
		if diff := cmp.Diff(want, dispositions(r)); diff != "" {
			t.Errorf("(-want +got):\n%s", diff)
		}
		if r.Outcomes[3].Document == nil {
			t.Error("a not-attempted document is missing from the report")
		}
	})
}

// C15: a write concern error: applied on the primary, durability unknown.
func TestC15WriteConcernErrorIsWrittenUnconfirmed(t *testing.T) {
	fake := mocks.NewFake("db.c15").Script(
		mocks.WriteConcernError(64, "WriteConcernTimeout", "waiting for replication timed out"),
		mocks.WriteConcernError(64, "WriteConcernTimeout", "waiting for replication timed out"))
	fx := newFixture(t, fake)
	res, err := fx.g.InsertOne(ctx, bson.D{{Key: "_id", Value: "w1"}})
	if !errors.Is(err, writeguard.ErrUnconfirmed) {
		t.Fatalf("err = %v, want ErrUnconfirmed", err)
	}
	if res == nil || res.InsertedID != "w1" {
		t.Errorf("result = %+v, want the _id w1 although the driver's result is nil", res)
	}
	var wce mongo.WriteException
	if !errors.As(err, &wce) || wce.WriteConcernError == nil || wce.WriteConcernError.Code != 64 {
		t.Errorf("errors.As(WriteException) did not reach the 64 write concern error: %v", err)
	}
	_, err = fx.g.InsertMany(ctx, []any{bson.D{{Key: "_id", Value: "w2"}}, bson.D{{Key: "_id", Value: "w3"}}})
	var r *writeguard.Report
	if !errors.As(err, &r) || r.Count(writeguard.WrittenUnconfirmed) != 2 {
		t.Fatalf("err = %v, want 2 written_unconfirmed", err)
	}
	if n := len(fake.Docs()); n != 3 {
		t.Errorf("%d documents, want 3", n)
	}
	if len(fake.Calls()) != 2 || len(fx.sink.Envelopes()) != 0 {
		t.Errorf("calls %d (want 2: nothing re-sent), DLQ %d (want 0)", len(fake.Calls()), len(fx.sink.Envelopes()))
	}
}

// C17: a retryable write concern error during a stepdown: inserts are
// retried with the same ids (a retry would store them again if the
// stepdown rolled them back); a retry that meets them stored proves
// presence, not durability, so they stay written_unconfirmed. A
// non-idempotent $inc is not re-sent.
func TestC17RetryableWriteConcernError(t *testing.T) {
	wce := mocks.WriteConcernError(91, "ShutdownInProgress", "Replication is being shut down", "RetryableWriteError")
	t.Run("insert", func(t *testing.T) {
		fake := mocks.NewFake("db.c17").Script(wce, wce)
		fx := newFixture(t, fake)
		res, err := fx.g.InsertMany(ctx, []any{bson.D{{Key: "_id", Value: "r1"}}, bson.D{{Key: "_id", Value: "r2"}}})
		var r *writeguard.Report
		if !errors.As(err, &r) || r.Count(writeguard.WrittenUnconfirmed) != 2 || !errors.Is(err, writeguard.ErrUnconfirmed) {
			t.Fatalf("err = %v, want 2 written_unconfirmed: the read-back after the retry proves presence, not durability", err)
		}
		if res == nil || len(res.InsertedIDs) != 2 || res.InsertedIDs[0] != "r1" {
			t.Errorf("result %+v, want both ids (stored)", res)
		}
		if r.Outcomes[0].MaybeWritten {
			t.Error("MaybeWritten set on a stored document")
		}
		if diff := cmp.Diff([]string{`"r1"`, `"r2"`}, storedIDs(t, fake)); diff != "" {
			t.Errorf("(-want +got):\n%s", diff)
		}
		if len(fx.rec.Retries()) == 0 {
			t.Error("no retry was scheduled")
		}
	})
	t.Run("$inc is not re-sent", func(t *testing.T) {
		fake := mocks.NewFake("db.c17b").Script(wce)
		if err := fake.Seed(bson.D{{Key: "_id", Value: "k"}, {Key: "n", Value: int32(0)}}); err != nil {
			t.Fatal(err)
		}
		fx := newFixture(t, fake)
		_, err := fx.g.BulkWrite(ctx, []mongo.WriteModel{
			mongo.NewUpdateOneModel().SetFilter(bson.D{{Key: "_id", Value: "k"}}).SetUpdate(bson.D{{Key: "$inc", Value: bson.D{{Key: "n", Value: 1}}}}),
		})
		var r *writeguard.Report
		if !errors.As(err, &r) || r.Outcomes[0].Disposition != writeguard.WrittenUnconfirmed {
			t.Fatalf("err = %v, want written_unconfirmed", err)
		}
		if n := fake.Docs()[0].Lookup("n").AsInt64(); n != 1 {
			t.Errorf("n = %d, want 1 ($inc applied once)", n)
		}
		if len(fake.Calls()) != 1 {
			t.Errorf("%d calls, want 1", len(fake.Calls()))
		}
	})
}

// C19: overload: back off only on a retryable overload error
// (SystemOverloadedError + RetryableError), with jittered waits bounded by
// the backoff, and never on SystemOverloadedError alone.
func TestC19OverloadLabels(t *testing.T) {
	t.Run("both labels", func(t *testing.T) {
		fake := mocks.NewFake("db.c19").Script(mocks.Reply(`{"ok":0,"code":91,"codeName":"ShutdownInProgress","errmsg":"overloaded","errorLabels":["RetryableError","SystemOverloadedError"]}`))
		fx := newFixture(t, fake)
		if _, err := fx.g.InsertOne(ctx, bson.D{{Key: "_id", Value: "o1"}}); err != nil {
			t.Fatalf("err = %v", err)
		}
		s := fx.sleeps()
		if len(s) != 1 || s[0] < 0 || s[0] >= policy.DefaultBase {
			t.Errorf("sleeps %v, want one in [0, 100ms)", s)
		}
		if len(fake.Docs()) != 1 {
			t.Error("o1 not stored exactly once")
		}
	})
	t.Run("throttled attempts are bounded", func(t *testing.T) {
		overload := mocks.Reply(`{"ok":0,"code":462,"codeName":"IngressRequestRateLimitExceeded","errmsg":"Rate limiter 'ingressRequestRateLimiter' rate exceeded","errorLabels":["SystemOverloadedError","RetryableError"]}`)
		fake := mocks.NewFake("db.c19b").Script(overload, overload, overload, overload)
		fx := newFixture(t, fake)
		_, err := fx.g.InsertOne(ctx, bson.D{{Key: "_id", Value: "o2"}})
		if !errors.Is(err, writeguard.ErrExhausted) {
			t.Fatalf("err = %v, want ErrExhausted", err)
		}
		if n := len(fake.Calls()); n != writeguard.DefaultThrottledAttempts {
			t.Errorf("%d attempts, want %d", n, writeguard.DefaultThrottledAttempts)
		}
	})
	t.Run("SystemOverloadedError alone", func(t *testing.T) {
		fake := mocks.NewFake("db.c19c").Script(mocks.Reply(`{"ok":0,"code":433,"codeName":"AdmissionQueueOverflow","errmsg":"overloaded","errorLabels":["SystemOverloadedError"]}`))
		fx := newFixture(t, fake)
		_, err := fx.g.InsertOne(ctx, bson.D{{Key: "_id", Value: "o3"}})
		if !errors.Is(err, writeguard.ErrFailed) || len(fake.Calls()) != 1 {
			t.Fatalf("err = %v after %d calls, want failed after 1 (no library retry)", err, len(fake.Calls()))
		}
	})
}

// C20: Cosmos DB throttling per document: only the throttled tail is
// re-sent, after at least the server's RetryAfterMs.
func TestC20CosmosThrottledTail(t *testing.T) {
	msg := "Error=16500, RetryAfterMs=8, Details='Response status code does not indicate success: TooManyRequests (429); Substatus: 3200'"
	var faults []mocks.Fault
	var docs []any
	for i := 0; i < 30; i++ {
		docs = append(docs, bson.D{{Key: "_id", Value: int32(i)}})
		if i >= 25 {
			faults = append(faults, mocks.DocError(int32(i), 16500, msg))
		}
	}
	fake := mocks.NewFake("db.c20").Script(mocks.Combine(faults...))
	fx := newFixture(t, fake, writeguard.WithBackoff(policy.Backoff{Base: time.Millisecond, Jitter: func() float64 { return 0 }}))
	if _, err := fx.g.InsertMany(ctx, docs, options.InsertMany().SetOrdered(false)); err != nil {
		t.Fatalf("err = %v", err)
	}
	calls := fake.Calls()
	if len(calls) != 2 || calls[1].Models != 5 {
		t.Fatalf("calls %+v, want 2, the second re-sending 5 documents", calls)
	}
	if s := fx.sleeps(); len(s) != 1 || s[0] < 8*time.Millisecond {
		t.Errorf("sleeps %v, want one of at least RetryAfterMs=8", s)
	}
	if n := len(fake.Docs()); n != 30 || len(fx.sink.Envelopes()) != 0 {
		t.Errorf("%d stored, %d dead-lettered; want 30 and 0", n, len(fx.sink.Envelopes()))
	}
}

// C21: the context deadline ends the call at once; the applied documents
// are reported unknown with their ids, and no wait passes the deadline.
func TestC21DeadlineDuringFlight(t *testing.T) {
	// In a testing/synctest bubble: the backoff waits and deadlines
	// run on the bubble's clock and take no real time.
	synctest.Test(t, func(t *testing.T) {
		fake := mocks.NewFake("db.c21").Script(mocks.Hang())
		g, err := writeguard.New(fake, writeguard.WithDeadLetter(&mocks.Sink{}), writeguard.WithBackoff(policy.Backoff{Base: 500 * time.Millisecond}))
		if err != nil {
			t.Fatal(err)
		}
		cctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		defer cancel()
		t0 := time.Now()
		_, err = g.InsertMany(cctx, []any{bson.D{{Key: "_id", Value: "t1"}}, bson.D{{Key: "_id", Value: "t2"}}})
		elapsed := time.Since(t0)
		if elapsed > 2*time.Second {
			t.Errorf("returned after %v, want about 300ms", elapsed)
		}
		if !mongo.IsTimeout(err) {
			t.Errorf("mongo.IsTimeout(%v) = false", err)
		}
		var r *writeguard.Report
		if !errors.As(err, &r) {
			t.Fatalf("err = %v", err)
		}
		for _, o := range r.Outcomes {
			if o.Disposition != writeguard.OutcomeUnknown || o.ID == nil || !o.MaybeWritten {
				t.Errorf("outcome %+v, want unknown with its id", o)
			}
		}
		if n := len(fake.Docs()); n != 2 {
			t.Errorf("%d stored, want 2 (exactly once each)", n)
		}
	})
}

// C22: a failure that never heals stops after the configured attempts,
// with the documents unknown (every reply was lost: each may have been
// applied; C63), never dead-lettered, their ids kept.
func TestC22NoRetryStorm(t *testing.T) {
	var script []mocks.Fault
	for i := 0; i < 10; i++ {
		script = append(script, mocks.DropConnection())
	}
	fake := mocks.NewFake("db.c22").Script(script...)
	fx := newFixture(t, fake, writeguard.WithBackoff(policy.Backoff{MaxAttempts: 3, Jitter: func() float64 { return 0.5 }}))
	_, err := fx.g.InsertMany(ctx, []any{bson.D{{Key: "_id", Value: "s1"}}, bson.D{{Key: "_id", Value: "s2"}}, bson.D{{Key: "_id", Value: "s3"}}})
	var r *writeguard.Report
	if !errors.As(err, &r) {
		t.Fatalf("err = %v", err)
	}
	for _, o := range r.Outcomes {
		if o.Disposition != writeguard.OutcomeUnknown || !o.MaybeWritten || o.Reason != writeguard.ReasonAttemptsSpent || o.ID == nil || o.Attempts != 3 {
			t.Errorf("outcome %+v, want unknown, MaybeWritten, attempts_spent after 3 attempts with its id", o)
		}
	}
	if n := len(fake.Calls()); n != 3 {
		t.Errorf("%d commands, want 3", n)
	}
	if !mongo.IsNetworkError(err) {
		t.Error("the network error is not reachable through the report")
	}
	if len(fx.sink.Envelopes()) != 0 {
		t.Error("a transient failure was dead-lettered")
	}
	want := []time.Duration{50 * time.Millisecond, 100 * time.Millisecond}
	if diff := cmp.Diff(want, fx.sleeps()); diff != "" {
		t.Errorf("backoff schedule (-want +got):\n%s", diff)
	}
}

// C24: an upsert that lost a race on a unique index is run again and now
// matches. (A plain insert's duplicate is never turned into an upsert: see
// C04.)
func TestC24UpsertRace(t *testing.T) {
	fake := mocks.NewFake("db.c24").Unique("assetId", "utxo").Script(mocks.Reply(
		`{"ok":1,"n":0,"writeErrors":[{"index":0,"code":11000,"errmsg":"E11000 duplicate key error collection: db.c24 index: assetId_1_utxo_1 dup key: { assetId: \"A\", utxo: \"u:0\" }","keyPattern":{"assetId":1,"utxo":1},"keyValue":{"assetId":"A","utxo":"u:0"}}]}`))
	if err := fake.Seed(bson.D{{Key: "_id", Value: 1}, {Key: "assetId", Value: "A"}, {Key: "utxo", Value: "u:0"}, {Key: "kind", Value: "x"}}); err != nil {
		t.Fatal(err)
	}
	fx := newFixture(t, fake)
	model := mongo.NewUpdateOneModel().SetFilter(bson.D{{Key: "assetId", Value: "A"}, {Key: "utxo", Value: "u:0"}, {Key: "kind", Value: "x"}}).
		SetUpdate(bson.D{{Key: "$set", Value: bson.D{{Key: "seen", Value: true}}}}).SetUpsert(true)
	res, err := fx.g.BulkWrite(ctx, []mongo.WriteModel{model})
	if err != nil {
		t.Fatalf("err = %v, want success after running the upsert again", err)
	}
	if res.MatchedCount != 1 || res.UpsertedCount != 0 {
		t.Errorf("result %+v, want 1 matched, 0 upserted", res)
	}
	if len(fake.Calls()) != 2 {
		t.Errorf("%d calls, want 2", len(fake.Calls()))
	}
	docs := fake.Docs()
	if len(docs) != 1 || !docs[0].Lookup("seen").Boolean() {
		t.Errorf("docs = %v, want one document with seen: true", docs)
	}
	if len(fx.sink.Envelopes()) != 0 {
		t.Error("DLQ not empty")
	}
}

// C26: an unacknowledged write concern hides every error, so it is
// refused unless explicitly allowed; then nothing is claimed written.
func TestC26Unacknowledged(t *testing.T) {
	t.Run("refused", func(t *testing.T) {
		fake := mocks.NewFake("db.c26").Script(mocks.Unacknowledged())
		fx := newFixture(t, fake)
		_, err := fx.g.InsertMany(ctx, []any{bson.D{{Key: "email", Value: "a@x"}, {Key: "qty", Value: 1}}, bson.D{{Key: "email", Value: "b@x"}}})
		var r *writeguard.Report
		if !errors.As(err, &r) || !errors.Is(err, writeguard.ErrUnacknowledged) {
			t.Fatalf("err = %v, want ErrUnacknowledged", err)
		}
		for _, o := range r.Outcomes {
			if o.Disposition != writeguard.Unacknowledged {
				t.Errorf("disposition %s, want unacknowledged", o.Disposition)
			}
		}
		if len(fx.sink.Envelopes()) != 0 {
			t.Error("DLQ outcome claimed under w:0")
		}
	})
	t.Run("allowed", func(t *testing.T) {
		fake := mocks.NewFake("db.c26b").Script(mocks.Unacknowledged())
		fx := newFixture(t, fake, writeguard.WithUnacknowledged())
		res, err := fx.g.InsertOne(ctx, bson.D{{Key: "_id", Value: "u1"}})
		if err != nil || res.Acknowledged {
			t.Fatalf("res %+v err %v, want an unacknowledged result and no error", res, err)
		}
		if d := fx.rec.Dispositions()[0].Disposition; d != writeguard.Unacknowledged {
			t.Errorf("hook disposition %s, want unacknowledged", d)
		}
	})
}

// C27: configuration errors fail the call at once, name the setting, and
// never dead-letter or retry.
func TestC27ConfigurationErrors(t *testing.T) {
	t.Run("code 20 as a write error", func(t *testing.T) {
		fake := mocks.NewFake("db.c27").Script(mocks.Reply(`{"ok":1,"n":0,"writeErrors":[{"index":0,"code":20,"codeName":"IllegalOperation","errmsg":"Transaction numbers are only allowed on a replica set member or mongos"}]}`))
		fx := newFixture(t, fake)
		_, err := fx.g.InsertMany(ctx, []any{bson.D{{Key: "_id", Value: 1}}, bson.D{{Key: "_id", Value: 2}}, bson.D{{Key: "_id", Value: 3}}})
		var r *writeguard.Report
		if !errors.As(err, &r) {
			t.Fatalf("err = %v", err)
		}
		// The driver turns this reply into driver.ErrUnsupportedStorageEngine,
		// a whole-command error: every document failed with it.
		if diff := cmp.Diff([]writeguard.Disposition{"failed", "failed", "failed"}, dispositions(r)); diff != "" {
			t.Errorf("(-want +got):\n%s", diff)
		}
		for _, o := range r.Outcomes {
			if o.Class != policy.Configuration {
				t.Errorf("document %d: class %s, want configuration (not invalid)", o.Index, o.Class)
			}
		}
		if !errors.Is(err, writeguard.ErrConfiguration) || !strings.Contains(err.Error(), "retryWrites=false") {
			t.Errorf("err %q does not name the setting", err)
		}
		if len(fake.Calls()) != 1 || len(fx.sink.Envelopes()) != 0 || len(fx.sleeps()) != 0 {
			t.Errorf("calls %d, DLQ %d, sleeps %d; want 1, 0, 0", len(fake.Calls()), len(fx.sink.Envelopes()), len(fx.sleeps()))
		}
	})
	t.Run("79 as a write concern error", func(t *testing.T) {
		fake := mocks.NewFake("db.c27b").Script(mocks.WriteConcernError(79, "UnknownReplWriteConcern", "No write concern mode named 'majorty' found in replica set configuration"))
		fx := newFixture(t, fake)
		_, err := fx.g.InsertOne(ctx, bson.D{{Key: "_id", Value: "c1"}})
		var r *writeguard.Report
		if !errors.As(err, &r) || r.Outcomes[0].Disposition != writeguard.WrittenUnconfirmed || !errors.Is(err, writeguard.ErrConfiguration) {
			t.Fatalf("err = %v, want written_unconfirmed and a configuration error", err)
		}
		if len(fake.Calls()) != 1 {
			t.Error("re-sent with the same bad write concern")
		}
	})
}

// C29: inside a transaction writeguard neither retries nor dead-letters,
// and returns the driver's error unchanged, labels intact.
func TestC29InsideTransaction(t *testing.T) {
	sctx, end := transactionContext(t)
	defer end()
	fake := mocks.NewFake("db.c29").Script(mocks.Reply(`{"ok":0,"code":112,"codeName":"WriteConflict","errmsg":"WriteConflict","errorLabels":["TransientTransactionError"]}`))
	fx := newFixture(t, fake)
	_, err := fx.g.InsertMany(sctx, []any{bson.D{{Key: "_id", Value: 1}}, bson.D{{Key: "_id", Value: 2}}})
	var ce mongo.CommandError
	if !errors.As(err, &ce) || !ce.HasErrorLabel("TransientTransactionError") {
		t.Fatalf("err = %#v, want the driver's CommandError with TransientTransactionError", err)
	}
	var r *writeguard.Report
	if errors.As(err, &r) {
		t.Error("a Report was returned inside a transaction")
	}
	if len(fake.Calls()) != 1 || len(fx.sink.Envelopes()) != 0 || len(fx.sleeps()) != 0 {
		t.Errorf("calls %d, DLQ %d, sleeps %d; want 1, 0, 0", len(fake.Calls()), len(fx.sink.Envelopes()), len(fx.sleeps()))
	}
}
