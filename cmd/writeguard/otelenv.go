package main

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetricgrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetrichttp"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// The OpenTelemetry settings the command honours, as the specification
// defines them (opentelemetry-specification:
// specification/configuration/sdk-environment-variables.md, "General SDK
// Configuration" and "Exporter Selection"; specification/protocol/
// exporter.md, "Configuration Options" and "Endpoint URLs for OTLP/HTTP"):
//
//   - OTEL_SDK_DISABLED: "true" (any case) turns every signal into a no-op:
//     nothing is exported, whatever the flags ask; any other value has no
//     effect.
//   - OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES: the resource of every
//     signal (service.name: OTEL_SERVICE_NAME, else the service.name of
//     OTEL_RESOURCE_ATTRIBUTES, else the command's name), read by the SDK
//     (resource.WithFromEnv).
//   - OTEL_EXPORTER_OTLP_PROTOCOL and the per-signal
//     OTEL_EXPORTER_OTLP_TRACES_PROTOCOL / _METRICS_PROTOCOL: grpc or
//     http/protobuf (the default); http/json, which the Go OTLP exporters do
//     not implement, is refused with an error naming the variable.
//   - OTEL_EXPORTER_OTLP_ENDPOINT turns both signals on; a per-signal
//     OTEL_EXPORTER_OTLP_TRACES_ENDPOINT or _METRICS_ENDPOINT turns that
//     signal on alone. The exporters read the endpoints, headers,
//     timeouts, compression and certificates themselves.
//   - OTEL_TRACES_EXPORTER and OTEL_METRICS_EXPORTER: "none" turns the
//     signal's OTLP export off, "otlp" on (to the default endpoint when none
//     is set); other exporters are refused (the command has --trace and
//     --metrics-addr for a file and Prometheus).
//
// One departure: a signal whose exporter is not named and has no endpoint
// is not exported (the specification's default exporter is otlp to
// localhost): the command is run by hand, and sends nothing unless asked.
// --otlp-endpoint asks for both signals, over the protocol above.

// otelEnv is what the environment asks of the OTLP export.
type otelEnv struct {
	disabled        bool // OTEL_SDK_DISABLED=true
	traces, metrics otlpSignal
}

// otlpSignal is the OTLP export of one signal.
type otlpSignal struct {
	on   bool
	grpc bool // else http/protobuf
}

// readOTelEnv reads the settings above; flag is true when --otlp-endpoint
// is given. Its error names the variable that is wrong.
func readOTelEnv(flag bool) (otelEnv, error) {
	env := otelEnv{disabled: strings.EqualFold(strings.TrimSpace(os.Getenv("OTEL_SDK_DISABLED")), "true")}
	var err error
	if env.traces, err = readSignal("TRACES", flag); err != nil {
		return env, err
	}
	env.metrics, err = readSignal("METRICS", flag)
	return env, err
}

func readSignal(signal string, flag bool) (otlpSignal, error) {
	var s otlpSignal
	named := false
	exporterVar := "OTEL_" + signal + "_EXPORTER"
	for _, e := range strings.Split(os.Getenv(exporterVar), ",") {
		switch e = strings.ToLower(strings.TrimSpace(e)); e {
		case "":
		case "none":
			return otlpSignal{}, nil
		case "otlp":
			named = true
		default:
			return s, fmt.Errorf("%s=%q: the command exports otlp or none (--trace writes spans to a file, --metrics-addr serves Prometheus)", exporterVar, e)
		}
	}
	s.on = named || flag || os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || os.Getenv("OTEL_EXPORTER_OTLP_"+signal+"_ENDPOINT") != ""
	protoVar := "OTEL_EXPORTER_OTLP_" + signal + "_PROTOCOL"
	proto := os.Getenv(protoVar)
	if proto == "" {
		protoVar = "OTEL_EXPORTER_OTLP_PROTOCOL"
		proto = os.Getenv(protoVar)
	}
	switch strings.TrimSpace(proto) {
	case "", "http/protobuf":
	case "grpc":
		s.grpc = true
	case "http/json":
		return s, fmt.Errorf("%s=%q: not supported by the Go OTLP exporters; use http/protobuf or grpc", protoVar, proto)
	default:
		return s, fmt.Errorf("%s=%q: want grpc or http/protobuf", protoVar, proto)
	}
	return s, nil
}

// newResource is the resource of every signal: service.name = service,
// overridden by OTEL_RESOURCE_ATTRIBUTES and then OTEL_SERVICE_NAME, and
// the SDK's telemetry.sdk.* attributes. A malformed
// OTEL_RESOURCE_ATTRIBUTES keeps what could be read; the error says what
// was wrong.
func newResource(ctx context.Context, service string) (*resource.Resource, error) {
	res, err := resource.New(ctx,
		resource.WithAttributes(attribute.String("service.name", service)),
		resource.WithFromEnv(), resource.WithTelemetrySDK())
	if err != nil {
		err = fmt.Errorf("OTEL_RESOURCE_ATTRIBUTES or OTEL_SERVICE_NAME: %w", err)
	}
	if res == nil {
		res = resource.NewSchemaless(attribute.String("service.name", service))
	}
	return res, err
}

// otlpExporters makes the OTLP exporters env asks for and returns the
// provider options that install them and their shutdowns. base is
// --otlp-endpoint ("" without it): the collector's base URL for
// OTLP/HTTP (the signal's path is appended), its address for gRPC.
func otlpExporters(ctx context.Context, env otelEnv, base string) ([]sdktrace.TracerProviderOption, []sdkmetric.Option, []func(context.Context) error, error) {
	var tpOpts []sdktrace.TracerProviderOption
	var mpOpts []sdkmetric.Option
	var undo []func(context.Context) error
	base = strings.TrimRight(base, "/")
	if env.traces.on {
		texp, err := traceExporter(ctx, env.traces.grpc, base)
		if err != nil {
			return nil, nil, nil, fmt.Errorf("otlp traces: %w", err)
		}
		undo = append(undo, texp.Shutdown)
		tpOpts = append(tpOpts, sdktrace.WithBatcher(texp))
	}
	if env.metrics.on {
		mexp, err := metricExporter(ctx, env.metrics.grpc, base)
		if err != nil {
			for _, f := range undo {
				_ = f(ctx)
			}
			return nil, nil, nil, fmt.Errorf("otlp metrics: %w", err)
		}
		undo = append(undo, mexp.Shutdown)
		mpOpts = append(mpOpts, sdkmetric.WithReader(sdkmetric.NewPeriodicReader(mexp)))
	}
	return tpOpts, mpOpts, undo, nil
}

func traceExporter(ctx context.Context, grpc bool, base string) (sdktrace.SpanExporter, error) {
	if grpc {
		var opts []otlptracegrpc.Option
		if base != "" {
			opts = append(opts, otlptracegrpc.WithEndpointURL(base))
		}
		return otlptracegrpc.New(ctx, opts...)
	}
	var opts []otlptracehttp.Option
	if base != "" {
		opts = append(opts, otlptracehttp.WithEndpointURL(base+"/v1/traces"))
	}
	return otlptracehttp.New(ctx, opts...)
}

func metricExporter(ctx context.Context, grpc bool, base string) (sdkmetric.Exporter, error) {
	if grpc {
		var opts []otlpmetricgrpc.Option
		if base != "" {
			opts = append(opts, otlpmetricgrpc.WithEndpointURL(base))
		}
		return otlpmetricgrpc.New(ctx, opts...)
	}
	var opts []otlpmetrichttp.Option
	if base != "" {
		opts = append(opts, otlpmetrichttp.WithEndpointURL(base+"/v1/metrics"))
	}
	return otlpmetrichttp.New(ctx, opts...)
}

// scrubOTelEnv makes the command's scrubber know the secrets of the
// OpenTelemetry environment: the user info of every OTEL_*_ENDPOINT, and
// the header values of every OTEL_*_HEADERS, well-formed or not (the SDK
// logs a malformed "Authorization: Bearer <token>" whole).
func scrubOTelEnv() {
	for _, kv := range os.Environ() {
		name, value, _ := strings.Cut(kv, "=")
		switch {
		case value == "" || !strings.HasPrefix(name, "OTEL_"):
		case strings.HasSuffix(name, "_ENDPOINT"):
			scrub.AddURI(value)
		case strings.HasSuffix(name, "_HEADERS"):
			scrub.AddSecrets(headerSecrets(value)...)
		}
	}
}

// headerSecrets returns what must never be printed of a headers variable
// ("key1=value1,key2=value2", values percent-encoded: protocol/exporter.md,
// "Specifying headers via environment variables"): the whole value, each
// item, each item's value (as written and decoded), and each word of 8 or
// more characters of a value, or of an item without "=" (malformed: its
// key cannot be told from its value).
func headerSecrets(value string) []string {
	out := []string{value}
	for _, item := range strings.Split(value, ",") {
		item = strings.TrimSpace(item)
		out = append(out, item)
		v := item
		if _, after, ok := strings.Cut(item, "="); ok {
			v = strings.TrimSpace(after)
			out = append(out, v)
			if d, err := url.PathUnescape(v); err == nil {
				out = append(out, strings.TrimSpace(d))
			}
		}
		for _, w := range strings.FieldsFunc(v, func(r rune) bool { return r == ' ' || r == ':' || r == '=' || r == '\t' }) {
			if len(w) >= 8 {
				out = append(out, w)
			}
		}
	}
	return out
}

// errDisabled is the note printed when OTEL_SDK_DISABLED turns off an
// export the flags asked for.
var errDisabled = errors.New("OTEL_SDK_DISABLED=true: nothing is exported (-metrics-addr, -otlp-endpoint and -trace are ignored)")
