// Package loglimit is the one rate limit of writeguard's log records: at
// most one record per key (an error code, a kind of event) per interval,
// with bounded memory. The guarded collection and otelhook both use it.
package loglimit

import (
	"sync"
	"time"
)

// MaxKeys bounds the keys a Limiter remembers, should a server send
// unboundedly many distinct codes; past it the Limiter starts afresh.
const MaxKeys = 1024

// Limiter allows one record per key per Every. Its zero value is not
// usable; make one with New. It is safe for concurrent use.
type Limiter struct {
	every time.Duration
	now   func() time.Time
	mu    sync.Mutex
	last  map[int64]time.Time
}

// New returns a Limiter allowing one record per key per every, reading the
// time from now (time.Now when nil).
func New(every time.Duration, now func() time.Time) *Limiter {
	if now == nil {
		now = time.Now
	}
	return &Limiter{every: every, now: now, last: map[int64]time.Time{}}
}

// Allow reports whether a record for key may be written now, and if so
// remembers it.
func (l *Limiter) Allow(key int64) bool {
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	if t, ok := l.last[key]; ok && now.Sub(t) < l.every {
		return false
	}
	if len(l.last) >= MaxKeys {
		clear(l.last)
	}
	l.last[key] = now
	return true
}
