package main

import (
	"context"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sync"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/encoding/protojson"
)

// newOTLPFileExporter returns a span exporter that appends the spans to
// path as OTLP JSON lines: one ExportTraceServiceRequest per line, in the
// OTLP/JSON encoding (OTLP specification, "JSON Protobuf Encoding":
// lowerCamelCase field names, enum values as integers, traceId and spanId
// as hex strings, not base64) — what the OpenTelemetry Collector's file
// exporter writes and its otlpjsonfile receiver reads. The spans go
// through the SDK's own OTLP transform (otlptrace with a client that
// writes instead of sending), so the file holds what an OTLP exporter
// would send.
func newOTLPFileExporter(ctx context.Context, path string) (*otlptrace.Exporter, error) {
	// 0600: the spans name collections and codes, nothing more, but the
	// file sits beside the demo's data.
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return nil, err
	}
	return otlptrace.New(ctx, &fileClient{f: f})
}

// fileClient is an otlptrace.Client that writes OTLP JSON lines.
type fileClient struct {
	mu sync.Mutex
	f  *os.File
}

func (c *fileClient) Start(context.Context) error { return nil }

func (c *fileClient) Stop(context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.f.Close()
}

func (c *fileClient) UploadTraces(_ context.Context, spans []*tracepb.ResourceSpans) error {
	line, err := otlpJSON(&coltracepb.ExportTraceServiceRequest{ResourceSpans: spans})
	if err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	// Scrubbed: a span's error message keeps neither a -uri's secrets nor
	// a duplicate key's values.
	_, err = scrubbedWriter{c.f}.Write(append(line, '\n'))
	return err
}

// otlpJSON encodes req in OTLP/JSON on one line: protojson with enum
// numbers, then the id fields turned from base64 (protobuf JSON mapping
// of bytes) into hex (the OTLP/JSON exception for trace and span ids).
func otlpJSON(req *coltracepb.ExportTraceServiceRequest) ([]byte, error) {
	raw, err := protojson.MarshalOptions{UseEnumNumbers: true}.Marshal(req)
	if err != nil {
		return nil, fmt.Errorf("otlp json: %w", err)
	}
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		return nil, fmt.Errorf("otlp json: %w", err)
	}
	if err := hexIDs(v); err != nil {
		return nil, err
	}
	return json.Marshal(v)
}

// idFields are the OTLP fields of type bytes that OTLP/JSON writes in hex.
var idFields = map[string]bool{"traceId": true, "spanId": true, "parentSpanId": true}

func hexIDs(v any) error {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			if s, ok := e.(string); ok && idFields[k] {
				b, err := base64.StdEncoding.DecodeString(s)
				if err != nil {
					return fmt.Errorf("otlp json: %s %q: %w", k, s, err)
				}
				x[k] = hex.EncodeToString(b)
				continue
			}
			if err := hexIDs(e); err != nil {
				return err
			}
		}
	case []any:
		for _, e := range x {
			if err := hexIDs(e); err != nil {
				return err
			}
		}
	}
	return nil
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
