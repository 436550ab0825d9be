package engine

import (
	"context"
	"errors"
	"time"
)

// ErrDeadlineTooClose is returned by Wait, at once and without sleeping,
// when the context's deadline would pass before the delay ends: a retry
// started after the wait could not finish in time (a retry that the
// deadline would cut mid-flight leaves its outcome unknown).
var ErrDeadlineTooClose = errors.New("writeguard: context deadline is closer than the retry delay")

// Wait sleeps for d on clock. It returns nil after d; ctx's error as soon
// as ctx is done; ErrDeadlineTooClose at once when ctx has a deadline
// earlier than now+d. d ≤ 0 returns ctx.Err(). A nil clock is the wall clock.
func Wait(ctx context.Context, clock Clock, d time.Duration) error {
	if clock == nil {
		clock = realClock{}
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if d <= 0 {
		return nil
	}
	if dl, ok := ctx.Deadline(); ok && clock.Now().Add(d).After(dl) {
		return ErrDeadlineTooClose
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-clock.After(d):
		return nil
	}
}

// Clock is the loop's time source: the wall clock, or what
// writeguard.WithClock gave (a policy.Clock).
type Clock interface {
	Now() time.Time
	After(d time.Duration) <-chan time.Time
}

// realClock is the wall clock.
type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

func (realClock) After(d time.Duration) <-chan time.Time { return time.After(d) }
