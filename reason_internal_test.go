package writeguard

import (
	"strings"
	"testing"

	"github.com/writeguard/writeguard/internal/engine"
)

// Every reason the engine names is lifted into the face's reason of the
// same name (newReport), and no two engine reasons meet in one.
func TestReasonsLifted(t *testing.T) {
	seen := map[Reason]engine.Reason{}
	n := 0
	for r := engine.ReasonNone; !strings.HasPrefix(r.String(), "reason("); r++ { // every reason the engine names
		n++
		got := reasonOf(r)
		if got.String() != r.String() {
			t.Errorf("engine reason %q lifted as %q", r, got)
		}
		if prev, ok := seen[got]; ok {
			t.Errorf("engine reasons %q and %q both lifted as %q", prev, r, got)
		}
		seen[got] = r
	}
	if len(reasons) != n {
		t.Errorf("%d reasons lifted, the engine has %d", len(reasons), n)
	}
	if s := Reason(200).String(); s != "reason(200)" {
		t.Errorf("Reason(200) = %q", s)
	}
}
