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
	"time"

	"github.com/go-logr/stdr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/otlptranslator"
	"go.opentelemetry.io/otel"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
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

func addTelemetryFlags(fs *flag.FlagSet, tf *telemetryFlags, withTrace bool) {
	fs.StringVar(&tf.metricsAddr, "metrics-addr", "", "serve the metrics in Prometheus text format on `HOST:PORT` (e.g. 127.0.0.1:9464), path /metrics, through the OpenTelemetry Prometheus exporter")
	fs.StringVar(&tf.otlp, "otlp-endpoint", "", "export traces and metrics over OTLP to `URL` (e.g. http://127.0.0.1:4318), over OTLP/HTTP (protobuf; /v1/traces and /v1/metrics are appended) unless OTEL_EXPORTER_OTLP_PROTOCOL is grpc (then the URL is the collector's gRPC address, e.g. http://127.0.0.1:4317); without it the standard OTEL_* variables turn the export on and configure it (see 'Telemetry' in the command's README)")
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
	if _, err := readOTelEnv(tf.otlp != ""); err != nil {
		return err.Error()
	}
	return ""
}

// exportsMetrics reports whether the metrics are exported at all: served
// for Prometheus or sent over OTLP, and the SDK not disabled.
func (tf *telemetryFlags) exportsMetrics() bool {
	env, err := readOTelEnv(tf.otlp != "")
	return err == nil && !env.disabled && (tf.metricsAddr != "" || env.metrics.on)
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

// startTelemetry sets up the exporters the flags and the OpenTelemetry
// environment ask for (otelenv.go). The providers are not installed
// globally, so the embedded server's own telemetry stays out. With
// OTEL_SDK_DISABLED=true it exports nothing, and says so on stderr when
// a flag asked for an export.
func startTelemetry(ctx context.Context, tf *telemetryFlags, service string, stderr io.Writer) (*telemetry, error) {
	quietOTel(stderr)
	t := &telemetry{TracerProvider: tracenoop.NewTracerProvider(), MeterProvider: noop.NewMeterProvider(), tf: tf, stderr: stderr}
	env, err := readOTelEnv(tf.otlp != "")
	if err != nil {
		return nil, err
	}
	if env.disabled {
		if tf.otlp != "" || tf.metricsAddr != "" || tf.trace != "" {
			fmt.Fprintf(stderr, "writeguard: telemetry: %v\n", errDisabled)
		}
		return t, nil
	}
	res, err := newResource(ctx, service)
	if err != nil {
		fmt.Fprintf(scrub.Writer(stderr), "writeguard: telemetry: %v\n", err)
	}
	tpOpts, mpOpts, undo, err := otlpExporters(ctx, env, tf.otlp)
	if err != nil {
		return nil, err
	}
	// cleanup shuts down the exporters made so far when a later one fails.
	cleanup := func() {
		for _, f := range undo {
			_ = f(context.WithoutCancel(ctx))
		}
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
		reader, err := t.servePrometheus(tf.metricsAddr)
		if err != nil {
			cleanup()
			return nil, err
		}
		mpOpts = append(mpOpts, sdkmetric.WithReader(reader))
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

// servePrometheus serves the metrics in Prometheus text format on addr,
// path /metrics, and returns the reader to install.
func (t *telemetry) servePrometheus(addr string) (sdkmetric.Reader, error) {
	reg := prometheus.NewRegistry()
	pexp, err := otelprom.New(otelprom.WithRegisterer(reg),
		otelprom.WithTranslationStrategy(otlptranslator.UnderscoreEscapingWithSuffixes))
	if err != nil {
		return nil, fmt.Errorf("prometheus exporter: %w", err)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("-metrics-addr: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.MetricsURL = "http://" + ln.Addr().String() + "/metrics"
	fmt.Fprintf(t.stderr, "metrics: %s\n", t.MetricsURL)
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
// (an unreachable collector, a bad endpoint, a malformed header) to stderr
// through the command's scrubber: an endpoint's user info, the secrets of
// every -uri and OTEL_*_ENDPOINT, and the header values of every
// OTEL_*_HEADERS never reach the output.
func quietOTel(stderr io.Writer) {
	scrubOTelEnv()
	w := scrub.Writer(stderr)
	otel.SetLogger(stdr.New(log.New(w, "writeguard: telemetry: ", log.LstdFlags)))
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
		fmt.Fprintf(w, "writeguard: telemetry: %v\n", err)
	}))
}
