package envelope

import (
	"context"
	"errors"
	"strings"
	"testing"
)

func envelopeN(t *testing.T, i int) Envelope {
	t.Helper()
	e := sampleEnvelope(t)
	e.BatchIndex = i
	return e
}

// TestPutEachAdapter: a plain Sink's error stands for every envelope; a
// PartialSink's answer is passed through, and a wrong-length answer fails
// every envelope.
func TestPutEachAdapter(t *testing.T) {
	ctx := context.Background()
	envs := []Envelope{envelopeN(t, 0), envelopeN(t, 1), envelopeN(t, 2)}
	boom := errors.New("boom")
	for i, err := range PutEach(ctx, SinkFunc(func(context.Context, []Envelope) error { return boom }), envs) {
		if err != boom {
			t.Errorf("plain sink, envelope %d: %v", i, err)
		}
	}
	if errs := PutEach(ctx, SinkFunc(func(context.Context, []Envelope) error { return nil }), envs); len(errs) != 3 || errs[0] != nil || errs[2] != nil {
		t.Errorf("plain sink, nil: %v", errs)
	}
	ps := partialFunc(func(_ context.Context, envs []Envelope) []error { return []error{nil, boom, nil} })
	if errs := PutEach(ctx, ps, envs); errs[0] != nil || errs[1] != boom || errs[2] != nil {
		t.Errorf("partial sink: %v", errs)
	}
	short := partialFunc(func(_ context.Context, envs []Envelope) []error { return nil })
	for i, err := range PutEach(ctx, short, envs) {
		if err == nil || !strings.Contains(err.Error(), "0 results for 3 envelopes") {
			t.Errorf("short answer, envelope %d: %v", i, err)
		}
	}
}

type partialFunc func(context.Context, []Envelope) []error

func (f partialFunc) Put(ctx context.Context, envs []Envelope) error {
	return errors.Join(f(ctx, envs)...)
}

func (f partialFunc) PutEach(ctx context.Context, envs []Envelope) []error { return f(ctx, envs) }
