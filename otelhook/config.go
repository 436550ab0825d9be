package otelhook

import (
	"log/slog"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
)

// Option configures the hooks New returns. Options are applied in order;
// a later option of the same kind replaces an earlier one.
type Option interface {
	apply(*config)
}

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

// config is the result of the options, with defaults filled in.
type config struct {
	tracerProvider trace.TracerProvider
	meterProvider  metric.MeterProvider
	logger         *slog.Logger
	spanKind       trace.SpanKind       // of the operation span
	pollInterval   time.Duration        // ObserveDLQ
	server         []attribute.KeyValue // server.address, server.port
	now            func() time.Time     // rate limit of log records (tests replace it)
	replay         bool                 // NewReplayHooks: the replay's instruments
	maxKeywords    int                  // ObserveDLQ: keyword label values
}

// newConfig applies opts over the defaults: the global tracer and meter
// providers, a logger that discards everything, no server attributes.
func newConfig(opts ...Option) *config {
	c := &config{now: time.Now, spanKind: trace.SpanKindClient, pollInterval: DefaultPollInterval, maxKeywords: DefaultMaxKeywords}
	for _, o := range opts {
		if o != nil {
			o.apply(c)
		}
	}
	if c.tracerProvider == nil {
		c.tracerProvider = otel.GetTracerProvider()
	}
	if c.meterProvider == nil {
		c.meterProvider = otel.GetMeterProvider()
	}
	if c.logger == nil {
		c.logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// WithTracerProvider sets the provider of the tracer that records spans.
// Default (and when tp is nil): otel.GetTracerProvider(), read once, when
// New is called.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return optionFunc(func(c *config) { c.tracerProvider = tp })
}

// WithMeterProvider sets the provider of the meter that records metrics.
// Default (and when mp is nil): otel.GetMeterProvider(), read once, when
// New is called.
func WithMeterProvider(mp metric.MeterProvider) Option {
	return optionFunc(func(c *config) { c.meterProvider = mp })
}

// WithLogger sets the logger for the two events that must not pass
// silently: a failure whose class is unknown (a Warn record at most once
// a minute per error code) and a retry budget that refused a retry (a
// Warn record at most once a minute). Records carry codes, class names,
// the operation and the collection, never document values. Default (and
// when l is nil): no logging.
//
// writeguard.WithLogger logs the same two events from the write path; set
// one or the other, unless you want both.
func WithLogger(l *slog.Logger) Option {
	return optionFunc(func(c *config) { c.logger = l })
}

// WithServerAddress adds server.address (host) and server.port (port) to
// every operation span and to the writeguard.call.duration metric.
// The hooks cannot see which server the driver picked, so this is the
// address the application connects to (a mongos or the replica set's
// seed host, say). An empty host adds neither; a port ≤ 0 adds only the
// host. Default: neither attribute.
func WithServerAddress(host string, port int) Option {
	return optionFunc(func(c *config) {
		c.server = nil
		if host == "" {
			return
		}
		c.server = append(c.server, keyServerAddress.String(host))
		if port > 0 {
			c.server = append(c.server, keyServerPort.Int(port))
		}
	})
}

// WithSpanKind sets the kind of the operation span (one per guarded call).
// Default: trace.SpanKindClient, as the MongoDB drivers' OpenTelemetry
// specification makes its operation span ("Operation Span Kind: MUST be
// client"), with the driver's command spans, also client, nested under it.
//
// Backends that derive database metrics (call rates, latencies, service
// maps) from client spans count such a call twice: once for writeguard's
// span and once per command span under it. Where the driver's command
// spans are recorded too and the backend double-counts, pass
// trace.SpanKindInternal: the operation span then describes writeguard's
// work (retries, backoff, dead-lettering) and the command spans alone are
// the database calls. Kinds other than client and internal are ignored.
func WithSpanKind(kind trace.SpanKind) Option {
	return optionFunc(func(c *config) {
		if kind == trace.SpanKindClient || kind == trace.SpanKindInternal {
			c.spanKind = kind
		}
	})
}

// DefaultPollInterval is how often ObserveDLQ reads the dead-letter
// collection.
const DefaultPollInterval = 30 * time.Second

// WithPollInterval sets how often ObserveDLQ reads the dead-letter
// collection (d ≥ 1 s; shorter values are raised to 1 s). Default
// DefaultPollInterval. New ignores it.
func WithPollInterval(d time.Duration) Option {
	return optionFunc(func(c *config) { c.pollInterval = max(d, time.Second) })
}
