package main

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/writeguard/writeguard/cmd/writeguard/internal/demo"
)

// The demo's check is the truth of every disposition: with sixteen
// writers sharing one client (lost replies clear the driver's connection
// pool under the others), every injected fault is transient, so no row may
// end failed, exhausted or unknown, and no row reported not written may be
// stored; the check passes on every seed.
func TestDemoSixteenWritersEveryDispositionTrue(t *testing.T) {
	if testing.Short() {
		t.Skip("demo with 16 writers: skipped with -short")
	}
	for seed := 1; seed <= 5; seed++ {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			code, out, errOut := runCmd(t, context.Background(), "demo", "--json", "--workers", "16", "--batch", "100", "--limit", "4000", "--seed", fmt.Sprint(seed))
			var r demo.Result
			if err := json.Unmarshal([]byte(out), &r); err != nil {
				t.Fatalf("exit %d, output is not JSON: %v\n%s\n%s", code, err, out, errOut)
			}
			t.Logf("demo --workers 16 --seed %d: exit %d, dispositions %v, faults %v", seed, code, r.Dispositions, r.Faults)
			if code != exitOK || !r.OK || r.Failed+r.Exhausted+r.Unknown != 0 || r.Lost != 0 || r.Duplicates != 0 {
				t.Errorf("exit %d, ok %v, failed %d, exhausted %d, unknown %d, lost %d, duplicates %d; problems %v",
					code, r.OK, r.Failed, r.Exhausted, r.Unknown, r.Lost, r.Duplicates, r.Problems)
			}
		})
	}
}

// A run whose transient faults are left unresolved (writeguard's retries
// turned off) must fail its check and exit non-zero.
func TestDemoUnresolvedTransientFaultFailsTheCheck(t *testing.T) {
	code, out, errOut := runCmd(t, context.Background(), "demo", "--json", "--workers", "16", "--batch", "100", "--limit", "3000", "--seed", "3", "--max-attempts", "1")
	var r demo.Result
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("exit %d, output is not JSON: %v\n%s\n%s", code, err, out, errOut)
	}
	if code != exitCheck || r.OK || r.Failed+r.Exhausted+r.Unknown == 0 {
		t.Errorf("exit %d (want %d), ok %v, failed %d, exhausted %d, unknown %d: an unresolved transient fault passed the check; problems %v",
			code, exitCheck, r.OK, r.Failed, r.Exhausted, r.Unknown, r.Problems)
	}
	t.Logf("problems: %v", r.Problems)
}
