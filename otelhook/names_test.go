package otelhook_test

import (
	"context"
	"errors"
	"regexp"
	"slices"
	"strings"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/writeguard/writeguard"
	"github.com/writeguard/writeguard/mocks"
	"github.com/writeguard/writeguard/otelhook"
	"github.com/writeguard/writeguard/policy"
)

// foreignName is a name another instrumentation of the same calls emits,
// with its meaning there and where it is defined.
type foreignName struct {
	name, meaning, source string
}

const (
	srcSemconv      = "OpenTelemetry semantic conventions 1.43.0 (go.opentelemetry.io/otel/semconv/v1.43.0), database client spans and metrics"
	srcSemconvOld   = "OpenTelemetry semantic conventions before 1.26 (db.* renamed since), still emitted by older instrumentations"
	srcOtelmongo    = "otelmongo (go.opentelemetry.io/contrib/instrumentation/go.mongodb.org/mongo-driver/v2/mongo/otelmongo), mongo.go: one client span per driver command"
	srcOtelmongoMet = "otelmongo v2, metrics_test.go: db.client.operation.duration per driver command"
	srcDriversSpec  = "MongoDB drivers' OpenTelemetry specification (mongodb/specifications source/open-telemetry/open-telemetry.md), operation span attributes"
)

// foreignInstruments are metric names of the semantic conventions' database
// client metrics and of otelmongo. writeguard emits none of them: its
// figures are per guarded call, not per server command or connection.
var foreignInstruments = []foreignName{
	{"db.client.operation.duration", "duration of one database operation (one server command)", srcSemconv + "; " + srcOtelmongoMet},
	{"db.client.response.returned_rows", "rows returned by one operation", srcSemconv},
	{"db.client.connection.count", "connections in the pool by state", srcSemconv},
	{"db.client.connection.create_time", "time to create a connection", srcSemconv},
	{"db.client.connection.wait_time", "time to obtain a connection from the pool", srcSemconv},
	{"db.client.connection.use_time", "time between borrowing and returning a connection", srcSemconv},
	{"db.client.connection.timeouts", "connection attempts that timed out", srcSemconv},
	{"db.client.connection.pending_requests", "requests waiting for a connection", srcSemconv},
	{"db.client.connection.max", "maximum connections allowed", srcSemconv},
	{"db.client.connection.idle.max", "maximum idle connections allowed", srcSemconv},
	{"db.client.connection.idle.min", "minimum idle connections allowed", srcSemconv},
}

// foreignAttributes are attribute keys of the semantic conventions and of
// otelmongo's command spans.
var foreignAttributes = []foreignName{
	{"db.system.name", "the database product", srcSemconv + "; " + srcOtelmongo},
	{"db.namespace", "the database name", srcSemconv + "; " + srcOtelmongo},
	{"db.collection.name", "the collection name", srcSemconv + "; " + srcOtelmongo},
	{"db.operation.name", "the server command (insert, update, delete, findAndModify)", srcSemconv + "; " + srcOtelmongo},
	{"db.operation.batch.size", "operations in a batch", srcSemconv},
	{"db.query.text", "the command's text", srcSemconv + "; " + srcOtelmongo},
	{"db.query.summary", "a low-cardinality summary of the query", srcSemconv},
	{"db.operation.summary", "the operation span's name", srcDriversSpec},
	{"db.response.status_code", "the server's error code, as a string", srcSemconv},
	{"db.response.returned_rows", "rows returned", srcSemconv},
	{"db.stored_procedure.name", "a stored procedure", srcSemconv},
	{"error.type", "a low-cardinality class of the error", srcSemconv},
	{"server.address", "the server's host name", srcSemconv},
	{"server.port", "the server's port", srcSemconv},
	{"network.peer.address", "the peer's address", srcSemconv + "; " + srcOtelmongo},
	{"network.peer.port", "the peer's port", srcSemconv + "; " + srcOtelmongo},
	{"network.transport", "tcp, udp, unix", srcSemconv + "; " + srcOtelmongo},
	{"db.system", "the database product", srcSemconvOld},
	{"db.name", "the database name", srcSemconvOld},
	{"db.operation", "the server command", srcSemconvOld},
	{"db.statement", "the command's text", srcSemconvOld},
	{"db.mongodb.collection", "the collection name", srcSemconvOld},
	{"net.peer.name", "the peer's host name", srcSemconvOld},
	{"net.peer.port", "the peer's port", srcSemconvOld},
}

// sameMeaning are the foreign attribute keys otelhook sets on purpose, with
// the semantic conventions' meaning, or for db.operation.summary the
// MongoDB drivers' specification's (checked below by value).
var sameMeaning = []string{
	"db.system.name", "db.namespace", "db.collection.name", "db.operation.name",
	"db.operation.batch.size", "db.response.status_code", "error.type",
	"server.address", "server.port", "db.operation.summary",
}

// emitted drives otelhook through every kind of step — a clean write, a
// retry, a mixed batch (dead letter, conflict), a sink outage, an
// unclassified failure, a refused retry — and returns every instrument
// name, span name, event name and attribute (key → values) it recorded.
func emitted(t *testing.T) (instruments map[string]bool, spans, events map[string]bool, attrs map[string]map[string]bool) {
	t.Helper()
	hx := newHarness(t, otelhook.WithServerAddress("mongo.example", 27017))
	ctx := context.Background()

	g := hx.guard(t, mocks.NewFake("shop.orders").Script(mocks.Reply(stepdown)))
	if _, err := g.InsertOne(ctx, bson.D{{Key: "qty", Value: 1}}); err != nil {
		t.Fatalf("InsertOne: %v", err)
	}
	_ = mixedBatch(t, hx)
	hx.sink.fail = func(int) error { return errors.New("sink down") }
	g = hx.guard(t, mocks.NewFake("shop.orders").Validator(requireQty))
	_, _ = g.InsertMany(ctx, []bson.D{{{Key: "_id", Value: 1}}})
	hx.sink.fail = nil
	g = hx.guard(t, failingTarget{Fake: mocks.NewFake("shop.orders"), err: errors.New("boom")})
	_, _ = g.InsertOne(ctx, bson.D{{Key: "qty", Value: 1}})
	budget, err := policy.NewBudget(2, 0.1)
	if err != nil {
		t.Fatal(err)
	}
	g = hx.guard(t, mocks.NewFake("shop.orders").Script(mocks.Reply(stepdown), mocks.Reply(stepdown), mocks.Reply(stepdown)),
		writeguard.WithBudget(budget))
	_, _ = g.InsertOne(ctx, bson.D{{Key: "qty", Value: 1}})
	// A batch (BATCH insert) and a write that matched nothing
	// (writeguard.no_match).
	g = hx.guard(t, mocks.NewFake("shop.orders"))
	if _, err := g.BulkWrite(ctx, []mongo.WriteModel{mongo.NewInsertOneModel().SetDocument(bson.D{{Key: "qty", Value: 1}}),
		mongo.NewInsertOneModel().SetDocument(bson.D{{Key: "qty", Value: 2}})}); err != nil {
		t.Fatalf("BulkWrite: %v", err)
	}
	if _, err := g.UpdateOne(ctx, bson.D{{Key: "_id", Value: "none"}}, bson.D{{Key: "$set", Value: bson.D{{Key: "qty", Value: 1}}}}); err != nil {
		t.Fatalf("UpdateOne: %v", err)
	}
	// An overloaded reply: the adaptive limit is cut (writeguard.limit).
	g = hx.guard(t, mocks.NewFake("shop.orders").Script(mocks.Reply(`{"ok":0,"code":462,"codeName":"IngressRequestRateLimitExceeded","errmsg":"rate exceeded","errorLabels":["SystemOverloadedError","RetryableError"]}`)))
	if _, err := g.InsertOne(ctx, bson.D{{Key: "qty", Value: 1}}); err != nil {
		t.Fatalf("InsertOne after an overloaded reply: %v", err)
	}
	// A flood: the breaker opens on the first call that dead-letters.
	g = hx.guard(t, mocks.NewFake("shop.orders").Validator(requireQty),
		writeguard.WithDeadLetterBreaker(writeguard.BreakerConfig{MinDocuments: 1}))
	if _, err := g.InsertMany(ctx, []bson.D{{{Key: "_id", Value: 1}}, {{Key: "_id", Value: 2}}}); !errors.Is(err, writeguard.ErrDeadLetterFlood) {
		t.Fatalf("flood scenario: err = %v, want ErrDeadLetterFlood", err)
	}

	instruments, spans, events, attrs = map[string]bool{}, map[string]bool{}, map[string]bool{}, map[string]map[string]bool{}
	add := func(kvs []attribute.KeyValue) {
		for _, kv := range kvs {
			if attrs[string(kv.Key)] == nil {
				attrs[string(kv.Key)] = map[string]bool{}
			}
			attrs[string(kv.Key)][kv.Value.String()] = true
		}
	}
	for _, s := range hx.sr.Ended() {
		spans[s.Name()] = true
		add(s.Attributes())
		for _, ev := range s.Events() {
			events[ev.Name] = true
			add(ev.Attributes)
		}
	}
	for _, sm := range hx.collect(t).ScopeMetrics {
		for _, m := range sm.Metrics {
			instruments[m.Name] = true
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, dp := range d.DataPoints {
					add(dp.Attributes.ToSlice())
				}
			case metricdata.Histogram[int64]:
				for _, dp := range d.DataPoints {
					add(dp.Attributes.ToSlice())
				}
			case metricdata.Histogram[float64]:
				for _, dp := range d.DataPoints {
					add(dp.Attributes.ToSlice())
				}
			case metricdata.Gauge[int64]:
				for _, dp := range d.DataPoints {
					add(dp.Attributes.ToSlice())
				}
			default:
				t.Fatalf("metric %s: unexpected data %T", m.Name, d)
			}
		}
	}
	return instruments, spans, events, attrs
}

// TestNoForeignNameCollision fails when a name otelhook emits is also a
// semantic-conventions or otelmongo name with another meaning, when a name
// it emits is not declared in names.go, or when one name does two jobs.
func TestNoForeignNameCollision(t *testing.T) {
	instruments, spans, events, attrs := emitted(t)
	declaredKeys := otelhook.AttributeKeys()

	// Everything emitted is declared in names.go, and everything declared
	// was emitted by the scenarios (so the lists below are complete).
	for name := range instruments {
		if !slices.Contains(otelhook.Instruments(), name) {
			t.Errorf("instrument %q is emitted but not listed in names.go", name)
		}
	}
	for _, name := range otelhook.Instruments() {
		if !instruments[name] {
			t.Errorf("instrument %q is declared but the scenarios did not record it", name)
		}
	}
	declared := func(key string) bool {
		for _, k := range declaredKeys {
			if k == key || (strings.HasSuffix(k, ".") && strings.HasPrefix(key, k)) {
				return true
			}
		}
		return false
	}
	for key := range attrs {
		if !declared(key) {
			t.Errorf("attribute %q is emitted but not listed in names.go", key)
		}
	}
	for name := range events {
		if !slices.Contains(otelhook.SpanEvents(), name) {
			t.Errorf("span event %q is emitted but not listed in names.go", name)
		}
	}

	// No instrument of the conventions or of otelmongo.
	for _, f := range foreignInstruments {
		if slices.Contains(otelhook.Instruments(), f.name) {
			t.Errorf("instrument %q means %q in %s; otelhook must not record it", f.name, f.meaning, f.source)
		}
	}
	// A foreign attribute key only with its foreign meaning.
	for _, f := range foreignAttributes {
		if declared(f.name) && !slices.Contains(sameMeaning, f.name) {
			t.Errorf("attribute %q means %q in %s; otelhook must not use it", f.name, f.meaning, f.source)
		}
	}
	// Every writeguard name is in writeguard's namespace.
	for _, k := range append(append(slices.Clone(declaredKeys), otelhook.Instruments()...), otelhook.SpanEvents()...) {
		if !strings.HasPrefix(k, "writeguard.") && !slices.Contains(sameMeaning, k) {
			t.Errorf("name %q is neither writeguard.* nor a semantic-conventions name used with its meaning", k)
		}
	}

	// One name, one job: no instrument name is also an attribute key or an
	// attribute namespace, and no span event is either.
	for _, name := range append(otelhook.Instruments(), otelhook.SpanEvents()...) {
		for _, k := range declaredKeys {
			if name == strings.TrimSuffix(k, ".") || strings.HasPrefix(k, name+".") {
				t.Errorf("%q is both an instrument or event name and the attribute %q", name, k)
			}
		}
	}
	// No unit in a name (OpenTelemetry metric naming: the unit goes in the
	// unit field).
	unit := regexp.MustCompile(`[._](ms|millis|milliseconds|s|sec|seconds|us|ns|bytes|pct|percent)$`)
	for _, name := range append(append(slices.Clone(declaredKeys), otelhook.Instruments()...), otelhook.SpanEvents()...) {
		if unit.MatchString(strings.TrimSuffix(name, ".")) {
			t.Errorf("name %q carries a unit", name)
		}
	}

	// The conventions' keys with their meaning: db.operation.name is a
	// server command, never a driver method; error.type a code, a class or
	// _OTHER; db.response.status_code a number.
	for v := range attrs["db.operation.name"] {
		if !regexp.MustCompile(`^((BATCH )?(insert|update|delete)|findAndModify|bulkWrite)$`).MatchString(v) {
			t.Errorf("db.operation.name = %q, not a MongoDB write command (BATCH-prefixed for a batch)", v)
		}
	}
	if !attrs["db.operation.name"]["BATCH insert"] {
		t.Errorf("db.operation.name values %v: the bulkWrite of inserts should be BATCH insert", attrs["db.operation.name"])
	}
	if !attrs["writeguard.method"]["insertOne"] || !attrs["writeguard.method"]["insertMany"] {
		t.Errorf("writeguard.method values %v, want insertOne and insertMany", attrs["writeguard.method"])
	}
	classes := regexp.MustCompile(`^([0-9]+|unknown|transient|throttled|invalid|conflict|configuration|_OTHER|not_attempted|unacknowledged|written_unconfirmed|dead_letter_flood)$`)
	for v := range attrs["error.type"] {
		if !classes.MatchString(v) {
			t.Errorf("error.type = %q, want a code, a class or _OTHER", v)
		}
	}
	for v := range attrs["db.response.status_code"] {
		if !regexp.MustCompile(`^[0-9]+$`).MatchString(v) {
			t.Errorf("db.response.status_code = %q, want a server code", v)
		}
	}
	if len(attrs["error.type"]) < 3 {
		t.Errorf("error.type values %v: the scenarios should give a code, a class-less _OTHER and more", attrs["error.type"])
	}

	// Span names: the operation span is "<method> <db>.<collection>" (the
	// drivers' specification's form, with the guarded method: see the
	// package documentation), its children that name plus " attempt" or
	// " dead_letter"; never a driver operation span's name, whose first
	// word is a command (insert, update, delete, findAndModify), never
	// otelmongo's legacy "<collection>.<command>". db.operation.summary
	// is the operation span's name.
	name := regexp.MustCompile(`^(insertOne|insertMany|bulkWrite|updateOne|updateByID|updateMany|replaceOne|deleteOne|deleteMany|findOneAndUpdate|findOneAndReplace|findOneAndDelete) shop\.(orders|dlq)( attempt| dead_letter)?$`)
	for s := range spans {
		if !name.MatchString(s) && s != "handle request" {
			t.Errorf("span %q is not <method> <db>.<collection>[ attempt| dead_letter]", s)
		}
	}
	for v := range attrs["db.operation.summary"] {
		if !spans[v] || strings.HasSuffix(v, " attempt") || strings.HasSuffix(v, " dead_letter") {
			t.Errorf("db.operation.summary = %q, not an operation span's name", v)
		}
	}
}
