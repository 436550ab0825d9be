package engine

import (
	"testing"

	"github.com/writeguard/writeguard/policy"
)

// The not_attempted invariant (C68), held where every disposition is
// given: a statement that was sent, or may have been applied, is never
// settled not_attempted; one never sent is.
func TestSettleNeverSentOnly(t *testing.T) {
	e := New(Config{Classifier: policy.Default()})
	for _, tc := range []struct {
		name     string
		attempts int
		ev       evidence
		want     policy.Disposition
	}{
		{"never sent", 0, noEvidence, policy.NotAttempted},
		{"sent, proved not applied", 1, noEvidence, policy.Exhausted},
		{"sent, maybe applied", 2, maybe, policy.OutcomeUnknown},
		{"sent, applied with a write concern error", 1, unconfirmed, policy.WrittenUnconfirmed},
	} {
		c := e.newCall("insertMany", true, 1)
		it := c.items[0]
		it.attempts, it.ev = tc.attempts, tc.ev
		c.settle(it, policy.NotAttempted)
		if it.disp != tc.want {
			t.Errorf("%s: %s, want %s", tc.name, it.disp, tc.want)
		}
	}
}
