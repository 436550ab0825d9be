package faultproxy_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/writeguard/writeguard/mocks/faultproxy"
)

// TestRateLimiterRefusesAboveTheRate: a bucket of 2 at 10 commands per
// second admits two inserts at once and refuses the third with the
// server's 462 reply (labels, baseBackoffMS); after 100 ms (a token) it
// admits one more. An admitted insert goes on to the next rule (which
// counts every insert: the fourth is its 4th occurrence).
func TestRateLimiterRefusesAboveTheRate(t *testing.T) {
	l, err := faultproxy.NewRateLimiter(faultproxy.RateLimit{PerSecond: 10, Burst: 2, BaseBackoff: 250 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1_700_000_000, 0)
	faultproxy.SetRateLimiterClock(l, func() time.Time { return now })
	script := faultproxy.MustScript(
		faultproxy.On("insert").In("app.users").Always().Do(l.Fault()),
		faultproxy.On("insert").In("app.users").Nth(4).Do(faultproxy.RejectDocuments(
			func(bson.Raw) bool { return true }, faultproxy.WriteError{Code: 112, Message: "write conflict"})),
	)
	p := startProxy(t, faultproxy.WithScript(script))
	coll := connect(t, p.URI(), false).Database("app").Collection("users")
	ctx := opCtx(t)

	for i := range 2 {
		if _, err := coll.InsertOne(ctx, bson.D{{Key: "n", Value: i}}); err != nil {
			t.Fatalf("insert %d within the burst: %v", i, err)
		}
	}
	_, err = coll.InsertOne(ctx, bson.D{{Key: "n", Value: 2}})
	var ce mongo.CommandError
	if !errors.As(err, &ce) {
		t.Fatalf("insert over the rate: %v (%T), want a CommandError", err, err)
	}
	if ce.Code != 462 || ce.Name != "IngressRequestRateLimitExceeded" || !strings.Contains(ce.Message, "ingressRequestRateLimiter") ||
		!ce.HasErrorLabel("SystemOverloadedError") || !ce.HasErrorLabel("RetryableError") {
		t.Errorf("refusal = %+v", ce)
	}
	if v, err := ce.Raw.LookupErr("baseBackoffMS"); err != nil || v.Int64() != 250 {
		t.Errorf("baseBackoffMS = %v, %v; want 250", v, err)
	}
	now = now.Add(100 * time.Millisecond) // one token
	_, err = coll.InsertOne(ctx, bson.D{{Key: "n", Value: 3}})
	var we mongo.WriteException
	if !errors.As(err, &we) || len(we.WriteErrors) != 1 || we.WriteErrors[0].Code != 112 {
		t.Fatalf("admitted insert: %v; want the next rule's write conflict", err)
	}
	if a, r := l.Counts(); a != 3 || r != 1 {
		t.Errorf("Counts = %d admitted, %d refused; want 3, 1", a, r)
	}
	st := p.Stats()
	if st.Faults[faultproxy.FaultRateLimited] != 1 || st.Count("insert") != 4 || st.Forwarded["insert"] != 2 {
		t.Errorf("stats: faults %v, inserts %d, forwarded %d; want 1 rate_limited, 4, 2", st.Faults, st.Count("insert"), st.Forwarded["insert"])
	}
}

// TestRateLimiterMeetsTheDriversRetries: on a replica set the driver
// retries an overload refusal itself (client-backpressure specification:
// maxAdaptiveRetries, 2 by default in the Go driver), so one InsertOne
// refused throughout is three commands on the wire, each counted against
// the bucket.
func TestRateLimiterMeetsTheDriversRetries(t *testing.T) {
	l, err := faultproxy.NewRateLimiter(faultproxy.RateLimit{PerSecond: 0.001, Burst: 1})
	if err != nil {
		t.Fatal(err)
	}
	p := startProxy(t, faultproxy.WithReplicaSet("rs0"), faultproxy.WithScript(faultproxy.MustScript(
		faultproxy.On("insert").Always().Do(l.Fault()))))
	coll := connect(t, p.URI(), true).Database("app").Collection("users")
	ctx := opCtx(t)
	if _, err := coll.InsertOne(ctx, bson.D{{Key: "n", Value: 1}}); err != nil {
		t.Fatalf("first insert: %v", err)
	}
	_, err = coll.InsertOne(ctx, bson.D{{Key: "n", Value: 2}})
	var ce mongo.CommandError
	if !errors.As(err, &ce) || ce.Code != 462 {
		t.Fatalf("second insert: %v; want 462", err)
	}
	if a, r := l.Counts(); a != 1 || r != 3 {
		t.Errorf("Counts = %d admitted, %d refused; want 1, 3 (the refused attempt and the driver's two retries)", a, r)
	}
	if n := p.Stats().Count("insert"); n != 4 {
		t.Errorf("inserts on the wire = %d, want 4", n)
	}
}

// TestRateLimitConfig: bad settings are refused by name; a zero Burst is
// one second of the rate; a limiter cannot hide in a RandomSchedule.
func TestRateLimitConfig(t *testing.T) {
	for _, c := range []struct {
		cfg  faultproxy.RateLimit
		want string
	}{
		{faultproxy.RateLimit{}, "PerSecond"},
		{faultproxy.RateLimit{PerSecond: -1}, "PerSecond"},
		{faultproxy.RateLimit{PerSecond: 1, Burst: -1}, "Burst"},
		{faultproxy.RateLimit{PerSecond: 1, BaseBackoff: -time.Second}, "BaseBackoff"},
		{faultproxy.RateLimit{PerSecond: 1, RefusalCost: 1.5}, "RefusalCost"},
	} {
		if _, err := faultproxy.NewRateLimiter(c.cfg); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("NewRateLimiter(%+v) = %v; want an error naming %s", c.cfg, err, c.want)
		}
	}
	l, err := faultproxy.NewRateLimiter(faultproxy.RateLimit{PerSecond: 3})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1_700_000_000, 0)
	faultproxy.SetRateLimiterClock(l, func() time.Time { return now })
	p := startProxy(t, faultproxy.WithScript(faultproxy.MustScript(faultproxy.On("ping").Always().Do(l.Fault()))))
	db := connect(t, p.URI(), false).Database("admin")
	refused := 0
	for range 5 {
		if err := db.RunCommand(opCtx(t), bson.D{{Key: "ping", Value: 1}}).Err(); err != nil {
			refused++
		}
	}
	if refused != 2 {
		t.Errorf("5 pings at once with a burst of one second of 3/s: %d refused, want 2", refused)
	}
	_, err = faultproxy.NewScript(faultproxy.On("insert").Always().Do(faultproxy.RandomSchedule(1, faultproxy.Rate{P: 0.5, Fault: l.Fault()})))
	if err == nil || !strings.Contains(err.Error(), "RateLimiter") {
		t.Errorf("a limiter in a RandomSchedule: %v; want an error", err)
	}
}

// TestRateLimiterRefusalCost: with RefusalCost 0.5 each refusal takes half
// a token, so refused commands delay the next admission: after a burst of
// one and two refusals the bucket is at -1, and one token needs 0.2 s at
// 10/s instead of 0.1 s.
func TestRateLimiterRefusalCost(t *testing.T) {
	l, err := faultproxy.NewRateLimiter(faultproxy.RateLimit{PerSecond: 10, Burst: 1, RefusalCost: 0.5})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1_700_000_000, 0)
	faultproxy.SetRateLimiterClock(l, func() time.Time { return now })
	p := startProxy(t, faultproxy.WithScript(faultproxy.MustScript(faultproxy.On("ping").Always().Do(l.Fault()))))
	db := connect(t, p.URI(), false).Database("admin")
	ping := func() bool { return db.RunCommand(opCtx(t), bson.D{{Key: "ping", Value: 1}}).Err() == nil }
	if !ping() || ping() || ping() {
		t.Fatal("want the burst's one ping admitted and the next two refused")
	}
	now = now.Add(100 * time.Millisecond) // free refusals would admit here
	if ping() {
		t.Fatal("admitted after 0.1 s: the refusals cost nothing")
	}
	now = now.Add(250 * time.Millisecond) // -0.5 after the third refusal, +2.5 tokens
	if !ping() {
		t.Fatal("refused after the bucket refilled past one token")
	}
	if a, r := l.Counts(); a != 2 || r != 3 {
		t.Errorf("Counts = %d admitted, %d refused; want 2, 3", a, r)
	}
}
