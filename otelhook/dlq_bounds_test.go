package otelhook

import (
	"fmt"
	"strings"
	"testing"

	"github.com/writeguard/writeguard/dlq"
)

// TestBoundStatuses: every known status has a value (0 when absent), and
// any other status read from the collection adds up under "other".
func TestBoundStatuses(t *testing.T) {
	got := boundStatuses([]dlq.Group{
		{Key: "pending", Envelopes: 5}, {Key: "PENDING", Envelopes: 1}, {Key: "x\ny", Envelopes: 2}, {Key: "other", Envelopes: 1},
	})
	want := map[string]int64{"pending": 5, "replayed": 0, "discarded": 0, "quarantined": 0, "other": 4}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("boundStatuses = %v, want %v", got, want)
	}
}

// TestBoundKeywords: keywords that look like keyword or operator names,
// the max most frequent of them, keep their name; the rest (a value too
// long, a document value an application stored, the keywords beyond the
// cap) add up under "other".
func TestBoundKeywords(t *testing.T) {
	groups := []dlq.Group{
		{Key: "minimum", Envelopes: 9}, {Key: "$lt", Envelopes: 7}, {Key: "carol@example.com", Envelopes: 6},
		{Key: "bsonType", Envelopes: 5}, {Key: strings.Repeat("a", 65), Envelopes: 4}, {Key: "pattern", Envelopes: 3},
		{Key: "required", Envelopes: 2}, {Key: "other", Envelopes: 1},
	}
	got := boundKeywords(groups, 3)
	want := map[string]int64{"minimum": 9, "$lt": 7, "bsonType": 5, "other": 6 + 4 + 3 + 2 + 1}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("boundKeywords(max 3) = %v, want %v", got, want)
	}
	// Thousands of distinct values stay within max + 1 series.
	many := make([]dlq.Group, 5000)
	for i := range many {
		many[i] = dlq.Group{Key: fmt.Sprintf("k%d", i), Envelopes: 1}
	}
	if got := boundKeywords(many, DefaultMaxKeywords); len(got) != DefaultMaxKeywords+1 || got[StatusOther] != 5000-DefaultMaxKeywords {
		t.Errorf("5000 keywords: %d series, other = %d", len(got), got[StatusOther])
	}
}

// TestWithMaxKeywords: the option's range; out-of-range values keep the
// default.
func TestWithMaxKeywords(t *testing.T) {
	for n, want := range map[int]int{0: DefaultMaxKeywords, -1: DefaultMaxKeywords, 1: 1, 1000: 1000, 1001: DefaultMaxKeywords} {
		if got := newConfig(WithMaxKeywords(n)).maxKeywords; got != want {
			t.Errorf("WithMaxKeywords(%d): %d, want %d", n, got, want)
		}
	}
}
