package mocks

import (
	"sync"
	"time"
)

// Clock is a fake policy.Clock for deterministic tests: After does not
// sleep, it moves the clock forward by d and fires at once, and records d.
// Safe for concurrent use.
//
// Deprecated: tests control time with testing/synctest (Go 1.25+): run the
// test in synctest.Test and the real clock, the backoff waits and context
// deadlines all move on the bubble's fake clock together, which a fake
// Clock cannot do for a context's deadline. Kept working this release;
// it will be removed in a later one.
type Clock struct {
	mu     sync.Mutex
	now    time.Time
	sleeps []time.Duration
}

// NewClock returns a Clock reading start.
//
// Deprecated: tests control time with testing/synctest (Go 1.25+): run the
// test in synctest.Test and the real clock, the backoff waits and context
// deadlines all move on the bubble's fake clock together, which a fake
// Clock cannot do for a context's deadline. Kept working this release;
// it will be removed in a later one.
func NewClock(start time.Time) *Clock { return &Clock{now: start} }

// Now returns the fake time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// After advances the clock by d, records d and returns a channel that has
// already fired.
func (c *Clock) After(d time.Duration) <-chan time.Time {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.sleeps = append(c.sleeps, d)
	now := c.now
	c.mu.Unlock()
	ch := make(chan time.Time, 1)
	ch <- now
	return ch
}

// Sleeps returns the durations passed to After, in order.
func (c *Clock) Sleeps() []time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]time.Duration(nil), c.sleeps...)
}
