package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/stdout/stdouttrace"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/writeguard/writeguard/hooks"
	"github.com/writeguard/writeguard/otelhook"
)

// startTrace returns otelhook hooks whose spans (one per guarded call,
// with a child per attempt and per dead-letter hand-off) are written to
// path by the OpenTelemetry stdout exporter, pretty-printed JSON, one
// object per span; parent_span_id links the tree. The provider is not
// installed globally, so the embedded FerretDB's own spans stay out.
// shutdown flushes and closes the file.
func startTrace(path string) (hooks.Hooks, func(context.Context) error, error) {
	// 0600: spans carry error messages, which can quote documents' values.
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return hooks.Hooks{}, nil, fmt.Errorf("trace: %w", err)
	}
	exp, err := stdouttrace.New(stdouttrace.WithWriter(scrubbedWriter{f}), stdouttrace.WithPrettyPrint())
	if err != nil {
		f.Close()
		return hooks.Hooks{}, nil, fmt.Errorf("trace: %w", err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp),
		sdktrace.WithResource(resource.NewSchemaless(attribute.String("service.name", "writeguard-demo"))))
	h, err := otelhook.New(otelhook.WithTracerProvider(tp))
	if err != nil {
		f.Close()
		return hooks.Hooks{}, nil, fmt.Errorf("trace: %w", err)
	}
	return h, func(ctx context.Context) error {
		return errors.Join(tp.Shutdown(ctx), f.Close())
	}, nil
}

// scrubbedWriter passes each Write through scrubbed: a span's error
// message keeps neither a -uri's secrets nor a duplicate key's values.
// The exporter writes each span with one call.
type scrubbedWriter struct{ w io.Writer }

func (s scrubbedWriter) Write(p []byte) (int, error) {
	if _, err := io.WriteString(s.w, scrubbed(string(p))); err != nil {
		return 0, err
	}
	return len(p), nil
}
