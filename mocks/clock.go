package mocks

import (
	"sync"
	"time"
)

// Clock is a fake policy.Clock for deterministic tests: After does not
// sleep, it moves the clock forward by d and fires at once, and records d.
// Safe for concurrent use. Give it to writeguard.WithClock in tests that
// do network I/O and so cannot run in a testing/synctest bubble (see
// policy.Clock).
type Clock struct {
	mu     sync.Mutex
	now    time.Time
	sleeps []time.Duration
}

// NewClock returns a Clock reading start.
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
