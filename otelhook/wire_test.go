package otelhook_test

import (
	"context"
	"testing"

	"github.com/writeguard/writeguard/hooks"
	"github.com/writeguard/writeguard/otelhook"
)

// TestWireCommandsCounted: each attempt's wire-observed commands
// (hooks.AttemptEnd.WireCommands, writeguard.Monitor's count, the driver's
// hidden retries included) add to writeguard.wire.commands, an instrument
// of their own beside writeguard.call.attempts.
func TestWireCommandsCounted(t *testing.T) {
	hx := newHarness(t)
	op := &hooks.Operation{Name: "updateOne", Database: "shop", Collection: "orders", Command: "update"}
	ctx := hx.hooks.OperationStarted(context.Background(), op)
	for _, n := range []int{3, 0, 1} {
		actx := hx.hooks.AttemptStarted(ctx, &hooks.AttemptStart{Op: op, Attempt: 1, Documents: 1})
		hx.hooks.AttemptFinished(actx, &hooks.AttemptEnd{Op: op, Attempt: 1, Documents: 1, WireCommands: n})
	}
	rm := hx.collect(t)
	if got := counterValue(t, rm, otelhook.MetricWireCommands, map[string]string{"db.collection.name": "orders"}); got != 4 {
		t.Errorf("%s = %d, want 4", otelhook.MetricWireCommands, got)
	}
}
