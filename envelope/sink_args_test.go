package envelope

import (
	"context"
	"strings"
	"testing"
)

// A nil collection never panics: NewCheckedMongoSink names it (and a nil
// option) at once, NewMongoSink in every Put.
func TestMongoSinkNilArguments(t *testing.T) {
	if _, err := NewCheckedMongoSink(nil, WithInsertFirst(), nil); err == nil ||
		!strings.Contains(err.Error(), "NewMongoSink(nil)") || !strings.Contains(err.Error(), "option 1 is nil") {
		t.Errorf("NewCheckedMongoSink(nil, ..., nil): %v", err)
	}
	s := NewMongoSink(nil)
	err := s.Put(context.Background(), []Envelope{{Original: mustMarshal(t, map[string]int{"a": 1})}})
	if err == nil || !strings.Contains(err.Error(), "no dead-letter collection") {
		t.Errorf("Put on a sink of a nil collection: %v", err)
	}
	if s.Collection() != nil {
		t.Error("Collection() of a nil collection's sink is not nil")
	}
}
