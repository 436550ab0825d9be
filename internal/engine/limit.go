package engine

import (
	"context"
	"sync"
	"time"

	"github.com/writeguard/writeguard/policy"
)

// Limiter is the adaptive limit on the driver calls in flight to one
// target, shared by the calls of one engine (one Guarded). It follows two
// signals of the server's replies:
//
//   - Overload (AIMD): a reply labelled SystemOverloadedError, or a failure
//     the classifier calls throttled (IngressRequestRateLimitExceeded 462,
//     Cosmos DB's 16500; MongoDB's client-backpressure spec), halves the
//     limit (or the commands in flight, when fewer), at most once per
//     window (the replies of commands sent before the last cut do not cut
//     again); every command that met no overload and was sent with every
//     slot taken raises it by 1/limit, so by one per window of clean
//     commands, up to its maximum (a limit that is not reached does not
//     grow). A caller over the limit waits for a slot.
//   - Failover (a gate): replies of the NotPrimaryError or ShutdownError
//     category (NotWritablePrimary 10107, NotPrimaryNoSecondaryOk 13435,
//     LegacyNotPrimary 10058, InterruptedAtShutdown 11600,
//     InterruptedDueToReplStateChange 11602, NotPrimaryOrSecondary 13436,
//     PrimarySteppedDown 189, ShutdownInProgress 91: the driver's
//     notPrimaryCodes and nodeIsRecoveringCodes, x/mongo/driver/errors.go
//     45–46, from the SDAM spec's error handling) to two calls, with no
//     reply from a primary in between (one alone closes nothing), close the
//     target to one call, the probe (the first of them), which keeps
//     sending with its own backoff; the other calls wait until a reply from
//     a primary (any reply the server answered but those) reopens it, or
//     the probe's call ends and the next waiter probes. The limit itself
//     is unchanged.
//
// A waiting call waits at most until its context ends (its attempt then
// fails with the context's error, before anything is sent, as the
// driver's would) or its MaxElapsed passes (it then sends anyway). The
// zero Limiter is not usable: NewLimiter.
type Limiter struct {
	mu       sync.Mutex
	wake     chan struct{} // closed and replaced on each change that may admit a waiter, when one waits
	waiting  int           // callers waiting on wake
	limit    float64
	min, max float64
	inFlight int
	seq      uint64 // admissions so far
	cutAt    uint64 // seq at the last decrease
	down     bool   // NotPrimary-category replies to two calls: only the probe sends
	probe    *Call  // the call that probes while down; nil: the next admitted
	npFrom   *Call  // the call of the first NotPrimary reply since the last reply from a primary
	changed  func(ctx context.Context, ch LimitChange)
}

// LimitChange describes a change of a Limiter (Config.LimitChanged).
type LimitChange struct {
	// Limit is the limit on commands in flight after the change (1 while
	// the target is closed to a probe).
	Limit int
	// InFlight is the number of commands in flight at the change.
	InFlight int
	// Reason: "overload" (halved), "clean" (raised), "not_primary" (closed
	// to a probe), "primary" (reopened), "overload_observed" (halved by
	// ObserveOverload).
	Reason string
}

// NewLimiter returns a limit starting at initial commands in flight, kept
// within [lo, hi] (lo ≥ 1; hi ≥ initial). changed, when not nil, is told
// each change of the effective limit (outside the lock: it must not call
// back into the Limiter).
func NewLimiter(initial, lo, hi int, changed func(ctx context.Context, ch LimitChange)) *Limiter {
	lo = max(lo, 1)
	hi = max(hi, lo)
	initial = min(max(initial, lo), hi)
	return &Limiter{wake: make(chan struct{}), limit: float64(initial), min: float64(lo), max: float64(hi), changed: changed}
}

// Limit returns the current limit (1 while the target is closed to a
// probe) and the commands in flight.
func (l *Limiter) Limit() (limit, inFlight int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.effective(), l.inFlight
}

func (l *Limiter) effective() int {
	if l.down {
		return 1
	}
	return int(l.limit)
}

// admits reports whether c may send now, and takes the probe role for c
// when the target is closed and nobody holds it. Called with l.mu held.
func (l *Limiter) admits(c *Call) bool {
	if l.down {
		if l.probe == nil {
			l.probe = c
		}
		return l.probe == c
	}
	return l.inFlight < int(l.limit)
}

// acquire waits for a slot for one command of c. It returns the
// admission's sequence number, or ctx's error when ctx ends first (nothing
// was sent). Past until (the call's MaxElapsed; zero: none) it admits c
// anyway.
func (l *Limiter) acquire(ctx context.Context, c *Call, clock Clock, until time.Time) (uint64, error) {
	var late <-chan time.Time
	overdue := false
	for {
		l.mu.Lock()
		if overdue || l.admits(c) {
			l.inFlight++
			l.seq++
			s := l.seq
			l.mu.Unlock()
			return s, nil
		}
		wake := l.wake
		l.waiting++
		l.mu.Unlock()
		if late == nil && !until.IsZero() {
			late = clock.After(max(until.Sub(clock.Now()), 0))
		}
		var err error
		select {
		case <-wake:
		case <-late:
			overdue = true
		case <-ctx.Done():
			err = ctx.Err()
		}
		l.mu.Lock()
		l.waiting--
		l.mu.Unlock()
		if err != nil {
			return 0, err
		}
	}
}

// signal is what one reply says to the Limiter.
type signal int

const (
	signalNone       signal = iota // no reply from the server (network, timeout, client)
	signalClean                    // the server answered as a primary, no overload
	signalOverload                 // SystemOverloadedError or a throttled failure
	signalNotPrimary               // NotPrimaryError or ShutdownError category
)

// release ends the command admitted as seq, with what its reply said.
func (l *Limiter) release(ctx context.Context, c *Call, seq uint64, s signal) {
	l.mu.Lock()
	full := l.inFlight >= int(l.limit) // the command was sent with every slot taken
	l.inFlight--
	before := l.effective()
	reason := ""
	switch s {
	case signalNotPrimary:
		l.notPrimary(c, &reason)
	case signalOverload:
		l.npFrom = nil
		l.reopen()
		if seq > l.cutAt {
			l.cut(l.inFlight + 1)
			reason = "overload"
		}
	case signalClean:
		l.npFrom = nil
		if l.reopen() {
			reason = "primary"
		}
		if full {
			l.limit = min(l.max, l.limit+1/l.limit)
		}
		if reason == "" && int(l.limit) != before {
			reason = "clean"
		}
	}
	l.notify(ctx, before, reason)
}

// cut halves the limit, from the commands in flight when they are fewer
// (a limit far above what is used would take many halvings to bind), and
// opens a new window: replies of commands admitted before it do not cut
// again. Called with l.mu held.
func (l *Limiter) cut(inFlight int) {
	l.limit = max(l.min, min(l.limit, float64(max(inFlight, 1)))/2)
	l.cutAt = l.seq
}

// notPrimary records a NotPrimary-category reply to c: the second call
// to get one, with no reply from a primary in between, closes the target;
// the first of them probes. One such reply alone (a stray stepdown reply,
// a node that answered from a stale view) closes nothing. Called with
// l.mu held.
func (l *Limiter) notPrimary(c *Call, reason *string) {
	switch {
	case l.down:
	case l.npFrom == nil || l.npFrom == c:
		l.npFrom = c
		return
	default:
		l.down, *reason = true, "not_primary"
	}
	if l.probe == nil {
		l.probe = c
		if l.npFrom != nil {
			l.probe = l.npFrom
		}
	}
}

// reopen ends a failover's gate; it reports whether the target was closed.
// Called with l.mu held.
func (l *Limiter) reopen() bool {
	if !l.down {
		return false
	}
	l.down, l.probe = false, nil
	return true
}

// notify wakes the waiters and, when the effective limit changed or the
// gate moved, tells changed. It releases l.mu.
func (l *Limiter) notify(ctx context.Context, before int, reason string) {
	if l.waiting > 0 {
		close(l.wake)
		l.wake = make(chan struct{})
	}
	after, inFlight := l.effective(), l.inFlight
	l.mu.Unlock()
	if l.changed != nil && reason != "" && (after != before || reason == "primary" || reason == "not_primary") {
		l.changed(ctx, LimitChange{Limit: after, InFlight: inFlight, Reason: reason})
	}
}

// leave drops c's probe role when its call ends while the target is
// closed: the next waiter probes.
func (l *Limiter) leave(c *Call) {
	l.mu.Lock()
	if l.npFrom == c {
		l.npFrom = nil
	}
	if l.probe != c {
		l.mu.Unlock()
		return
	}
	l.probe = nil
	l.notify(context.Background(), l.effective(), "")
}

// ObserveOverload is the seam for evidence the final error does not show:
// a reply labelled SystemOverloadedError that the driver retried inside
// one call (v2.10.0 retries such a reply itself, twice), seen by a wire
// command monitor. It halves the limit as an overloaded reply does, at
// most once per window (a cut waits for at least one admission after the
// previous one).
func (l *Limiter) ObserveOverload(ctx context.Context) {
	l.mu.Lock()
	before := l.effective()
	reason := ""
	if l.seq > l.cutAt {
		l.cut(l.inFlight)
		reason = "overload_observed"
	}
	l.notify(ctx, before, reason)
}

// signalOf reads what an attempt's outcome says to the Limiter: err nil is
// clean; fails are the attempt's failures (policy.Extract).
func signalOf(err error, fails []policy.Failure, classify func(policy.Failure) policy.Class) signal {
	if err == nil {
		return signalClean
	}
	out := signalNone
	for i := range fails {
		f := &fails[i]
		switch {
		case f.HasLabel(policy.LabelSystemOverloaded) || f.Origin == policy.OriginServer && classify(*f) == policy.Throttled:
			out = signalOverload // before the codes: an overloaded 91 is overload
		case notPrimaryCode(f.Code) && f.Origin == policy.OriginServer:
			return signalNotPrimary
		case f.Origin == policy.OriginServer && out == signalNone:
			out = signalClean
		}
	}
	return out
}

// notPrimaryCodes are the NotPrimaryError and ShutdownError category codes
// the driver reads as a primary gone (x/mongo/driver/errors.go 45–46).
var notPrimaryCodes = [...]int32{10107, 13435, 10058, 11600, 11602, 13436, 189, 91}

func notPrimaryCode(code int32) bool {
	for _, c := range notPrimaryCodes {
		if c == code {
			return true
		}
	}
	return false
}
