package writeguard_test

import (
	"context"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/writeguard/writeguard"
	"github.com/writeguard/writeguard/envelope"
	"github.com/writeguard/writeguard/hooks"
	"github.com/writeguard/writeguard/mocks"
)

// traceTestRejectAll is a validator that rejects every document (code 121).
func traceTestRejectAll(bson.Raw) (bson.Raw, bool) { return nil, true }

// Dead-letter envelopes carry the trace ids hooks.Hooks.TraceIDs returns
// for the call's context, and none without such a hook: the root package
// reads no tracing library itself.
func TestEnvelopeTraceIDsComeFromHooks(t *testing.T) {
	type ctxKey struct{}
	for _, c := range []struct {
		name     string
		hooks    []hooks.Hooks
		tid, sid string
	}{
		{"no hooks", nil, "", ""},
		{"hooks without TraceIDs", []hooks.Hooks{{}}, "", ""},
		{"TraceIDs reads the call's context", []hooks.Hooks{{
			TraceIDs: func(ctx context.Context) (string, string) {
				if ctx.Value(ctxKey{}) == nil {
					return "", ""
				}
				return "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
			},
		}}, "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"},
	} {
		t.Run(c.name, func(t *testing.T) {
			sink := &mocks.Sink{}
			opts := []writeguard.Option{writeguard.WithDeadLetter(sink)}
			for _, h := range c.hooks {
				opts = append(opts, writeguard.WithHooks(h))
			}
			g, err := writeguard.New(mocks.NewFake("shop.orders").Validator(traceTestRejectAll), opts...)
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.WithValue(context.Background(), ctxKey{}, true)
			if _, err := g.InsertOne(ctx, bson.D{{Key: "_id", Value: 1}}); !writeguard.Handled(err) {
				t.Fatalf("InsertOne: %v, want a handled dead letter", err)
			}
			envs := sink.Envelopes()
			if len(envs) != 1 || envs[0].TraceID != c.tid || envs[0].SpanID != c.sid {
				t.Fatalf("envelopes %d, ids %q %q; want 1 with %q %q", len(envs), traceTestFirst(envs).TraceID, traceTestFirst(envs).SpanID, c.tid, c.sid)
			}
		})
	}
}

// traceTestFirst returns the first envelope, or a zero one.
func traceTestFirst(envs []envelope.Envelope) envelope.Envelope {
	if len(envs) == 0 {
		return envelope.Envelope{}
	}
	return envs[0]
}
