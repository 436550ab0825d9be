package otelhook_test

//lint:file-ignore SA1019 these tests pin durations with the deprecated fake clock, which must keep working until it is removed

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/writeguard/writeguard"
	"github.com/writeguard/writeguard/envelope"
	"github.com/writeguard/writeguard/hooks"
	"github.com/writeguard/writeguard/mocks"
	"github.com/writeguard/writeguard/otelhook"
	"github.com/writeguard/writeguard/policy"
)

var bg = context.Background()

// childOf fails unless child's parent is parent.
func childOf(t *testing.T, child, parent sdktrace.ReadOnlySpan) {
	t.Helper()
	if child.Parent().SpanID() != parent.SpanContext().SpanID() || child.SpanContext().TraceID() != parent.SpanContext().TraceID() {
		t.Errorf("span %q: parent %s, want %q (%s)", child.Name(), child.Parent().SpanID(), parent.Name(), parent.SpanContext().SpanID())
	}
}

func TestCleanInsert(t *testing.T) {
	hx := newHarness(t, otelhook.WithServerAddress("mongo.example", 27017))
	g := hx.guard(t, mocks.NewFake("shop.orders"))

	ctx, parent := hx.tp.Tracer("app").Start(bg, "handle request")
	if _, err := g.InsertOne(ctx, bson.D{{Key: "_id", Value: 1}, {Key: "qty", Value: 2}}); err != nil {
		t.Fatalf("InsertOne: %v", err)
	}
	parent.End()

	op := hx.one(t, "insertOne shop.orders")
	if op.SpanKind() != trace.SpanKindClient {
		t.Errorf("operation span kind %v, want client", op.SpanKind())
	}
	if op.Parent().SpanID() != parent.SpanContext().SpanID() {
		t.Errorf("operation span is not a child of the caller's span")
	}
	if sc := op.InstrumentationScope(); sc.Name != otelhook.ScopeName || sc.Version != otelhook.Version {
		t.Errorf("scope %s %s, want %s %s", sc.Name, sc.Version, otelhook.ScopeName, otelhook.Version)
	}
	checkAttrs(t, "operation span", op.Attributes(), map[string]string{
		"db.system.name":           "mongodb",
		"db.namespace":             "shop",
		"db.collection.name":       "orders",
		"db.operation.name":        "insert",
		"writeguard.method":        "insertOne",
		"db.operation.batch.size":  absent,
		"server.address":           "mongo.example",
		"server.port":              "27017",
		"writeguard.disposition":   "written",
		"writeguard.attempts":      "1",
		"writeguard.retries":       "0",
		"writeguard.dead_lettered": "0",
		"writeguard.conflicts":     "0",
		"error.type":               absent,
		"db.response.status_code":  absent,
	})
	if op.Status().Code != codes.Unset {
		t.Errorf("operation status %v %q, want unset", op.Status().Code, op.Status().Description)
	}
	if len(op.Events()) != 0 {
		t.Errorf("operation span has events %v", op.Events())
	}

	at := hx.one(t, "insertOne shop.orders attempt")
	childOf(t, at, op)
	if at.SpanKind() != trace.SpanKindInternal {
		t.Errorf("attempt span kind %v, want internal", at.SpanKind())
	}
	checkAttrs(t, "attempt span", at.Attributes(), map[string]string{
		"writeguard.attempt":      "1",
		"writeguard.documents":    "1",
		"writeguard.backoff":      "0",
		"writeguard.class":        absent,
		"db.response.status_code": absent,
	})
	if at.Status().Code != codes.Unset {
		t.Errorf("attempt status %v, want unset", at.Status().Code)
	}
	if n := len(hx.sr.Ended()); n != 3 {
		t.Errorf("%d spans, want 3 (caller, operation, attempt): %v", n, hx.names())
	}
}

func TestRetriedInsert(t *testing.T) {
	hx := newHarness(t)
	g := hx.guard(t, mocks.NewFake("shop.orders").Script(mocks.Reply(stepdown)))
	if _, err := g.InsertOne(bg, bson.D{{Key: "_id", Value: 1}, {Key: "qty", Value: 2}}); err != nil {
		t.Fatalf("InsertOne: %v", err)
	}
	sleeps := hx.clock.Sleeps()
	if len(sleeps) != 1 {
		t.Fatalf("slept %v, want one backoff", sleeps)
	}
	wantS := strconv.FormatFloat(sleeps[0].Seconds(), 'g', -1, 64)

	op := hx.one(t, "insertOne shop.orders")
	checkAttrs(t, "operation span", op.Attributes(), map[string]string{
		"writeguard.attempts":    "2",
		"writeguard.retries":     "1",
		"writeguard.disposition": "written",
		"error.type":             absent,
	})
	if op.Status().Code != codes.Unset {
		t.Errorf("operation status %v, want unset: the retry recovered", op.Status().Code)
	}
	evs := op.Events()
	if len(evs) != 1 || evs[0].Name != "writeguard.retry" {
		t.Fatalf("events %v, want one writeguard.retry", evs)
	}
	checkAttrs(t, "retry event", evs[0].Attributes, map[string]string{
		"writeguard.attempt":      "2",
		"writeguard.backoff":      wantS,
		"writeguard.documents":    "1",
		"writeguard.class":        "transient",
		"db.response.status_code": "189",
	})

	ats := hx.ended("insertOne shop.orders attempt")
	if len(ats) != 2 {
		t.Fatalf("%d attempt spans, want 2", len(ats))
	}
	for _, at := range ats {
		childOf(t, at, op)
	}
	checkAttrs(t, "attempt 1", ats[0].Attributes(), map[string]string{
		"writeguard.attempt":      "1",
		"writeguard.backoff":      "0",
		"db.response.status_code": "189",
		"writeguard.class":        "transient",
		"writeguard.failures":     "1",
		"error.type":              "189",
	})
	if s := ats[0].Status(); s.Code != codes.Error || s.Description != "attempt failed: transient failure, code 189" {
		t.Errorf("attempt 1 status %v %q", s.Code, s.Description)
	}
	checkAttrs(t, "attempt 2", ats[1].Attributes(), map[string]string{
		"writeguard.attempt":      "2",
		"writeguard.backoff":      wantS,
		"db.response.status_code": absent,
		"writeguard.class":        absent,
	})
	if ats[1].Status().Code != codes.Unset {
		t.Errorf("attempt 2 status %v, want unset", ats[1].Status().Code)
	}
}

// mixedBatch inserts 4 documents unordered into a fake holding "dup": two
// are written, "b" (no qty) is dead-lettered, "dup" is a duplicate key.
func mixedBatch(t *testing.T, hx *harness, opts ...writeguard.Option) error {
	t.Helper()
	fake := mocks.NewFake("shop.orders").Validator(requireQty)
	if err := fake.Seed(bson.D{{Key: "_id", Value: "dup"}, {Key: "qty", Value: 0}}); err != nil {
		t.Fatal(err)
	}
	g := hx.guard(t, fake, opts...)
	docs := []bson.D{
		{{Key: "_id", Value: "a"}, {Key: "qty", Value: 1}},
		{{Key: "_id", Value: "b"}},
		{{Key: "_id", Value: "c"}, {Key: "qty", Value: 1}},
		{{Key: "_id", Value: "dup"}, {Key: "qty", Value: 1}},
	}
	_, err := g.InsertMany(bg, docs, options.InsertMany().SetOrdered(false))
	return err
}

func TestMixedBatch(t *testing.T) {
	t.Run("default conflict handler: unhandled", func(t *testing.T) {
		hx := newHarness(t)
		err := mixedBatch(t, hx)
		if !errors.Is(err, writeguard.ErrConflict) || writeguard.Handled(err) {
			t.Fatalf("err = %v, want an unhandled conflict", err)
		}
		op := hx.one(t, "insertMany shop.orders")
		checkAttrs(t, "operation span", op.Attributes(), map[string]string{
			"db.operation.batch.size":               absent, // one insert command: not a batch of operations
			"writeguard.dispositions.written":       "2",
			"writeguard.dispositions.dead_lettered": "1",
			"writeguard.dispositions.conflict":      "1",
			"writeguard.disposition":                absent,
			"writeguard.attempts":                   "1",
			"writeguard.retries":                    "0",
			"writeguard.dead_lettered":              "1",
			"writeguard.conflicts":                  "1",
			"error.type":                            "11000",
			"db.response.status_code":               "11000",
		})
		if s := op.Status(); s.Code != codes.Error || s.Description != "unhandled: 1 conflict" {
			t.Errorf("status %v %q, want Error \"unhandled: 1 conflict\"", s.Code, s.Description)
		}
		at := hx.one(t, "insertMany shop.orders attempt")
		childOf(t, at, op)
		checkAttrs(t, "attempt span", at.Attributes(), map[string]string{
			"writeguard.documents":    "4",
			"writeguard.failures":     "2",
			"writeguard.class":        "invalid",
			"db.response.status_code": "121",
		})
		dl := hx.one(t, "insertMany shop.orders dead_letter")
		childOf(t, dl, op)
		checkAttrs(t, "dead-letter span", dl.Attributes(), map[string]string{
			"writeguard.envelopes": "1",
			"writeguard.attempt":   "1",
			"writeguard.fallback":  "false",
			"error.type":           absent,
		})
		if dl.Status().Code != codes.Unset {
			t.Errorf("dead-letter status %v, want unset", dl.Status().Code)
		}
	})
	t.Run("ConflictSkip: handled", func(t *testing.T) {
		hx := newHarness(t)
		err := mixedBatch(t, hx, writeguard.WithConflictHandler(writeguard.ConflictSkip()))
		if err == nil || !writeguard.Handled(err) {
			t.Fatalf("err = %v, want a handled report", err)
		}
		op := hx.one(t, "insertMany shop.orders")
		checkAttrs(t, "operation span", op.Attributes(), map[string]string{
			"writeguard.dispositions.written":          "2",
			"writeguard.dispositions.dead_lettered":    "1",
			"writeguard.dispositions.conflict_skipped": "1",
			"writeguard.conflicts":                     "1",
			"error.type":                               absent,
			"db.response.status_code":                  absent,
		})
		if op.Status().Code != codes.Unset {
			t.Errorf("status %v %q, want unset: every document was handled", op.Status().Code, op.Status().Description)
		}
	})
}

func TestDeadLetterOutage(t *testing.T) {
	t.Run("sink and fallback fail", func(t *testing.T) {
		hx := newHarness(t)
		hx.sink.fail = func(int) error { return errors.New("sink down") }
		fallback := newSpanSink()
		fallback.fail = func(int) error { return errors.New("disk full") }
		g := hx.guard(t, mocks.NewFake("shop.orders").Validator(requireQty), writeguard.WithFallbackDeadLetter(fallback))
		_, err := g.InsertMany(bg, []bson.D{{{Key: "_id", Value: 1}, {Key: "qty", Value: 1}}, {{Key: "_id", Value: 2}}})
		if !errors.Is(err, writeguard.ErrDeadLetterFailed) {
			t.Fatalf("err = %v, want ErrDeadLetterFailed", err)
		}
		op := hx.one(t, "insertMany shop.orders")
		dls := hx.ended("insertMany shop.orders dead_letter")
		if len(dls) != 2 {
			t.Fatalf("%d dead-letter spans, want 2 (sink, fallback)", len(dls))
		}
		for i, dl := range dls {
			childOf(t, dl, op)
			checkAttrs(t, "dead-letter span", dl.Attributes(), map[string]string{
				"writeguard.envelopes": "1",
				"writeguard.attempt":   "1",
				"writeguard.fallback":  strconv.FormatBool(i == 1),
				"error.type":           "_OTHER",
			})
			if s := dl.Status(); s.Code != codes.Error || s.Description != "dead-letter sink failed" {
				t.Errorf("dead-letter span %d status %v %q", i, s.Code, s.Description)
			}
		}
		checkAttrs(t, "operation span", op.Attributes(), map[string]string{
			"writeguard.dispositions.written":            "1",
			"writeguard.dispositions.dead_letter_failed": "1",
			"writeguard.dead_lettered":                   "0",
			"error.type":                                 "121",
		})
		if s := op.Status(); s.Code != codes.Error || s.Description != "unhandled: 1 dead_letter_failed" {
			t.Errorf("operation status %v %q", s.Code, s.Description)
		}
		rm := hx.collect(t)
		if n := counterValue(t, rm, "writeguard.call.inputs", map[string]string{
			"writeguard.disposition": "dead_letter_failed", "writeguard.class": "invalid", "db.response.status_code": "121",
		}); n != 1 {
			t.Errorf("dead_letter_failed counted %d times, want 1", n)
		}
	})
	t.Run("retryable sink error then success", func(t *testing.T) {
		hx := newHarness(t)
		hx.sink.fail = func(n int) error {
			if n == 1 {
				return mocks.NetworkError(mocks.OpInsertMany)
			}
			return nil
		}
		g := hx.guard(t, mocks.NewFake("shop.orders").Validator(requireQty))
		_, err := g.InsertMany(bg, []bson.D{{{Key: "_id", Value: 1}, {Key: "qty", Value: 1}}, {{Key: "_id", Value: 2}}})
		if !writeguard.Handled(err) {
			t.Fatalf("err = %v, want handled", err)
		}
		dls := hx.ended("insertMany shop.orders dead_letter")
		if len(dls) != 2 {
			t.Fatalf("%d dead-letter spans, want 2", len(dls))
		}
		if dls[0].Status().Code != codes.Error || dls[1].Status().Code != codes.Unset {
			t.Errorf("statuses %v, %v; want Error then unset", dls[0].Status().Code, dls[1].Status().Code)
		}
		checkAttrs(t, "second hand-off", dls[1].Attributes(), map[string]string{"writeguard.attempt": "2"})
		if op := hx.one(t, "insertMany shop.orders"); op.Status().Code != codes.Unset {
			t.Errorf("operation status %v, want unset", op.Status().Code)
		}
	})
}

// cancelClock cancels the call's context when a backoff starts and never
// fires: the context ends mid-backoff.
type cancelClock struct {
	*mocks.Clock
	cancel context.CancelFunc
}

func (c cancelClock) After(time.Duration) <-chan time.Time {
	c.cancel()
	return make(chan time.Time)
}

func TestContextCancelledMidBackoff(t *testing.T) {
	hx := newHarness(t)
	ctx, cancel := context.WithCancel(bg)
	defer cancel()
	g := hx.guard(t, mocks.NewFake("shop.orders").Script(mocks.Reply(stepdown)),
		writeguard.WithClock(cancelClock{Clock: hx.clock, cancel: cancel}))
	_, err := g.InsertOne(ctx, bson.D{{Key: "_id", Value: 1}, {Key: "qty", Value: 1}})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled in the report", err)
	}
	if started, ended := len(hx.sr.Started()), len(hx.sr.Ended()); started != ended || ended != 2 {
		t.Fatalf("%d spans started, %d ended; want 2 and 2", started, ended)
	}
	op := hx.one(t, "insertOne shop.orders")
	// 189 is in the server's NotPrimaryError category: the insert may
	// have been applied, and the cancelled context leaves no time to read
	// it back: unknown.
	checkAttrs(t, "operation span", op.Attributes(), map[string]string{
		"writeguard.disposition": "unknown",
		"writeguard.attempts":    "1",
		"writeguard.retries":     "0",
		"error.type":             "189",
	})
	if op.Status().Code != codes.Error {
		t.Errorf("status %v, want Error", op.Status().Code)
	}
	if evs := op.Events(); len(evs) != 1 || evs[0].Name != "writeguard.retry" {
		t.Errorf("events %v, want the scheduled retry", evs)
	}
	rm := hx.collect(t)
	if n, _ := histogram(t, rm, "writeguard.call.duration", map[string]string{"error.type": "189"}); n != 1 {
		t.Errorf("duration recorded %d times with error.type 189, want 1", n)
	}
	if n := counterValue(t, rm, "writeguard.call.inputs", map[string]string{"writeguard.disposition": "unknown"}); n != 1 {
		t.Errorf("unknown counted %d, want 1", n)
	}
}

// spyTarget records the span context of each write call, and starts a
// "driver" span from it as otelmongo would.
type spyTarget struct {
	*mocks.Fake
	tracer trace.Tracer
	mu     sync.Mutex
	seen   []trace.SpanContext
}

func (s *spyTarget) InsertMany(ctx context.Context, docs any, opts ...options.Lister[options.InsertManyOptions]) (*mongo.InsertManyResult, error) {
	s.mu.Lock()
	s.seen = append(s.seen, trace.SpanContextFromContext(ctx))
	s.mu.Unlock()
	ctx, span := s.tracer.Start(ctx, "driver insert", trace.WithSpanKind(trace.SpanKindClient))
	defer span.End()
	return s.Fake.InsertMany(ctx, docs, opts...)
}

// failingTarget fails every InsertOne with err.
type failingTarget struct {
	*mocks.Fake
	err error
}

func (f failingTarget) InsertOne(context.Context, any, ...options.Lister[options.InsertOneOptions]) (*mongo.InsertOneResult, error) {
	return nil, f.err
}

func TestAttemptSpanParentsDriverSpans(t *testing.T) {
	hx := newHarness(t)
	spy := &spyTarget{Fake: mocks.NewFake("shop.orders").Validator(requireQty).Script(mocks.Reply(stepdown)), tracer: hx.tp.Tracer("driver")}
	g := hx.guard(t, spy)
	_, err := g.InsertMany(bg, []bson.D{{{Key: "_id", Value: 1}, {Key: "qty", Value: 1}}, {{Key: "_id", Value: 2}}})
	if !writeguard.Handled(err) {
		t.Fatalf("err = %v, want handled", err)
	}
	ats := hx.ended("insertMany shop.orders attempt")
	if len(ats) != 2 || len(spy.seen) != 2 {
		t.Fatalf("%d attempt spans, %d driver calls; want 2 and 2", len(ats), len(spy.seen))
	}
	drivers := hx.ended("driver insert")
	for i := range ats {
		if !spy.seen[i].Equal(ats[i].SpanContext()) {
			t.Errorf("driver call %d ran with span %s, want attempt span %s", i+1, spy.seen[i].SpanID(), ats[i].SpanContext().SpanID())
		}
		childOf(t, drivers[i], ats[i])
	}
	op := hx.one(t, "insertMany shop.orders")
	dl := hx.one(t, "insertMany shop.orders dead_letter")
	if len(hx.sink.spans) != 1 || !hx.sink.spans[0].Equal(dl.SpanContext()) {
		t.Errorf("sink.Put ran with %v, want the dead-letter span %s", hx.sink.spans, dl.SpanContext().SpanID())
	}
	envs := hx.sink.all()
	if len(envs) != 1 || envs[0].TraceID != op.SpanContext().TraceID().String() || envs[0].SpanID != op.SpanContext().SpanID().String() {
		t.Errorf("envelope trace %+v, want the operation span's ids", envs)
	}
}

func TestMetrics(t *testing.T) {
	t.Run("dispositions, attempts and duration", func(t *testing.T) {
		hx := newHarness(t, otelhook.WithServerAddress("mongo.example", 27017))
		_ = mixedBatch(t, hx)
		rm := hx.collect(t)
		call := map[string]string{"db.system.name": "mongodb", "db.namespace": "shop", "db.collection.name": "orders", "db.operation.name": "insert", "writeguard.method": "insertMany"}
		for _, c := range []struct {
			filter map[string]string
			want   int64
		}{
			{map[string]string{"writeguard.disposition": "written", "writeguard.class": absent, "db.response.status_code": absent}, 2},
			{map[string]string{"writeguard.disposition": "dead_lettered", "writeguard.class": "invalid", "db.response.status_code": "121"}, 1},
			{map[string]string{"writeguard.disposition": "conflict", "writeguard.class": "conflict", "db.response.status_code": "11000"}, 1},
			{call, 4},
		} {
			if got := counterValue(t, rm, "writeguard.call.inputs", c.filter); got != c.want {
				t.Errorf("writeguard.dispositions%v = %d, want %d", c.filter, got, c.want)
			}
		}
		if n, sum := histogram(t, rm, "writeguard.call.attempts", call); n != 1 || sum != 1 {
			t.Errorf("writeguard.attempts: count %d sum %v, want 1 and 1", n, sum)
		}
		m := findMetric(t, rm, "writeguard.call.duration")
		if m.Unit != "s" {
			t.Errorf("duration unit %q, want s", m.Unit)
		}
		if n, _ := histogram(t, rm, "writeguard.call.duration", map[string]string{
			"db.collection.name": "orders", "error.type": "11000", "db.response.status_code": "11000", "server.address": "mongo.example", "server.port": "27017",
		}); n != 1 {
			t.Errorf("duration recorded %d times with the failure's attributes, want 1", n)
		}
		if fh, ok := m.Data.(metricdata.Histogram[float64]); ok {
			want := []float64{0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10}
			if got := fh.DataPoints[0].Bounds; fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("duration bounds %v, want %v", got, want)
			}
		} else {
			t.Errorf("duration is %T, want a float64 histogram", m.Data)
		}
		if n := counterValue(t, rm, "writeguard.unclassified", nil); n != 0 {
			t.Errorf("unclassified = %d, want 0", n)
		}
	})
	t.Run("unclassified code", func(t *testing.T) {
		hx := newHarness(t)
		reply := `{"ok":0,"code":8000,"codeName":"AtlasError","errmsg":"something new"}`
		g := hx.guard(t, mocks.NewFake("shop.orders").Script(mocks.Reply(reply), mocks.Reply(reply)))
		for i := 0; i < 2; i++ {
			// An unknown code proves nothing (issue 28): the insert is read
			// back, not found: unknown.
			if _, err := g.InsertOne(bg, bson.D{{Key: "qty", Value: i}}); !errors.Is(err, writeguard.ErrOutcomeUnknown) {
				t.Fatalf("InsertOne: %v, want ErrOutcomeUnknown", err)
			}
		}
		rm := hx.collect(t)
		if n := counterValue(t, rm, "writeguard.unclassified", map[string]string{"db.response.status_code": "8000", "db.collection.name": "orders"}); n != 2 {
			t.Errorf("unclassified{code=8000} = %d, want 2", n)
		}
		if n := counterValue(t, rm, "writeguard.call.inputs", map[string]string{"writeguard.disposition": "unknown", "writeguard.class": "unknown", "db.response.status_code": "8000"}); n != 2 {
			t.Errorf("unknown/unknown/8000 = %d, want 2", n)
		}
		if n, sum := histogram(t, rm, "writeguard.call.attempts", nil); n != 2 || sum != 2 {
			t.Errorf("attempts: count %d sum %v, want 2 calls of 1 attempt", n, sum)
		}
		logs := hx.logs.String()
		if c := strings.Count(logs, "unclassified write failure"); c != 1 {
			t.Errorf("%d unclassified log records, want 1 (rate-limited):\n%s", c, logs)
		}
		if !strings.Contains(logs, "level=WARN") || !strings.Contains(logs, "code=8000") || !strings.Contains(logs, "code_name=AtlasError") {
			t.Errorf("log record lacks level, code or code name:\n%s", logs)
		}
		if op := hx.ended("insertOne shop.orders"); len(op) != 2 || op[0].Status().Code != codes.Error {
			t.Errorf("operation spans %v, want 2 with status Error", hx.names())
		}
	})
	t.Run("unclassified failure without a code", func(t *testing.T) {
		hx := newHarness(t)
		g := hx.guard(t, failingTarget{Fake: mocks.NewFake("shop.orders"), err: errors.New("boom")})
		// An error of no shape the driver produces proves nothing about
		// the server's state: unknown (may be written), never retried.
		if _, err := g.InsertOne(bg, bson.D{{Key: "qty", Value: 1}}); !errors.Is(err, writeguard.ErrOutcomeUnknown) {
			t.Fatalf("InsertOne: %v, want ErrOutcomeUnknown", err)
		}
		rm := hx.collect(t)
		if n := counterValue(t, rm, "writeguard.unclassified", map[string]string{"db.response.status_code": absent}); n != 1 {
			t.Errorf("unclassified without a code = %d, want 1", n)
		}
		if n := counterValue(t, rm, "writeguard.call.inputs", map[string]string{"writeguard.disposition": "unknown", "writeguard.class": "unknown"}); n != 1 {
			t.Errorf("unknown/unknown = %d, want 1", n)
		}
		checkAttrs(t, "operation span", hx.one(t, "insertOne shop.orders").Attributes(), map[string]string{
			"error.type": "_OTHER", "db.response.status_code": absent,
		})
	})
	t.Run("budget exhausted", func(t *testing.T) {
		hx := newHarness(t)
		budget, err := policy.NewBudget(2, 0.1)
		if err != nil {
			t.Fatal(err)
		}
		g := hx.guard(t, mocks.NewFake("shop.orders").Script(mocks.Reply(stepdown), mocks.Reply(stepdown), mocks.Reply(stepdown)),
			writeguard.WithBudget(budget))
		_, err = g.InsertOne(bg, bson.D{{Key: "qty", Value: 1}})
		// A stepdown may have applied the insert, and the read-back
		// found nothing: unknown, never exhausted (C63).
		if !errors.Is(err, writeguard.ErrOutcomeUnknown) {
			t.Fatalf("err = %v, want ErrOutcomeUnknown", err)
		}
		rm := hx.collect(t)
		if n := counterValue(t, rm, "writeguard.budget.exhausted", map[string]string{"db.response.status_code": "189", "db.operation.name": "insert", "writeguard.method": "insertOne"}); n != 1 {
			t.Errorf("budget.exhausted = %d, want 1", n)
		}
		if n, sum := histogram(t, rm, "writeguard.call.attempts", nil); n != 1 || sum != 2 {
			t.Errorf("attempts: count %d sum %v, want one call of 2 attempts", n, sum)
		}
		if c := strings.Count(hx.logs.String(), "retry budget exhausted"); c != 1 {
			t.Errorf("%d budget log records, want 1", c)
		}
		op := hx.one(t, "insertOne shop.orders")
		var names []string
		for _, ev := range op.Events() {
			names = append(names, ev.Name)
		}
		if fmt.Sprint(names) != "[writeguard.retry writeguard.budget_exhausted]" {
			t.Errorf("events %v, want a retry then budget_exhausted", names)
		}
		checkAttrs(t, "operation span", op.Attributes(), map[string]string{"writeguard.disposition": "unknown", "error.type": "189"})
	})
}

func TestConcurrentCalls(t *testing.T) {
	hx := newHarness(t)
	faults := make([]mocks.Fault, 10)
	for i := range faults {
		faults[i] = mocks.Reply(stepdown)
	}
	g := hx.guard(t, mocks.NewFake("shop.orders").Validator(requireQty).Script(faults...))
	const calls = 16
	var wg sync.WaitGroup
	for i := 0; i < calls; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			docs := []bson.D{{{Key: "_id", Value: i*2 + 1}, {Key: "qty", Value: 1}}, {{Key: "_id", Value: i*2 + 2}}}
			_, _ = g.InsertMany(bg, docs)
		}(i)
	}
	wg.Wait()
	ops := map[trace.SpanID]sdktrace.ReadOnlySpan{}
	for _, s := range hx.ended("insertMany shop.orders") {
		ops[s.SpanContext().SpanID()] = s
	}
	if len(ops) != calls {
		t.Fatalf("%d operation spans, want %d", len(ops), calls)
	}
	if s, e := len(hx.sr.Started()), len(hx.sr.Ended()); s != e {
		t.Errorf("%d spans started, %d ended", s, e)
	}
	perOp := map[trace.SpanID]int{}
	for _, name := range []string{"insertMany shop.orders attempt", "insertMany shop.orders dead_letter"} {
		for _, s := range hx.ended(name) {
			op, ok := ops[s.Parent().SpanID()]
			if !ok {
				t.Errorf("%s has no operation span as parent", name)
				continue
			}
			childOf(t, s, op)
			if name == "insertMany shop.orders attempt" {
				perOp[op.SpanContext().SpanID()]++
			}
		}
	}
	for id, op := range ops {
		want := attrMap(op.Attributes())["writeguard.attempts"]
		if strconv.Itoa(perOp[id]) != want {
			t.Errorf("operation %s: %d attempt children, attribute says %s", id, perOp[id], want)
		}
	}
	// The metrics agree with the spans.
	rm := hx.collect(t)
	deadLettered := 0
	for _, op := range ops {
		n, _ := strconv.Atoi(attrMap(op.Attributes())["writeguard.dead_lettered"])
		deadLettered += n
	}
	if n := counterValue(t, rm, "writeguard.call.inputs", map[string]string{"writeguard.disposition": "dead_lettered"}); n != int64(deadLettered) || n == 0 {
		t.Errorf("dead_lettered counter = %d, spans say %d", n, deadLettered)
	}
	if n := counterValue(t, rm, "writeguard.call.inputs", nil); n != 2*calls {
		t.Errorf("%d dispositions, want %d", n, 2*calls)
	}
	if n, _ := histogram(t, rm, "writeguard.call.attempts", nil); n != calls {
		t.Errorf("attempts histogram count %d, want %d", n, calls)
	}
}

// TestInTransaction drives the hooks as writeguard does for a call inside
// a transaction: no AttemptStarted, an AttemptFinished with the operation
// context, no dispositions.
func TestInTransaction(t *testing.T) {
	hx := newHarness(t)
	h := hx.hooks
	op := &hooks.Operation{Name: "insertOne", Database: "shop", Collection: "orders", BatchSize: 1, Ordered: true, InTransaction: true}
	err := mocks.ReplyError(mocks.OpInsertOne, mustRaw(t, `{"ok":0,"code":8000,"codeName":"AtlasError","errmsg":"x"}`))
	ctx := h.OperationStarted(bg, op)
	actx := h.AttemptStarted(ctx, &hooks.AttemptStart{Op: op, Attempt: 1, Documents: 1})
	h.AttemptFinished(actx, &hooks.AttemptEnd{Op: op, Attempt: 1, Documents: 1, Err: err, Code: 8000, Class: policy.Unknown, Failures: 1})
	h.OperationFinished(ctx, &hooks.OperationEnd{Op: op, Attempts: 1, Err: err, Code: 8000, Class: policy.Unknown, Duration: 3 * time.Millisecond})

	if s, e := len(hx.sr.Started()), len(hx.sr.Ended()); s != 2 || e != 2 {
		t.Fatalf("%d spans started, %d ended; want 2 and 2 (operation and attempt)", s, e)
	}
	span := hx.one(t, "insertOne shop.orders")
	checkAttrs(t, "operation span", span.Attributes(), map[string]string{
		"writeguard.in_transaction": "true",
		"writeguard.attempts":       "1",
		"writeguard.dead_lettered":  absent,
		"error.type":                "8000",
		"db.response.status_code":   "8000",
	})
	if s := span.Status(); s.Code != codes.Error || s.Description != "unknown failure, code 8000" {
		t.Errorf("status %v %q", s.Code, s.Description)
	}
	rm := hx.collect(t)
	if n := counterValue(t, rm, "writeguard.unclassified", map[string]string{"db.response.status_code": "8000"}); n != 1 {
		t.Errorf("unclassified = %d, want 1", n)
	}
	if n, _ := histogram(t, rm, "writeguard.call.duration", nil); n != 1 {
		t.Errorf("duration recorded %d times, want 1", n)
	}
}

// TestDefaults checks that New works with no options (the global no-op
// providers) and that the hooks tolerate events of calls they did not see
// start.
func TestDefaults(t *testing.T) {
	h, err := otelhook.New()
	if err != nil {
		t.Fatal(err)
	}
	g, err := writeguard.New(mocks.NewFake("shop.orders").Script(mocks.Reply(stepdown)), writeguard.WithHooks(h), writeguard.WithClock(mocks.NewClock(time.Unix(0, 0))))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := g.InsertOne(bg, bson.D{{Key: "qty", Value: 1}}); err != nil {
		t.Fatalf("InsertOne: %v", err)
	}

	hx := newHarness(t)
	op := &hooks.Operation{Name: "insertOne", Collection: "orders", BatchSize: 1}
	hx.hooks.AttemptFinished(bg, &hooks.AttemptEnd{Op: op, Attempt: 1})
	hx.hooks.DeadLetterFinished(bg, &hooks.DeadLetterEnd{Op: op, Attempt: 1})
	hx.hooks.RetryScheduled(bg, &hooks.Retry{Op: op, Attempt: 2})
	hx.hooks.Disposition(bg, &hooks.Disposition{Op: op, Disposition: policy.Written})
	hx.hooks.OperationFinished(bg, &hooks.OperationEnd{Op: op, Attempts: 1})
	if n := len(hx.sr.Ended()); n != 0 {
		t.Errorf("%d spans ended for events without a start", n)
	}
	rm := hx.collect(t)
	if n := counterValue(t, rm, "writeguard.call.inputs", map[string]string{"writeguard.disposition": "written", "db.collection.name": "orders"}); n != 1 {
		t.Errorf("written = %d, want 1", n)
	}
}

func mustRaw(t *testing.T, extJSON string) bson.Raw {
	t.Helper()
	var raw bson.Raw
	if err := bson.UnmarshalExtJSON([]byte(extJSON), false, &raw); err != nil {
		t.Fatalf("ext JSON %s: %v", extJSON, err)
	}
	return raw
}

// TestTwoInstances puts two sets of otelhook hooks, on two tracer
// providers, on one guarded collection: each records its own complete
// tree.
func TestTwoInstances(t *testing.T) {
	a, b := newHarness(t), newHarness(t)
	g := a.guard(t, mocks.NewFake("shop.orders").Script(mocks.Reply(stepdown)), writeguard.WithHooks(b.hooks))
	if _, err := g.InsertOne(bg, bson.D{{Key: "qty", Value: 1}}); err != nil {
		t.Fatal(err)
	}
	for name, hx := range map[string]*harness{"first": a, "second": b} {
		if s, e := len(hx.sr.Started()), len(hx.sr.Ended()); s != 3 || e != 3 {
			t.Errorf("%s: %d spans started, %d ended; want 3 and 3", name, s, e)
			continue
		}
		op := hx.one(t, "insertOne shop.orders")
		for _, at := range hx.ended("insertOne shop.orders attempt") {
			childOf(t, at, op)
		}
	}
}

// TestGuardedSink dead-letters into a sink that is itself a guarded
// collection with the same hooks: its call nests under the dead-letter
// span, and neither call ends the other's spans.
func TestGuardedSink(t *testing.T) {
	hx := newHarness(t)
	dlq := hx.guard(t, mocks.NewFake("shop.dlq"))
	sink := envelope.SinkFunc(func(ctx context.Context, envs []envelope.Envelope) error {
		docs := make([]any, len(envs))
		for i := range envs {
			docs[i] = bson.D{{Key: "code", Value: envs[i].Code}}
		}
		_, err := dlq.InsertMany(ctx, docs)
		return err
	})
	g := hx.guard(t, mocks.NewFake("shop.orders").Validator(requireQty), writeguard.WithDeadLetter(sink))
	if _, err := g.InsertMany(bg, []bson.D{{{Key: "qty", Value: 1}}, {}}); !writeguard.Handled(err) {
		t.Fatalf("err = %v, want handled", err)
	}
	if s, e := len(hx.sr.Started()), len(hx.sr.Ended()); s != 5 || e != 5 {
		t.Fatalf("%d spans started, %d ended; want 5 and 5: %v", s, e, hx.names())
	}
	op := hx.one(t, "insertMany shop.orders")
	dl := hx.one(t, "insertMany shop.orders dead_letter")
	inner := hx.one(t, "insertMany shop.dlq")
	childOf(t, hx.one(t, "insertMany shop.orders attempt"), op)
	childOf(t, dl, op)
	childOf(t, inner, dl)
	childOf(t, hx.one(t, "insertMany shop.dlq attempt"), inner)
	if dl.Status().Code != codes.Unset || inner.Status().Code != codes.Unset {
		t.Errorf("statuses %v, %v; want unset", dl.Status().Code, inner.Status().Code)
	}
}

func TestBulkWrite(t *testing.T) {
	hx := newHarness(t)
	g := hx.guard(t, mocks.NewFake("shop.orders"))
	models := []mongo.WriteModel{
		mongo.NewInsertOneModel().SetDocument(bson.D{{Key: "_id", Value: 1}, {Key: "qty", Value: 1}}),
		mongo.NewUpdateOneModel().SetFilter(bson.D{{Key: "_id", Value: 1}}).SetUpdate(bson.D{{Key: "$inc", Value: bson.D{{Key: "qty", Value: 1}}}}),
	}
	if _, err := g.BulkWrite(bg, models); err != nil {
		t.Fatalf("BulkWrite: %v", err)
	}
	op := hx.one(t, "bulkWrite shop.orders")
	checkAttrs(t, "operation span", op.Attributes(), map[string]string{
		"db.operation.name":               "bulkWrite",
		"writeguard.method":               "bulkWrite",
		"db.operation.batch.size":         "2",
		"writeguard.dispositions.written": "2",
		"writeguard.disposition":          absent,
	})
	// One driver call per server command (an insert, then an update):
	// one attempt span each, both children of the operation.
	attempts := hx.ended("bulkWrite shop.orders attempt")
	if len(attempts) != 2 {
		t.Fatalf("%d attempt spans, want 2 (one per command); ended: %v", len(attempts), hx.names())
	}
	for _, a := range attempts {
		childOf(t, a, op)
	}
}

// reportLike is an unhandled call error with an ErrorType method, as
// *writeguard.Report has.
type reportLike struct{ et string }

func (r reportLike) Error() string     { return "report" }
func (r reportLike) Handled() bool     { return false }
func (r reportLike) ErrorType() string { return r.et }

func TestErrorTypeFromTheCallError(t *testing.T) {
	for _, c := range []struct {
		err  error
		want string
	}{
		{reportLike{"not_attempted"}, "not_attempted"},
		{fmt.Errorf("wrapped: %w", reportLike{"11000"}), "11000"},
		{reportLike{""}, "189"},             // no answer: the event's code
		{errors.New("driver error"), "189"}, // no method: the event's code
	} {
		hx := newHarness(t)
		op := &hooks.Operation{Name: "insertOne", Collection: "orders", BatchSize: 1}
		ctx := hx.hooks.OperationStarted(bg, op)
		hx.hooks.OperationFinished(ctx, &hooks.OperationEnd{Op: op, Attempts: 1, Err: c.err, Code: 189, Class: policy.Transient})
		checkAttrs(t, "operation span", hx.one(t, "insertOne orders").Attributes(), map[string]string{"error.type": c.want})
		if n, _ := histogram(t, hx.collect(t), "writeguard.call.duration", map[string]string{"error.type": c.want}); n != 1 {
			t.Errorf("%v: duration recorded %d times with error.type %q, want 1", c.err, n, c.want)
		}
	}
}
