package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	colmetricpb "go.opentelemetry.io/proto/otlp/collector/metrics/v1"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	metricpb "go.opentelemetry.io/proto/otlp/metrics/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/writeguard/writeguard/cmd/writeguard/internal/demo"
)

// otlpReceiver is an OTLP/HTTP (protobuf) receiver: it decodes what the
// exporters post to /v1/traces and /v1/metrics.
type otlpReceiver struct {
	mu      sync.Mutex
	spans   []*tracepb.Span
	metrics []*metricpb.Metric // in arrival order
	// resources of the spans and of the metrics received, by the
	// requests' order.
	traceRes, metricRes []map[string]string
	// headers of the requests received (first value of each).
	headers map[string]string
}

// addTraces and addMetrics record a request's content (the caller holds
// mu).
func (r *otlpReceiver) addTraces(m *coltracepb.ExportTraceServiceRequest) {
	for _, rs := range m.ResourceSpans {
		r.traceRes = append(r.traceRes, attrs(rs.GetResource().GetAttributes()))
		for _, ss := range rs.ScopeSpans {
			r.spans = append(r.spans, ss.Spans...)
		}
	}
}

func (r *otlpReceiver) addMetrics(m *colmetricpb.ExportMetricsServiceRequest) {
	for _, rm := range m.ResourceMetrics {
		r.metricRes = append(r.metricRes, attrs(rm.GetResource().GetAttributes()))
		for _, sm := range rm.ScopeMetrics {
			r.metrics = append(r.metrics, sm.Metrics...)
		}
	}
}

func (r *otlpReceiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	body, err := io.ReadAll(req.Body)
	if err != nil || req.Header.Get("Content-Type") != "application/x-protobuf" {
		http.Error(w, "want application/x-protobuf", http.StatusBadRequest)
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.headers == nil {
		r.headers = map[string]string{}
	}
	for k := range req.Header {
		r.headers[strings.ToLower(k)] = req.Header.Get(k)
	}
	switch req.URL.Path {
	case "/v1/traces":
		var m coltracepb.ExportTraceServiceRequest
		if err := proto.Unmarshal(body, &m); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		r.addTraces(&m)
		out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		_, _ = w.Write(out)
	case "/v1/metrics":
		var m colmetricpb.ExportMetricsServiceRequest
		if err := proto.Unmarshal(body, &m); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		r.addMetrics(&m)
		out, _ := proto.Marshal(&colmetricpb.ExportMetricsServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		_, _ = w.Write(out)
	default:
		http.NotFound(w, req)
	}
}

func attrs(kvs []*commonpb.KeyValue) map[string]string {
	m := map[string]string{}
	for _, kv := range kvs {
		v := kv.Value
		_, isBool := v.GetValue().(*commonpb.AnyValue_BoolValue)
		switch {
		case v.GetStringValue() != "":
			m[kv.Key] = v.GetStringValue()
		case isBool:
			m[kv.Key] = fmt.Sprint(v.GetBoolValue())
		default:
			m[kv.Key] = fmt.Sprint(v.GetIntValue())
		}
	}
	return m
}

// TestDemoOTLP: with OTEL_EXPORTER_OTLP_ENDPOINT set, the demo exports
// its spans and metrics over OTLP/HTTP; the receiver decodes them and
// finds one "insertMany writeguard_demo.orders" client span per
// InsertMany the demo made,
// whose per-disposition attributes add up to the report, and a
// writeguard.call.inputs counter (cumulative, last export) equal to the
// report per disposition, and the dead-letter gauge equal to its DLQ.
func TestDemoOTLP(t *testing.T) {
	rcv := &otlpReceiver{}
	srv := httptest.NewServer(rcv)
	defer srv.Close()
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", srv.URL)
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")

	code, out, errOut := runCmd(t, context.Background(), "demo", "--limit", "1500", "--batch", "250", "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var res demo.Result
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatal(err)
	}
	want := reportCounts(&res)

	rcv.mu.Lock()
	defer rcv.mu.Unlock()
	ops := 0
	spanCounts := map[string]int{}
	for _, s := range rcv.spans {
		if s.Name != "insertMany writeguard_demo.orders" {
			continue
		}
		ops++
		a := attrs(s.Attributes)
		if s.Kind != tracepb.Span_SPAN_KIND_CLIENT || a["db.operation.name"] != "insert" || a["writeguard.method"] != "insertMany" ||
			a["db.collection.name"] != "orders" || a["db.system.name"] != "mongodb" {
			t.Errorf("operation span kind %v attributes %v", s.Kind, a)
		}
		for d := range want {
			if n := a["writeguard.dispositions."+d]; n != "" {
				var v int
				fmt.Sscan(n, &v)
				spanCounts[d] += v
			}
		}
	}
	if ops != res.Batches {
		t.Errorf("%d operation spans received, the demo made %d calls", ops, res.Batches)
	}
	if fmt.Sprint(spanCounts) != fmt.Sprint(want) {
		t.Errorf("span dispositions %v, report %v", spanCounts, want)
	}

	// The last export of writeguard.call.inputs (cumulative).
	var last *metricpb.Metric
	var pending int64 = -1
	for _, m := range rcv.metrics {
		switch m.Name {
		case "writeguard.call.inputs":
			last = m
		case "writeguard.dlq.envelopes":
			for _, dp := range m.GetGauge().GetDataPoints() {
				if attrs(dp.Attributes)["writeguard.envelope.status"] == "pending" {
					pending = dp.GetAsInt()
				}
			}
		}
	}
	if last == nil {
		t.Fatalf("no writeguard.call.inputs received; metrics: %d", len(rcv.metrics))
	}
	got := map[string]int{}
	for _, dp := range last.GetSum().GetDataPoints() {
		got[attrs(dp.Attributes)["writeguard.disposition"]] += int(dp.GetAsInt())
	}
	if fmt.Sprint(got) != fmt.Sprint(want) || last.Unit != "{input}" {
		t.Errorf("OTLP writeguard.call.inputs %v (unit %q), report %v", got, last.Unit, want)
	}
	if pending != res.DLQ.Pending {
		t.Errorf("OTLP writeguard.dlq.envelopes{pending} = %d, report %d", pending, res.DLQ.Pending)
	}
	t.Logf("otlp: %d operation spans = %d calls; inputs %v = report %v; pending %d", ops, res.Batches, got, want, pending)
}

// TestDemoTrace: --trace writes OTLP JSON lines — each line an
// ExportTraceServiceRequest in the OTLP/JSON encoding (hex ids, integer
// enums) — holding the operation, attempt and dead-letter spans.
func TestDemoTrace(t *testing.T) {
	path := filepath.Join(t.TempDir(), "spans.jsonl")
	code, _, errOut := runCmd(t, context.Background(), "demo", "--limit", "600", "--batch", "300", "--trace", path)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	names := map[string]int{}
	lines := 0
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 16<<20)
	for sc.Scan() {
		lines++
		var req struct {
			ResourceSpans []struct {
				ScopeSpans []struct {
					Spans []struct {
						TraceID      string `json:"traceId"`
						SpanID       string `json:"spanId"`
						ParentSpanID string `json:"parentSpanId"`
						Name         string `json:"name"`
						Kind         int    `json:"kind"`
					} `json:"spans"`
				} `json:"scopeSpans"`
			} `json:"resourceSpans"`
		}
		if err := json.Unmarshal(sc.Bytes(), &req); err != nil {
			t.Fatalf("line %d is not JSON: %v", lines, err)
		}
		for _, rs := range req.ResourceSpans {
			for _, ss := range rs.ScopeSpans {
				for _, s := range ss.Spans {
					if b, err := hex.DecodeString(s.TraceID); err != nil || len(b) != 16 {
						t.Errorf("traceId %q is not 32 hex digits", s.TraceID)
					}
					if b, err := hex.DecodeString(s.SpanID); err != nil || len(b) != 8 {
						t.Errorf("spanId %q is not 16 hex digits", s.SpanID)
					}
					if s.Name == "insertMany writeguard_demo.orders" && s.Kind != int(tracepb.Span_SPAN_KIND_CLIENT) {
						t.Errorf("operation span kind %d, want %d (client)", s.Kind, tracepb.Span_SPAN_KIND_CLIENT)
					}
					names[s.Name]++
				}
			}
		}
	}
	for _, want := range []string{"insertMany writeguard_demo.orders", "insertMany writeguard_demo.orders attempt", "insertMany writeguard_demo.orders dead_letter"} {
		if names[want] == 0 {
			t.Errorf("trace lacks %q; has %v", want, names)
		}
	}
	if data, _ := os.ReadFile(path); bytes.Contains(data, []byte("\n  ")) {
		t.Error("the trace is pretty-printed; want one request per line")
	}
}

// TestDLQReplayOTLP: "dlq replay" with OTLP export counts its outcomes in
// writeguard.replay.envelopes (equal to the run's JSON) and its writes in
// writeguard.replay.inputs, never in the application's
// writeguard.call.inputs; traces the replayed writes ("bulkWrite
// writeguard_demo.orders" spans with writeguard.replay = true); and ends
// with the backlog gauges: no pending envelope left, every failing
// keyword at 0.
func TestDLQReplayOTLP(t *testing.T) {
	dir := t.TempDir()
	code, out, errOut := runCmd(t, context.Background(), "demo", "--limit", "800", "--json", "--data-dir", dir)
	if code != 0 {
		t.Fatalf("demo exit %d: %s", code, errOut)
	}
	var res demo.Result
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatal(err)
	}
	rcv := &otlpReceiver{}
	srv := httptest.NewServer(rcv)
	defer srv.Close()
	rep := dlqJSON(t, 0, "replay", "--data-dir", dir, "--no-validator", "--otlp-endpoint", srv.URL)
	ns := rep["namespaces"].([]any)[0].(map[string]any)
	replayed := num(ns["Replayed"])
	if replayed == 0 || replayed != int(res.DLQ.Pending) {
		t.Fatalf("replayed %d, the demo left %d pending", replayed, res.DLQ.Pending)
	}

	rcv.mu.Lock()
	defer rcv.mu.Unlock()
	got := map[string]int64{}
	pending := int64(-1)
	var keywords map[string]int64
	replayInputs := map[string]int64{}
	for _, m := range rcv.metrics {
		switch m.Name {
		case "writeguard.call.inputs":
			t.Errorf("the replay's writes were counted as the application's inputs: %v", m)
		case "writeguard.replay.inputs":
			replayInputs = map[string]int64{}
			for _, dp := range m.GetSum().GetDataPoints() {
				replayInputs[attrs(dp.Attributes)["writeguard.disposition"]] += dp.GetAsInt()
			}
		case "writeguard.replay.envelopes":
			got = map[string]int64{} // cumulative: the last export counts
			for _, dp := range m.GetSum().GetDataPoints() {
				got[attrs(dp.Attributes)["writeguard.replay.outcome"]] += dp.GetAsInt()
			}
		case "writeguard.dlq.envelopes":
			for _, dp := range m.GetGauge().GetDataPoints() {
				if attrs(dp.Attributes)["writeguard.envelope.status"] == "pending" {
					pending = dp.GetAsInt()
				}
			}
		case "writeguard.dlq.failing_keywords":
			keywords = map[string]int64{}
			for _, dp := range m.GetGauge().GetDataPoints() {
				keywords[attrs(dp.Attributes)["writeguard.failing_keyword"]] = dp.GetAsInt()
			}
		}
	}
	// The failing keywords of the pending envelopes read 0 for every
	// keyword once the replay drained them (a keyword gone since the last
	// read reports 0 once).
	if len(keywords) == 0 {
		t.Error("no writeguard.dlq.failing_keywords points")
	}
	for k, n := range keywords {
		if n != 0 {
			t.Errorf("writeguard.dlq.failing_keywords{%s} = %d after the replay, want 0", k, n)
		}
	}
	if fmt.Sprint(replayInputs) != fmt.Sprint(map[string]int64{"written": int64(replayed)}) {
		t.Errorf("writeguard.replay.inputs %v, want %d written", replayInputs, replayed)
	}
	want := map[string]int64{"replayed": int64(replayed), "still_invalid": 0, "conflict": 0, "failed": 0, "skipped": 0, "refused": 0, "held": 0}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("OTLP writeguard.replay.envelopes %v, want %v", got, want)
	}
	if pending != 0 {
		t.Errorf("OTLP writeguard.dlq.envelopes{pending} = %d after the replay, want 0", pending)
	}
	spans := 0
	for _, s := range rcv.spans {
		if s.Name == "bulkWrite writeguard_demo.orders" && attrs(s.Attributes)["writeguard.replay"] == "true" {
			spans++
		}
	}
	if spans == 0 {
		t.Error("no span of the replayed writes")
	}
}
