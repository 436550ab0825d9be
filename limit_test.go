package writeguard_test

import (
	"context"
	"slices"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/writeguard/writeguard"
	"github.com/writeguard/writeguard/hooks"
	"github.com/writeguard/writeguard/mocks"
)

// The adaptive limit reports its changes through hooks.LimitChanged: an
// overloaded reply cuts it (from the one command in flight, to the
// minimum), the clean retry raises it; one call's NotPrimary reply alone
// does not close the collection.
// WithoutAdaptiveLimit turns it off: no change is reported.
func TestAdaptiveLimitChanges(t *testing.T) {
	overload := mocks.Reply(`{"ok":0,"code":462,"codeName":"IngressRequestRateLimitExceeded","errmsg":"rate exceeded","errorLabels":["SystemOverloadedError","RetryableError"]}`)
	notPrimary := mocks.Reply(`{"ok":0,"code":10107,"codeName":"NotWritablePrimary","errmsg":"not primary","errorLabels":["RetryableWriteError"]}`)
	cases := []struct {
		name  string
		fault mocks.Fault
		opts  []writeguard.Option
		want  []string
		limit []int
	}{
		{"overload", overload, nil, []string{"overload", "clean"}, []int{1, 2}},
		// One call's NotPrimary reply alone closes nothing (two calls' do:
		// internal/engine TestLimiterFailoverGate).
		{"not primary", notPrimary, nil, nil, nil},
		{"overload, limit set", overload, []writeguard.Option{writeguard.WithAdaptiveLimit(writeguard.AdaptiveLimit{Initial: 8, Min: 2, Max: 8})}, []string{"overload"}, []int{2}},
		{"off", overload, []writeguard.Option{writeguard.WithoutAdaptiveLimit()}, nil, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			var limits []int
			h := hooks.Hooks{LimitChanged: func(_ context.Context, ev *hooks.LimitChange) {
				if ev.Collection != "c" || ev.Database != "db" {
					t.Errorf("change for %s.%s, want db.c", ev.Database, ev.Collection)
				}
				got, limits = append(got, ev.Reason), append(limits, ev.Limit)
			}}
			fake := mocks.NewFake("db.c").Script(tc.fault)
			fx := newFixture(t, fake, append(tc.opts, writeguard.WithHooks(h))...)
			if _, err := fx.g.InsertMany(ctx, []any{bson.D{{Key: "n", Value: 1}}, bson.D{{Key: "n", Value: 2}}}); err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, tc.want) || !slices.Equal(limits, tc.limit) {
				t.Errorf("changes %v to %v, want %v to %v", got, limits, tc.want, tc.limit)
			}
		})
	}
}
