package engine

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/writeguard/writeguard/policy"
)

// limitRec records a Limiter's changes.
type limitRec struct{ changes []LimitChange }

func (r *limitRec) changed(_ context.Context, ch LimitChange) { r.changes = append(r.changes, ch) }

func (r *limitRec) reasons() []string {
	var out []string
	for _, ch := range r.changes {
		out = append(out, ch.Reason)
	}
	return out
}

var bg = context.Background()

func mustAcquire(t *testing.T, l *Limiter, c *Call) uint64 {
	t.Helper()
	seq, err := l.acquire(bg, c, realClock{}, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	return seq
}

// tryAcquire reports whether c is admitted at once (a context that is
// already done makes acquire return instead of waiting).
func tryAcquire(l *Limiter, c *Call) (uint64, bool) {
	l.mu.Lock()
	ok := l.admits(c)
	l.mu.Unlock()
	if !ok {
		return 0, false
	}
	seq, err := l.acquire(bg, c, realClock{}, time.Time{})
	return seq, err == nil
}

// Overload halves the limit once per window: replies of commands admitted
// before the cut do not cut again; a new window's overload does.
func TestLimiterOverloadHalvesOncePerWindow(t *testing.T) {
	rec := &limitRec{}
	l := NewLimiter(8, 1, 8, rec.changed)
	c := &Call{}
	var seqs []uint64
	for range 8 {
		seqs = append(seqs, mustAcquire(t, l, c))
	}
	if _, ok := tryAcquire(l, c); ok {
		t.Fatal("a ninth command was admitted under a limit of 8")
	}
	for _, s := range seqs {
		l.release(bg, c, s, signalOverload) // 8 overloaded replies of one window
	}
	if lim, _ := l.Limit(); lim != 4 {
		t.Fatalf("limit %d after one window of overload, want 4", lim)
	}
	seqs = seqs[:0]
	for range 4 { // the new window, every slot taken
		seqs = append(seqs, mustAcquire(t, l, c))
	}
	for _, s := range seqs {
		l.release(bg, c, s, signalOverload)
	}
	if lim, _ := l.Limit(); lim != 2 {
		t.Fatalf("limit %d after a second window's overload, want 2", lim)
	}
	if got := rec.reasons(); len(got) != 2 || got[0] != "overload" || got[1] != "overload" {
		t.Errorf("changes %v, want two overload cuts", got)
	}
}

// A cut starts from the commands in flight when they are fewer than the
// limit: a limit far above what is used binds at once.
func TestLimiterCutFromInFlight(t *testing.T) {
	l := NewLimiter(1000, 1, 1000, nil)
	c := &Call{}
	var seqs []uint64
	for range 6 {
		seqs = append(seqs, mustAcquire(t, l, c))
	}
	l.release(bg, c, seqs[0], signalOverload)
	if lim, _ := l.Limit(); lim != 3 {
		t.Fatalf("limit %d after an overload with 6 in flight, want 3", lim)
	}
}

// Clean replies raise the limit by one per window of commands sent with
// every slot taken, up to the maximum; clean replies of commands sent
// below the limit do not raise it.
func TestLimiterAdditiveIncrease(t *testing.T) {
	rec := &limitRec{}
	l := NewLimiter(2, 1, 3, rec.changed)
	c := &Call{}
	s := mustAcquire(t, l, c)
	l.release(bg, c, s, signalClean) // one in flight of 2: not full
	if lim, _ := l.Limit(); lim != 2 || len(rec.changes) != 0 {
		t.Fatalf("limit %d, changes %v after a clean reply below the limit, want 2 and none", lim, rec.changes)
	}
	for round := 0; round < 4; round++ {
		lim, _ := l.Limit()
		var seqs []uint64
		for range lim {
			seqs = append(seqs, mustAcquire(t, l, c))
		}
		for _, s := range seqs {
			l.release(bg, c, s, signalClean)
		}
	}
	if lim, _ := l.Limit(); lim != 3 {
		t.Errorf("limit %d after full windows of clean replies, want the maximum 3", lim)
	}
	if got := rec.reasons(); len(got) != 1 || got[0] != "clean" || rec.changes[0].Limit != 3 {
		t.Errorf("changes %+v, want one raise to 3", rec.changes)
	}
}

// A waiter over the limit is admitted when a slot frees; a waiter whose
// context ends is not admitted and gets the context's error.
func TestLimiterWaitsForSlot(t *testing.T) {
	l := NewLimiter(1, 1, 1, nil)
	a, b := &Call{}, &Call{}
	s := mustAcquire(t, l, a)
	got := make(chan uint64)
	go func() { got <- mustAcquireNoT(l, b) }()
	l.release(bg, a, s, signalClean)
	s2 := <-got
	if _, in := l.Limit(); in != 1 {
		t.Fatalf("%d in flight after the waiter's admission, want 1", in)
	}
	ctx, cancel := context.WithCancel(bg)
	cancel()
	if _, err := l.acquire(ctx, a, realClock{}, time.Time{}); !errors.Is(err, context.Canceled) {
		t.Fatalf("acquire with a done context over the limit = %v, want context.Canceled", err)
	}
	l.release(bg, b, s2, signalClean)
}

func mustAcquireNoT(l *Limiter, c *Call) uint64 {
	s, err := l.acquire(bg, c, realClock{}, time.Time{})
	if err != nil {
		panic(err)
	}
	return s
}

// Past the call's MaxElapsed a waiter is admitted anyway.
func TestLimiterOverdueAdmits(t *testing.T) {
	l := NewLimiter(1, 1, 1, nil)
	a, b := &Call{}, &Call{}
	mustAcquire(t, l, a)
	if _, err := l.acquire(bg, b, realClock{}, time.Now().Add(-time.Second)); err != nil {
		t.Fatalf("overdue acquire: %v", err)
	}
	if _, in := l.Limit(); in != 2 {
		t.Errorf("%d in flight, want 2 (the overdue call admitted past the limit)", in)
	}
}

// NotPrimary replies to two calls close the target to one probing call
// (the first of them): the others are not admitted while it probes, its
// own next attempt is; a reply from a primary reopens it; a probe whose
// call ends hands the role over. A reply from a primary between two
// NotPrimary replies keeps it open.
func TestLimiterFailoverGate(t *testing.T) {
	rec := &limitRec{}
	l := NewLimiter(10, 1, 10, rec.changed)
	probe, other, third := &Call{}, &Call{}, &Call{}
	s := mustAcquire(t, l, probe)
	s2 := mustAcquire(t, l, other)
	l.release(bg, probe, s, signalNotPrimary)
	if lim, _ := l.Limit(); lim != 10 {
		t.Fatalf("limit %d after one call's NotPrimary reply, want 10 (one alone closes nothing)", lim)
	}
	l.release(bg, other, s2, signalNotPrimary)
	if lim, _ := l.Limit(); lim != 1 {
		t.Fatalf("limit %d while closed, want 1", lim)
	}
	if _, ok := tryAcquire(l, other); ok {
		t.Fatal("another call admitted while the probe holds the gate")
	}
	s = mustAcquire(t, l, probe) // the probe's retry
	l.release(bg, probe, s, signalNotPrimary)
	l.leave(probe) // the probe's call gives up
	s, ok := tryAcquire(l, third)
	if !ok {
		t.Fatal("the next call is not admitted as the probe after the first probe's call ended")
	}
	if _, ok := tryAcquire(l, other); ok {
		t.Fatal("a second call admitted while the new probe holds the gate")
	}
	l.release(bg, third, s, signalClean) // a primary answered
	if lim, _ := l.Limit(); lim != 10 {
		t.Fatalf("limit %d after the primary answered, want 10 (unchanged by the failover)", lim)
	}
	if _, ok := tryAcquire(l, other); !ok {
		t.Fatal("a call not admitted after the gate reopened")
	}
	if got := rec.reasons(); len(got) != 2 || got[0] != "not_primary" || got[1] != "primary" {
		t.Errorf("changes %v, want not_primary then primary", got)
	}
}

// ObserveOverload (the seam for a wire monitor's evidence of the driver's
// hidden retries) cuts like an overloaded reply, once per window.
func TestLimiterObserveOverload(t *testing.T) {
	rec := &limitRec{}
	l := NewLimiter(8, 1, 8, rec.changed)
	c := &Call{}
	for range 8 {
		mustAcquire(t, l, c)
	}
	l.ObserveOverload(bg)
	l.ObserveOverload(bg) // same window: no second cut
	if lim, _ := l.Limit(); lim != 4 {
		t.Fatalf("limit %d, want 4", lim)
	}
	if got := rec.reasons(); len(got) != 1 || got[0] != "overload_observed" {
		t.Errorf("changes %v, want one overload_observed", got)
	}
}

// signalOf reads a reply: NotPrimary and Shutdown category codes from the
// server close the gate; SystemOverloadedError or a throttled class cut;
// other server replies (a duplicate key) are clean; network errors say
// nothing.
func TestSignalOf(t *testing.T) {
	classify := policy.Default().Classify
	err := errors.New("x")
	cases := []struct {
		name string
		f    policy.Failure
		want signal
	}{
		{"10107", policy.Failure{Code: 10107, Origin: policy.OriginServer, Index: policy.WholeCommand}, signalNotPrimary},
		{"91", policy.Failure{Code: 91, Origin: policy.OriginServer, Index: policy.WholeCommand}, signalNotPrimary},
		{"91 overloaded", policy.Failure{Code: 91, Origin: policy.OriginServer, Index: policy.WholeCommand,
			Labels: []string{policy.LabelSystemOverloaded, policy.LabelRetryable}}, signalOverload},
		{"462 overloaded", policy.Failure{Code: 462, Origin: policy.OriginServer, Index: policy.WholeCommand,
			Labels: []string{policy.LabelSystemOverloaded, policy.LabelRetryable}}, signalOverload},
		{"16500 throttled", policy.Failure{Code: 16500, Origin: policy.OriginServer, Index: policy.WholeCommand}, signalOverload},
		{"11000", policy.Failure{Code: 11000, Origin: policy.OriginServer, Index: 0, Shape: policy.ShapeWriteError}, signalClean},
		{"network", policy.Failure{Origin: policy.OriginNetwork, Index: policy.WholeCommand}, signalNone},
	}
	for _, c := range cases {
		if got := signalOf(err, []policy.Failure{c.f}, classify); got != c.want {
			t.Errorf("%s: signal %d, want %d", c.name, got, c.want)
		}
	}
	if got := signalOf(nil, nil, classify); got != signalClean {
		t.Errorf("success: signal %d, want clean", got)
	}
}

// A NotPrimary reply, then a reply from a primary, then another call's
// NotPrimary reply: not two in a row, the target stays open.
func TestLimiterStrayNotPrimary(t *testing.T) {
	l := NewLimiter(10, 1, 10, nil)
	a, b, c := &Call{}, &Call{}, &Call{}
	sa, sb, sc := mustAcquire(t, l, a), mustAcquire(t, l, b), mustAcquire(t, l, c)
	l.release(bg, a, sa, signalNotPrimary)
	l.release(bg, b, sb, signalClean)
	l.release(bg, c, sc, signalNotPrimary)
	if lim, _ := l.Limit(); lim != 10 {
		t.Fatalf("limit %d, want 10: a reply from a primary came between the NotPrimary replies", lim)
	}
}
