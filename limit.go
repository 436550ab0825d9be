package writeguard

import (
	"context"

	"github.com/writeguard/writeguard/hooks"
	"github.com/writeguard/writeguard/internal/engine"
)

// AdaptiveLimit bounds the driver calls a Guarded has in flight to its
// collection at once, shared by all its calls, and adapts the bound to the
// server's replies:
//
//   - Overload, AIMD: a reply labelled SystemOverloadedError (MongoDB's
//     client-backpressure spec; IngressRequestRateLimitExceeded 462 of the
//     ingress rate limiter) or a failure the classifier calls throttled
//     (Cosmos DB's 16500) halves the limit, from the calls in flight when
//     they are fewer, at most once per window (replies of calls sent before
//     the last cut do not cut again); each driver call that met no overload,
//     sent while every slot was taken, raises it by 1/limit: one per window
//     of clean calls, up to Max. A limit that is not reached does not grow.
//   - Failover, a gate: replies of the NotPrimaryError or ShutdownError
//     category (10107, 13435, 10058, 11600, 11602, 13436, 189, 91: the
//     driver's notPrimaryCodes and nodeIsRecoveringCodes, driver v2.10.0
//     x/mongo/driver/errors.go 45–46) to two calls, with no reply from a
//     primary in between (one alone closes nothing), close the collection
//     to one probing call, the first of them, which retries with its own
//     backoff; the others wait, sending
//     nothing, until a reply from a primary reopens it (or the probe's call
//     ends and the next waiter probes). A call waits at most until its
//     context ends (its attempt then fails with the context's error,
//     nothing sent) or its MaxElapsed passes (it then sends anyway).
//
// Composition: the limit decides when a driver call leaves, never what a
// reply proves, so dispositions are unchanged. The retry budget
// (WithBudget) still charges each retry when it is scheduled, before any
// wait for a slot; the limit lowers the number of refused attempts, and
// so of retries the budget is asked for. The dead-letter flood breaker
// (WithDeadLetterBreaker) counts dispositions and is not affected. The
// driver's own retries of an overload reply (two inside one driver call,
// v2.10.0) do not show in the final error: with Monitor installed on the
// client, each attempt's overloaded replies the driver retried itself
// halve the limit too ("overload_observed"); without it the limit reads
// the final error only.
//
// Each change is reported by hooks.Hooks.LimitChanged (otelhook: the gauge
// writeguard.limit). Set with WithAdaptiveLimit, off with
// WithoutAdaptiveLimit.
type AdaptiveLimit struct {
	// Initial is the limit a Guarded starts with (driver calls in
	// flight). Default Max.
	Initial int
	// Min is the lowest the limit goes under overload. Default 1.
	Min int
	// Max is the highest the limit goes. Default 1000 (above the driver's
	// default connection pool of 100: on a healthy server it does not
	// bind).
	Max int
}

// DefaultAdaptiveLimit returns the adaptive limit a Guarded has unless
// WithAdaptiveLimit or WithoutAdaptiveLimit says otherwise: Initial 1000,
// Min 1, Max 1000.
func DefaultAdaptiveLimit() AdaptiveLimit { return AdaptiveLimit{Initial: 1000, Min: 1, Max: 1000} }

// limiter builds the engine's Limiter of cfg for the collection db.coll,
// reporting its changes to h; nil when the limit is off.
func (c *config) limiter(db, coll string, h hooks.Hooks) *engine.Limiter {
	l := DefaultAdaptiveLimit()
	if c.limit != nil {
		l = *c.limit
	}
	if l.Max < 1 {
		return nil
	}
	return engine.NewLimiter(l.Initial, l.Min, l.Max, func(ctx context.Context, ch engine.LimitChange) {
		h.LimitChanged(ctx, &hooks.LimitChange{Database: db, Collection: coll, Limit: ch.Limit, InFlight: ch.InFlight, Reason: ch.Reason})
	})
}
