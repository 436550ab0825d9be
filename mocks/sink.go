package mocks

import (
	"context"
	"sync"

	"github.com/writeguard/writeguard/envelope"
)

// Sink is an in-memory envelope.Sink for tests. Safe for concurrent use;
// the zero value is ready.
type Sink struct {
	// Before, when set, runs at the start of every Put with the Put's
	// context, its number (from 1) and its envelopes; a non-nil error
	// fails the Put and nothing is stored. Use it to inject sink outages
	// or to look at the context (a span, a deadline).
	Before func(ctx context.Context, n int, envs []envelope.Envelope) error

	mu   sync.Mutex
	envs []envelope.Envelope
	puts int
}

// Put implements envelope.Sink.
func (s *Sink) Put(ctx context.Context, envs []envelope.Envelope) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.puts++
	if s.Before != nil {
		if err := s.Before(ctx, s.puts, envs); err != nil {
			return err
		}
	}
	s.envs = append(s.envs, envs...)
	return nil
}

// Envelopes returns a copy of the stored envelopes, in Put order.
func (s *Sink) Envelopes() []envelope.Envelope {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]envelope.Envelope(nil), s.envs...)
}

// Puts returns the number of Put calls, failed ones included.
func (s *Sink) Puts() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.puts
}
