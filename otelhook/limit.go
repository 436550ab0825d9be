package otelhook

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"

	"github.com/writeguard/writeguard/hooks"
)

// limitChanged records the adaptive limit's new value (MetricLimit).
func (h *handler) limitChanged(ctx context.Context, ev *hooks.LimitChange) {
	attrs := []attribute.KeyValue{keyDBSystemName.String(semconv.DBSystemNameMongoDB.Value.AsString())}
	if ev.Database != "" {
		attrs = append(attrs, keyDBNamespace.String(ev.Database))
	}
	if ev.Collection != "" {
		attrs = append(attrs, keyDBCollectionName.String(ev.Collection))
	}
	h.limitGauge.Record(context.WithoutCancel(ctx), int64(ev.Limit), metric.WithAttributes(attrs...))
}
