package otelhook_test

import (
	"errors"
	"strings"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/writeguard/writeguard"
	"github.com/writeguard/writeguard/mocks"
	"github.com/writeguard/writeguard/otelhook"
)

// TestSpanNameFollowsSemconv: the operation span is named
// "<db.operation.name> <db.collection.name>" (semantic conventions 1.43,
// database client spans, "Name"), so its name and db.operation.name agree;
// the driver method stays in writeguard.method.
func TestSpanNameFollowsSemconv(t *testing.T) {
	hx := newHarness(t)
	g := hx.guard(t, mocks.NewFake("shop.orders"))
	if _, err := g.InsertMany(bg, []bson.D{{{Key: "qty", Value: 1}}, {{Key: "qty", Value: 2}}}); err != nil {
		t.Fatal(err)
	}
	op := hx.one(t, "insert orders")
	a := attrMap(op.Attributes())
	if !strings.HasPrefix(op.Name(), a["db.operation.name"]+" ") || a["writeguard.method"] != "insertMany" {
		t.Errorf("span %q with db.operation.name %q, writeguard.method %q", op.Name(), a["db.operation.name"], a["writeguard.method"])
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
	checkAttrs(t, "insertMany span", hx.one(t, "insert orders").Attributes(), map[string]string{"db.operation.batch.size": absent})
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
		if got := hx.one(t, "insert orders").SpanKind(); got != tc.want {
			t.Errorf("operation span kind %v, want %v", got, tc.want)
		}
		for _, a := range hx.ended("insert orders attempt") {
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
	op := hx.one(t, "insert orders")
	if op.Status().Code != codes.Unset {
		t.Errorf("operation span status %v %q, want unset", op.Status().Code, op.Status().Description)
	}
	checkAttrs(t, "operation span", op.Attributes(), map[string]string{"error.type": absent})
	errs := 0
	for _, a := range hx.ended("insert orders attempt") {
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
	ops := hx.ended("insert orders")
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
	for _, s := range hx.ended("insert orders attempt") {
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
