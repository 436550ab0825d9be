package main

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/writeguard/writeguard/cmd/writeguard/internal/conn"
	"github.com/writeguard/writeguard/cmd/writeguard/internal/demo"
	"github.com/writeguard/writeguard/envelope"
	"github.com/writeguard/writeguard/otelhook"
)

// gauges returns the int64 gauge points of name, by the value of key.
func gauges(rm metricdata.ResourceMetrics, name, key string) map[string]int64 {
	out := map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if g, ok := m.Data.(metricdata.Gauge[int64]); ok && m.Name == name {
				for _, dp := range g.DataPoints {
					v, _ := dp.Attributes.Value(attrKey(key))
					out[v.AsString()] = dp.Value
				}
			}
		}
	}
	return out
}

// age returns the oldest-pending-age gauge's value, -1 when absent.
func age(rm metricdata.ResourceMetrics) float64 {
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if g, ok := m.Data.(metricdata.Gauge[float64]); ok && m.Name == otelhook.MetricDLQOldestPendingAge && len(g.DataPoints) == 1 {
				return g.DataPoints[0].Value
			}
		}
	}
	return -1
}

// TestObserveDLQ drives otelhook.ObserveDLQ against the dead-letter
// collection a demo left: every envelope status has a point (0 for those
// absent), the pending envelopes by keyword cover the pending ones, the
// oldest pending age grows between observations without a new read (it
// is computed when observed), and Stop removes the gauges.
func TestObserveDLQ(t *testing.T) {
	dir := t.TempDir()
	code, out, errOut := runCmd(t, context.Background(), "demo", "--limit", "800", "--json", "--data-dir", dir)
	if code != 0 {
		t.Fatalf("demo exit %d: %s", code, errOut)
	}
	var res demo.Result
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	c, err := conn.Open(ctx, conn.Options{DataDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer func() { _ = mp.Shutdown(ctx) }()

	obs, err := otelhook.ObserveDLQ(ctx, c.Client.Database(demo.DefaultDatabase).Collection(demo.DefaultDLQ),
		otelhook.WithMeterProvider(mp), otelhook.WithPollInterval(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		t.Fatal(err)
	}
	statuses := gauges(rm, otelhook.MetricDLQEnvelopes, "writeguard.envelope.status")
	for _, s := range envelope.Statuses {
		if _, ok := statuses[s]; !ok {
			t.Errorf("no point for status %q: %v", s, statuses)
		}
	}
	if statuses[envelope.StatusPending] != res.DLQ.Pending || statuses[envelope.StatusReplayed] != 0 {
		t.Errorf("statuses %v, want %d pending", statuses, res.DLQ.Pending)
	}
	var byKeyword int64
	for _, n := range gauges(rm, otelhook.MetricDLQPendingKeyword, "writeguard.failing_keyword") {
		byKeyword += n
	}
	if byKeyword < res.DLQ.Pending {
		t.Errorf("pending by keyword sums to %d, fewer than the %d pending envelopes", byKeyword, res.DLQ.Pending)
	}
	a1 := age(rm)
	time.Sleep(50 * time.Millisecond)
	if err := reader.Collect(ctx, &rm); err != nil {
		t.Fatal(err)
	}
	if a2 := age(rm); a1 <= 0 || a2 < a1+0.04 {
		t.Errorf("oldest pending age %v then %v 50ms later, want it positive and growing", a1, a2)
	}
	if err := obs.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := reader.Collect(ctx, &rm); err != nil {
		t.Fatal(err)
	}
	if got := gauges(rm, otelhook.MetricDLQEnvelopes, "writeguard.envelope.status"); len(got) != 0 {
		t.Errorf("after Stop: %v", got)
	}
}

func attrKey(k string) attribute.Key { return attribute.Key(k) }
