package envelope

import (
	"context"
	"fmt"
)

// PartialSink is a Sink that can say, for a gathered Put, which envelopes
// it stored. It is optional: a Sink that does not implement it is called
// with Put, and its error then counts for every envelope of the call
// (PutEach).
//
// PutEach stores envs as Put does (idempotent per Fingerprint, safe for
// concurrent use) and returns one error per envelope, in the order of
// envs: nil for an envelope that is durably stored, the reason for one
// that is not. It must not return nil for an envelope it cannot give
// back. A slice of another length is treated as the failure of every
// envelope (PutEach, the function, says so).
//
// dlq.FileSink and dlq.MongoSink implement it.
type PartialSink interface {
	Sink
	PutEach(ctx context.Context, envs []Envelope) []error
}

// PutEach hands envs to s and returns what was stored, per envelope: a
// slice of len(envs) errors, nil for each envelope s stored. It calls
// s.PutEach when s is a PartialSink, and otherwise s.Put, whose error
// then stands for every envelope. A panic in s is not recovered.
//
// It is what a dead-letter path calls so that a document whose envelope
// was stored is reported dead-lettered even when other envelopes of the
// same Put were refused; retry only the envelopes whose entry is non-nil.
func PutEach(ctx context.Context, s Sink, envs []Envelope) []error {
	errs := make([]error, len(envs))
	if ps, ok := s.(PartialSink); ok {
		got := ps.PutEach(ctx, envs)
		if len(got) == len(envs) {
			copy(errs, got)
			return errs
		}
		err := fmt.Errorf("envelope: %T.PutEach returned %d results for %d envelopes", s, len(got), len(envs))
		for i := range errs {
			errs[i] = err
		}
		return errs
	}
	if err := s.Put(ctx, envs); err != nil {
		for i := range errs {
			errs[i] = err
		}
	}
	return errs
}
