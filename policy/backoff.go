package policy

import (
	"fmt"
	"math"
	"math/rand/v2"
	"time"
)

// Backoff is exponential backoff with full jitter, bounded by a number of
// attempts and a total elapsed time.
//
// The delay before retry n (n ≥ 1; retry 1 is the second attempt) is drawn
// uniformly from [0, min(Cap, Base·Multiplier^(n-1))): "full jitter" as in
// the AWS Architecture Blog's "Exponential Backoff And Jitter" and the
// MongoDB client-backpressure spec (base 100 ms, cap 10 s, doubling). A
// Backoff is a value; copy it freely. It is safe for concurrent use when
// Jitter is.
type Backoff struct {
	// Base is the ceiling of the first retry's delay. Default 100 ms.
	Base time.Duration
	// Cap bounds every delay's ceiling. Default 10 s.
	Cap time.Duration
	// Multiplier grows the ceiling per retry. Default 2; must be ≥ 1.
	Multiplier float64
	// MaxAttempts bounds the attempts of one document or model, the first
	// included. Default 5; 1 disables retries.
	MaxAttempts int
	// MaxElapsed bounds the time one call spends retrying, from its
	// first attempt; a retry whose delay would end later is not started.
	// Default 30 s; 0 after Validate means the default, a negative value
	// means no limit.
	MaxElapsed time.Duration
	// Jitter returns a number in [0, 1). nil uses math/rand/v2. Tests
	// inject a fixed sequence.
	Jitter func() float64
}

// Default backoff settings (see Backoff's fields).
const (
	DefaultBase        = 100 * time.Millisecond
	DefaultCap         = 10 * time.Second
	DefaultMultiplier  = 2.0
	DefaultMaxAttempts = 5
	DefaultMaxElapsed  = 30 * time.Second
)

// DefaultBackoff returns the default Backoff: base 100 ms, cap 10 s,
// multiplier 2, 5 attempts, 30 s elapsed.
func DefaultBackoff() Backoff {
	return Backoff{Base: DefaultBase, Cap: DefaultCap, Multiplier: DefaultMultiplier, MaxAttempts: DefaultMaxAttempts, MaxElapsed: DefaultMaxElapsed}
}

// WithDefaults returns b with every zero field set to its default.
func (b Backoff) WithDefaults() Backoff {
	if b.Base == 0 {
		b.Base = DefaultBase
	}
	if b.Cap == 0 {
		b.Cap = DefaultCap
	}
	if b.Multiplier == 0 {
		b.Multiplier = DefaultMultiplier
	}
	if b.MaxAttempts == 0 {
		b.MaxAttempts = DefaultMaxAttempts
	}
	if b.MaxElapsed == 0 {
		b.MaxElapsed = DefaultMaxElapsed
	}
	return b
}

// Validate returns an error naming the first field out of range: Base and
// Cap must be positive with Base ≤ Cap, Multiplier ≥ 1 and finite,
// MaxAttempts ≥ 1. Zero fields are taken as their defaults.
func (b Backoff) Validate() error {
	b = b.WithDefaults()
	switch {
	case b.Base < 0:
		return fmt.Errorf("policy: Backoff.Base must be positive, got %v", b.Base)
	case b.Cap < 0:
		return fmt.Errorf("policy: Backoff.Cap must be positive, got %v", b.Cap)
	case b.Base > b.Cap:
		return fmt.Errorf("policy: Backoff.Base (%v) is larger than Backoff.Cap (%v)", b.Base, b.Cap)
	case b.Multiplier < 1 || math.IsInf(b.Multiplier, 0) || math.IsNaN(b.Multiplier):
		return fmt.Errorf("policy: Backoff.Multiplier must be a finite number ≥ 1, got %v", b.Multiplier)
	case b.MaxAttempts < 1:
		return fmt.Errorf("policy: Backoff.MaxAttempts must be ≥ 1, got %d", b.MaxAttempts)
	}
	return nil
}

// Ceiling returns the upper bound of the delay before retry n (n ≥ 1):
// min(Cap, Base·Multiplier^(n-1)). Zero fields count as their defaults.
func (b Backoff) Ceiling(n int) time.Duration {
	b = b.WithDefaults()
	if n < 1 {
		n = 1
	}
	c := float64(b.Base) * math.Pow(b.Multiplier, float64(n-1))
	if c >= float64(b.Cap) || math.IsInf(c, 0) || math.IsNaN(c) {
		return b.Cap
	}
	return time.Duration(c)
}

// Delay returns the jittered delay before retry n (n ≥ 1), in
// [0, Ceiling(n)).
func (b Backoff) Delay(n int) time.Duration {
	j := b.Jitter
	if j == nil {
		j = rand.Float64
	}
	r := j()
	if r < 0 || r >= 1 || math.IsNaN(r) {
		r = 0
	}
	return time.Duration(r * float64(b.Ceiling(n)))
}

// Clock is the time source of the retry loop (writeguard.WithClock):
// backoff waits, attempt and call durations, the elapsed-time limit,
// envelope timestamps. The default is the wall clock.
//
// A test that makes no network I/O may instead run in a testing/synctest
// bubble, whose fake clock moves the wall clock, the backoff waits and
// the context's deadlines together. A test that talks to a server over the
// network (a real MongoDB, an embedded one, a fault proxy) cannot: a
// goroutine blocked reading a socket is never durably blocked, so the
// bubble's clock does not move while the driver waits on its connections.
// Such a test gives the loop a Clock (mocks.Clock, whose backoff waits
// pass at once and are recorded). A Clock does not move a context's
// deadline.
type Clock interface {
	Now() time.Time
	// After returns a channel that receives once d has passed.
	After(d time.Duration) <-chan time.Time
}

// RefusedWait is how long a call whose retry number n (1 for the first
// retry) the retry budget refused waits before it returns: the backoff of
// that retry and of every later one its attempt limit would have allowed
// (retries n … limit−1, each jittered as by Delay). A refusal then never
// makes a caller faster than the retries it replaced: writers that loop on
// exhausted documents send no more first attempts during an outage than
// they would have sent retries without a budget. limit above MaxAttempts
// counts as MaxAttempts.
func (b Backoff) RefusedWait(n, limit int) time.Duration {
	limit = min(limit, b.MaxAttempts)
	var d time.Duration
	for k := n; k < max(limit, n+1); k++ {
		d += b.Delay(k)
	}
	return d
}
