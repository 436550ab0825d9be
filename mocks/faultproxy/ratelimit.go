package faultproxy

import (
	"fmt"
	"math"
	"sync"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// The bed's ingress request rate limiter: MongoDB 8.2+ (and 8.0.20+ on
// mongos) can admit commands at a configured rate through a token bucket
// and refuse the others at once with 462 IngressRequestRateLimitExceeded,
// labelled SystemOverloadedError and RetryableError (SERVER-104932, the
// ingress admission rate limiter; its burst is given in seconds of the
// rate, SERVER-106020). A driver that implements the client-backpressure
// specification retries such a refusal itself, with backoff (the Go
// driver v2.10: up to maxAdaptiveRetries = 2 times, from 100 ms doubling,
// or from the reply's baseBackoffMS).

// FaultRateLimited: the command was refused by a RateLimiter with 462
// IngressRequestRateLimitExceeded and not forwarded.
const FaultRateLimited FaultKind = "rate_limited"

// RateLimit configures a RateLimiter.
type RateLimit struct {
	// PerSecond is the rate at which commands are admitted (tokens added
	// per second). It must be positive.
	PerSecond float64
	// Burst is the bucket's size in commands: how many may be admitted at
	// once after a quiet period. 0 means one second of PerSecond (at
	// least 1).
	Burst int
	// BaseBackoff, when positive, is sent in each refusal as baseBackoffMS
	// (an int64, beside errorLabels): the server's suggested base of the
	// client's backoff (client-backpressure specification).
	BaseBackoff time.Duration
	// RefusalCost is the part of a token a refused command takes (0: a
	// refusal is free; at most 1). A server spends work on each command it
	// refuses (reading it, answering it, the connection's turn), so
	// clients that keep refused commands coming lower what it admits: the
	// bucket may go below zero, and admits again once it has refilled to
	// one token.
	RefusalCost float64
}

// RateLimiter is a token bucket shared by the commands of every rule that
// uses its Fault: a command is admitted when a token is left (and takes
// it), refused with 462 otherwise. The bucket starts full. It is safe for
// concurrent use.
type RateLimiter struct {
	cfg RateLimit
	now func() time.Time

	mu       sync.Mutex
	tokens   float64
	last     time.Time
	admitted int64
	refused  int64
}

// NewRateLimiter returns a full bucket for cfg, or an error naming the
// field out of range.
func NewRateLimiter(cfg RateLimit) (*RateLimiter, error) {
	if !(cfg.PerSecond > 0) || math.IsInf(cfg.PerSecond, 0) {
		return nil, fmt.Errorf("faultproxy: RateLimit.PerSecond %v: want a positive rate", cfg.PerSecond)
	}
	if cfg.Burst < 0 {
		return nil, fmt.Errorf("faultproxy: RateLimit.Burst %d: want ≥ 0", cfg.Burst)
	}
	if cfg.BaseBackoff < 0 {
		return nil, fmt.Errorf("faultproxy: RateLimit.BaseBackoff %v: want ≥ 0", cfg.BaseBackoff)
	}
	if !(cfg.RefusalCost >= 0 && cfg.RefusalCost <= 1) {
		return nil, fmt.Errorf("faultproxy: RateLimit.RefusalCost %v: want 0 to 1", cfg.RefusalCost)
	}
	if cfg.Burst == 0 {
		cfg.Burst = max(1, int(cfg.PerSecond))
	}
	return &RateLimiter{cfg: cfg, now: time.Now, tokens: float64(cfg.Burst)}, nil
}

// Fault returns the fault that applies the limiter to the commands of a
// rule: an admitted command goes on as if the rule had not fired (the
// next rule's fault, or normal forwarding, applies); a refused one is
// answered {ok: 0, errmsg: "Rate limiter 'ingressRequestRateLimiter' rate
// exceeded", code: 462, codeName: "IngressRequestRateLimitExceeded",
// errorLabels: ["SystemOverloadedError", "RetryableError"]} (with
// baseBackoffMS when configured) and counted as FaultRateLimited. Every
// occurrence the rule selects is counted against the bucket, a driver's
// own retries included.
func (l *RateLimiter) Fault() Fault { return Fault{limiter: l} }

// Counts returns the commands the limiter admitted and refused so far.
func (l *RateLimiter) Counts() (admitted, refused int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.admitted, l.refused
}

// Reset refills the bucket and zeroes the counts.
func (l *RateLimiter) Reset() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.tokens, l.last, l.admitted, l.refused = float64(l.cfg.Burst), time.Time{}, 0, 0
}

// allow takes a token if one is left.
func (l *RateLimiter) allow() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	if !l.last.IsZero() {
		l.tokens = min(float64(l.cfg.Burst), l.tokens+now.Sub(l.last).Seconds()*l.cfg.PerSecond)
	}
	l.last = now
	if l.tokens >= 1 {
		l.tokens--
		l.admitted++
		return true
	}
	l.refused++
	l.tokens -= l.cfg.RefusalCost
	return false
}

// refusal is the error of a refused command.
func (l *RateLimiter) refusal() CommandError {
	e := CommandError{
		Code:     462,
		CodeName: "IngressRequestRateLimitExceeded",
		Message:  "Rate limiter 'ingressRequestRateLimiter' rate exceeded",
		Labels:   []string{"SystemOverloadedError", "RetryableError"},
	}
	if l.cfg.BaseBackoff > 0 {
		e.Extra = bson.D{{Key: "baseBackoffMS", Value: l.cfg.BaseBackoff.Milliseconds()}}
	}
	return e
}

// resolveLimit is resolve for a limiter's Fault: the refusal, or no fault.
func (l *RateLimiter) resolveLimit() (Fault, bool) {
	if l.allow() {
		return Fault{}, false
	}
	return Fault{kind: FaultRateLimited, cmdErr: l.refusal()}, true
}
