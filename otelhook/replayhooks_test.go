package otelhook_test

import (
	"context"
	"testing"
	"testing/synctest"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/writeguard/writeguard"
	"github.com/writeguard/writeguard/mocks"
	"github.com/writeguard/writeguard/otelhook"
)

// TestReplayHooksCountApart: the hooks of a replay's writes
// (NewReplayHooks) count the replay's inputs in writeguard.replay.inputs
// and record none of the application's instruments, so a row the
// validator rejects again (failed: a replay has no dead-letter sink) is
// never one of the application's failed inputs; the replay's operation
// span says writeguard.replay = true.
func TestReplayHooksCountApart(t *testing.T) {
	synctest.Test(t, replayHooksCountApart) // the backoff waits on the bubble's clock
}

func replayHooksCountApart(t *testing.T) {
	ctx := context.Background()
	sr := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	h, err := otelhook.NewReplayHooks(otelhook.WithTracerProvider(tp), otelhook.WithMeterProvider(mp))
	if err != nil {
		t.Fatal(err)
	}
	g, err := writeguard.New(mocks.NewFake("shop.orders").Validator(requireQty).Script(mocks.Reply(stepdown)),
		writeguard.WithHooks(h))
	if err != nil {
		t.Fatal(err)
	}
	docs := []bson.D{{{Key: "_id", Value: 1}, {Key: "qty", Value: 1}}, {{Key: "_id", Value: 2}}}
	if _, err := g.InsertMany(ctx, docs, options.InsertMany().SetOrdered(false)); writeguard.Handled(err) {
		t.Fatalf("err = %v, want the re-rejected row unhandled", err)
	}
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		t.Fatal(err)
	}
	byDisp := map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != otelhook.MetricReplayInputs {
				t.Errorf("the replay's hooks recorded %s", m.Name)
				continue
			}
			for _, dp := range m.Data.(metricdata.Sum[int64]).DataPoints {
				v, _ := dp.Attributes.Value("writeguard.disposition")
				byDisp[v.AsString()] += dp.Value
			}
		}
	}
	if byDisp["written"] != 1 || byDisp["failed"] != 1 || len(byDisp) != 2 {
		t.Errorf("writeguard.replay.inputs by disposition %v, want written 1, failed 1", byDisp)
	}
	var op sdktrace.ReadOnlySpan
	for _, s := range sr.Ended() {
		if s.Name() == "insertMany shop.orders" {
			op = s
		}
	}
	if op == nil {
		t.Fatal("no operation span")
	}
	checkAttrs(t, "replay operation span", op.Attributes(), map[string]string{"writeguard.replay": "true", "writeguard.attempts": "2"})
}
