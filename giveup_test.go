package writeguard_test

import (
	"errors"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/writeguard/writeguard"
	"github.com/writeguard/writeguard/mocks"
	"github.com/writeguard/writeguard/policy"
)

// A call that gives up on a possibly applied insert reads it back, unless
// its last failure says the primary is gone (a NotPrimary or Shutdown
// category reply): then the read would be refused as well, and the
// document ends unknown, maybe written, for Remaining to send again (its
// duplicate key then leads to the read-back).
func TestGiveUpReadsBackUnlessPrimaryGone(t *testing.T) {
	notPrimary := mocks.Reply(`{"ok":0,"code":10107,"codeName":"NotWritablePrimary","errmsg":"not primary","errorLabels":["RetryableWriteError"]}`)
	cases := []struct {
		name  string
		last  mocks.Fault
		reads int
		want  writeguard.Disposition
	}{
		{"primary gone", notPrimary, 0, writeguard.OutcomeUnknown},
		{"network", mocks.DropConnection(), 1, writeguard.AlreadyWritten},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			fake := mocks.NewFake("db.giveup").Script(mocks.LoseReply(), tc.last, tc.last)
			fx := newFixture(t, fake, writeguard.WithBackoff(policy.Backoff{Base: time.Millisecond, MaxAttempts: 3, Jitter: func() float64 { return 0.5 }}))
			_, err := fx.g.InsertOne(ctx, bson.D{{Key: "n", Value: 1}})
			primary, other := fake.Reads()
			if primary+other != tc.reads {
				t.Errorf("%d reads, want %d", primary+other, tc.reads)
			}
			if tc.want == writeguard.AlreadyWritten {
				if err != nil { // already_written alone: the call succeeds
					t.Errorf("err = %v, want nil (the read-back found it)", err)
				}
				return
			}
			var r *writeguard.Report
			if !errors.As(err, &r) {
				t.Fatalf("err = %v, want a Report", err)
			}
			o := r.Outcomes[0]
			if o.Disposition != tc.want || !o.MaybeWritten || len(r.Remaining().Indexes) != 1 {
				t.Errorf("disposition %s (maybe %v, remaining %v); want %s, maybe written, in Remaining", o.Disposition, o.MaybeWritten, r.Remaining().Indexes, tc.want)
			}
		})
	}
}
