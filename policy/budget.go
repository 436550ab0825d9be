package policy

import (
	"fmt"
	"sync"
)

// Budget is a retry budget: a token bucket shared by every call of one
// guarded collection, so that a failing server sees fewer retries instead
// of a storm.
//
// Its numbers follow gRPC's client-side retry throttling (gRFC A6,
// "retryThrottling": maxTokens, tokenRatio): the bucket starts full at
// MaxTokens; each retry spends one token (a retry is one round of
// re-sending a call's retryable documents, one token however many
// documents and commands it holds; a retry after a failure that proves
// the server was never reached, such as a connection pool cleared before
// the command was sent, spends none); each successful attempt refunds
// Ratio tokens, up to MaxTokens; retries are refused while the bucket holds
// no more than half of MaxTokens. A retry refused by the budget leaves the
// document with the disposition "exhausted"; writeguard still waits the
// backoffs the refused retries would have waited (Backoff.RefusedWait)
// before the call returns, so that a caller who loops on exhausted
// documents does not turn the refusal into a storm of first attempts
// (measured in bench/README.md, "retry budget").
//
// A nil *Budget allows every retry (the budget is disabled). Methods are
// safe for concurrent use.
type Budget struct {
	mu     sync.Mutex
	tokens float64
	max    float64
	ratio  float64
}

// Default budget settings.
const (
	DefaultBudgetTokens = 100
	DefaultBudgetRatio  = 0.1
)

// NewBudget returns a full Budget. maxTokens must be in (0, 1000] and
// ratio in (0, 1], the ranges gRPC accepts; otherwise it returns an error
// naming the bad value.
func NewBudget(maxTokens, ratio float64) (*Budget, error) {
	if !(maxTokens > 0 && maxTokens <= 1000) {
		return nil, fmt.Errorf("policy: budget maxTokens must be in (0, 1000], got %v", maxTokens)
	}
	if !(ratio > 0 && ratio <= 1) {
		return nil, fmt.Errorf("policy: budget ratio must be in (0, 1], got %v", ratio)
	}
	return &Budget{tokens: maxTokens, max: maxTokens, ratio: ratio}, nil
}

// DefaultBudget returns a full Budget of 100 tokens refunding 0.1 per
// success: up to 50 retries in a burst, then one retry per 10 successes.
func DefaultBudget() *Budget {
	b, _ := NewBudget(DefaultBudgetTokens, DefaultBudgetRatio)
	return b
}

// Allow spends one token for a retry and reports whether the retry may
// go ahead. It returns false, spending nothing, when the bucket holds no
// more than half of its capacity.
func (b *Budget) Allow() bool {
	if b == nil {
		return true
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.tokens-1 < b.max/2 {
		return false
	}
	b.tokens--
	return true
}

// Success refunds Ratio tokens after a successful attempt.
func (b *Budget) Success() {
	if b == nil {
		return
	}
	b.mu.Lock()
	b.tokens += b.ratio
	if b.tokens > b.max {
		b.tokens = b.max
	}
	b.mu.Unlock()
}

// Tokens returns the tokens in the bucket now. A nil Budget (no budget:
// every retry allowed) has no bucket and returns 0.
func (b *Budget) Tokens() float64 {
	if b == nil {
		return 0
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.tokens
}
