package replay

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
)

// ErrClockSkew is wrapped by the error of Run and Discard when the
// runner's clock and the server's differ by more than the lease (after
// allowing for the time the reading took): "clock skew beyond the lease:
// this host's clock is 7m2s behind the server's (lease 5m0s)". Nothing was
// claimed or written. Fix the host's clock (NTP), or give a longer lease.
var ErrClockSkew = errors.New("replay: clock skew beyond the lease")

// serverClock is the time of the server that holds the lease collection,
// as a runner reads it: its own clock plus the offset last measured with
// hello's localTime. Every time a runner writes in or compares with the
// lease collection, and every time it records in the DLQ (replay_tried_at,
// replayed_at, discarded_at), is this one, so runners on hosts whose
// clocks differ still agree on when a lease expires.
type serverClock struct {
	local func() time.Time
	db    *mongo.Database
	lease time.Duration

	mu     sync.Mutex
	offset time.Duration
	synced time.Time // local time of the last measurement (zero: none)
}

// resyncEvery bounds how long a measurement of the server's clock is
// used before the next claim measures it again: half the lease, at most
// 30 s.
func (c *serverClock) resyncEvery() time.Duration { return min(c.lease/2, 30*time.Second) }

// sync measures the server's clock unless the last measurement is recent
// (see resyncEvery): hello's localTime (mongodb/mongo
// src/mongo/db/repl/hello.idl, localTime: "the server's current time"; a
// BSON date, to the millisecond), taken as the server's time at the
// midpoint of the round trip. It returns an error wrapping ErrClockSkew
// when the two clocks differ by more than the lease plus half the round
// trip and a millisecond (what the reading cannot tell apart), and an
// error when the server's time cannot be read: a lease checked with an
// unknown clock is assumed, not checked.
func (c *serverClock) sync(ctx context.Context) error {
	if c == nil {
		return nil
	}
	c.mu.Lock()
	recent := !c.synced.IsZero() && c.local().Sub(c.synced) < c.resyncEvery()
	c.mu.Unlock()
	if recent {
		return nil
	}
	var raw bson.Raw
	var t0, t1 time.Time
	err := retry(ctx, func() error {
		var err error
		t0 = c.local()
		raw, err = c.db.RunCommand(ctx, bson.D{{Key: "hello", Value: 1}}).Raw()
		t1 = c.local()
		return err
	})
	if err != nil {
		return fmt.Errorf("replay: reading the server's clock (hello): %w", err)
	}
	dt, ok := raw.Lookup("localTime").DateTimeOK()
	if !ok {
		return errors.New("replay: the server's hello reply has no localTime: its clock cannot be compared with this host's, " +
			"so leases cannot be checked")
	}
	rtt := t1.Sub(t0)
	offset := time.UnixMilli(dt).Sub(t0.Add(rtt / 2))
	if slack := rtt/2 + time.Millisecond; offset.Abs() > c.lease+slack {
		skew := offset.Abs().Round(time.Millisecond)
		if skew >= time.Second {
			skew = skew.Round(time.Second)
		}
		return fmt.Errorf("%w: this host's clock is %v %s the server's (lease %v); fix the host's clock (NTP) or give a longer lease",
			ErrClockSkew, skew, map[bool]string{true: "behind", false: "ahead of"}[offset > 0], c.lease)
	}
	c.mu.Lock()
	c.offset, c.synced = offset, t1
	c.mu.Unlock()
	return nil
}

// now returns the server's time as last measured, in UTC to the
// millisecond (as BSON dates store it).
func (c *serverClock) now() time.Time {
	c.mu.Lock()
	off := c.offset
	c.mu.Unlock()
	return c.local().Add(off).UTC().Truncate(time.Millisecond)
}
