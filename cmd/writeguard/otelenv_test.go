package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	colmetricpb "go.opentelemetry.io/proto/otlp/collector/metrics/v1"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
)

// grpcReceiver is an OTLP/gRPC collector (the trace and metrics services
// of go.opentelemetry.io/proto/otlp) served in-process; it records what it
// decodes in an otlpReceiver.
type grpcReceiver struct {
	coltracepb.UnimplementedTraceServiceServer
	colmetricpb.UnimplementedMetricsServiceServer
	rcv *otlpReceiver
}

func (g *grpcReceiver) Export(ctx context.Context, req *coltracepb.ExportTraceServiceRequest) (*coltracepb.ExportTraceServiceResponse, error) {
	g.rcv.mu.Lock()
	defer g.rcv.mu.Unlock()
	g.headers(ctx)
	g.rcv.addTraces(req)
	return &coltracepb.ExportTraceServiceResponse{}, nil
}

func (g *grpcReceiver) headers(ctx context.Context) {
	md, _ := metadata.FromIncomingContext(ctx)
	if g.rcv.headers == nil {
		g.rcv.headers = map[string]string{}
	}
	for k, v := range md {
		g.rcv.headers[k] = v[0]
	}
}

// metricsService adapts grpcReceiver to the metrics service, whose Export
// has the same name as the trace service's.
type metricsService struct{ *grpcReceiver }

func (m metricsService) Export(ctx context.Context, req *colmetricpb.ExportMetricsServiceRequest) (*colmetricpb.ExportMetricsServiceResponse, error) {
	m.rcv.mu.Lock()
	defer m.rcv.mu.Unlock()
	m.headers(ctx)
	m.rcv.addMetrics(req)
	return &colmetricpb.ExportMetricsServiceResponse{}, nil
}

// startGRPCReceiver serves an OTLP/gRPC collector on a loopback port and
// returns it with its address as an http:// URL (insecure gRPC).
func startGRPCReceiver(t *testing.T) (*otlpReceiver, string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	rcv := &otlpReceiver{}
	srv := grpc.NewServer()
	g := &grpcReceiver{rcv: rcv}
	coltracepb.RegisterTraceServiceServer(srv, g)
	colmetricpb.RegisterMetricsServiceServer(srv, metricsService{g})
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(srv.Stop)
	return rcv, "http://" + ln.Addr().String()
}

// received summarises what a receiver decoded: the operation spans of the
// demo, the writeguard.call.inputs points, and the resources.
type received struct {
	opSpans, inputs     int
	traceRes, metricRes map[string]string // the first of each
}

func (r *otlpReceiver) summary() received {
	r.mu.Lock()
	defer r.mu.Unlock()
	var s received
	for _, sp := range r.spans {
		if sp.Name == "insertMany writeguard_demo.orders" {
			s.opSpans++
		}
	}
	for _, m := range r.metrics {
		if m.Name == "writeguard.call.inputs" {
			s.inputs += len(m.GetSum().GetDataPoints())
		}
	}
	if len(r.traceRes) > 0 {
		s.traceRes = r.traceRes[0]
	}
	if len(r.metricRes) > 0 {
		s.metricRes = r.metricRes[0]
	}
	return s
}

// TestTelemetryEnv: the OpenTelemetry environment variables behave as the
// specification's environment-variable page says, with a receiver of each
// OTLP protocol (OTLP/HTTP protobuf, and a real gRPC collector service):
// the protocol (general and per signal), the endpoints (general and per
// signal: one signal's endpoint exports that signal alone), the exporter
// selection (none), OTEL_SERVICE_NAME over the service.name of
// OTEL_RESOURCE_ATTRIBUTES, the other resource attributes, and
// OTEL_SDK_DISABLED=true, which exports nothing. A protocol the Go
// exporters do not implement (http/json) is a usage error naming the
// variable.
func TestTelemetryEnv(t *testing.T) {
	httpRcv := func() (*otlpReceiver, string) {
		rcv := &otlpReceiver{}
		srv := httptest.NewServer(rcv)
		t.Cleanup(srv.Close)
		return rcv, srv.URL
	}
	type want struct {
		httpTraces, httpMetrics, grpcTraces, grpcMetrics bool
	}
	cases := []struct {
		name    string
		env     func(h, g string) map[string]string
		want    want
		service string // service.name of the resources
		code    int
		stderr  string
	}{
		{"http/protobuf, OTEL_SERVICE_NAME over OTEL_RESOURCE_ATTRIBUTES", func(h, g string) map[string]string {
			return map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": h, "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
				"OTEL_SERVICE_NAME": "orders-api", "OTEL_RESOURCE_ATTRIBUTES": "service.name=ignored,deployment.environment.name=staging"}
		}, want{httpTraces: true, httpMetrics: true}, "orders-api", 0, ""},
		{"grpc", func(h, g string) map[string]string {
			return map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": g, "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
				"OTEL_SERVICE_NAME": "orders-api", "OTEL_RESOURCE_ATTRIBUTES": "deployment.environment.name=staging"}
		}, want{grpcTraces: true, grpcMetrics: true}, "orders-api", 0, ""},
		{"service.name from OTEL_RESOURCE_ATTRIBUTES", func(h, g string) map[string]string {
			return map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": g, "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
				"OTEL_RESOURCE_ATTRIBUTES": "service.name=billing,deployment.environment.name=staging"}
		}, want{grpcTraces: true, grpcMetrics: true}, "billing", 0, ""},
		{"the traces endpoint alone exports traces alone", func(h, g string) map[string]string {
			return map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": h + "/v1/traces", "OTEL_RESOURCE_ATTRIBUTES": "deployment.environment.name=staging"}
		}, want{httpTraces: true}, "writeguard-demo", 0, ""},
		{"per-signal protocols: traces over gRPC, metrics over HTTP", func(h, g string) map[string]string {
			return map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": g, "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "grpc",
				"OTEL_EXPORTER_OTLP_METRICS_ENDPOINT": h + "/v1/metrics", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
				"OTEL_RESOURCE_ATTRIBUTES": "deployment.environment.name=staging"}
		}, want{grpcTraces: true, httpMetrics: true}, "writeguard-demo", 0, ""},
		{"OTEL_METRICS_EXPORTER=none", func(h, g string) map[string]string {
			return map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": h, "OTEL_METRICS_EXPORTER": "none",
				"OTEL_RESOURCE_ATTRIBUTES": "deployment.environment.name=staging"}
		}, want{httpTraces: true}, "writeguard-demo", 0, ""},
		{"OTEL_SDK_DISABLED=true exports nothing", func(h, g string) map[string]string {
			return map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": h, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": g,
				"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "grpc", "OTEL_SDK_DISABLED": "TRUE"}
		}, want{}, "", 0, ""},
		{"http/json is refused", func(h, g string) map[string]string {
			return map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": h, "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL": "http/json"}
		}, want{}, "", exitUsage, "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			hr, hURL := httpRcv()
			gr, gURL := startGRPCReceiver(t)
			for k, v := range c.env(hURL, gURL) {
				t.Setenv(k, v)
			}
			code, _, errOut := runCmd(t, context.Background(), "demo", "--limit", "400", "--batch", "200", "--json")
			if code != c.code || !strings.Contains(errOut, c.stderr) {
				t.Fatalf("exit %d, stderr %q; want %d and %q", code, errOut, c.code, c.stderr)
			}
			h, g := hr.summary(), gr.summary()
			got := want{h.opSpans > 0, h.inputs > 0, g.opSpans > 0, g.inputs > 0}
			if got != c.want {
				t.Errorf("received %+v (http %+v, grpc %+v), want %+v", got, h, g, c.want)
			}
			for _, res := range []map[string]string{h.traceRes, h.metricRes, g.traceRes, g.metricRes} {
				if res == nil {
					continue
				}
				if res["service.name"] != c.service || res["deployment.environment.name"] != "staging" || res["telemetry.sdk.language"] != "go" {
					t.Errorf("resource %v: want service.name %q, deployment.environment.name staging, telemetry.sdk.*", res, c.service)
				}
			}
			t.Logf("otlp: %s: http traces %v metrics %v, grpc traces %v metrics %v, service.name %q", c.name,
				got.httpTraces, got.httpMetrics, got.grpcTraces, got.grpcMetrics, c.service)
		})
	}
}

// TestSecretHeaders: the values of OTEL_*_HEADERS never reach the
// command's output, well-formed (percent-encoded) or not: a malformed
// "Authorization: Bearer <token>", which the SDK logs whole when it
// rejects it, and a well-formed key whose value a collector echoes in its
// error reply, which the SDK quotes. The collector saw the well-formed
// header (the test has teeth) and the command printed the SDK's errors.
func TestSecretHeaders(t *testing.T) {
	const (
		token  = "TOKEN-abc123-def456"
		apiKey = "KEY/secret99"
	)
	echo := &otlpReceiver{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		echo.mu.Lock()
		echo.headers = map[string]string{"x-api-key": r.Header.Get("X-Api-Key")}
		echo.mu.Unlock()
		http.Error(w, fmt.Sprintf("unauthorized: x-api-key %q", r.Header.Get("X-Api-Key")), http.StatusUnauthorized)
	}))
	defer srv.Close()
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", srv.URL)
	t.Setenv("OTEL_EXPORTER_OTLP_HEADERS", "Authorization: Bearer "+token)
	t.Setenv("OTEL_EXPORTER_OTLP_METRICS_HEADERS", "x-api-key=KEY%2Fsecret99")
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_HEADERS", "x-api-key=KEY%2Fsecret99")
	code, out, errOut := runCmd(t, context.Background(), "demo", "--limit", "200", "--batch", "200")
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, s := range []string{token, apiKey, "KEY%2Fsecret99"} {
		if strings.Contains(out+errOut, s) {
			t.Errorf("the output holds the header secret %q:\nstdout: %s\nstderr: %s", s, out, errOut)
		}
	}
	echo.mu.Lock()
	seen := echo.headers["x-api-key"]
	echo.mu.Unlock()
	if seen != apiKey || !strings.Contains(errOut, "writeguard: telemetry:") || !strings.Contains(errOut, "REDACTED") {
		t.Errorf("the collector saw x-api-key %q; stderr %q: want the key sent, and the SDK's errors printed scrubbed", seen, errOut)
	}
}

// TestHeaderSecrets: what headerSecrets takes out of a headers variable.
func TestHeaderSecrets(t *testing.T) {
	got := headerSecrets("api-key=abc%20def, Authorization: Bearer tok123456789,short=xy")
	for _, want := range []string{"abc%20def", "abc def", "Authorization: Bearer tok123456789", "tok123456789"} {
		if !strings.Contains(strings.Join(got, "\n"), want) {
			t.Errorf("headerSecrets misses %q: %q", want, got)
		}
	}
	for _, not := range []string{"api-key", "Bearer"} {
		for _, s := range got {
			if s == not {
				t.Errorf("headerSecrets masks the innocent %q", not)
			}
		}
	}
}
