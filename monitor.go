package writeguard

import (
	"context"

	"go.mongodb.org/mongo-driver/v2/event"

	"github.com/writeguard/writeguard/internal/engine"
)

// Monitor returns a command monitor to set on the client of the guarded
// collections (options.Client().SetMonitor(writeguard.Monitor(nil))), so
// that writeguard reads each attempt from the wire instead of the driver's
// last error alone. It composes with inner, the caller's own monitor (nil:
// none): every event goes on to inner's callbacks unchanged, and inner's
// Started callback, if any, is kept as it is. A later SetMonitor on the
// same client options replaces this one: set it once, wrapping yours.
//
// What it reads: writeguard tags each attempt's context; the monitor reads
// the Succeeded and Failed events of tagged commands only (a command sent
// by the driver for a guarded attempt). A command was sent if and only if
// a finished event for it carries a reply, or an error other than the
// driver's pre-send ones (the context or ErrDeadlineWouldBeExceeded checked
// just before the send, mongo-go-driver v2.10.0 x/mongo/driver/operation.go
// 818-822, published at 844). What each statement proves is the union
// across every attempt of the driver call (each event is one attempt,
// matched by request and connection id); an update whose hidden first
// attempt shows a reply with n: 1 is written, one whose only events are
// pre-send errors was not sent. Without the monitor, an error that says
// "not sent" after attempts the driver may have hidden is read as "maybe
// applied" (see WithDriverRetryWrites and the README's "Proof rules").
//
// Started events are not read: the driver publishes Started before its
// last context check (operation.go 789), so Started proves nothing, and a
// Started callback makes the driver copy every command, documents
// included. An attempt that got a server reply with no tagged event says
// the monitor is not installed on that client: writeguard logs it once per
// guarded collection and keeps the rules without the wire. Missing events
// never prove "not sent".
//
// The monitor's cost is measured in bench (BenchmarkMonitor); the
// wire-observed commands are counted in hooks.AttemptEnd.WireCommands.
func Monitor(inner *event.CommandMonitor) *event.CommandMonitor {
	m := &event.CommandMonitor{
		Succeeded: func(ctx context.Context, ev *event.CommandSucceededEvent) {
			engine.WireSucceeded(ctx, ev)
			if inner != nil && inner.Succeeded != nil {
				inner.Succeeded(ctx, ev)
			}
		},
		Failed: func(ctx context.Context, ev *event.CommandFailedEvent) {
			engine.WireFailed(ctx, ev)
			if inner != nil && inner.Failed != nil {
				inner.Failed(ctx, ev)
			}
		},
	}
	if inner != nil {
		m.Started = inner.Started
	}
	return m
}
