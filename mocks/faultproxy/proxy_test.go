package faultproxy_test

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.uber.org/goleak"

	"github.com/writeguard/writeguard/jsonschema"
	"github.com/writeguard/writeguard/mocks/faultproxy"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// testTimeout bounds every driver operation of these tests: generous, only
// there so that a bug fails the test instead of hanging it.
const testTimeout = 20 * time.Second

func startProxy(t *testing.T, opts ...faultproxy.Option) *faultproxy.Proxy {
	t.Helper()
	p, err := faultproxy.New(opts...)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	if err := p.Start(context.Background()); err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return p
}

// connect opens a driver client on uri. Writes are not retried unless
// retry is set, so that every scripted fault reaches the test as is.
func connect(t *testing.T, uri string, retry bool) *mongo.Client {
	t.Helper()
	opts := options.Client().ApplyURI(uri).
		SetRetryWrites(retry).
		SetRetryReads(false).
		SetServerSelectionTimeout(testTimeout)
	c, err := mongo.Connect(opts)
	if err != nil {
		t.Fatalf("Connect: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
		defer cancel()
		if err := c.Disconnect(ctx); err != nil {
			t.Errorf("Disconnect: %v", err)
		}
	})
	return c
}

func opCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	t.Cleanup(cancel)
	return ctx
}

func mustRaw(t *testing.T, v any) bson.Raw {
	t.Helper()
	b, err := bson.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// sameDoc compares two documents field order included, numbers by value.
func sameDoc(t *testing.T, what string, want any, got bson.Raw) {
	t.Helper()
	var w, g bson.D
	if err := bson.Unmarshal(mustRaw(t, want), &w); err != nil {
		t.Fatal(err)
	}
	if err := bson.Unmarshal(got, &g); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	if diff := cmp.Diff(flatten(canonical(w)), flatten(canonical(g))); diff != "" {
		t.Errorf("%s differs (-want +got):\n%s", what, diff)
	}
}

func TestNullBackendAnswersTheDriver(t *testing.T) {
	p := startProxy(t)
	c := connect(t, p.URI(), false)
	ctx := opCtx(t)
	coll := c.Database("app").Collection("users")

	if err := c.Ping(ctx, nil); err != nil {
		t.Fatalf("Ping: %v", err)
	}
	if _, err := coll.InsertOne(ctx, bson.D{{Key: "_id", Value: 1}}); err != nil {
		t.Fatalf("InsertOne: %v", err)
	}
	res, err := coll.InsertMany(ctx, []any{bson.D{{Key: "a", Value: 1}}, bson.D{{Key: "a", Value: 2}}, bson.D{{Key: "a", Value: 3}}})
	if err != nil || len(res.InsertedIDs) != 3 {
		t.Fatalf("InsertMany: %v %v", res, err)
	}
	up, err := coll.UpdateOne(ctx, bson.D{{Key: "_id", Value: 1}}, bson.D{{Key: "$set", Value: bson.D{{Key: "a", Value: 9}}}})
	if err != nil || up.MatchedCount != 1 || up.ModifiedCount != 1 {
		t.Fatalf("UpdateOne: %+v %v", up, err)
	}
	upsert, err := coll.UpdateOne(ctx, bson.D{{Key: "_id", Value: 7}}, bson.D{{Key: "$set", Value: bson.D{{Key: "a", Value: 1}}}}, options.UpdateOne().SetUpsert(true))
	if err != nil || upsert.UpsertedCount != 1 || upsert.UpsertedID != int32(7) {
		t.Fatalf("upsert: %+v %v", upsert, err)
	}
	del, err := coll.DeleteMany(ctx, bson.D{})
	if err != nil || del.DeletedCount != 1 {
		t.Fatalf("DeleteMany: %+v %v", del, err)
	}
	cur, err := coll.Find(ctx, bson.D{})
	if err != nil {
		t.Fatalf("Find: %v", err)
	}
	var docs []bson.D
	if err := cur.All(ctx, &docs); err != nil || len(docs) != 0 {
		t.Fatalf("Find returned %v, %v", docs, err)
	}
	if cur, err := coll.Aggregate(ctx, mongo.Pipeline{}); err != nil {
		t.Fatalf("Aggregate: %v", err)
	} else {
		_ = cur.Close(ctx)
	}
	err = coll.FindOneAndUpdate(ctx, bson.D{{Key: "_id", Value: 1}}, bson.D{{Key: "$set", Value: bson.D{{Key: "b", Value: 1}}}}).Err()
	if !errors.Is(err, mongo.ErrNoDocuments) {
		t.Fatalf("FindOneAndUpdate: %v, want ErrNoDocuments", err)
	}
	var bi bson.M
	if err := c.Database("admin").RunCommand(ctx, bson.D{{Key: "buildInfo", Value: 1}}).Decode(&bi); err != nil || bi["version"] == nil {
		t.Fatalf("buildInfo: %v %v", bi, err)
	}

	st := p.Stats()
	if st.Count("insert") != 2 || st.Documents["insert"] != 4 || st.Forwarded["insert"] != 4 {
		t.Errorf("insert counters: commands %d, documents %d, forwarded %d; want 2, 4, 4",
			st.Count("insert"), st.Documents["insert"], st.Forwarded["insert"])
	}
	if st.CountIn("update", "app.users") != 2 || st.Documents["update"] != 2 {
		t.Errorf("update counters: %d commands, %d statements; want 2, 2", st.CountIn("update", "app.users"), st.Documents["update"])
	}
	for _, name := range []string{"delete", "find", "aggregate", "findAndModify", "ping", "buildInfo"} {
		if st.Count(name) != 1 {
			t.Errorf("Count(%q) = %d, want 1", name, st.Count(name))
		}
	}
	if st.Connections < 1 || st.Count("isMaster") < 1 {
		t.Errorf("handshake not counted: %d connections, %d isMaster", st.Connections, st.Count("isMaster"))
	}
	if len(st.Faults) != 0 {
		t.Errorf("faults fired without a script: %v", st.Faults)
	}
}

func TestErrorReplyOnNthOccurrence(t *testing.T) {
	script := faultproxy.MustScript(faultproxy.On("insert").Nth(2).Do(faultproxy.ErrorReply(faultproxy.CommandError{
		Code: 91, CodeName: "ShutdownInProgress", Message: "shutting down",
		Labels: []string{"RetryableWriteError"},
		Extra:  bson.D{{Key: "baseBackoffMS", Value: int64(250)}},
	})))
	p := startProxy(t, faultproxy.WithScript(script))
	coll := connect(t, p.URI(), false).Database("app").Collection("users")
	ctx := opCtx(t)

	if _, err := coll.InsertOne(ctx, bson.D{{Key: "n", Value: 1}}); err != nil {
		t.Fatalf("occurrence 1: %v", err)
	}
	_, err := coll.InsertOne(ctx, bson.D{{Key: "n", Value: 2}})
	var ce mongo.CommandError
	if !errors.As(err, &ce) {
		t.Fatalf("occurrence 2: %v (%T), want a CommandError", err, err)
	}
	if ce.Code != 91 || ce.Name != "ShutdownInProgress" || ce.Message != "shutting down" || !ce.HasErrorLabel("RetryableWriteError") {
		t.Errorf("CommandError = %+v", ce)
	}
	if v, err := ce.Raw.LookupErr("baseBackoffMS"); err != nil || v.Int64() != 250 {
		t.Errorf("baseBackoffMS = %v, %v", v, err)
	}
	if _, err := coll.InsertOne(ctx, bson.D{{Key: "n", Value: 3}}); err != nil {
		t.Fatalf("occurrence 3: %v", err)
	}
	st := p.Stats()
	if st.Faults[faultproxy.FaultErrorReply] != 1 || st.Count("insert") != 3 || st.Forwarded["insert"] != 2 {
		t.Errorf("stats: faults %v, inserts %d, forwarded %d; want 1 error_reply, 3, 2", st.Faults, st.Count("insert"), st.Forwarded["insert"])
	}
}

func TestWriteConcernErrorAfterForwarding(t *testing.T) {
	script := faultproxy.MustScript(faultproxy.On("insert").Do(faultproxy.WriteConcernErrorReply(faultproxy.WriteConcernError{
		Code: 64, CodeName: "WriteConcernTimeout", Message: "waiting for replication timed out",
		ErrInfo: bson.D{{Key: "wtimeout", Value: true}},
	})))
	p := startProxy(t, faultproxy.WithScript(script))
	coll := connect(t, p.URI(), false).Database("app").Collection("users")

	_, err := coll.InsertOne(opCtx(t), bson.D{{Key: "n", Value: 1}})
	var we mongo.WriteException
	if !errors.As(err, &we) || we.WriteConcernError == nil {
		t.Fatalf("err = %v (%T), want a WriteException with a write concern error", err, err)
	}
	wce := we.WriteConcernError
	if wce.Code != 64 || wce.Name != "WriteConcernTimeout" || wce.Message != "waiting for replication timed out" {
		t.Errorf("WriteConcernError = %+v", wce)
	}
	sameDoc(t, "errInfo", bson.D{{Key: "wtimeout", Value: true}}, wce.Details)
	if len(we.WriteErrors) != 0 {
		t.Errorf("unexpected write errors %v", we.WriteErrors)
	}
	st := p.Stats()
	if st.Forwarded["insert"] != 1 || st.Faults[faultproxy.FaultWriteConcernError] != 1 {
		t.Errorf("the write must have been applied once: forwarded %d, faults %v", st.Forwarded["insert"], st.Faults)
	}
}

func TestCloseBeforeAndAfterForward(t *testing.T) {
	for _, tc := range []struct {
		name      string
		fault     faultproxy.Fault
		forwarded int64
	}{
		{"before", faultproxy.CloseBeforeForward(), 0},
		{"after", faultproxy.CloseAfterForward(), 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := startProxy(t, faultproxy.WithScript(faultproxy.MustScript(faultproxy.On("insert").Do(tc.fault))))
			coll := connect(t, p.URI(), false).Database("app").Collection("users")
			ctx := opCtx(t)
			_, err := coll.InsertOne(ctx, bson.D{{Key: "n", Value: 1}})
			if !mongo.IsNetworkError(err) {
				t.Fatalf("err = %v, want a network error", err)
			}
			if _, err := coll.InsertOne(ctx, bson.D{{Key: "n", Value: 2}}); err != nil {
				t.Fatalf("the next insert must succeed: %v", err)
			}
			st := p.Stats()
			if got := st.Forwarded["insert"]; got != tc.forwarded+1 {
				t.Errorf("forwarded %d documents, want %d", got, tc.forwarded+1)
			}
			if st.Faults[tc.fault.Kind()] != 1 {
				t.Errorf("faults %v, want one %s", st.Faults, tc.fault.Kind())
			}
		})
	}
}

func TestDelayHitsTheDeadlineAndCloseCutsItShort(t *testing.T) {
	p, err := faultproxy.New(faultproxy.WithScript(faultproxy.MustScript(
		faultproxy.On("insert").Do(faultproxy.Delay(time.Hour)))))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	c := connect(t, p.URI(), false)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	_, err = c.Database("app").Collection("users").InsertOne(ctx, bson.D{{Key: "n", Value: 1}})
	if !errors.Is(err, context.DeadlineExceeded) || !mongo.IsTimeout(err) {
		t.Fatalf("err = %v, want a context deadline", err)
	}
	if got := p.Stats().Faults[faultproxy.FaultDelay]; got != 1 {
		t.Errorf("delay faults = %d, want 1", got)
	}
	start := time.Now()
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("Close took %v: the one-hour delay was not cut short", d)
	}
}

// usersValidator is the validator of the validation tests.
var usersValidator = bson.D{{Key: "$jsonSchema", Value: bson.D{
	{Key: "required", Value: bson.A{"name"}},
	{Key: "properties", Value: bson.D{
		{Key: "age", Value: bson.D{{Key: "bsonType", Value: "int"}, {Key: "minimum", Value: 0}}},
	}},
}}}

// errInfo the server gives for {_id: id, name: ..., age: <negative int>}.
func negativeAgeErrInfo(id, age any) bson.D {
	return bson.D{
		{Key: "failingDocumentId", Value: id},
		{Key: "details", Value: bson.D{
			{Key: "operatorName", Value: "$jsonSchema"},
			{Key: "schemaRulesNotSatisfied", Value: bson.A{bson.D{
				{Key: "operatorName", Value: "properties"},
				{Key: "propertiesNotSatisfied", Value: bson.A{bson.D{
					{Key: "propertyName", Value: "age"},
					{Key: "details", Value: bson.A{bson.D{
						{Key: "operatorName", Value: "minimum"},
						{Key: "specifiedAs", Value: bson.D{{Key: "minimum", Value: 0}}},
						{Key: "reason", Value: "comparison failed"},
						{Key: "consideredValue", Value: age},
					}}},
				}}},
			}}},
		}},
	}
}

// errInfo the server gives for {_id: id} without the required name.
func missingNameErrInfo(id any) bson.D {
	return bson.D{
		{Key: "failingDocumentId", Value: id},
		{Key: "details", Value: bson.D{
			{Key: "operatorName", Value: "$jsonSchema"},
			{Key: "schemaRulesNotSatisfied", Value: bson.A{bson.D{
				{Key: "operatorName", Value: "required"},
				{Key: "specifiedAs", Value: bson.D{{Key: "required", Value: bson.A{"name"}}}},
				{Key: "missingProperties", Value: bson.A{"name"}},
			}}},
		}},
	}
}

func usersDocs() []any {
	return []any{
		bson.D{{Key: "_id", Value: 0}, {Key: "name", Value: "ok"}},
		bson.D{{Key: "_id", Value: 1}, {Key: "name", Value: "young"}, {Key: "age", Value: int32(-1)}},
		bson.D{{Key: "_id", Value: 2}, {Key: "name", Value: "ok"}, {Key: "age", Value: int32(30)}},
		bson.D{{Key: "_id", Value: 3}},
		bson.D{{Key: "_id", Value: 4}, {Key: "name", Value: "ok"}},
	}
}

func bulkErrors(t *testing.T, err error) []mongo.BulkWriteError {
	t.Helper()
	var bwe mongo.BulkWriteException
	if !errors.As(err, &bwe) {
		t.Fatalf("err = %v (%T), want a BulkWriteException", err, err)
	}
	return bwe.WriteErrors
}

func TestValidatorOrderedStopsAtFirstRejection(t *testing.T) {
	p := startProxy(t, faultproxy.WithScript(faultproxy.MustScript(faultproxy.Validator("app.users", usersValidator))))
	coll := connect(t, p.URI(), false).Database("app").Collection("users")

	_, err := coll.InsertMany(opCtx(t), usersDocs())
	wes := bulkErrors(t, err)
	if len(wes) != 1 || wes[0].Index != 1 || wes[0].Code != 121 || wes[0].Message != "Document failed validation" {
		t.Fatalf("write errors = %+v, want one 121 at index 1", wes)
	}
	sameDoc(t, "errInfo", negativeAgeErrInfo(1, -1), wes[0].Details)
	st := p.Stats()
	if st.Documents["insert"] != 5 || st.Forwarded["insert"] != 1 || st.Faults[faultproxy.FaultValidation] != 1 {
		t.Errorf("stats: documents %d, forwarded %d, faults %v; want 5, 1, 1 validation",
			st.Documents["insert"], st.Forwarded["insert"], st.Faults)
	}
}

func TestValidatorUnorderedReportsEveryRejection(t *testing.T) {
	p := startProxy(t, faultproxy.WithScript(faultproxy.MustScript(faultproxy.Validator("app.users", usersValidator))))
	coll := connect(t, p.URI(), false).Database("app").Collection("users")

	res, err := coll.InsertMany(opCtx(t), usersDocs(), options.InsertMany().SetOrdered(false))
	wes := bulkErrors(t, err)
	if len(wes) != 2 || wes[0].Index != 1 || wes[1].Index != 3 {
		t.Fatalf("write errors = %+v, want indexes 1 and 3", wes)
	}
	sameDoc(t, "errInfo[1]", negativeAgeErrInfo(1, -1), wes[0].Details)
	sameDoc(t, "errInfo[3]", missingNameErrInfo(3), wes[1].Details)
	if res == nil || len(res.InsertedIDs) != 3 {
		t.Errorf("InsertedIDs = %v, want the 3 accepted documents", res)
	}
	if st := p.Stats(); st.Forwarded["insert"] != 3 || st.Faults[faultproxy.FaultValidation] != 2 {
		t.Errorf("forwarded %d, faults %v; want 3 and 2 validation", st.Forwarded["insert"], st.Faults)
	}
}

func TestValidatorOnlyOnItsNamespace(t *testing.T) {
	p := startProxy(t, faultproxy.WithScript(faultproxy.MustScript(faultproxy.Validator("app.users", usersValidator))))
	db := connect(t, p.URI(), false).Database("app")
	if _, err := db.Collection("dlq").InsertMany(opCtx(t), usersDocs()); err != nil {
		t.Fatalf("app.dlq has no validator: %v", err)
	}
	// An insert without _id: the driver adds one, and errInfo reports it.
	res, err := db.Collection("users").InsertOne(opCtx(t), bson.D{{Key: "age", Value: int32(5)}, {Key: "name", Value: "x"}, {Key: "x", Value: 1}})
	if err != nil {
		t.Fatalf("valid document rejected: %v", err)
	}
	_, err = db.Collection("users").InsertOne(opCtx(t), bson.D{{Key: "age", Value: int32(-3)}, {Key: "name", Value: "x"}})
	var we mongo.WriteException
	if !errors.As(err, &we) || len(we.WriteErrors) != 1 || we.WriteErrors[0].Code != 121 {
		t.Fatalf("err = %v, want one 121 write error", err)
	}
	id, err := we.WriteErrors[0].Details.LookupErr("failingDocumentId")
	if err != nil || id.Type != bson.TypeObjectID {
		t.Errorf("failingDocumentId = %v (%v), want the driver's ObjectID", id, err)
	}
	_ = res
}

// TestIndexRemappingThroughAChain chains two proxies: A emulates the
// validator, B (null backend) plays a server that fails one document with
// its own duplicate-key error. A forwards a subset of the documents, so B's
// indexes must be mapped back to the client's.
func TestIndexRemappingThroughAChain(t *testing.T) {
	dup := faultproxy.WriteError{
		Code:       11000,
		Message:    "E11000 duplicate key error collection: app.users index: _id_ dup key: { _id: 12 }",
		KeyPattern: bson.D{{Key: "_id", Value: 1}},
		KeyValue:   bson.D{{Key: "_id", Value: 12}},
	}
	b := startProxy(t, faultproxy.WithScript(faultproxy.MustScript(
		faultproxy.On("insert").Always().Do(faultproxy.RejectDocuments(faultproxy.DocumentID(12), dup)))))
	a := startProxy(t, faultproxy.WithUpstream(b.Addr()), faultproxy.WithScript(faultproxy.MustScript(
		faultproxy.Validator("app.users", usersValidator))))
	coll := connect(t, a.URI(), false).Database("app").Collection("users")
	ok := func(id int) bson.D { return bson.D{{Key: "_id", Value: id}, {Key: "name", Value: "ok"}} }
	bad := func(id int) bson.D { return bson.D{{Key: "_id", Value: id}} }

	t.Run("unordered", func(t *testing.T) {
		_, err := coll.InsertMany(opCtx(t), []any{bad(10), ok(11), ok(12), bad(13), ok(14)}, options.InsertMany().SetOrdered(false))
		wes := bulkErrors(t, err)
		var got []string
		for _, we := range wes {
			got = append(got, fmt.Sprintf("%d:%d", we.Index, we.Code))
		}
		if want := []string{"0:121", "2:11000", "3:121"}; !cmp.Equal(got, want) {
			t.Fatalf("write errors = %v, want %v", got, want)
		}
		sameDoc(t, "duplicate key error", bson.D{
			{Key: "index", Value: 2}, {Key: "code", Value: 11000},
			{Key: "keyPattern", Value: bson.D{{Key: "_id", Value: 1}}},
			{Key: "keyValue", Value: bson.D{{Key: "_id", Value: 12}}},
			{Key: "errmsg", Value: dup.Message},
		}, wes[1].Raw)
		sameDoc(t, "errInfo[3]", missingNameErrInfo(13), wes[2].Details)
	})
	t.Run("ordered, server error first", func(t *testing.T) {
		_, err := coll.InsertMany(opCtx(t), []any{ok(11), ok(12), bad(13)})
		wes := bulkErrors(t, err)
		if len(wes) != 1 || wes[0].Index != 1 || wes[0].Code != 11000 {
			t.Fatalf("write errors = %+v, want only the 11000 at index 1 (the ordered insert stopped there)", wes)
		}
	})
	t.Run("ordered, validation first", func(t *testing.T) {
		_, err := coll.InsertMany(opCtx(t), []any{ok(11), bad(13), ok(12)})
		wes := bulkErrors(t, err)
		if len(wes) != 1 || wes[0].Index != 1 || wes[0].Code != 121 {
			t.Fatalf("write errors = %+v, want only the 121 at index 1", wes)
		}
	})
	st := b.Stats()
	if st.Documents["insert"] != 3+2+1 {
		t.Errorf("B received %d documents, want 6 (only what A forwarded)", st.Documents["insert"])
	}
	if st.Faults[faultproxy.FaultDocument] != 2 {
		t.Errorf("B rejected %d documents, want 2", st.Faults[faultproxy.FaultDocument])
	}
}

func TestRejectDocumentsInUpdatesAndDeletes(t *testing.T) {
	conflict := faultproxy.WriteError{Code: 112, Message: "WriteConflict error: this operation conflicted with another operation."}
	p := startProxy(t, faultproxy.WithScript(faultproxy.MustScript(
		faultproxy.On("update").Nth(1).Do(faultproxy.RejectDocuments(faultproxy.DocumentID("b"), conflict)),
		faultproxy.On("delete").Do(faultproxy.RejectDocuments(faultproxy.DocumentID("x"), faultproxy.WriteError{Code: 16500, Message: "Request rate is large. RetryAfterMs=12"})),
	)))
	coll := connect(t, p.URI(), false).Database("app").Collection("users")
	set := bson.D{{Key: "$set", Value: bson.D{{Key: "v", Value: 1}}}}
	models := []mongo.WriteModel{
		mongo.NewUpdateOneModel().SetFilter(bson.D{{Key: "_id", Value: "a"}}).SetUpdate(set),
		mongo.NewUpdateOneModel().SetFilter(bson.D{{Key: "_id", Value: "b"}}).SetUpdate(set),
		mongo.NewUpdateOneModel().SetFilter(bson.D{{Key: "_id", Value: "c"}}).SetUpdate(set),
	}
	res, err := coll.BulkWrite(opCtx(t), models, options.BulkWrite().SetOrdered(false))
	wes := bulkErrors(t, err)
	if len(wes) != 1 || wes[0].Index != 1 || wes[0].Code != 112 {
		t.Fatalf("write errors = %+v, want a 112 at index 1", wes)
	}
	if res == nil || res.MatchedCount != 2 {
		t.Errorf("result = %+v, want 2 matched", res)
	}
	// Occurrence 2 of update: the rule no longer fires.
	if _, err := coll.BulkWrite(opCtx(t), models); err != nil {
		t.Fatalf("second update: %v", err)
	}
	_, err = coll.DeleteOne(opCtx(t), bson.D{{Key: "_id", Value: "x"}})
	var we mongo.WriteException
	if !errors.As(err, &we) || len(we.WriteErrors) != 1 || we.WriteErrors[0].Code != 16500 || we.WriteErrors[0].Index != 0 {
		t.Fatalf("delete: %v, want a 16500 write error", err)
	}
	if st := p.Stats(); st.Faults[faultproxy.FaultDocument] != 2 || st.Forwarded["update"] != 2+3 || st.Forwarded["delete"] != 0 {
		t.Errorf("stats: faults %v, forwarded %v", st.Faults, st.Forwarded)
	}
}

func TestRuleWindowsAndNamespaces(t *testing.T) {
	// 11601 Interrupted: not a state-change error, so the driver keeps its
	// pool and does not wait for a heartbeat after each fault.
	shutdown := faultproxy.ErrorReply(faultproxy.CommandError{Code: 11601, CodeName: "Interrupted"})
	p := startProxy(t, faultproxy.WithScript(faultproxy.MustScript(
		faultproxy.On("insert").In("app.dlq").Always().Do(shutdown),
		faultproxy.On("insert").In("app.users").Nth(2).Times(2).Do(shutdown),
	)))
	db := connect(t, p.URI(), false).Database("app")
	var users, dlq []bool
	for i := 0; i < 5; i++ {
		_, err := db.Collection("users").InsertOne(opCtx(t), bson.D{{Key: "i", Value: i}})
		users = append(users, err == nil)
		_, err = db.Collection("dlq").InsertOne(opCtx(t), bson.D{{Key: "i", Value: i}})
		dlq = append(dlq, err == nil)
	}
	if want := []bool{true, false, false, true, true}; !cmp.Equal(users, want) {
		t.Errorf("app.users successes = %v, want %v", users, want)
	}
	if want := []bool{false, false, false, false, false}; !cmp.Equal(dlq, want) {
		t.Errorf("app.dlq successes = %v, want %v", dlq, want)
	}
	st := p.Stats()
	if st.CountIn("insert", "app.users") != 5 || st.CountIn("insert", "app.dlq") != 5 || st.Faults[faultproxy.FaultErrorReply] != 7 {
		t.Errorf("stats: users %d, dlq %d, faults %v", st.CountIn("insert", "app.users"), st.CountIn("insert", "app.dlq"), st.Faults)
	}
	p.Reset()
	if st := p.Stats(); st.Count("insert") != 0 || len(st.Faults) != 0 {
		t.Errorf("after Reset: %+v", st)
	}
	// Reset also restarts occurrence counting: occurrence 1 passes again.
	if _, err := db.Collection("users").InsertOne(opCtx(t), bson.D{}); err != nil {
		t.Errorf("occurrence 1 after Reset: %v", err)
	}
	if _, err := db.Collection("users").InsertOne(opCtx(t), bson.D{}); err == nil {
		t.Error("occurrence 2 after Reset must fail")
	}
}

func TestRandomScheduleIsReproducible(t *testing.T) {
	run := func(seed int64) (string, faultproxy.Stats) {
		schedule := faultproxy.RandomSchedule(seed,
			faultproxy.Rate{Fault: faultproxy.ErrorReply(faultproxy.CommandError{Code: 11601}), P: 0.2},
			faultproxy.Rate{Fault: faultproxy.ErrorReply(faultproxy.CommandError{Code: 112}), P: 0.2},
			faultproxy.Rate{Fault: faultproxy.WriteConcernErrorReply(faultproxy.WriteConcernError{Code: 64}), P: 0.2},
		)
		p := startProxy(t, faultproxy.WithScript(faultproxy.MustScript(faultproxy.On("insert").Always().Do(schedule))))
		coll := connect(t, p.URI(), false).Database("app").Collection("users")
		var b strings.Builder
		for i := 0; i < 40; i++ {
			_, err := coll.InsertOne(opCtx(t), bson.D{{Key: "i", Value: i}})
			var ce mongo.CommandError
			var we mongo.WriteException
			switch {
			case err == nil:
				b.WriteByte('.')
			case errors.As(err, &ce):
				fmt.Fprintf(&b, "[%d]", ce.Code)
			case errors.As(err, &we) && we.WriteConcernError != nil:
				b.WriteString("[wce]")
			default:
				t.Fatalf("unexpected error %v", err)
			}
		}
		return b.String(), p.Stats()
	}
	first, st := run(7)
	second, _ := run(7)
	other, _ := run(8)
	if first != second {
		t.Errorf("same seed, different schedules:\n%s\n%s", first, second)
	}
	if first == other {
		t.Errorf("seeds 7 and 8 gave the same 40-step schedule %s", first)
	}
	for _, k := range []faultproxy.FaultKind{faultproxy.FaultErrorReply, faultproxy.FaultWriteConcernError} {
		if st.Faults[k] == 0 {
			t.Errorf("no %s fired in 40 draws: %s", k, first)
		}
	}
	if !strings.Contains(first, ".") {
		t.Errorf("no clean occurrence in 40 draws: %s", first)
	}
}

func TestCustomRule(t *testing.T) {
	var mu sync.Mutex
	var seen []string
	p := startProxy(t, faultproxy.WithScript(faultproxy.MustScript(
		// Tagged inserts: forward only the first document and report it.
		faultproxy.OnAny().Where(func(c *faultproxy.Command) bool {
			v, err := c.Body.LookupErr("comment")
			return c.Name == "insert" && err == nil && v.StringValue() == "tagged"
		}).Always().Do(faultproxy.Custom(func(c *faultproxy.Command, forward func(*faultproxy.Command) (bson.Raw, error)) (bson.Raw, error) {
			mu.Lock()
			seen = append(seen, c.Namespace)
			mu.Unlock()
			return forward(c.WithStatements(c.Statements()[:1]))
		})),
		faultproxy.On("delete").Do(faultproxy.Custom(func(*faultproxy.Command, func(*faultproxy.Command) (bson.Raw, error)) (bson.Raw, error) {
			return nil, faultproxy.ErrCloseConnection
		})),
	)))
	coll := connect(t, p.URI(), false).Database("app").Collection("users")
	_, err := coll.InsertMany(opCtx(t), []any{bson.D{}, bson.D{}, bson.D{}}, options.InsertMany().SetComment("tagged"))
	if err != nil {
		t.Fatalf("tagged insert: %v", err)
	}
	if _, err := coll.InsertMany(opCtx(t), []any{bson.D{}, bson.D{}}); err != nil {
		t.Fatalf("plain insert: %v", err)
	}
	if _, err := coll.DeleteOne(opCtx(t), bson.D{}); !mongo.IsNetworkError(err) {
		t.Errorf("delete: %v, want a network error", err)
	}
	st := p.Stats()
	if st.Documents["insert"] != 5 || st.Forwarded["insert"] != 1+2 || st.Faults[faultproxy.FaultCustom] != 2 {
		t.Errorf("stats: documents %v forwarded %v faults %v", st.Documents, st.Forwarded, st.Faults)
	}
	mu.Lock()
	defer mu.Unlock()
	if !cmp.Equal(seen, []string{"app.users"}) {
		t.Errorf("handler saw %v", seen)
	}
}

// TestRetryableWriteAmplification: as a replica-set primary the null
// backend gets retryable writes; a reply lost after the write was applied
// makes the driver send the insert twice.
func TestRetryableWriteAmplification(t *testing.T) {
	var mu sync.Mutex
	var txnNumbers []int64
	p := startProxy(t, faultproxy.WithReplicaSet("rs0"), faultproxy.WithScript(faultproxy.MustScript(
		faultproxy.On("insert").Where(func(c *faultproxy.Command) bool {
			if v, err := c.Body.LookupErr("txnNumber"); err == nil {
				mu.Lock()
				txnNumbers = append(txnNumbers, v.Int64())
				mu.Unlock()
			}
			return true
		}).Nth(1).Do(faultproxy.CloseAfterForward()),
	)))
	coll := connect(t, p.URI(), true).Database("app").Collection("users")
	if _, err := coll.InsertOne(opCtx(t), bson.D{{Key: "n", Value: 1}}); err != nil {
		t.Fatalf("the retry must succeed: %v", err)
	}
	st := p.Stats()
	if st.Count("insert") != 2 || st.Forwarded["insert"] != 2 || st.Documents["insert"] != 2 {
		t.Errorf("inserts %d, forwarded %d, documents %d; want 2, 2, 2", st.Count("insert"), st.Forwarded["insert"], st.Documents["insert"])
	}
	mu.Lock()
	defer mu.Unlock()
	if len(txnNumbers) != 2 || txnNumbers[0] != txnNumbers[1] {
		t.Errorf("txnNumbers = %v, want the same txnNumber twice (a retryable write)", txnNumbers)
	}
}

func TestBadScripts(t *testing.T) {
	errFault := faultproxy.ErrorReply(faultproxy.CommandError{Code: 1})
	for _, tc := range []struct {
		name string
		item faultproxy.ScriptItem
		want string
	}{
		{"unknown command", faultproxy.On("inesrt").Do(errFault), `unknown command name "inesrt"`},
		{"zero Nth", faultproxy.On("insert").Nth(0).Do(errFault), "Nth(0)"},
		{"zero Times", faultproxy.On("insert").Times(0).Do(errFault), "Times(0)"},
		{"no fault", faultproxy.On("insert"), "no fault"},
		{"zero fault", faultproxy.On("insert").Do(faultproxy.Fault{}), "zero Fault"},
		{"zero code", faultproxy.On("insert").Do(faultproxy.ErrorReply(faultproxy.CommandError{})), "code must not be 0"},
		{"negative delay", faultproxy.On("insert").Do(faultproxy.Delay(-time.Second)), "must be positive"},
		{"negative k", faultproxy.On("insert").Do(faultproxy.ApplyThenClose(-1)), "must not be negative"},
		{"apply then zero code", faultproxy.On("insert").Do(faultproxy.ApplyThenError(1, faultproxy.CommandError{})), "code must not be 0"},
		{"negative k in a schedule", faultproxy.On("insert").Do(faultproxy.RandomSchedule(1, faultproxy.Rate{Fault: faultproxy.ApplyThenError(-2, faultproxy.CommandError{Code: 1}), P: 0.5})), "must not be negative"},
		{"bad namespace", faultproxy.On("insert").In("nodot").Do(errFault), "database.collection"},
		{"documents on find", faultproxy.On("find").Do(faultproxy.RejectDocuments(faultproxy.DocumentID(1), faultproxy.WriteError{Code: 112})), "not \"find\""},
		{"nil matcher", faultproxy.On("insert").Do(faultproxy.RejectDocuments(nil, faultproxy.WriteError{Code: 112})), "nil DocMatcher"},
		{"probabilities", faultproxy.On("insert").Do(faultproxy.RandomSchedule(1, faultproxy.Rate{Fault: errFault, P: 0.7}, faultproxy.Rate{Fault: errFault, P: 0.7})), "add up to"},
		{"nil validator", faultproxy.Validator("app.users", nil), "nil validator"},
		{"validator namespace", faultproxy.Validator("users", usersValidator), "database.collection"},
		{"unsupported validator", faultproxy.Validator("app.users", bson.D{{Key: "$expr", Value: bson.D{}}}), "unsupported"},
		{"invalid schema", faultproxy.Validator("app.users", bson.D{{Key: "$jsonSchema", Value: bson.D{{Key: "minimum", Value: "x"}}}}), "must be a number"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := faultproxy.NewScript(tc.item)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("NewScript error = %v, want one containing %q", err, tc.want)
			}
		})
	}
	_, err := faultproxy.NewScript(faultproxy.Validator("app.users", bson.D{{Key: "$jsonSchema", Value: bson.D{{Key: "encrypt", Value: bson.D{}}}}}))
	if !errors.Is(err, jsonschema.ErrUnsupported) {
		t.Errorf("encrypt validator: %v, want ErrUnsupported", err)
	}
	for _, opt := range []faultproxy.Option{
		faultproxy.WithUpstream("no-port"), faultproxy.WithReplicaSet(""),
		faultproxy.WithMaxWireVersion(2), faultproxy.WithDialTimeout(0), faultproxy.WithListenAddr("x"),
	} {
		if _, err := faultproxy.New(opt); err == nil {
			t.Error("New accepted a bad option")
		}
	}
}

func TestCloseLeavesNoGoroutines(t *testing.T) {
	defer goleak.VerifyNone(t)
	p, err := faultproxy.New(faultproxy.WithScript(faultproxy.MustScript(faultproxy.Validator("app.users", usersValidator))))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := p.Start(context.Background()); err == nil {
		t.Error("second Start succeeded")
	}
	c, err := mongo.Connect(options.Client().ApplyURI(p.URI()))
	if err != nil {
		t.Fatal(err)
	}
	ctx := opCtx(t)
	if _, err := c.Database("app").Collection("users").InsertMany(ctx, usersDocs(), options.InsertMany().SetOrdered(false)); err == nil {
		t.Error("validator did not fire")
	}
	// Close the proxy under a connected client, then disconnect it.
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if err := p.Start(context.Background()); err == nil {
		t.Error("Start after Close succeeded")
	}
	if err := c.Disconnect(ctx); err != nil {
		t.Errorf("Disconnect: %v", err)
	}
}

// TestAgainstRealServer runs through the proxy to the MongoDB named by
// MONGODB_URI, when set.
func TestAgainstRealServer(t *testing.T) {
	uri := os.Getenv("MONGODB_URI")
	if uri == "" {
		t.Skip("MONGODB_URI not set: skipping the test against a real MongoDB server")
	}
	u, err := url.Parse(uri)
	if err != nil {
		t.Fatalf("MONGODB_URI: %v", err)
	}
	host := strings.Split(u.Host, ",")[0]
	if !strings.Contains(host, ":") {
		host += ":27017"
	}
	ns := fmt.Sprintf("faultproxy_test.users_%d", time.Now().UnixNano())
	p := startProxy(t, faultproxy.WithUpstream(host), faultproxy.WithScript(faultproxy.MustScript(
		faultproxy.Validator(ns, usersValidator),
		faultproxy.On("insert").In(ns).Nth(2).Do(faultproxy.WriteConcernErrorReply(faultproxy.WriteConcernError{Code: 64, CodeName: "WriteConcernTimeout"})),
	)))
	proxied := strings.Replace(uri, u.Host, p.Addr(), 1)
	if strings.Contains(proxied, "?") {
		proxied += "&directConnection=true"
	} else {
		proxied += "?directConnection=true"
	}
	c := connect(t, proxied, false)
	dbName, collName, _ := strings.Cut(ns, ".")
	coll := c.Database(dbName).Collection(collName)
	t.Cleanup(func() { _ = coll.Drop(context.Background()) })
	_, err = coll.InsertMany(opCtx(t), usersDocs(), options.InsertMany().SetOrdered(false))
	wes := bulkErrors(t, err)
	if len(wes) != 2 || wes[0].Index != 1 || wes[1].Index != 3 {
		t.Fatalf("write errors = %+v", wes)
	}
	if n, err := coll.CountDocuments(opCtx(t), bson.D{}); err != nil || n != 3 {
		t.Errorf("server holds %d documents (%v), want 3", n, err)
	}
	_, err = coll.InsertOne(opCtx(t), bson.D{{Key: "name", Value: "x"}})
	var we mongo.WriteException
	if !errors.As(err, &we) || we.WriteConcernError == nil || we.WriteConcernError.Code != 64 {
		t.Errorf("second insert: %v, want a write concern error", err)
	}
}
