package otelhook_test

//lint:file-ignore SA1019 these tests pin durations with the deprecated fake clock, which must keep working until it is removed

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/writeguard/writeguard"
	"github.com/writeguard/writeguard/envelope"
	"github.com/writeguard/writeguard/hooks"
	"github.com/writeguard/writeguard/mocks"
	"github.com/writeguard/writeguard/otelhook"
	"github.com/writeguard/writeguard/policy"
)

const stepdown = `{"ok":0,"code":189,"codeName":"PrimarySteppedDown","errmsg":"primary stepped down","errorLabels":["RetryableWriteError"]}`

// spanSink is a mocks.Sink that records the span context of each Put.
type spanSink struct {
	mocks.Sink
	mu    sync.Mutex
	spans []trace.SpanContext
	fail  func(n int) error
}

func newSpanSink() *spanSink {
	s := &spanSink{}
	s.Before = func(ctx context.Context, n int, _ []envelope.Envelope) error {
		s.mu.Lock()
		s.spans = append(s.spans, trace.SpanContextFromContext(ctx))
		fail := s.fail
		s.mu.Unlock()
		if fail != nil {
			return fail(n)
		}
		return nil
	}
	return s
}

func (s *spanSink) all() []envelope.Envelope { return s.Envelopes() }

// syncBuffer is a bytes.Buffer safe for concurrent writes (log output).
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// harness records spans, metrics and log records of otelhook hooks.
type harness struct {
	sr     *tracetest.SpanRecorder
	tp     *sdktrace.TracerProvider
	reader *sdkmetric.ManualReader
	logs   *syncBuffer
	hooks  hooks.Hooks
	clock  *mocks.Clock
	sink   *spanSink
}

func newHarness(t *testing.T, opts ...otelhook.Option) *harness {
	t.Helper()
	hx := &harness{
		sr:     tracetest.NewSpanRecorder(),
		reader: sdkmetric.NewManualReader(),
		logs:   &syncBuffer{},
		clock:  mocks.NewClock(time.Unix(1_700_000_000, 0)),
		sink:   newSpanSink(),
	}
	hx.tp = sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(hx.sr))
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(hx.reader))
	t.Cleanup(func() {
		_ = hx.tp.Shutdown(context.Background())
		_ = mp.Shutdown(context.Background())
	})
	base := []otelhook.Option{
		otelhook.WithTracerProvider(hx.tp),
		otelhook.WithMeterProvider(mp),
		otelhook.WithLogger(slog.New(slog.NewTextHandler(hx.logs, nil))),
	}
	h, err := otelhook.New(append(base, opts...)...)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	hx.hooks = h
	return hx
}

// guard wraps target with the harness's hooks, sink and fake clock, and a
// backoff with a fixed jitter.
func (hx *harness) guard(t *testing.T, target writeguard.Target, opts ...writeguard.Option) *writeguard.Guarded {
	t.Helper()
	base := []writeguard.Option{
		writeguard.WithHooks(hx.hooks),
		writeguard.WithDeadLetter(hx.sink),
		writeguard.WithClock(hx.clock),
		writeguard.WithBackoff(policy.Backoff{Jitter: func() float64 { return 0.5 }}),
	}
	g, err := writeguard.New(target, append(base, opts...)...)
	if err != nil {
		t.Fatalf("writeguard.New: %v", err)
	}
	return g
}

// ended returns the ended spans whose name is name, in end order.
func (hx *harness) ended(name string) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range hx.sr.Ended() {
		if s.Name() == name {
			out = append(out, s)
		}
	}
	return out
}

// one returns the single ended span named name.
func (hx *harness) one(t *testing.T, name string) sdktrace.ReadOnlySpan {
	t.Helper()
	spans := hx.ended(name)
	if len(spans) != 1 {
		t.Fatalf("%d ended spans named %q, want 1; ended: %v", len(spans), name, hx.names())
	}
	return spans[0]
}

func (hx *harness) names() []string {
	var out []string
	for _, s := range hx.sr.Ended() {
		out = append(out, s.Name())
	}
	return out
}

func (hx *harness) collect(t *testing.T) metricdata.ResourceMetrics {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := hx.reader.Collect(context.Background(), &rm); err != nil {
		t.Fatalf("Collect: %v", err)
	}
	return rm
}

// attrMap renders attributes as key → value text.
func attrMap(kvs []attribute.KeyValue) map[string]string {
	m := make(map[string]string, len(kvs))
	for _, kv := range kvs {
		m[string(kv.Key)] = kv.Value.String()
	}
	return m
}

// checkAttrs fails for each key of want whose value differs; a want value
// of "<absent>" requires the key to be missing.
func checkAttrs(t *testing.T, what string, kvs []attribute.KeyValue, want map[string]string) {
	t.Helper()
	got := attrMap(kvs)
	keys := make([]string, 0, len(want))
	for k := range want {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		v, ok := got[k]
		switch {
		case want[k] == absent && ok:
			t.Errorf("%s: %s = %q, want no such attribute", what, k, v)
		case want[k] != absent && !ok:
			t.Errorf("%s: no attribute %s, want %q (have %v)", what, k, want[k], got)
		case want[k] != absent && v != want[k]:
			t.Errorf("%s: %s = %q, want %q", what, k, v, want[k])
		}
	}
}

const absent = "<absent>"

// findMetric returns the metric named name; it fails the test when there
// is none.
func findMetric(t *testing.T, rm metricdata.ResourceMetrics, name string) metricdata.Metrics {
	t.Helper()
	m, ok := lookupMetric(rm, name)
	if !ok {
		t.Fatalf("no metric %s", name)
	}
	return m
}

func lookupMetric(rm metricdata.ResourceMetrics, name string) (metricdata.Metrics, bool) {
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name == name {
				return m, true
			}
		}
	}
	return metricdata.Metrics{}, false
}

// matches reports whether set has every key/value of filter (value
// "<absent>": the key is missing).
func matches(set attribute.Set, filter map[string]string) bool {
	for k, want := range filter {
		v, ok := set.Value(attribute.Key(k))
		if want == absent {
			if ok {
				return false
			}
			continue
		}
		if !ok || v.String() != want {
			return false
		}
	}
	return true
}

// counterValue sums the int64 counter points of name matching filter (0
// when nothing was recorded).
func counterValue(t *testing.T, rm metricdata.ResourceMetrics, name string, filter map[string]string) int64 {
	t.Helper()
	m, ok := lookupMetric(rm, name)
	if !ok {
		return 0
	}
	sum, ok := m.Data.(metricdata.Sum[int64])
	if !ok {
		t.Fatalf("%s is not an int64 sum", name)
	}
	var n int64
	for _, dp := range sum.DataPoints {
		if matches(dp.Attributes, filter) {
			n += dp.Value
		}
	}
	return n
}

// histogram returns the int64 or float64 histogram points of name
// matching filter as (count, sum); 0, 0 when nothing was recorded.
func histogram(t *testing.T, rm metricdata.ResourceMetrics, name string, filter map[string]string) (count uint64, sum float64) {
	t.Helper()
	m, ok := lookupMetric(rm, name)
	if !ok {
		return 0, 0
	}
	switch h := m.Data.(type) {
	case metricdata.Histogram[int64]:
		for _, dp := range h.DataPoints {
			if matches(dp.Attributes, filter) {
				count += dp.Count
				sum += float64(dp.Sum)
			}
		}
	case metricdata.Histogram[float64]:
		for _, dp := range h.DataPoints {
			if matches(dp.Attributes, filter) {
				count += dp.Count
				sum += dp.Sum
			}
		}
	default:
		t.Fatalf("%s is a %T, not a histogram", name, h)
	}
	return count, sum
}

// requireQty is a validator rejecting documents without a qty field, with
// a $jsonSchema-shaped errInfo.
func requireQty(doc bson.Raw) (bson.Raw, bool) {
	if _, err := doc.LookupErr("qty"); err == nil {
		return nil, false
	}
	info, _ := bson.Marshal(bson.D{{Key: "failingDocumentId", Value: doc.Lookup("_id")}, {Key: "details", Value: bson.D{
		{Key: "operatorName", Value: "$jsonSchema"},
		{Key: "schemaRulesNotSatisfied", Value: bson.A{bson.D{
			{Key: "operatorName", Value: "required"},
			{Key: "specifiedAs", Value: bson.D{{Key: "required", Value: bson.A{"qty"}}}},
			{Key: "missingProperties", Value: bson.A{"qty"}},
		}}},
	}}})
	return info, true
}

// dump renders every recorded span and metric point as text, for the
// privacy test and for failure messages.
func (hx *harness) dump(t *testing.T) string {
	t.Helper()
	var b strings.Builder
	for _, s := range hx.sr.Started() {
		fmt.Fprintf(&b, "span %q scope=%s\n", s.Name(), s.InstrumentationScope().Name)
	}
	for _, s := range hx.sr.Ended() {
		fmt.Fprintf(&b, "span %q kind=%v status=%v %q\n", s.Name(), s.SpanKind(), s.Status().Code, s.Status().Description)
		for _, kv := range s.Attributes() {
			fmt.Fprintf(&b, "  attr %s=%s\n", kv.Key, kv.Value.String())
		}
		for _, ev := range s.Events() {
			fmt.Fprintf(&b, "  event %q\n", ev.Name)
			for _, kv := range ev.Attributes {
				fmt.Fprintf(&b, "    attr %s=%s\n", kv.Key, kv.Value.String())
			}
		}
		for _, l := range s.Links() {
			for _, kv := range l.Attributes {
				fmt.Fprintf(&b, "  link attr %s=%s\n", kv.Key, kv.Value.String())
			}
		}
	}
	rm := hx.collect(t)
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			fmt.Fprintf(&b, "metric %s %s %s\n", m.Name, m.Unit, m.Description)
			for _, s := range pointSets(t, m) {
				fmt.Fprintf(&b, "  point %s\n", s.Encoded(attribute.DefaultEncoder()))
			}
		}
	}
	return b.String()
}

// pointSets returns the attribute sets of m's points.
func pointSets(t *testing.T, m metricdata.Metrics) []attribute.Set {
	t.Helper()
	var sets []attribute.Set
	switch d := m.Data.(type) {
	case metricdata.Sum[int64]:
		for _, dp := range d.DataPoints {
			sets = append(sets, dp.Attributes)
		}
	case metricdata.Histogram[int64]:
		for _, dp := range d.DataPoints {
			sets = append(sets, dp.Attributes)
		}
	case metricdata.Histogram[float64]:
		for _, dp := range d.DataPoints {
			sets = append(sets, dp.Attributes)
		}
	default:
		t.Fatalf("metric %s: unexpected data %T", m.Name, d)
	}
	return sets
}

// pointAttr returns attribute key of the one point instrument has in m
// ("" when the point has no such attribute); it fails the test when the
// instrument has not exactly one point.
func pointAttr(t *testing.T, m metricdata.ResourceMetrics, instrument, key string) string {
	t.Helper()
	var sets []attribute.Set
	for _, sm := range m.ScopeMetrics {
		for _, mt := range sm.Metrics {
			if mt.Name == instrument {
				sets = append(sets, pointSets(t, mt)...)
			}
		}
	}
	if len(sets) != 1 {
		t.Fatalf("%s: %d points, want 1", instrument, len(sets))
	}
	v, _ := sets[0].Value(attribute.Key(key))
	return v.Emit()
}
