package dlq

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/writeguard/writeguard/envelope"
)

// A nil collection never panics: NewCheckedMongoSink names it (and a nil
// option) at once, NewMongoSink in every Put.
func TestMongoSinkNilArguments(t *testing.T) {
	if _, err := NewCheckedMongoSink(nil, WithInsertFirst(), nil); err == nil ||
		!strings.Contains(err.Error(), "NewMongoSink(nil)") || !strings.Contains(err.Error(), "option 1 is nil") {
		t.Errorf("NewCheckedMongoSink(nil, ..., nil): %v", err)
	}
	s := NewMongoSink(nil)
	err := s.Put(context.Background(), []envelope.Envelope{{Original: mustMarshal(t, map[string]int{"a": 1})}})
	if err == nil || !strings.Contains(err.Error(), "no dead-letter collection") {
		t.Errorf("Put on a sink of a nil collection: %v", err)
	}
	if s.Collection() != nil {
		t.Error("Collection() of a nil collection's sink is not nil")
	}
}

// Bad option values and nil options are errors naming each of them, from
// every constructor.
func TestSinkAndSetupOptionErrors(t *testing.T) {
	_, err := NewCheckedMongoSink(nil, WithUpsertRetries(-1), nil)
	for _, want := range []string{"NewMongoSink(nil)", "WithUpsertRetries(-1)", "sink option 1 is nil"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("NewCheckedMongoSink: %v, want %q among the errors", err, want)
		}
	}
	if _, err := NewFileSink(t.TempDir()+"/f.jsonl", nil); err == nil || !strings.Contains(err.Error(), "sink option 0 is nil") {
		t.Errorf("NewFileSink with a nil option: %v", err)
	}
	if _, err := StoredDocument(envelope.Envelope{}, WithUpsertRetries(-2)); err == nil || !strings.Contains(err.Error(), "WithUpsertRetries(-2)") {
		t.Errorf("StoredDocument with a bad option: %v", err)
	}
	_, err = EnsureCollection(context.Background(), nil, "", WithTTL("", time.Millisecond), nil)
	for _, want := range []string{"nil database", "empty collection name", "WithTTL", "option 1 is nil"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("EnsureCollection: %v, want %q among the errors", err, want)
		}
	}
}
