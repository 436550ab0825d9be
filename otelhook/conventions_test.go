package otelhook_test

import (
	"errors"
	"strings"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.opentelemetry.io/otel/trace"

	"github.com/writeguard/writeguard"
	"github.com/writeguard/writeguard/mocks"
	"github.com/writeguard/writeguard/otelhook"
)

// TestSpanName: the operation span is named "<method> <db>.<collection>"
// — the MongoDB drivers' OpenTelemetry specification's form ("Operation
// Span Name": "driver_operation_name db.collection_name"), with the
// guarded method in place of the driver operation's name, so that it
// never equals the name of a driver operation span under it (insert
// shop.orders) — db.operation.summary equals the name (the drivers'
// specification: "Equivalent to span name"), db.operation.name is the
// server command, and writeguard.method the method. Every guarded method
// is traced.
func TestSpanName(t *testing.T) {
	upd := bson.D{{Key: "$set", Value: bson.D{{Key: "qty", Value: 2}}}}
	calls := []struct {
		method, command string
		call            func(g *writeguard.Guarded) error
	}{
		{"insertOne", "insert", func(g *writeguard.Guarded) error {
			_, err := g.InsertOne(bg, bson.D{{Key: "qty", Value: 1}})
			return err
		}},
		{"insertMany", "insert", func(g *writeguard.Guarded) error {
			_, err := g.InsertMany(bg, []bson.D{{{Key: "qty", Value: 1}}, {{Key: "qty", Value: 2}}})
			return err
		}},
		{"updateOne", "update", func(g *writeguard.Guarded) error {
			_, err := g.UpdateOne(bg, bson.D{{Key: "_id", Value: 1}}, upd)
			return err
		}},
		{"updateByID", "update", func(g *writeguard.Guarded) error { _, err := g.UpdateByID(bg, 1, upd); return err }},
		{"updateMany", "update", func(g *writeguard.Guarded) error { _, err := g.UpdateMany(bg, bson.D{}, upd); return err }},
		{"replaceOne", "update", func(g *writeguard.Guarded) error {
			_, err := g.ReplaceOne(bg, bson.D{{Key: "_id", Value: 1}}, bson.D{{Key: "qty", Value: 3}})
			return err
		}},
		{"deleteOne", "delete", func(g *writeguard.Guarded) error {
			_, err := g.DeleteOne(bg, bson.D{{Key: "_id", Value: 1}})
			return err
		}},
		{"deleteMany", "delete", func(g *writeguard.Guarded) error { _, err := g.DeleteMany(bg, bson.D{}); return err }},
		{"findOneAndUpdate", "findAndModify", func(g *writeguard.Guarded) error {
			return ignoreNoDocs(g.FindOneAndUpdate(bg, bson.D{{Key: "_id", Value: 1}}, upd).Err())
		}},
		{"findOneAndReplace", "findAndModify", func(g *writeguard.Guarded) error {
			return ignoreNoDocs(g.FindOneAndReplace(bg, bson.D{{Key: "_id", Value: 1}}, bson.D{{Key: "qty", Value: 3}}).Err())
		}},
		{"findOneAndDelete", "findAndModify", func(g *writeguard.Guarded) error {
			return ignoreNoDocs(g.FindOneAndDelete(bg, bson.D{{Key: "_id", Value: 1}}).Err())
		}},
	}
	for _, c := range calls {
		hx := newHarness(t)
		g := hx.guard(t, mocks.NewFake("shop.orders"))
		if err := c.call(g); err != nil {
			t.Fatalf("%s: %v", c.method, err)
		}
		name := c.method + " shop.orders"
		checkAttrs(t, name, hx.one(t, name).Attributes(), map[string]string{
			"db.operation.summary": name, "db.operation.name": c.command, "writeguard.method": c.method,
			"db.namespace": "shop", "db.collection.name": "orders",
		})
	}
}

func ignoreNoDocs(err error) error {
	if errors.Is(err, mongo.ErrNoDocuments) {
		return nil
	}
	return err
}

// TestBatchPrefix: a bulkWrite of two or more models is a batch
// (semantic conventions, db.operation.batch.size); its db.operation.name
// is "BATCH <command>" when every model sends the same command, else
// MongoDB's term "bulkWrite" (semantic conventions since 1.28,
// db.operation.name); a bulkWrite of one model is that model's command,
// without a batch size.
func TestBatchPrefix(t *testing.T) {
	ins := func(q int) mongo.WriteModel {
		return mongo.NewInsertOneModel().SetDocument(bson.D{{Key: "qty", Value: q}})
	}
	upd := mongo.NewUpdateOneModel().SetFilter(bson.D{{Key: "_id", Value: 1}}).SetUpdate(bson.D{{Key: "$set", Value: bson.D{{Key: "q", Value: 1}}}})
	rep := mongo.NewReplaceOneModel().SetFilter(bson.D{{Key: "_id", Value: 2}}).SetReplacement(bson.D{{Key: "q", Value: 2}})
	del := mongo.NewDeleteOneModel().SetFilter(bson.D{{Key: "_id", Value: 3}})
	for _, c := range []struct {
		models     []mongo.WriteModel
		name, size string
	}{
		{[]mongo.WriteModel{ins(1)}, "insert", absent},
		{[]mongo.WriteModel{ins(1), ins(2)}, "BATCH insert", "2"},
		{[]mongo.WriteModel{upd, rep}, "BATCH update", "2"},
		{[]mongo.WriteModel{ins(1), upd, del}, "bulkWrite", "3"},
	} {
		hx := newHarness(t)
		g := hx.guard(t, mocks.NewFake("shop.orders"))
		if _, err := g.BulkWrite(bg, c.models); err != nil {
			t.Fatal(err)
		}
		checkAttrs(t, c.name, hx.one(t, "bulkWrite shop.orders").Attributes(), map[string]string{
			"db.operation.name": c.name, "db.operation.batch.size": c.size,
		})
		m := hx.collect(t)
		if got := pointAttr(t, m, "writeguard.call.duration", "db.operation.name"); got != c.name {
			t.Errorf("writeguard.call.duration db.operation.name %q, want %q", got, c.name)
		}
	}
}

// TestMatchedNothing: a write that succeeded and matched no document
// stays written, marked writeguard.no_match = true on its span and its
// writeguard.call.inputs point; one that matched has no mark.
func TestMatchedNothing(t *testing.T) {
	upd := bson.D{{Key: "$set", Value: bson.D{{Key: "qty", Value: 2}}}}
	for _, c := range []struct {
		name  string
		call  func(g *writeguard.Guarded) error
		match bool
	}{
		{"updateOne shop.orders", func(g *writeguard.Guarded) error {
			_, err := g.UpdateOne(bg, bson.D{{Key: "_id", Value: "none"}}, upd)
			return err
		}, false},
		{"updateOne shop.orders", func(g *writeguard.Guarded) error {
			_, err := g.UpdateOne(bg, bson.D{{Key: "_id", Value: "a"}}, upd)
			return err
		}, true},
		{"updateOne shop.orders", func(g *writeguard.Guarded) error {
			_, err := g.UpdateOne(bg, bson.D{{Key: "_id", Value: "none"}}, upd, options.UpdateOne().SetUpsert(true))
			return err
		}, true},
		{"replaceOne shop.orders", func(g *writeguard.Guarded) error {
			_, err := g.ReplaceOne(bg, bson.D{{Key: "_id", Value: "none"}}, bson.D{{Key: "qty", Value: 3}})
			return err
		}, false},
		{"deleteOne shop.orders", func(g *writeguard.Guarded) error {
			_, err := g.DeleteOne(bg, bson.D{{Key: "_id", Value: "none"}})
			return err
		}, false},
		{"deleteMany shop.orders", func(g *writeguard.Guarded) error {
			_, err := g.DeleteMany(bg, bson.D{{Key: "_id", Value: "a"}})
			return err
		}, true},
		{"findOneAndDelete shop.orders", func(g *writeguard.Guarded) error {
			return ignoreNoDocs(g.FindOneAndDelete(bg, bson.D{{Key: "_id", Value: "none"}}).Err())
		}, false},
		{"findOneAndUpdate shop.orders", func(g *writeguard.Guarded) error {
			return g.FindOneAndUpdate(bg, bson.D{{Key: "_id", Value: "a"}}, upd).Err()
		}, true},
	} {
		hx := newHarness(t)
		fake := mocks.NewFake("shop.orders")
		if err := fake.Seed(bson.D{{Key: "_id", Value: "a"}, {Key: "qty", Value: 1}}); err != nil {
			t.Fatal(err)
		}
		if err := c.call(hx.guard(t, fake)); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		want := "true"
		if c.match {
			want = absent
		}
		checkAttrs(t, c.name, hx.one(t, c.name).Attributes(), map[string]string{"writeguard.no_match": want, "writeguard.disposition": "written"})
		if got := pointAttr(t, hx.collect(t), "writeguard.call.inputs", "writeguard.no_match"); got != strings.TrimPrefix(want, absent) {
			t.Errorf("%s (matched %v): writeguard.call.inputs writeguard.no_match %q, want %q", c.name, c.match, got, want)
		}
	}
}

// TestBatchSizeOnlyForBatches: db.operation.batch.size is set only for a
// batch in the conventions' sense — two or more operations in one call (a
// bulkWrite of two or more models; TestBulkWrite) — never for an
// InsertMany, which is one insert command however many documents it holds
// (semantic conventions 1.43, db.operation.batch.size: "Operations are
// only considered batches when they contain two or more operations").
func TestBatchSizeOnlyForBatches(t *testing.T) {
	hx := newHarness(t)
	g := hx.guard(t, mocks.NewFake("shop.orders"))
	if _, err := g.InsertMany(bg, []bson.D{{{Key: "qty", Value: 1}}, {{Key: "qty", Value: 2}}, {{Key: "qty", Value: 3}}}); err != nil {
		t.Fatal(err)
	}
	checkAttrs(t, "insertMany span", hx.one(t, "insertMany shop.orders").Attributes(), map[string]string{"db.operation.batch.size": absent})
}

// TestSpanKind: the operation span is CLIENT by default (the MongoDB
// drivers' OpenTelemetry specification, "Operation Span Kind": client),
// INTERNAL with WithSpanKind(trace.SpanKindInternal); attempt and
// dead-letter spans are INTERNAL either way.
func TestSpanKind(t *testing.T) {
	for _, tc := range []struct {
		opts []otelhook.Option
		want trace.SpanKind
	}{
		{nil, trace.SpanKindClient},
		{[]otelhook.Option{otelhook.WithSpanKind(trace.SpanKindInternal)}, trace.SpanKindInternal},
		{[]otelhook.Option{otelhook.WithSpanKind(trace.SpanKindServer)}, trace.SpanKindClient}, // ignored
	} {
		hx := newHarness(t, tc.opts...)
		g := hx.guard(t, mocks.NewFake("shop.orders").Script(mocks.Reply(stepdown)))
		if _, err := g.InsertOne(bg, bson.D{{Key: "qty", Value: 1}}); err != nil {
			t.Fatal(err)
		}
		if got := hx.one(t, "insertOne shop.orders").SpanKind(); got != tc.want {
			t.Errorf("operation span kind %v, want %v", got, tc.want)
		}
		for _, a := range hx.ended("insertOne shop.orders attempt") {
			if a.SpanKind() != trace.SpanKindInternal {
				t.Errorf("attempt span kind %v, want internal", a.SpanKind())
			}
		}
	}
}

// TestHandledOutcomesNoErrorStatus: a call whose documents all reached a
// handled disposition — dead_lettered, conflict_skipped, already_written —
// leaves the operation span's status unset, and the attempt that received
// the verdicts (121, 11000 write errors in an ok: 1 reply) is not an
// error either (semantic conventions, "Recording errors": an error the
// instrumented code handles is not recorded as the span's error). The
// transient failure before them is.
func TestHandledOutcomesNoErrorStatus(t *testing.T) {
	hx := newHarness(t)
	fake := mocks.NewFake("shop.orders").Validator(requireQty).Unique("sku").
		Script(mocks.Reply(stepdown), mocks.LoseReply())
	g := hx.guard(t, fake, writeguard.WithConflictHandler(writeguard.ConflictSkip()))
	docs := []bson.D{
		{{Key: "_id", Value: "a"}, {Key: "qty", Value: 1}, {Key: "sku", Value: "x"}},
		{{Key: "_id", Value: "bad"}}, // no qty: dead_lettered
		{{Key: "_id", Value: "dup"}, {Key: "qty", Value: 1}, {Key: "sku", Value: "x"}},
	}
	_, err := g.InsertMany(bg, docs, options.InsertMany().SetOrdered(false))
	var r *writeguard.Report
	if !errors.As(err, &r) || !writeguard.Handled(err) {
		t.Fatalf("err = %v, want a handled Report", err)
	}
	if r.Count(writeguard.DeadLettered) != 1 || r.Count(writeguard.ConflictSkipped) != 1 {
		t.Fatalf("dispositions %v, want one dead_lettered and one conflict_skipped", r.Counts())
	}
	op := hx.one(t, "insertMany shop.orders")
	if op.Status().Code != codes.Unset {
		t.Errorf("operation span status %v %q, want unset", op.Status().Code, op.Status().Description)
	}
	checkAttrs(t, "operation span", op.Attributes(), map[string]string{"error.type": absent})
	errs := 0
	for _, a := range hx.ended("insertMany shop.orders attempt") {
		am := attrMap(a.Attributes())
		switch am["writeguard.class"] {
		case "invalid", "conflict":
			if a.Status().Code == codes.Error || am["error.type"] != "" {
				t.Errorf("attempt %s with a %s verdict: status %v, error.type %q; want neither", am["writeguard.attempt"], am["writeguard.class"], a.Status().Code, am["error.type"])
			}
		case "transient":
			if a.Status().Code == codes.Error {
				errs++
			}
		}
	}
	if errs == 0 {
		t.Errorf("no attempt span with status Error for the stepdown; spans: %s", hx.dump(t))
	}
}

// TestFloodIsLoud: a call that dead-letters while the flood breaker is
// open has status Error with error.type dead_letter_flood, the
// writeguard.flood_breaker.open and .share attributes, is counted in
// writeguard.dead_letter.flood, and is logged.
func TestFloodIsLoud(t *testing.T) {
	hx := newHarness(t)
	g := hx.guard(t, mocks.NewFake("shop.orders").Validator(requireQty),
		writeguard.WithDeadLetterBreaker(writeguard.BreakerConfig{MinDocuments: 4, Threshold: 0.5}))
	good := []bson.D{{{Key: "qty", Value: 1}}, {{Key: "qty", Value: 1}}}
	bad := []bson.D{{{Key: "_id", Value: 1}}, {{Key: "_id", Value: 2}}}
	if _, err := g.InsertMany(bg, good); err != nil { // 2 documents, 0 dead
		t.Fatal(err)
	}
	if _, err := g.InsertMany(bg, bad); !errors.Is(err, writeguard.ErrDeadLetterFlood) { // 4, 2 dead: 50 %
		t.Fatalf("err = %v, want ErrDeadLetterFlood", err)
	}
	ops := hx.ended("insertMany shop.orders")
	if len(ops) != 2 {
		t.Fatalf("%d operation spans, want 2", len(ops))
	}
	if ops[0].Status().Code != codes.Unset {
		t.Errorf("clean call: status %v", ops[0].Status().Code)
	}
	flood := ops[1]
	if flood.Status().Code != codes.Error || !strings.Contains(flood.Status().Description, "dead-letter flood") {
		t.Errorf("flood call: status %v %q, want Error naming the flood", flood.Status().Code, flood.Status().Description)
	}
	checkAttrs(t, "flood span", flood.Attributes(), map[string]string{
		"writeguard.flood_breaker.open":  "true",
		"writeguard.flood_breaker.share": "0.5",
		"error.type":                     "dead_letter_flood",
		"writeguard.dead_lettered":       "2",
	})
	rm := hx.collect(t)
	if n := counterValue(t, rm, otelhook.MetricDeadLetterFlood, map[string]string{"db.collection.name": "orders"}); n != 1 {
		t.Errorf("%s = %d, want 1", otelhook.MetricDeadLetterFlood, n)
	}
	if !strings.Contains(hx.logs.String(), "dead-letter flood breaker open") {
		t.Errorf("no log record; logs:\n%s", hx.logs.String())
	}
}

// TestRetryDelayHistogram: writeguard.retry.delay records each scheduled
// backoff, in seconds, by class and code.
func TestRetryDelayHistogram(t *testing.T) {
	hx := newHarness(t)
	g := hx.guard(t, mocks.NewFake("shop.orders").Script(mocks.Reply(stepdown), mocks.Reply(stepdown)))
	if _, err := g.InsertOne(bg, bson.D{{Key: "qty", Value: 1}}); err != nil {
		t.Fatal(err)
	}
	var want float64
	for _, s := range hx.ended("insertOne shop.orders attempt") {
		for _, kv := range s.Attributes() {
			if kv.Key == "writeguard.backoff" {
				want += kv.Value.AsFloat64()
			}
		}
	}
	count, sum := histogram(t, hx.collect(t), otelhook.MetricRetryDelay, map[string]string{"writeguard.class": "transient", "db.response.status_code": "189"})
	if count != 2 || want == 0 || sum < want-1e-9 || sum > want+1e-9 {
		t.Errorf("%s: count %d sum %v, want 2 retries summing to the attempts' backoffs %v", otelhook.MetricRetryDelay, count, sum, want)
	}
}

// TestInputAttempts: writeguard.input.attempts records how many times each
// input was sent: two documents retried once after a stepdown give a
// count of 2 and a sum of 4 (2 attempts per document).
func TestInputAttempts(t *testing.T) {
	hx := newHarness(t)
	g := hx.guard(t, mocks.NewFake("shop.orders").Script(mocks.Reply(stepdown)))
	if _, err := g.InsertMany(bg, []bson.D{{{Key: "qty", Value: 1}}, {{Key: "qty", Value: 2}}}); err != nil {
		t.Fatal(err)
	}
	count, sum := histogram(t, hx.collect(t), otelhook.MetricInputAttempts, map[string]string{"db.collection.name": "orders"})
	if count != 2 || sum != 4 {
		t.Errorf("%s: count %d sum %v, want 2 inputs sent 4 times", otelhook.MetricInputAttempts, count, sum)
	}
}

// TestExemplars: with the SDK's default exemplar filter (trace_based),
// writeguard.call.duration and writeguard.call.inputs carry exemplars
// whose trace and span ids are the call's operation span (the package
// documentation, "Exemplars").
func TestExemplars(t *testing.T) {
	hx := newHarness(t)
	g := hx.guard(t, mocks.NewFake("shop.orders"))
	if _, err := g.InsertOne(bg, bson.D{{Key: "qty", Value: 1}}); err != nil {
		t.Fatal(err)
	}
	op := hx.one(t, "insertOne shop.orders").SpanContext()
	rm := hx.collect(t)
	seen := map[string]bool{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			var ex []metricdata.Exemplar[float64]
			var exi []metricdata.Exemplar[int64]
			switch d := m.Data.(type) {
			case metricdata.Histogram[float64]:
				for _, dp := range d.DataPoints {
					ex = append(ex, dp.Exemplars...)
				}
			case metricdata.Sum[int64]:
				for _, dp := range d.DataPoints {
					exi = append(exi, dp.Exemplars...)
				}
			}
			for _, e := range ex {
				seen[m.Name] = seen[m.Name] || [16]byte(e.TraceID) == op.TraceID() && [8]byte(e.SpanID) == op.SpanID()
			}
			for _, e := range exi {
				seen[m.Name] = seen[m.Name] || [16]byte(e.TraceID) == op.TraceID() && [8]byte(e.SpanID) == op.SpanID()
			}
		}
	}
	for _, name := range []string{otelhook.MetricCallDuration, otelhook.MetricCallInputs} {
		if !seen[name] {
			t.Errorf("%s: no exemplar with the operation span's ids", name)
		}
	}
}

// TestFloodZeroSeries: the first call of a collection creates the
// writeguard.dead_letter.flood series at 0 (its labels are known when a
// call starts), so that a first flood after a scrape is an increase from
// 0; a later flood call adds to that same series.
func TestFloodZeroSeries(t *testing.T) {
	hx := newHarness(t)
	g := hx.guard(t, mocks.NewFake("shop.orders").Validator(requireQty),
		writeguard.WithDeadLetterBreaker(writeguard.BreakerConfig{MinDocuments: 1}))
	if _, err := g.InsertMany(bg, []bson.D{{{Key: "qty", Value: 1}}}); err != nil {
		t.Fatal(err)
	}
	flood := func() int64 {
		for _, sm := range hx.collect(t).ScopeMetrics {
			for _, m := range sm.Metrics {
				if m.Name == otelhook.MetricDeadLetterFlood {
					pts := m.Data.(metricdata.Sum[int64]).DataPoints
					if len(pts) != 1 {
						t.Fatalf("%d flood series, want 1", len(pts))
					}
					return pts[0].Value
				}
			}
		}
		return -1
	}
	if n := flood(); n != 0 {
		t.Fatalf("after a clean call: flood series %d, want a series at 0", n)
	}
	if _, err := g.InsertMany(bg, []bson.D{{{Key: "_id", Value: 1}}, {{Key: "_id", Value: 2}}}); !errors.Is(err, writeguard.ErrDeadLetterFlood) {
		t.Fatalf("err = %v, want ErrDeadLetterFlood", err)
	}
	if n := flood(); n != 1 {
		t.Errorf("after a flood: %d, want 1 on the same series", n)
	}
}
