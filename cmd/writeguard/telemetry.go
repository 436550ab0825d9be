package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/go-logr/stdr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/otlptranslator"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetrichttp"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"
)

// telemetryFlags are the export flags shared by demo and the dlq
// commands.
type telemetryFlags struct {
	metricsAddr string        // --metrics-addr: serve Prometheus text format here
	otlp        string        // --otlp-endpoint: OTLP/HTTP base URL
	trace       string        // --trace: OTLP JSON lines file (demo)
	linger      time.Duration // --linger: keep serving after the work
}

// otlpEnv are the standard variables that turn the OTLP exporters on
// without --otlp-endpoint (OpenTelemetry SDK environment variables,
// "OTLP Exporter").
var otlpEnv = []string{"OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT"}

func addTelemetryFlags(fs *flag.FlagSet, tf *telemetryFlags, withTrace bool) {
	fs.StringVar(&tf.metricsAddr, "metrics-addr", "", "serve the metrics in Prometheus text format on `HOST:PORT` (e.g. 127.0.0.1:9464), path /metrics, through the OpenTelemetry Prometheus exporter")
	fs.StringVar(&tf.otlp, "otlp-endpoint", "", "export traces and metrics over OTLP/HTTP (protobuf) to `URL` (e.g. http://127.0.0.1:4318; /v1/traces and /v1/metrics are appended); without it the standard OTEL_EXPORTER_OTLP_* variables turn the export on and configure it")
	fs.DurationVar(&tf.linger, "linger", 0, "after the work, keep serving --metrics-addr for `DURATION` (or until interrupted), so that Prometheus can scrape the final figures")
	if withTrace {
		fs.StringVar(&tf.trace, "trace", "", "write the OpenTelemetry spans of every guarded call to `FILE` as OTLP JSON lines (one ExportTraceServiceRequest per line, the format of the OpenTelemetry Collector's file exporter and receiver)")
	}
}

// check returns a usage message for a bad flag value, "" when they are
// fine.
func (tf *telemetryFlags) check() string {
	if tf.metricsAddr != "" {
		if _, _, err := net.SplitHostPort(tf.metricsAddr); err != nil {
			return fmt.Sprintf("-metrics-addr %q: want HOST:PORT (%v)", tf.metricsAddr, err)
		}
	}
	if tf.otlp != "" {
		u, err := url.Parse(tf.otlp)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			// scrubbed by usageError: the endpoint's user info is known
			// to the scrubber (parseFlags).
			return fmt.Sprintf("-otlp-endpoint %q: want an http:// or https:// URL with a host", tf.otlp)
		}
	}
	if tf.linger < 0 {
		return fmt.Sprintf("-linger %v: want ≥ 0", tf.linger)
	}
	return ""
}

// otlpOn reports whether OTLP export is asked for, by flag or environment.
func (tf *telemetryFlags) otlpOn() bool {
	if tf.otlp != "" {
		return true
	}
	for _, v := range otlpEnv {
		if os.Getenv(v) != "" {
			return true
		}
	}
	return false
}

// telemetry holds the providers a command records into; both are no-op
// providers when nothing is exported.
type telemetry struct {
	TracerProvider trace.TracerProvider
	MeterProvider  metric.MeterProvider
	// MetricsURL is the Prometheus endpoint's URL, "" when not served.
	MetricsURL string

	tf       *telemetryFlags
	stderr   io.Writer
	closers  []func(context.Context) error
	flushers []func(context.Context) error
}

// Enabled reports whether anything is exported.
func (t *telemetry) Enabled() bool { return len(t.closers) > 0 }

// startTelemetry sets up the exporters the flags and the OTLP environment
// ask for. The providers are not installed globally, so the embedded
// server's own telemetry stays out.
func startTelemetry(ctx context.Context, tf *telemetryFlags, service string, stderr io.Writer) (*telemetry, error) {
	quietOTel(stderr)
	t := &telemetry{TracerProvider: tracenoop.NewTracerProvider(), MeterProvider: noop.NewMeterProvider(), tf: tf, stderr: stderr}
	res := resource.NewSchemaless(attribute.String("service.name", service))
	var tpOpts []sdktrace.TracerProviderOption
	var mpOpts []sdkmetric.Option
	// undo shuts down the exporters made so far when a later one fails.
	var undo []func(context.Context) error
	cleanup := func() {
		for _, f := range undo {
			_ = f(context.WithoutCancel(ctx))
		}
	}

	if tf.otlpOn() {
		texp, mexp, err := otlpExporters(ctx, tf)
		if err != nil {
			return nil, err
		}
		undo = append(undo, texp.Shutdown, mexp.Shutdown)
		tpOpts = append(tpOpts, sdktrace.WithBatcher(texp))
		mpOpts = append(mpOpts, sdkmetric.WithReader(sdkmetric.NewPeriodicReader(mexp)))
	}
	if tf.trace != "" {
		fe, err := newOTLPFileExporter(ctx, tf.trace)
		if err != nil {
			cleanup()
			return nil, fmt.Errorf("trace: %w", err)
		}
		undo = append(undo, fe.Shutdown)
		tpOpts = append(tpOpts, sdktrace.WithSyncer(fe))
	}
	if tf.metricsAddr != "" {
		pexp, err := t.servePrometheus(tf, stderr)
		if err != nil {
			cleanup()
			return nil, err
		}
		mpOpts = append(mpOpts, sdkmetric.WithReader(pexp))
	}
	if len(tpOpts) > 0 {
		tp := sdktrace.NewTracerProvider(append(tpOpts, sdktrace.WithResource(res))...)
		t.TracerProvider = tp
		t.flushers = append(t.flushers, tp.ForceFlush)
		t.closers = append([]func(context.Context) error{tp.Shutdown}, t.closers...)
	}
	if len(mpOpts) > 0 {
		mp := sdkmetric.NewMeterProvider(append(mpOpts, sdkmetric.WithResource(res))...)
		t.MeterProvider = mp
		t.flushers = append(t.flushers, mp.ForceFlush)
		// The meter provider shuts down before the HTTP server: its
		// readers export the last figures.
		t.closers = append([]func(context.Context) error{mp.Shutdown}, t.closers...)
	}
	return t, nil
}

// otlpExporters makes the OTLP/HTTP exporters of traces and metrics: to
// --otlp-endpoint's /v1/traces and /v1/metrics, else where the
// OTEL_EXPORTER_OTLP_* variables say.
func otlpExporters(ctx context.Context, tf *telemetryFlags) (*otlptrace.Exporter, *otlpmetrichttp.Exporter, error) {
	var topts []otlptracehttp.Option
	var mopts []otlpmetrichttp.Option
	if tf.otlp != "" {
		base := strings.TrimRight(tf.otlp, "/")
		topts = append(topts, otlptracehttp.WithEndpointURL(base+"/v1/traces"))
		mopts = append(mopts, otlpmetrichttp.WithEndpointURL(base+"/v1/metrics"))
	}
	texp, err := otlptracehttp.New(ctx, topts...)
	if err != nil {
		return nil, nil, fmt.Errorf("otlp traces: %w", err)
	}
	mexp, err := otlpmetrichttp.New(ctx, mopts...)
	if err != nil {
		_ = texp.Shutdown(ctx)
		return nil, nil, fmt.Errorf("otlp metrics: %w", err)
	}
	return texp, mexp, nil
}

// servePrometheus serves the metrics in Prometheus text format on
// --metrics-addr, path /metrics, until Close, and returns the reader that
// feeds them.
func (t *telemetry) servePrometheus(tf *telemetryFlags, stderr io.Writer) (*otelprom.Exporter, error) {
	reg := prometheus.NewRegistry()
	pexp, err := otelprom.New(otelprom.WithRegisterer(reg),
		otelprom.WithTranslationStrategy(otlptranslator.UnderscoreEscapingWithSuffixes))
	if err != nil {
		return nil, fmt.Errorf("prometheus exporter: %w", err)
	}
	ln, err := net.Listen("tcp", tf.metricsAddr)
	if err != nil {
		return nil, fmt.Errorf("-metrics-addr: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.MetricsURL = "http://" + ln.Addr().String() + "/metrics"
	fmt.Fprintf(stderr, "metrics: %s\n", t.MetricsURL)
	t.closers = append(t.closers, func(ctx context.Context) error {
		if err := srv.Shutdown(ctx); err != nil && !errors.Is(err, http.ErrServerClosed) {
			return err
		}
		return nil
	})
	return pexp, nil
}

// Flush exports what the providers hold now (OTLP), without closing.
func (t *telemetry) Flush(ctx context.Context) error {
	var err error
	for _, f := range t.flushers {
		err = errors.Join(err, f(ctx))
	}
	return err
}

// Linger keeps the process (and its Prometheus endpoint) up for --linger,
// or until ctx is done. It does nothing without --metrics-addr.
func (t *telemetry) Linger(ctx context.Context) {
	if t.MetricsURL == "" || t.tf.linger <= 0 {
		return
	}
	fmt.Fprintf(t.stderr, "metrics: serving %s for %v (Ctrl-C ends it)\n", t.MetricsURL, t.tf.linger)
	tm := time.NewTimer(t.tf.linger)
	defer tm.Stop()
	select {
	case <-ctx.Done():
	case <-tm.C:
	}
}

// Close flushes and shuts the exporters down, within 10 s.
func (t *telemetry) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var err error
	for _, c := range t.closers {
		err = errors.Join(err, c(ctx))
	}
	return err
}

// quietOTel routes the OpenTelemetry SDK's own log lines and export errors
// (an unreachable collector, a bad endpoint) to stderr through the
// command's scrubber: an endpoint's user info, and the secrets of every
// -uri and OTEL_EXPORTER_OTLP_*ENDPOINT, never reach the output.
func quietOTel(stderr io.Writer) {
	for _, name := range otlpEnv {
		if v := os.Getenv(name); v != "" {
			scrub.AddURI(v)
		}
	}
	w := scrub.Writer(stderr)
	otel.SetLogger(stdr.New(log.New(w, "writeguard: telemetry: ", log.LstdFlags)))
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
		fmt.Fprintf(w, "writeguard: telemetry: %v\n", err)
	}))
}
