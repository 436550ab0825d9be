package writeguard_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/writeguard/writeguard"
	"github.com/writeguard/writeguard/mocks"
	"github.com/writeguard/writeguard/policy"
)

// Tests of the rule that every disposition is true: each one claims only
// what the server's replies proved. Each is named after the case it
// reproduces (testdata/CASES.md: a public report reduced to a small
// input).

func sixDocs(prefix string) []any {
	docs := make([]any, 6)
	for i := range docs {
		docs[i] = bson.D{{Key: "_id", Value: fmt.Sprintf("%s%d", prefix, i)}, {Key: "n", Value: int32(i)}}
	}
	return docs
}

// C31: a whole-command rejection naming a client setting (Cosmos DB's
// code 2 "Retryable writes are not supported") is not a verdict on the
// documents: one attempt, nothing dead-lettered, not handled, a hint.
func TestC31WholeCommandRejectionIsNotAVerdict(t *testing.T) {
	const cosmos = `{"ok":0,"code":2,"codeName":"BadValue","errmsg":"Retryable writes are not supported. Please disable retryable writes by specifying \"retrywrites=false\" in the connection string or an equivalent driver specific config."}`
	for _, op := range []string{"insertOne", "insertMany"} {
		t.Run(op, func(t *testing.T) {
			fake := mocks.NewFake("db.c31").Script(mocks.Reply(cosmos))
			fx := newFixture(t, fake)
			var err error
			if op == "insertOne" {
				_, err = fx.g.InsertOne(ctx, bson.D{{Key: "_id", Value: 1}})
			} else {
				_, err = fx.g.InsertMany(ctx, []any{bson.D{{Key: "_id", Value: 1}}, bson.D{{Key: "_id", Value: 2}}, bson.D{{Key: "_id", Value: 3}}}, options.InsertMany().SetOrdered(false))
			}
			var r *writeguard.Report
			if !errors.As(err, &r) || writeguard.Handled(err) {
				t.Fatalf("err = %v, want an unhandled Report", err)
			}
			if n := len(fx.sink.Envelopes()); n != 0 {
				t.Errorf("%d envelopes: a whole-command failure dead-lettered documents", n)
			}
			if len(fake.Calls()) != 1 {
				t.Errorf("%d attempts, want 1", len(fake.Calls()))
			}
			if !errors.Is(err, writeguard.ErrConfiguration) || !strings.Contains(r.Hint, "retryWrites=false") {
				t.Errorf("hint %q, err %v: want ErrConfiguration and a hint naming retryWrites=false", r.Hint, err)
			}
			for _, o := range r.Outcomes {
				if o.Disposition != writeguard.Failed || o.Class != policy.Configuration {
					t.Errorf("outcome %d: %s/%s, want failed/configuration", o.Index, o.Disposition, o.Class)
				}
			}
		})
	}
	// The same kind: a whole-command size rejection of several documents
	// is not every document's fault either. Nothing is dead-lettered; the
	// batch is narrowed down (C66), and here every half goes through.
	t.Run("whole-command BSONObjectTooLarge", func(t *testing.T) {
		fake := mocks.NewFake("db.c31b").Script(mocks.Reply(`{"ok":0,"code":10334,"codeName":"BSONObjectTooLarge","errmsg":"command too large"}`))
		fx := newFixture(t, fake)
		_, err := fx.g.InsertMany(ctx, sixDocs("s"))
		if err != nil || len(fx.sink.Envelopes()) != 0 || len(fake.Docs()) != 6 {
			t.Errorf("err = %v, %d envelopes, %d stored: want all six written and nothing dead-lettered", err, len(fx.sink.Envelopes()), len(fake.Docs()))
		}
	})
}

// C33: the server commits the first 3 of 6 documents and fails the
// command with an interruption. The retry meets its own _ids: all six
// stored once, no conflict, no not_attempted, success. A kill that is not
// retried (11601) leaves the in-flight documents unknown, never failed.
func TestC33InterruptedBatchPartlyApplied(t *testing.T) {
	replies := map[string]string{
		"11600": `{"ok":0,"code":11600,"codeName":"InterruptedAtShutdown","errmsg":"interrupted at shutdown"}`,
		"11602": `{"ok":0,"code":11602,"codeName":"InterruptedDueToReplStateChange","errmsg":"stepdown","errorLabels":["RetryableWriteError"]}`,
		"drop":  "",
	}
	for name, reply := range replies {
		for _, ordered := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/ordered=%v", name, ordered), func(t *testing.T) {
				then := mocks.DropConnection()
				if reply != "" {
					then = mocks.Reply(reply)
				}
				fake := mocks.NewFake("db.c33").Script(mocks.ApplyFirst(3, then))
				fx := newFixture(t, fake)
				res, err := fx.g.InsertMany(ctx, sixDocs("i"), options.InsertMany().SetOrdered(ordered))
				if err != nil {
					t.Fatalf("err = %v, want success", err)
				}
				if diff := cmp.Diff([]string{`"i0"`, `"i1"`, `"i2"`, `"i3"`, `"i4"`, `"i5"`}, storedIDs(t, fake)); diff != "" {
					t.Errorf("stored (-want +got):\n%s", diff)
				}
				if len(res.InsertedIDs) != 6 || res.InsertedIDs[0] != "i0" {
					t.Errorf("InsertedIDs %v, want the six ids as strings", res.InsertedIDs)
				}
				counts := map[writeguard.Disposition]int{}
				for _, d := range fx.rec.Dispositions() {
					counts[d.Disposition]++
				}
				if counts[writeguard.AlreadyWritten] != 3 || counts[writeguard.Written] != 3 {
					t.Errorf("dispositions %v, want 3 already_written and 3 written", counts)
				}
			})
		}
	}
	// Issue 28: an insert that may have been applied and is not retried
	// is read back: the three stored are already_written, the others
	// unknown (MaybeWritten).
	t.Run("11601 not retried: read back", func(t *testing.T) {
		fake := mocks.NewFake("db.c33k").Script(mocks.ApplyFirst(3, mocks.Reply(`{"ok":0,"code":11601,"codeName":"Interrupted","errmsg":"operation was interrupted"}`)))
		fx := newFixture(t, fake)
		_, err := fx.g.InsertMany(ctx, sixDocs("k"))
		var r *writeguard.Report
		if !errors.As(err, &r) {
			t.Fatalf("err = %v", err)
		}
		for _, o := range r.Outcomes {
			want := writeguard.OutcomeUnknown
			if o.Index < 3 {
				want = writeguard.AlreadyWritten
			}
			if o.Disposition != want || o.MaybeWritten != (want == writeguard.OutcomeUnknown) || o.Attempts != 1 {
				t.Errorf("outcome %d: %s maybe=%v attempts=%d, want %s, 1 attempt", o.Index, o.Disposition, o.MaybeWritten, o.Attempts, want)
			}
		}
		if len(fake.Calls()) != 1 {
			t.Errorf("%d calls, want 1 (11601 is not retried)", len(fake.Calls()))
		}
	})
}

// C39: per-document 16500 throttling, which the driver never retries,
// keeps being retried within the budget and MaxElapsed, each wait at least
// the server's RetryAfterMs.
func TestC39ThrottledDocumentsKeepRetrying(t *testing.T) {
	// In a testing/synctest bubble: the backoff waits and deadlines
	// run on the bubble's clock and take no real time.
	synctest.Test(t, func(t *testing.T) {
		throttled := func() mocks.Fault {
			var fs []mocks.Fault
			for i := range 4 {
				fs = append(fs, mocks.DocError(int32(i), 16500, "Error=16500, RetryAfterMs=12, Details='Response status code does not indicate success: TooManyRequests (429)'"))
			}
			return mocks.Combine(fs...)
		}
		fake := mocks.NewFake("db.c39").Script(throttled(), throttled(), throttled())
		fx := newFixture(t, fake, writeguard.WithTable(policy.CosmosDB()))
		docs := make([]any, 4)
		for i := range docs {
			docs[i] = bson.D{{Key: "_id", Value: int32(i)}}
		}
		if _, err := fx.g.InsertMany(ctx, docs, options.InsertMany().SetOrdered(false)); err != nil {
			t.Fatalf("err = %v, want all 4 written on the fourth round", err)
		}
		if len(fake.Calls()) != 4 || len(fake.Docs()) != 4 {
			t.Errorf("%d calls, %d stored; want 4 and 4", len(fake.Calls()), len(fake.Docs()))
		}
		for _, s := range fx.sleeps() {
			if s < 12*time.Millisecond {
				t.Errorf("waited %v, less than the server's 12ms", s)
			}
		}
	})
}

// C42: a duplicate on a null unique key identifies nobody: no handler
// replaces (or skips for) someone else's document.
func TestC42NullKeyNeverReplaces(t *testing.T) {
	dup := `{"ok":1,"n":0,"writeErrors":[{"index":0,"code":11000,"errmsg":"E11000 duplicate key error collection: db.users index: username_1 dup key: { username: null }","keyPattern":{"username":1},"keyValue":{"username":null}}]}`
	for _, h := range []writeguard.ConflictHandler{writeguard.ConflictReplace(), writeguard.ConflictSkip()} {
		fake := mocks.NewFake("db.users").Script(mocks.Reply(dup))
		if err := fake.Seed(bson.D{{Key: "_id", Value: "user-a"}, {Key: "username", Value: nil}, {Key: "email", Value: "a@example.test"}, {Key: "plan", Value: "paid"}}); err != nil {
			t.Fatal(err)
		}
		called := false
		spy := writeguard.ConflictHandlerFunc(func(ctx context.Context, c *writeguard.Conflict) (policy.Disposition, error) {
			called = true
			return h.Resolve(ctx, c)
		})
		fx := newFixture(t, fake, writeguard.WithConflictHandler(spy))
		_, err := fx.g.InsertOne(ctx, bson.D{{Key: "_id", Value: "user-b"}, {Key: "username", Value: nil}, {Key: "email", Value: "b@example.test"}})
		var r *writeguard.Report
		if !errors.As(err, &r) || r.Outcomes[0].Disposition != writeguard.Conflicted || r.Outcomes[0].Err == nil {
			t.Fatalf("err = %v, want conflict with a reason", err)
		}
		if called {
			t.Error("a conflict handler ran on a null key")
		}
		if got := fake.Docs()[0].Lookup("plan").StringValue(); got != "paid" {
			t.Errorf("user-a's plan is %q: someone else's document was changed", got)
		}
	}
}

// A conflict names its index from keyPattern, else from errmsg (every
// format), else says it is unknown; ConflictReplace refuses to guess.
func TestConflictNamesItsIndex(t *testing.T) {
	cases := []struct {
		name, reply string
		index       string
		fields      []string
		known       bool
	}{
		{"keyPattern", `{"ok":1,"writeErrors":[{"index":0,"code":11000,"errmsg":"E11000 duplicate key error collection: db.c index: email_1 dup key: { email: \"x\" }","keyPattern":{"email":1},"keyValue":{"email":"x"}}]}`, "email_1", []string{"email"}, true},
		{"4.0 errmsg", `{"ok":1,"writeErrors":[{"index":0,"code":11000,"errmsg":"E11000 duplicate key error collection: db.c index: email_1 dup key: { : \"x\" }"}]}`, "email_1", nil, true},
		{"3.x errmsg", `{"ok":1,"writeErrors":[{"index":0,"code":11000,"errmsg":"E11000 duplicate key error index: db.c.$email_1 dup key: { : \"x\" }"}]}`, "email_1", nil, true},
		{"Cosmos DB", `{"ok":1,"writeErrors":[{"index":0,"code":11000,"errmsg":"E11000 duplicate key error collection: db.c. Failed _id or unique index constraint."}]}`, "", nil, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var got *writeguard.Conflict
			h := writeguard.ConflictHandlerFunc(func(ctx context.Context, cf *writeguard.Conflict) (policy.Disposition, error) {
				got = cf
				return writeguard.ConflictReplace().Resolve(ctx, cf)
			})
			fake := mocks.NewFake("db.c").Script(mocks.Reply(c.reply))
			fx := newFixture(t, fake, writeguard.WithConflictHandler(h))
			_, err := fx.g.InsertOne(ctx, bson.D{{Key: "_id", Value: "d1"}, {Key: "email", Value: "x"}})
			if got == nil {
				t.Fatalf("handler not called; err = %v", err)
			}
			if got.IndexName != c.index || !cmp.Equal(got.IndexFields, c.fields) || got.IndexKnown != c.known {
				t.Errorf("index %q %v known=%v, want %q %v %v", got.IndexName, got.IndexFields, got.IndexKnown, c.index, c.fields, c.known)
			}
			var r *writeguard.Report
			if c.name != "keyPattern" && (!errors.As(err, &r) || r.Outcomes[0].Disposition != writeguard.Conflicted || r.Outcomes[0].Err == nil) {
				t.Errorf("err = %v: ConflictReplace must refuse without a keyValue", err)
			}
		})
	}
}

// C43: the driver's pool-cleared error (no code, no label, not a network
// error) is transient, and nothing was sent.
func TestC43PoolClearedIsTransient(t *testing.T) {
	fake := mocks.NewFake("db.c43").Script(mocks.PoolCleared(), mocks.PoolCleared())
	fx := newFixture(t, fake)
	if _, err := fx.g.InsertMany(ctx, sixDocs("p")); err != nil {
		t.Fatalf("err = %v, want success after the pool-cleared failures", err)
	}
	if len(fake.Docs()) != 6 {
		t.Errorf("%d stored, want 6", len(fake.Docs()))
	}
	// A checkout failure is not a try (it never reached the server): it
	// does not spend the document's attempts, so MaxAttempts 1 still
	// retries it; the call's time limit ends it.
	t.Run("attempts are not spent", func(t *testing.T) {
		fake := mocks.NewFake("db.c43a").Script(mocks.PoolCleared(), mocks.PoolCleared())
		fx := newFixture(t, fake, writeguard.WithBackoff(policy.Backoff{MaxAttempts: 1, Jitter: func() float64 { return 0.5 }}))
		if _, err := fx.g.InsertMany(ctx, sixDocs("a")); err != nil || len(fake.Docs()) != 6 {
			t.Fatalf("err = %v, %d stored; want success", err, len(fake.Docs()))
		}
	})
	t.Run("time spent: never sent is not_attempted", func(t *testing.T) {
		fake := mocks.NewFake("db.c43b").Script(mocks.PoolCleared())
		fx := newFixture(t, fake, writeguard.WithBackoff(policy.Backoff{MaxElapsed: time.Nanosecond, Jitter: func() float64 { return 0.5 }}))
		_, err := fx.g.InsertMany(ctx, sixDocs("q"))
		var r *writeguard.Report
		if !errors.As(err, &r) || r.Count(writeguard.NotAttempted) != 6 {
			t.Fatalf("err = %v, want 6 not_attempted", err)
		}
		for _, o := range r.Outcomes {
			if o.Attempts != 0 || o.MaybeWritten || o.Class != policy.Transient {
				t.Errorf("outcome %+v: want 0 attempts, not MaybeWritten, transient", o)
			}
		}
	})
}

// C44: the _id in the result, Outcome.ID and hook events is the Go value
// the driver returns, on every path.
func TestC44IDTypesOnEveryPath(t *testing.T) {
	docs := func() []any { return []any{bson.D{{Key: "name", Value: "a"}}, bson.D{{Key: "_id", Value: "s2"}}} }
	check := func(t *testing.T, ids []any) {
		t.Helper()
		if len(ids) != 2 {
			t.Fatalf("ids %v", ids)
		}
		if _, ok := ids[0].(bson.ObjectID); !ok {
			t.Errorf("ids[0] is %T, want bson.ObjectID", ids[0])
		}
		if s, ok := ids[1].(string); !ok || s != "s2" {
			t.Errorf("ids[1] is %T %v, want string s2", ids[1], ids[1])
		}
	}
	t.Run("first try", func(t *testing.T) {
		fx := newFixture(t, mocks.NewFake("db.c44a"))
		res, err := fx.g.InsertMany(ctx, docs())
		if err != nil {
			t.Fatal(err)
		}
		check(t, res.InsertedIDs)
	})
	t.Run("after a lost reply", func(t *testing.T) {
		fx := newFixture(t, mocks.NewFake("db.c44b").Script(mocks.LoseReply()))
		res, err := fx.g.InsertMany(ctx, docs())
		if err != nil {
			t.Fatal(err)
		}
		check(t, res.InsertedIDs)
	})
	t.Run("in a Report", func(t *testing.T) {
		fx := newFixture(t, mocks.NewFake("db.c44c").Script(mocks.Reply(`{"ok":0,"code":8000,"codeName":"AtlasError","errmsg":"no"}`)))
		_, err := fx.g.InsertMany(ctx, docs())
		var r *writeguard.Report
		if !errors.As(err, &r) {
			t.Fatal(err)
		}
		check(t, []any{r.Outcomes[0].ID, r.Outcomes[1].ID})
	})
	t.Run("hook events", func(t *testing.T) {
		fx := newFixture(t, mocks.NewFake("db.c44e").Script(mocks.LoseReply()))
		if _, err := fx.g.InsertMany(ctx, docs()); err != nil {
			t.Fatal(err)
		}
		var ids []any
		for _, d := range fx.rec.Dispositions() {
			ids = append(ids, d.ID)
		}
		check(t, ids)
	})
	t.Run("InsertOne after a retry", func(t *testing.T) {
		fx := newFixture(t, mocks.NewFake("db.c44d").Script(mocks.LoseReply()))
		res, err := fx.g.InsertOne(ctx, bson.D{{Key: "_id", Value: int64(7)}})
		if err != nil || res.InsertedID != int64(7) {
			t.Errorf("InsertedID %T %v (err %v), want int64 7", res.InsertedID, res.InsertedID, err)
		}
	})
}

// C45: a call that never sent anything: not_attempted, no attempts, not
// MaybeWritten, and errors.Is still sees the context's error.
func TestC45NothingSent(t *testing.T) {
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	past, cancel2 := context.WithDeadline(ctx, time.Now().Add(-time.Second))
	defer cancel2()
	for name, c := range map[string]struct {
		ctx  context.Context
		want error
	}{"cancelled": {cancelled, context.Canceled}, "past deadline": {past, context.DeadlineExceeded}} {
		t.Run(name, func(t *testing.T) {
			fake := mocks.NewFake("db.c45")
			fx := newFixture(t, fake)
			_, err := fx.g.InsertMany(c.ctx, sixDocs("c"))
			var r *writeguard.Report
			if !errors.As(err, &r) || !errors.Is(err, c.want) {
				t.Fatalf("err = %v, want a Report matching %v", err, c.want)
			}
			for _, o := range r.Outcomes {
				if o.Disposition != writeguard.NotAttempted || o.Attempts != 0 || o.MaybeWritten {
					t.Errorf("outcome %+v, want not_attempted, 0 attempts, not MaybeWritten", o)
				}
			}
			if len(fake.Calls()) != 0 {
				t.Errorf("%d calls, want 0", len(fake.Calls()))
			}
		})
	}
}

// C46: Report.Error() is bounded and never quotes a document value, a key
// value or errInfo; the driver's error stays reachable.
func TestC46ErrorMessageCarriesNoValues(t *testing.T) {
	dup := `{"ok":1,"writeErrors":[{"index":0,"code":11000,"errmsg":"E11000 duplicate key error collection: db.p index: ssn_1 dup key: { ssn: \"123-45-6789\" }","keyPattern":{"ssn":1},"keyValue":{"ssn":"123-45-6789"}}]}`
	fake := mocks.NewFake("db.p").Script(mocks.Reply(dup))
	fx := newFixture(t, fake)
	_, err := fx.g.InsertOne(ctx, bson.D{{Key: "_id", Value: 1}, {Key: "ssn", Value: "123-45-6789"}})
	if err == nil || strings.Contains(err.Error(), "123-45-6789") {
		t.Fatalf("err = %v: it quotes the key value", err)
	}
	var we mongo.WriteException
	if !errors.As(err, &we) {
		t.Error("the driver's WriteException is not reachable")
	}

	// A 121 with a huge errInfo (40,000 failing items) and one value per
	// document of a large batch.
	var items bson.A
	for i := range 40000 {
		items = append(items, bson.D{{Key: "itemIndex", Value: int32(i)}, {Key: "details", Value: bson.A{bson.D{{Key: "operatorName", Value: "minimum"}, {Key: "consideredValue", Value: "SECRET-VALUE"}}}}})
	}
	errInfo := bson.D{{Key: "failingDocumentId", Value: 1}, {Key: "details", Value: bson.D{{Key: "operatorName", Value: "$jsonSchema"}, {Key: "schemaRulesNotSatisfied", Value: bson.A{bson.D{{Key: "operatorName", Value: "items"}, {Key: "details", Value: items}}}}}}}
	reply, _ := bson.MarshalExtJSON(bson.D{{Key: "ok", Value: 1}, {Key: "writeErrors", Value: bson.A{bson.D{{Key: "index", Value: 0}, {Key: "code", Value: 121}, {Key: "codeName", Value: "DocumentValidationFailure"}, {Key: "errmsg", Value: "Document failed validation"}, {Key: "errInfo", Value: errInfo}}}}}, false, false)
	fake = mocks.NewFake("db.v").Script(mocks.Reply(string(reply)))
	fx = newFixture(t, fake, writeguard.WithConflictHandler(writeguard.ConflictFail()))
	g, _ := writeguard.New(fake)
	_, err = g.InsertOne(ctx, bson.D{{Key: "_id", Value: 1}})
	msg := err.Error()
	if len(msg) > 1024 || strings.Contains(msg, "SECRET-VALUE") {
		t.Errorf("Error() is %d bytes (max 1024) or quotes errInfo: %.200s", len(msg), msg)
	}
	_ = fx
}

// A write concern error made clean by a read-back is not a success: the
// document stays written_unconfirmed.
func TestWriteConcernErrorIsNotClearedByReadBack(t *testing.T) {
	// In a testing/synctest bubble: the backoff waits and deadlines
	// run on the bubble's clock and take no real time.
	synctest.Test(t, func(t *testing.T) {
		wce := mocks.WriteConcernError(91, "ShutdownInProgress", "shutting down", "RetryableWriteError")
		fake := mocks.NewFake("db.wce").Script(wce, mocks.LoseReply())
		fx := newFixture(t, fake)
		_, err := fx.g.InsertOne(ctx, bson.D{{Key: "_id", Value: "w"}})
		var r *writeguard.Report
		if !errors.As(err, &r) || r.Outcomes[0].Disposition != writeguard.WrittenUnconfirmed {
			t.Fatalf("err = %v, want written_unconfirmed", err)
		}
	})
}

// Report.ErrorType is bounded: a code, a class or a disposition.
func TestReportErrorType(t *testing.T) {
	fake := mocks.NewFake("db.et").Script(mocks.Reply(`{"ok":0,"code":8000,"codeName":"AtlasError","errmsg":"no"}`))
	fx := newFixture(t, fake)
	_, err := fx.g.InsertOne(ctx, bson.D{{Key: "_id", Value: 1}})
	var r *writeguard.Report
	if !errors.As(err, &r) || r.ErrorType() != "8000" {
		t.Fatalf("ErrorType() of %v, want 8000", err)
	}
	fake = mocks.NewFake("db.et2").Script(mocks.PoolCleared())
	fx = newFixture(t, fake, writeguard.WithBackoff(policy.Backoff{MaxElapsed: time.Nanosecond, Jitter: func() float64 { return 0.5 }}))
	_, err = fx.g.InsertOne(ctx, bson.D{{Key: "_id", Value: 1}})
	if !errors.As(err, &r) || r.ErrorType() != "transient" {
		t.Fatalf("ErrorType() of %v = %q, want transient", err, r.ErrorType())
	}
}

// An ordered write through many invalid documents: one command ends at
// each of them (the server's ordered semantics), but the tail is sent in a
// window that follows the distance between rejections, and the sink gets
// gathered Puts, not one per rejection. Order and dispositions are kept.
func TestOrderedDeadLetteringIsGathered(t *testing.T) {
	fake := mocks.NewFake("db.ord").Validator(func(doc bson.Raw) (bson.Raw, bool) {
		_, err := doc.LookupErr("bad")
		return nil, err == nil
	})
	fx := newFixture(t, fake)
	const n = 600
	docs := make([]any, n)
	for i := range docs {
		d := bson.D{{Key: "_id", Value: int32(i)}}
		if i%3 != 2 { // two invalid documents in three
			d = append(d, bson.E{Key: "bad", Value: true})
		}
		docs[i] = d
	}
	_, err := fx.g.InsertMany(ctx, docs)
	var r *writeguard.Report
	if !errors.As(err, &r) || !r.Handled() || r.Count(writeguard.DeadLettered) != 400 || r.Count(writeguard.Written) != 200 {
		t.Fatalf("err = %v, want 400 dead_lettered and 200 written, handled", err)
	}
	if puts := fx.sink.Puts(); puts > 3 {
		t.Errorf("%d sink Puts for 400 rejections, want gathered (at most 3)", puts)
	}
	sent := 0
	for _, c := range fake.Calls() {
		sent += len(c.Docs)
	}
	if sent > 20*n {
		t.Errorf("%d documents sent for %d inputs: the tail is re-sent whole after each rejection", sent, n)
	}
	var last int32 = -1
	for _, d := range fake.Docs() {
		id := d.Lookup("_id").Int32()
		if id <= last || id%3 != 2 {
			t.Fatalf("stored %d after %d: out of order or an invalid document", id, last)
		}
		last = id
	}
	t.Logf("%d commands, %d documents sent, %d Puts", len(fake.Calls()), sent, fx.sink.Puts())
}
