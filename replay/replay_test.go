package replay

import (
	"context"
	"errors"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/writeguard/writeguard"
	"github.com/writeguard/writeguard/dlq"
	"github.com/writeguard/writeguard/envelope"
	"github.com/writeguard/writeguard/mocks"
	"github.com/writeguard/writeguard/policy"
)

func mustMarshal(tb testing.TB, v any) bson.Raw {
	tb.Helper()
	b, err := bson.Marshal(v)
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

func insertEnv(tb testing.TB, doc bson.D, idAssigned bool) *stored {
	tb.Helper()
	orig := mustMarshal(tb, doc)
	return &stored{
		ID: bson.RawValue{Type: bson.TypeObjectID, Value: func() []byte { o := bson.NewObjectID(); return o[:] }()},
		Envelope: envelope.Envelope{
			Original: orig, IDAssigned: idAssigned, Fingerprint: envelope.Fingerprint(orig, idAssigned),
			Code: 121, Operation: "insertMany", Namespace: "db.c", Status: envelope.StatusPending, Attempts: 1,
		},
	}
}

func entriesFor(tb testing.TB, envs ...*stored) []*entry {
	tb.Helper()
	var out []*entry
	for _, s := range envs {
		m, insert, reason := buildModel(&s.Envelope, false)
		if reason != "" {
			tb.Fatalf("buildModel: %s", reason)
		}
		e := &entry{env: s, model: m, insert: insert}
		if insert {
			e.docID = s.Original.Lookup("_id")
		}
		out = append(out, e)
	}
	return out
}

func models(es []*entry) []mongo.WriteModel {
	out := make([]mongo.WriteModel, len(es))
	for i, e := range es {
		out[i] = e.model
	}
	return out
}

func TestBuildModel(t *testing.T) {
	orig := mustMarshal(t, bson.D{{Key: "_id", Value: int32(1)}, {Key: "op", Value: "updateOne"}, {Key: "a", Value: 1}})
	m, insert, reason := buildModel(&envelope.Envelope{Original: orig, Operation: "bulkWrite"}, false)
	if reason != "" || !insert {
		t.Fatalf("insert with an op field: %v %v %q", m, insert, reason)
	}
	if got := m.(*mongo.InsertOneModel).Document.(bson.Raw); string(got) != string(orig) {
		t.Error("insert model does not carry the original verbatim")
	}

	upd := mustMarshal(t, bson.D{{Key: "op", Value: "updateOne"}, {Key: "filter", Value: bson.D{{Key: "_id", Value: 5}}},
		{Key: "update", Value: bson.D{{Key: "$set", Value: bson.D{{Key: "qty", Value: 2}}}}}, {Key: "upsert", Value: true}})
	m, insert, reason = buildModel(&envelope.Envelope{Original: upd, Operation: "bulkWrite"}, false)
	um, ok := m.(*mongo.UpdateOneModel)
	if reason != "" || insert || !ok || um.Upsert == nil || !*um.Upsert {
		t.Fatalf("updateOne: %#v %q", m, reason)
	}
	if um.Update.(bson.Raw).Lookup("$set", "qty").Int32() != 2 || um.Filter.(bson.Raw).Lookup("_id").Int32() != 5 {
		t.Error("updateOne model fields wrong")
	}

	pipe := mustMarshal(t, bson.D{{Key: "op", Value: "updateMany"}, {Key: "filter", Value: bson.D{}},
		{Key: "update", Value: bson.A{bson.D{{Key: "$set", Value: bson.D{{Key: "x", Value: 1}}}}}}, {Key: "upsert", Value: false}})
	m, _, reason = buildModel(&envelope.Envelope{Original: pipe}, false)
	if um, ok := m.(*mongo.UpdateManyModel); reason != "" || !ok || len(um.Update.([]bson.Raw)) != 1 {
		t.Errorf("pipeline updateMany: %#v %q", m, reason)
	}

	rep := mustMarshal(t, bson.D{{Key: "op", Value: "replaceOne"}, {Key: "filter", Value: bson.D{{Key: "_id", Value: 5}}},
		{Key: "replacement", Value: bson.D{{Key: "qty", Value: 3}}}, {Key: "upsert", Value: false}})
	if m, _, reason = buildModel(&envelope.Envelope{Original: rep}, false); reason != "" {
		t.Errorf("replaceOne: %q", reason)
	} else if _, ok := m.(*mongo.ReplaceOneModel); !ok {
		t.Errorf("replaceOne: %T", m)
	}
	for op, typ := range map[string]string{"deleteOne": "*mongo.DeleteOneModel", "deleteMany": "*mongo.DeleteManyModel"} {
		del := mustMarshal(t, bson.D{{Key: "op", Value: op}, {Key: "filter", Value: bson.D{{Key: "x", Value: 1}}}})
		m, _, reason := buildModel(&envelope.Envelope{Original: del}, false)
		if reason != "" || typeName(m) != typ {
			t.Errorf("%s: %T %q", op, m, reason)
		}
	}

	skips := []struct {
		env  envelope.Envelope
		want string
	}{
		{envelope.Envelope{Original: orig, OriginalTruncated: true}, "truncated"},
		{envelope.Envelope{Original: orig, OriginalRedacted: true}, "redacted"},
		{envelope.Envelope{}, "no original"},
		{envelope.Envelope{Original: bson.Raw{7, 0, 0, 0, 0}}, "not valid BSON"},
		{envelope.Envelope{Original: mustMarshal(t, bson.D{{Key: "a", Value: 1}})}, "no _id"},
		{envelope.Envelope{Original: mustMarshal(t, bson.D{{Key: "op", Value: "updateOne"}})}, "without a filter"},
		{envelope.Envelope{Original: mustMarshal(t, bson.D{{Key: "op", Value: "updateOne"}, {Key: "filter", Value: bson.D{}}})}, "without an update"},
		{envelope.Envelope{Original: mustMarshal(t, bson.D{{Key: "op", Value: "replaceOne"}, {Key: "filter", Value: bson.D{}}})}, "without a replacement"},
	}
	for _, s := range skips {
		_, _, reason := buildModel(&s.env, false)
		if !strings.Contains(reason, s.want) {
			t.Errorf("skip reason %q, want %q", reason, s.want)
		}
	}
	if _, _, reason := buildModel(&envelope.Envelope{Original: orig, OriginalRedacted: true}, true); reason != "" {
		t.Errorf("WithRedacted still skips: %q", reason)
	}
}

func typeName(v any) string {
	switch v.(type) {
	case *mongo.DeleteOneModel:
		return "*mongo.DeleteOneModel"
	case *mongo.DeleteManyModel:
		return "*mongo.DeleteManyModel"
	}
	return "?"
}

// qtyValidator rejects documents without qty, with a real-format errInfo.
func qtyValidator(doc bson.Raw) (bson.Raw, bool) {
	if _, err := doc.LookupErr("qty"); err == nil {
		return nil, false
	}
	ei, _ := bson.Marshal(bson.D{{Key: "failingDocumentId", Value: doc.Lookup("_id")}, {Key: "details", Value: bson.D{
		{Key: "operatorName", Value: "$jsonSchema"}, {Key: "schemaRulesNotSatisfied", Value: bson.A{bson.D{
			{Key: "operatorName", Value: "required"}, {Key: "specifiedAs", Value: bson.D{{Key: "required", Value: bson.A{"qty"}}}},
			{Key: "missingProperties", Value: bson.A{"qty"}}}}}}}})
	return ei, true
}

// TestClassifyDriverError: a plain *mongo.Collection-like target answers
// with a BulkWriteException; per-index codes decide.
func TestClassifyDriverError(t *testing.T) {
	fake := mocks.NewFake("db.c").Validator(qtyValidator)
	fake.Unique("sku")
	if err := fake.Seed(bson.D{{Key: "_id", Value: int32(3)}, {Key: "sku", Value: "S3"}, {Key: "qty", Value: 1}}); err != nil {
		t.Fatal(err)
	}
	es := entriesFor(t,
		insertEnv(t, bson.D{{Key: "_id", Value: int32(1)}, {Key: "qty", Value: 1}}, false),                            // written
		insertEnv(t, bson.D{{Key: "_id", Value: int32(2)}}, false),                                                    // 121 again
		insertEnv(t, bson.D{{Key: "_id", Value: int32(3)}, {Key: "sku", Value: "S3"}, {Key: "qty", Value: 1}}, false), // dup, same doc
		insertEnv(t, bson.D{{Key: "_id", Value: int32(4)}, {Key: "sku", Value: "S3"}, {Key: "qty", Value: 1}}, false), // dup on sku
	)
	_, err := fake.BulkWrite(context.Background(), models(es), options.BulkWrite().SetOrdered(false))
	if err == nil {
		t.Fatal("no error from the fake")
	}
	classify(es, err)
	want := []outcome{outReplayed, outInvalid, outDuplicate, outDuplicate}
	for i, e := range es {
		if e.out != want[i] {
			t.Errorf("entry %d: outcome %d, want %d (%s)", i, e.out, want[i], e.reason)
		}
	}
	resolveDuplicates(context.Background(), fake, es)
	if es[2].out != outReplayedDup {
		t.Errorf("same document under its _id: outcome %d, want replayed by duplicate", es[2].out)
	}
	if es[3].out != outConflict || !strings.Contains(es[3].reason, "another unique index") {
		t.Errorf("dup on another index: outcome %d (%s), want conflict", es[3].out, es[3].reason)
	}
}

// TestResolveDuplicatesByID: a different document under the _id is a
// conflict, unless writeguard assigned the _id.
func TestResolveDuplicatesByID(t *testing.T) {
	fake := mocks.NewFake("db.c")
	oid := bson.NewObjectID()
	if err := fake.Seed(bson.D{{Key: "_id", Value: int32(1)}, {Key: "qty", Value: 99}}, bson.D{{Key: "_id", Value: oid}, {Key: "qty", Value: 99}}); err != nil {
		t.Fatal(err)
	}
	es := entriesFor(t,
		insertEnv(t, bson.D{{Key: "_id", Value: int32(1)}, {Key: "qty", Value: 1}}, false),
		insertEnv(t, bson.D{{Key: "_id", Value: oid}, {Key: "qty", Value: 1}}, true),
	)
	for _, e := range es {
		e.out = outDuplicate
	}
	resolveDuplicates(context.Background(), fake, es)
	if es[0].out != outConflict {
		t.Errorf("caller's _id holding another document: outcome %d, want conflict", es[0].out)
	}
	if es[1].out != outReplayedDup {
		t.Errorf("writeguard-assigned _id: outcome %d, want replayed", es[1].out)
	}
}

// TestClassifyReport: through a Guarded target the per-document
// dispositions decide; a dead-lettering target is detected.
func TestClassifyReport(t *testing.T) {
	for _, sink := range []bool{false, true} {
		fake := mocks.NewFake("db.c").Validator(qtyValidator)
		var opts []writeguard.Option
		if sink {
			opts = append(opts, writeguard.WithDeadLetter(envelope.SinkFunc(func(context.Context, []envelope.Envelope) error { return nil })))
		}
		g, err := writeguard.New(fake, opts...)
		if err != nil {
			t.Fatal(err)
		}
		if err := fake.Seed(bson.D{{Key: "_id", Value: int32(3)}, {Key: "qty", Value: 1}}); err != nil {
			t.Fatal(err)
		}
		es := entriesFor(t,
			insertEnv(t, bson.D{{Key: "_id", Value: int32(1)}, {Key: "qty", Value: 1}}, false),
			insertEnv(t, bson.D{{Key: "_id", Value: int32(2)}}, false),
			insertEnv(t, bson.D{{Key: "_id", Value: int32(3)}, {Key: "qty", Value: 1}}, false),
		)
		_, err = g.BulkWrite(context.Background(), models(es), options.BulkWrite().SetOrdered(false))
		var rep *writeguard.Report
		if !errors.As(err, &rep) {
			t.Fatalf("sink %v: %v is not a Report", sink, err)
		}
		classify(es, err)
		wantInvalid := outInvalid
		if sink {
			wantInvalid = outInvalidByTarget
		}
		if es[0].out != outReplayed || es[1].out != wantInvalid || es[2].out != outDuplicate {
			t.Errorf("sink %v: outcomes %d %d %d", sink, es[0].out, es[1].out, es[2].out)
		}
		resolveDuplicates(context.Background(), g, es)
		if es[2].out != outReplayedDup {
			t.Errorf("sink %v: dup through Guarded.Target(): %d", sink, es[2].out)
		}
	}
}

// TestClassifyWholeCommand: a network error fails the whole batch.
func TestClassifyWholeCommand(t *testing.T) {
	fake := mocks.NewFake("db.c").Script(mocks.DropConnection())
	es := entriesFor(t, insertEnv(t, bson.D{{Key: "_id", Value: int32(1)}}, false), insertEnv(t, bson.D{{Key: "_id", Value: int32(2)}}, false))
	_, err := fake.BulkWrite(context.Background(), models(es), options.BulkWrite().SetOrdered(false))
	if err == nil {
		t.Fatal("no error from the fake")
	}
	classify(es, err)
	for i, e := range es {
		if e.out != outFailed {
			t.Errorf("entry %d: outcome %d, want failed", i, e.out)
		}
	}
}

type anonTarget struct{ writeguard.Collection }

func TestRunBadOptions(t *testing.T) {
	client, err := mongo.Connect(options.Client().ApplyURI("mongodb://127.0.0.1:1/?serverSelectionTimeoutMS=100"))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = client.Disconnect(context.Background()) }()
	coll := client.Database("x").Collection("dlq")
	target := mocks.NewFake("db.c")
	for _, c := range []struct {
		opts []Option
		want string
	}{
		{[]Option{WithBatchSize(0)}, "WithBatchSize(0)"},
		{[]Option{WithBatchSize(MaxBatchSize + 1)}, "WithBatchSize"},
		{[]Option{WithRate(-1)}, "WithRate(-1)"},
		{[]Option{WithValidator(bson.D{})}, "needs WithDryRun"},
		{[]Option{WithValidator(nil)}, "WithValidator(nil)"},
		{[]Option{WithFilter(dlq.Filter{Statuses: []string{"bogus"}})}, "bad filter"},
		{[]Option{WithWorkers(0)}, "WithWorkers(0)"},
		{[]Option{WithWorkers(MaxWorkers + 1)}, "WithWorkers(65)"},
		{[]Option{WithLease(time.Millisecond)}, "WithLease(1ms)"},
		{[]Option{WithLeaseCollection(nil)}, "WithLeaseCollection(nil)"},
		{[]Option{WithOwner("")}, "WithOwner"},
		{[]Option{WithRunID("")}, "WithRunID"},
		{[]Option{WithBatchSize(1), nil}, "option 1 is nil"},
	} {
		_, err := Run(context.Background(), coll, target, c.opts...)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("err = %v, want %q", err, c.want)
		}
	}
	if _, err := Run(context.Background(), coll, anonTarget{target}); err == nil || !strings.Contains(err.Error(), "no known namespace") {
		t.Errorf("anonymous target: %v", err)
	}
	// Every bad value is named at once, nil arguments included.
	_, err = Run(context.Background(), nil, nil, WithBatchSize(0), WithWorkers(0))
	for _, want := range []string{"WithBatchSize(0)", "WithWorkers(0)", "nil dead-letter collection", "nil target"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("joined errors: %v, want %q among them", err, want)
		}
	}
	if _, err := Run(context.Background(), coll, anonTarget{target}, WithDryRun(), WithFilter(dlq.Filter{Namespaces: []string{"db.c"}})); err == nil ||
		!strings.Contains(err.Error(), "cannot read the validator") {
		t.Errorf("dry run without a readable validator: %v", err)
	}
}

func TestNamespace(t *testing.T) {
	client, err := mongo.Connect(options.Client().ApplyURI("mongodb://127.0.0.1:1/"))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = client.Disconnect(context.Background()) }()
	coll := client.Database("shop").Collection("orders")
	g, err := writeguard.Wrap(coll)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		t    writeguard.Collection
		want string
	}{{coll, "shop.orders"}, {g, "shop.orders"}, {mocks.NewFake("a.b"), "a.b"}, {anonTarget{coll}, ""}} {
		if got := Namespace(c.t); got != c.want {
			t.Errorf("Namespace(%T) = %q, want %q", c.t, got, c.want)
		}
	}
	if TargetCollection(g) != coll || TargetCollection(coll) != coll || TargetCollection(mocks.NewFake("a.b")) != nil {
		t.Error("TargetCollection wrong")
	}
}

// TestPace: with a rate, sending waits so the average stays at or below
// it (in a synctest bubble: the waits are exact).
func TestPace(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := &runner{cfg: &config{rate: 100, now: time.Now}, start: time.Now()}
		for i := 0; i < 4; i++ {
			if err := r.pace(context.Background(), 10); err != nil {
				t.Fatal(err)
			}
		}
		// 30 envelopes were due before the 4th batch: 0.3 s at 100/s.
		if el := time.Since(r.start); el != 300*time.Millisecond {
			t.Errorf("4 batches of 10 at 100/s took %v, want 300ms", el)
		}
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		r = &runner{cfg: &config{rate: 1, now: time.Now}, start: time.Now(), sent: 100}
		if err := r.pace(ctx, 1); !errors.Is(err, context.Canceled) {
			t.Errorf("cancelled pace: %v", err)
		}
	})
}

func TestSameDocument(t *testing.T) {
	a := mustMarshal(t, bson.D{{Key: "_id", Value: 1}, {Key: "x", Value: "y"}})
	b := mustMarshal(t, bson.D{{Key: "x", Value: "y"}, {Key: "_id", Value: 1}})
	c := mustMarshal(t, bson.D{{Key: "_id", Value: 1}, {Key: "x", Value: "z"}})
	if !policy.SameDocument(a, b) || policy.SameDocument(a, c) || policy.SameDocument(a, mustMarshal(t, bson.D{{Key: "_id", Value: 1}})) {
		t.Error("policy.SameDocument wrong")
	}
}
