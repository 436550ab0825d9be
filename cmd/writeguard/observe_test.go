package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
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
// collection a demo left, with two rows forged by a writer of the
// collection (an unknown status; a pending row whose keyword is an e-mail
// address): every envelope status has a point (0 for those absent), the
// forged values count under "other" and never become label values, the
// failing keywords of the pending envelopes cover them, the
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

	dlq := c.Client.Database(demo.DefaultDatabase).Collection(demo.DefaultDLQ)
	forge(t, dlq)
	obs, err := otelhook.ObserveDLQ(ctx, dlq, otelhook.WithMeterProvider(mp), otelhook.WithPollInterval(time.Hour))
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
	// The forged statuses count under "other", and nowhere else.
	if statuses[envelope.StatusPending] != res.DLQ.Pending+1 || statuses[envelope.StatusReplayed] != 0 ||
		statuses[otelhook.StatusOther] != 1 || len(statuses) != len(envelope.Statuses)+1 {
		t.Errorf("statuses %v, want %d pending and 1 other", statuses, res.DLQ.Pending+1)
	}
	var byKeyword int64
	kw := gauges(rm, otelhook.MetricDLQFailingKeywords, "writeguard.failing_keyword")
	for k, n := range kw {
		byKeyword += n
		if strings.Contains(k, "@") {
			t.Errorf("a value stored in the collection became a label value: %q", k)
		}
	}
	if kw[otelhook.StatusOther] != 1 {
		t.Errorf("failing keywords %v, want the forged one under other", kw)
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

// forge stores two rows in dlq as a writer of the collection could: copies
// of an envelope, one with the status "hacked", one pending with the
// failing keyword "carol@example.com".
func forge(t *testing.T, dlq *mongo.Collection) {
	t.Helper()
	ctx := context.Background()
	var env bson.M
	if err := dlq.FindOne(ctx, bson.D{}).Decode(&env); err != nil {
		t.Fatal(err)
	}
	for i, set := range []bson.M{
		{"status": "hacked"},
		{"status": envelope.StatusPending, "failing_keywords": bson.A{"carol@example.com"}},
	} {
		doc := bson.M{}
		for k, v := range env {
			doc[k] = v
		}
		doc["_id"] = bson.NewObjectID()
		doc["fingerprint"] = fmt.Sprintf("forged-%d", i)
		for k, v := range set {
			doc[k] = v
		}
		if _, err := dlq.InsertOne(ctx, doc); err != nil {
			t.Fatal(err)
		}
	}
}
