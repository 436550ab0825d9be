package writeguard_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/writeguard/writeguard"
	"github.com/writeguard/writeguard/hooks"
	"github.com/writeguard/writeguard/mocks"
	"github.com/writeguard/writeguard/mocks/faultproxy"
	"github.com/writeguard/writeguard/policy"
)

// With the real driver (v2.10.0) on faultproxy's null backend as a
// one-member replica set (retryable writes on): the first update command
// is answered {ok: 0, code: 10107, errorLabels: [NoWritesPerformed]}, which
// the driver does not retry (no RetryableWriteError label) and returns as
// it is; the next command succeeds. Without the monitor an error labelled
// NoWritesPerformed may hide an earlier applied attempt (operation.go
// 637-646): the update ends unknown and is not sent again. With
// writeguard.Monitor the call's one finished event shows its only command
// refused before it ran: the update is sent again and written.
func TestMonitorRealDriverNoWritesPerformed(t *testing.T) {
	for _, mon := range []bool{false, true} {
		t.Run(map[bool]string{false: "without", true: "with"}[mon], func(t *testing.T) {
			ctx := context.Background()
			script := faultproxy.MustScript(faultproxy.On("update").Do(faultproxy.ErrorReply(faultproxy.CommandError{
				Code: 10107, CodeName: "NotWritablePrimary", Labels: []string{"NoWritesPerformed"},
			})))
			p, client := proxyClient(t, script, mon)
			rec := &mocks.Recorder{}
			g, err := writeguard.Wrap(client.Database("db").Collection("acct"), writeguard.WithHooks(rec.Hooks()),
				writeguard.WithBackoff(policy.Backoff{Base: time.Millisecond, Cap: time.Millisecond}))
			if err != nil {
				t.Fatal(err)
			}
			dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			_, err = g.UpdateOne(dctx, bson.D{{Key: "_id", Value: "acct-1"}}, bson.D{{Key: "$inc", Value: bson.D{{Key: "balance", Value: 100}}}})
			n := p.Stats().Commands["update"]
			if mon {
				if err != nil || n != 2 {
					t.Errorf("err %v, %d update commands: want written after 2", err, n)
				}
				if ends := rec.AttemptEnds(); len(ends) == 0 || ends[0].WireCommands != 1 {
					t.Errorf("attempt ends %+v: want the first with WireCommands 1", ends)
				}
				return
			}
			o := oneOutcome(t, err)
			if o.Disposition != writeguard.OutcomeUnknown || !o.MaybeWritten || n != 1 {
				t.Errorf("outcome %s MaybeWritten %v after %d update commands: want unknown after 1", o.Disposition, o.MaybeWritten, n)
			}
		})
	}
}

// The adaptive limit reads the driver's hidden overload retries through
// writeguard.Monitor: the first insert is answered 462 labelled
// SystemOverloadedError and RetryableError, the driver retries it itself
// (operation.go 859-877) and the retry succeeds, so the call's final error
// is nil. With the monitor the limit is halved ("overload_observed");
// without it nothing in the final error shows the overload and the limit
// stays.
func TestMonitorFeedsAdaptiveLimit(t *testing.T) {
	for _, mon := range []bool{false, true} {
		t.Run(map[bool]string{false: "without", true: "with"}[mon], func(t *testing.T) {
			ctx := context.Background()
			script := faultproxy.MustScript(faultproxy.On("insert").Do(faultproxy.ErrorReply(faultproxy.CommandError{
				Code: 462, CodeName: "IngressRequestRateLimitExceeded",
				Labels: []string{"SystemOverloadedError", "RetryableError"},
			})))
			p, client := proxyClient(t, script, mon)
			var changes []hooks.LimitChange
			var mu sync.Mutex
			h := hooks.Hooks{LimitChanged: func(_ context.Context, ev *hooks.LimitChange) {
				mu.Lock()
				changes = append(changes, *ev)
				mu.Unlock()
			}}
			g, err := writeguard.Wrap(client.Database("db").Collection("lim"), writeguard.WithHooks(h),
				writeguard.WithAdaptiveLimit(writeguard.AdaptiveLimit{Initial: 8, Min: 1, Max: 8}))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := g.InsertOne(ctx, bson.D{{Key: "_id", Value: "l-1"}}); err != nil {
				t.Fatalf("InsertOne: %v, want written by the driver's retry", err)
			}
			if n := p.Stats().Commands["insert"]; n != 2 {
				t.Fatalf("%d insert commands, want 2 (the overloaded one and the driver's retry)", n)
			}
			mu.Lock()
			defer mu.Unlock()
			var cut bool
			for _, c := range changes {
				cut = cut || c.Reason == "overload_observed" && c.Limit < 8
			}
			if cut != mon {
				t.Errorf("limit changes %+v: halved on the observed overload %v, want %v", changes, cut, mon)
			}
		})
	}
}

// proxyClient starts faultproxy's null backend as a one-member replica set
// running script, and a client of it, with writeguard.Monitor when mon;
// both end with the test.
func proxyClient(t *testing.T, script *faultproxy.Script, mon bool) (*faultproxy.Proxy, *mongo.Client) {
	t.Helper()
	ctx := context.Background()
	p, err := faultproxy.New(faultproxy.WithReplicaSet("rs0"), faultproxy.WithScript(script))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	opts := options.Client().ApplyURI(p.URI())
	if mon {
		opts.SetMonitor(writeguard.Monitor(nil))
	}
	client, err := mongo.Connect(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.Disconnect(ctx) })
	return p, client
}
