package faultproxy

import "time"

// SetRateLimiterClock replaces l's time source, for tests that move time
// by hand.
func SetRateLimiterClock(l *RateLimiter, now func() time.Time) {
	l.mu.Lock()
	l.now = now
	l.mu.Unlock()
}
