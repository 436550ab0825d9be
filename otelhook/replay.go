package otelhook

import (
	"context"
	"fmt"
	"sort"

	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"

	"github.com/writeguard/writeguard/hooks"
)

// ReplayRecorder counts what replay runs did with envelopes, in
// writeguard.replay.envelopes (counter, {envelope}) by
// writeguard.replay.outcome, with db.system.name, db.namespace and
// db.collection.name of the dead-letter collection. otelhook does not
// import the replay package (which imports writeguard): the caller hands
// the run's counts over by outcome name. It is safe for concurrent use.
type ReplayRecorder struct {
	counter metric.Int64Counter
}

// Replay outcomes, the values of writeguard.replay.outcome: the fields of
// replay.Counts, in snake case.
const (
	ReplayReplayed     = "replayed"      // written (or found written) and marked replayed
	ReplayStillInvalid = "still_invalid" // rejected again by validation; back to pending
	ReplayConflict     = "conflict"      // a duplicate key that is not the envelope's own write
	ReplayFailed       = "failed"        // another error; left pending
	ReplaySkipped      = "skipped"       // not replayable (truncated, redacted, not a model)
	ReplayRefused      = "refused"       // not sent: the replay may not run it (namespace, kind of write)
	ReplayHeld         = "held"          // not sent: an earlier runner died with it in flight
)

// NewReplayRecorder returns a ReplayRecorder on the meter provider
// (WithMeterProvider). It fails only when the meter refuses the
// instrument.
func NewReplayRecorder(opts ...Option) (*ReplayRecorder, error) {
	c := newConfig(opts...)
	m := c.meterProvider.Meter(ScopeName, metric.WithInstrumentationVersion(Version), metric.WithSchemaURL(semconv.SchemaURL))
	ctr, err := m.Int64Counter(MetricReplayEnvelopes,
		metric.WithDescription("Envelopes a replay run tried, by outcome."), metric.WithUnit("{envelope}"))
	if err != nil {
		return nil, fmt.Errorf("otelhook: creating instruments: %w", err)
	}
	return &ReplayRecorder{counter: ctr}, nil
}

// Record adds counts (outcome → envelopes, e.g. ReplayReplayed → 1168) of
// one replay run of dlq. Zero counts are added too, so that every outcome
// has a series from the first run on. A nil recorder records nothing.
func (r *ReplayRecorder) Record(ctx context.Context, dlq *mongo.Collection, counts map[string]int64) {
	if r == nil || dlq == nil {
		return
	}
	base := []attribute.KeyValue{
		keyDBSystemName.String(semconv.DBSystemNameMongoDB.Value.AsString()),
		keyDBNamespace.String(dlq.Database().Name()),
		keyDBCollectionName.String(dlq.Name()),
	}
	outcomes := make([]string, 0, len(counts))
	for k := range counts {
		outcomes = append(outcomes, k)
	}
	sort.Strings(outcomes)
	for _, k := range outcomes {
		r.counter.Add(context.WithoutCancel(ctx), counts[k], metric.WithAttributes(with(base, keyReplayOutcome.String(k))...))
	}
}

// NewReplayHooks returns hooks for the guarded collection a replay writes
// through (the target of replay.Run). They trace its writes as New's
// hooks do, with writeguard.replay = true on the operation span, and
// record one metric: writeguard.replay.inputs (counter, {input}), the
// replay's inputs by writeguard.disposition (with writeguard.class and
// db.response.status_code for an input that failed, and the attributes
// of New's metrics: db.namespace and db.collection.name of the target).
// None of New's instruments is recorded: a row the replay sends and the
// validator rejects again is the replay's outcome (still_invalid, in
// ReplayRecorder's writeguard.replay.envelopes and in this counter), not
// a failed input of the application, and the alerts on
// writeguard.call.inputs never see it. Wrap the replay's target with
// these hooks, never with the application's.
//
// It fails only when the meter refuses the instrument.
func NewReplayHooks(opts ...Option) (hooks.Hooks, error) {
	c := newConfig(opts...)
	c.replay = true
	return newHooks(c)
}
