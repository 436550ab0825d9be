package writeguard

import (
	"strings"
	"testing"

	"github.com/writeguard/writeguard/internal/engine"
)

// Every reason the engine names is lifted into the face's reason that
// says the same (newReport: the two lists are in the same order), and the
// face has no reason the engine does not give.
func TestReasonsLifted(t *testing.T) {
	pairs := []struct {
		engine engine.Reason
		face   Reason
	}{
		{engine.ReasonNone, ReasonNone},
		{engine.ReasonAttemptsSpent, ReasonAttemptsSpent},
		{engine.ReasonMaxElapsed, ReasonMaxElapsed},
		{engine.ReasonBudgetRefused, ReasonBudgetRefused},
		{engine.ReasonDeadline, ReasonDeadline},
		{engine.ReasonOrderedStop, ReasonOrderedStop},
		{engine.ReasonConfiguration, ReasonConfiguration},
		{engine.ReasonNotSent, ReasonNotSent},
		{engine.ReasonNotRetried, ReasonNotRetried},
		{engine.ReasonNotResendable, ReasonNotResendable},
		{engine.ReasonSinkFailed, ReasonSinkFailed},
	}
	for _, p := range pairs {
		if got := reasonOf(p.engine); got != p.face {
			t.Errorf("engine reason %q lifted as %q (%d), want %d", p.engine, got, got, p.face)
		}
	}
	n := 0
	for r := engine.ReasonNone; !strings.HasPrefix(r.String(), "reason("); r++ { // every reason the engine names
		n++
	}
	if n != len(pairs) {
		t.Errorf("the engine names %d reasons, the face %d", n, len(pairs))
	}
	if s := Reason(200).String(); s != "reason(200)" {
		t.Errorf("Reason(200) = %q", s)
	}
}
