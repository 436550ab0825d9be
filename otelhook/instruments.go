package otelhook

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/writeguard/writeguard/hooks"
	"github.com/writeguard/writeguard/internal/loglimit"
)

// durationBuckets are the explicit bucket boundaries, in seconds, of
// writeguard.call.duration: those the database semantic conventions give
// for db.client.operation.duration, so the two compare bucket by bucket.
var durationBuckets = []float64{0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10}

// attemptBuckets are the bucket boundaries of writeguard.call.attempts: one
// bucket per attempt up to the default maximum of 5, then coarser.
var attemptBuckets = []float64{1, 2, 3, 4, 5, 7, 10, 20, 50}

// retryDelayBuckets are the bucket boundaries, in seconds, of
// writeguard.retry.delay: from the 5 ms of a first jittered backoff to
// the 30 s a throttled server may ask for.
var retryDelayBuckets = []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30}

func newHandler(c *config) (*handler, error) {
	h := &handler{
		tracer: c.tracerProvider.Tracer(ScopeName,
			trace.WithInstrumentationVersion(Version), trace.WithSchemaURL(semconv.SchemaURL)),
		kind:   c.spanKind,
		logger: c.logger,
		server: c.server,
		limit:  loglimit.New(time.Minute, c.now),
		replay: c.replay,
	}
	m := c.meterProvider.Meter(ScopeName,
		metric.WithInstrumentationVersion(Version), metric.WithSchemaURL(semconv.SchemaURL))
	var err error
	if c.replay {
		err = h.replayInstruments(m)
	} else {
		err = h.instruments(m)
	}
	if err != nil {
		return nil, fmt.Errorf("otelhook: creating instruments: %w", err)
	}
	return h, nil
}

// instruments creates the instruments of New's hooks (Instruments).
func (h *handler) instruments(m metric.Meter) error {
	var err, e error
	h.duration, e = m.Float64Histogram(MetricCallDuration,
		metric.WithDescription("Duration of guarded write calls, from the call to its return, retries and backoff waits included."),
		metric.WithUnit("s"), metric.WithExplicitBucketBoundaries(durationBuckets...))
	err = errors.Join(err, e)
	h.inputs, e = m.Int64Counter(MetricCallInputs,
		metric.WithDescription("Input documents or write models by terminal disposition."),
		metric.WithUnit("{input}"))
	err = errors.Join(err, e)
	h.attempts, e = m.Int64Histogram(MetricCallAttempts,
		metric.WithDescription("Driver calls made per guarded write call."),
		metric.WithUnit("{attempt}"), metric.WithExplicitBucketBoundaries(attemptBuckets...))
	err = errors.Join(err, e)
	h.inputTries, e = m.Int64Histogram(MetricInputAttempts,
		metric.WithDescription("Times each input document or write model was sent (0 for one never sent)."),
		metric.WithUnit("{attempt}"), metric.WithExplicitBucketBoundaries(attemptBuckets...))
	err = errors.Join(err, e)
	h.unclassified, e = m.Int64Counter(MetricUnclassified,
		metric.WithDescription("Failures no classifier rule matched (never retried): documents, or calls inside a transaction."),
		metric.WithUnit("{failure}"))
	err = errors.Join(err, e)
	h.budget, e = m.Int64Counter(MetricBudgetExhausted,
		metric.WithDescription("Retries the retry budget refused."),
		metric.WithUnit("{refusal}"))
	err = errors.Join(err, e)
	h.retryDelay, e = m.Float64Histogram(MetricRetryDelay,
		metric.WithDescription("Backoff waits before retries, as scheduled (the server's delay for a throttled failure)."),
		metric.WithUnit("s"), metric.WithExplicitBucketBoundaries(retryDelayBuckets...))
	err = errors.Join(err, e)
	h.flood, e = m.Int64Counter(MetricDeadLetterFlood,
		metric.WithDescription("Calls reported not handled because they dead-lettered while the dead-letter flood breaker was open."),
		metric.WithUnit("{call}"))
	err = errors.Join(err, e)
	h.wire, e = m.Int64Counter(MetricWireCommands,
		metric.WithDescription("Commands the driver sent for guarded attempts, as writeguard's command monitor saw them (the driver's own retries included)."),
		metric.WithUnit("{command}"))
	err = errors.Join(err, e)
	h.limitGauge, e = m.Int64Gauge(MetricLimit,
		metric.WithDescription("Adaptive limit on the driver calls a guarded collection has in flight, at each change (1 while a failover closes it to one probing call)."),
		metric.WithUnit("{command}"))
	return errors.Join(err, e)
}

// replayInstruments creates the one instrument of NewReplayHooks's hooks,
// writeguard.replay.inputs; the others record nothing, so that a
// replay's writes never count as the application's.
func (h *handler) replayInstruments(m metric.Meter) error {
	h.duration, h.retryDelay = noop.Float64Histogram{}, noop.Float64Histogram{}
	h.attempts, h.inputTries = noop.Int64Histogram{}, noop.Int64Histogram{}
	h.unclassified, h.budget, h.flood, h.wire = noop.Int64Counter{}, noop.Int64Counter{}, noop.Int64Counter{}, noop.Int64Counter{}
	h.limitGauge = noop.Int64Gauge{}
	var err error
	h.inputs, err = m.Int64Counter(MetricReplayInputs,
		metric.WithDescription("Input documents or write models of a replay's guarded writes, by terminal disposition."),
		metric.WithUnit("{input}"))
	return err
}

// recordWire counts an attempt's wire-observed commands
// (MetricWireCommands), with the call's attributes; an attempt the
// monitor did not see adds 0.
func (h *handler) recordWire(ctx context.Context, ev *hooks.AttemptEnd) {
	if ev.Op == nil {
		return
	}
	h.wire.Add(context.WithoutCancel(ctx), int64(ev.WireCommands), metric.WithAttributes(h.callAttrs(ctx, ev.Op)...))
}
