package writeguard_test

import (
	"context"
	"errors"
	"sync"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/writeguard/writeguard"
	"github.com/writeguard/writeguard/envelope"
	"github.com/writeguard/writeguard/mocks"
)

// partialSink stores every envelope but those whose document _id is in
// refuse, and says so per envelope (envelope.PartialSink).
type partialSink struct {
	mu     sync.Mutex
	refuse map[int32]bool
	stored []envelope.Envelope
	calls  int
}

func (s *partialSink) Put(ctx context.Context, envs []envelope.Envelope) error {
	return errors.Join(s.PutEach(ctx, envs)...)
}

func (s *partialSink) PutEach(_ context.Context, envs []envelope.Envelope) []error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls++
	out := make([]error, len(envs))
	for i, e := range envs {
		if id, ok := e.Original.Lookup("_id").Int32OK(); ok && s.refuse[id] {
			out[i] = errors.New("refused by the dead-letter collection")
			continue
		}
		s.stored = append(s.stored, e)
	}
	return out
}

// When the sink refuses some envelopes of a gathered Put, only their
// documents are dead_letter_failed: those whose envelope was stored are
// dead_lettered, and stored once (the refused ones alone are sent again).
func TestDeadLetterPartialPut(t *testing.T) {
	fake := mocks.NewFake("db.partial").Validator(func(bson.Raw) (bson.Raw, bool) { return nil, true })
	sink := &partialSink{refuse: map[int32]bool{2: true}}
	g, err := writeguard.New(fake, writeguard.WithDeadLetter(sink))
	if err != nil {
		t.Fatal(err)
	}
	docs := []any{bson.D{{Key: "_id", Value: int32(1)}}, bson.D{{Key: "_id", Value: int32(2)}}, bson.D{{Key: "_id", Value: int32(3)}}}
	_, err = g.InsertMany(context.Background(), docs)
	var r *writeguard.Report
	if !errors.As(err, &r) {
		t.Fatalf("err = %v, want a Report", err)
	}
	want := []writeguard.Disposition{writeguard.DeadLettered, writeguard.DeadLetterFailed, writeguard.DeadLettered}
	for i, o := range r.Outcomes {
		if o.Disposition != want[i] {
			t.Errorf("document %d: %s, want %s", i, o.Disposition, want[i])
		}
	}
	if r.Outcomes[1].Err == nil {
		t.Error("the refused document carries no sink error")
	}
	if len(sink.stored) != 2 {
		t.Errorf("%d envelopes stored, want 2 (each once)", len(sink.stored))
	}
}
