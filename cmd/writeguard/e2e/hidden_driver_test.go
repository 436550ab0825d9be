package e2e

// The driver's side of the hidden-attempt fates, pinned: the raw driver
// (v2.10.0, retryable writes on, a deadline) through the replica-set bed,
// no writeguard. Each fate's first attempt is applied; the error the
// driver returns describes its last attempt only (x/mongo/driver/operation.go).
// If a driver upgrade changes one of these, the proof rules that cite those
// lines (policy ReplyShapes) must be looked at again.

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/writeguard/writeguard/mocks/faultproxy"
)

func TestHiddenFatesDriverErrors(t *testing.T) {
	cases := []struct {
		fate    faultproxy.RetryFate
		updates int64 // update commands the proxy saw: the first attempt, and the retries that were sent
		check   func(err error) string
	}{
		{faultproxy.RetryCutByDeadline, 1, func(err error) string {
			// operation.go 747-750 (calculateMaxTimeMS) or 818-819 (ctx.Err):
			// the retry is never sent; no NetworkError label.
			if !mongo.IsTimeout(err) || mongo.IsNetworkError(err) {
				return "want a timeout before the retry's send, without NetworkError"
			}
			return ""
		}},
		{faultproxy.RetryPoolCleared, 1, func(err error) string {
			// 691-700: the checkout's poolClearedError, recorded by
			// resetForRetry, is returned as prevErr.
			if !strings.Contains(err.Error(), "connection pool") || !strings.Contains(err.Error(), "was cleared") {
				return "want the pool-cleared checkout error"
			}
			return ""
		}},
		{faultproxy.RetryOverloaded, 2, func(err error) string {
			// 639-646: the overload backoff exceeds the deadline; the retry's
			// own error is returned, NoWritesPerformed and all.
			var se mongo.ServerError
			if !errors.As(err, &se) || !se.HasErrorCode(462) || !se.HasErrorLabel("NoWritesPerformed") {
				return "want the retry's 462 labelled NoWritesPerformed"
			}
			return ""
		}},
		{faultproxy.RetryIncompleteHistory, 2, func(err error) string {
			var se mongo.ServerError
			if !errors.As(err, &se) || !se.HasErrorCode(217) {
				return "want the retry's 217"
			}
			return ""
		}},
	}
	for _, tc := range cases {
		t.Run(string(tc.fate), func(t *testing.T) {
			b, h := hiddenBed(t, false)
			const coll = "raw"
			b.seed(coll, cbD("_id", "acct-1", "balance", int64(0)))
			b.script(h.Retries(), faultproxy.On("update").In(b.ns(coll)).Do(h.ReplyLost(tc.fate)))
			ctx, cancel := context.WithTimeout(b.ctx, time.Second)
			defer cancel()
			_, err := b.db.Collection(coll).UpdateOne(ctx, cbD("_id", "acct-1"), cbD("$inc", cbD("balance", int64(100))))
			n := b.proxy.Stats().Count("update")
			t.Logf("%s: %d update commands; driver error: %v", tc.fate, n, err)
			if err == nil {
				t.Fatalf("no error")
			}
			if why := tc.check(err); why != "" {
				t.Errorf("%s: %s; got %v", tc.fate, why, err)
			}
			if n != tc.updates {
				t.Errorf("%d update commands reached the proxy, want %d", n, tc.updates)
			}
			if got := balance(t, b, coll, "acct-1"); got != 100 {
				t.Errorf("balance %d, want 100 (applied once, by the first attempt)", got)
			}
		})
	}
}

// TestRefuseMultiAtRawDriver: RefuseMultiAt(2, 121) on UpdateMany over a,
// b, c writes a, refuses b, leaves c, and answers as mongod does: n 1,
// one write error at the statement's index.
func TestRefuseMultiAtRawDriver(t *testing.T) {
	b := newCaseBed(t)
	if b.server == nil {
		t.Skipf("%s: RefuseMultiAt needs the bed's proxy", b.backend())
	}
	const coll = "multi_raw"
	b.seed(coll, cbD("_id", "a", "n", int64(0)), cbD("_id", "b", "n", int64(1)), cbD("_id", "c", "n", int64(0)))
	b.script(faultproxy.On("update").In(b.ns(coll)).Do(faultproxy.RefuseMultiAt(2, faultproxy.WriteError{Code: 121, Message: "Document failed validation"})))
	res, err := b.db.Collection(coll).UpdateMany(b.ctx, cbD(), cbD("$inc", cbD("n", int64(1))))
	var we mongo.WriteException
	if !errors.As(err, &we) || len(we.WriteErrors) != 1 || we.WriteErrors[0].Code != 121 || we.WriteErrors[0].Index != 0 {
		t.Fatalf("err = %v, want one write error 121 at index 0", err)
	}
	if res == nil || res.ModifiedCount != 1 {
		t.Errorf("result %+v, want ModifiedCount 1", res)
	}
	want := map[string]int64{"a": 1, "b": 1, "c": 0}
	for _, d := range b.docs(coll) {
		id := d.Lookup("_id").StringValue()
		if n := d.Lookup("n").AsInt64(); n != want[id] {
			t.Errorf("%s.n = %d, want %d", id, n, want[id])
		}
	}
	if st := b.proxy.Stats(); st.Faults[faultproxy.FaultMultiRefused] != 1 {
		t.Errorf("faults %v, want one multi_refused", st.Faults)
	}
}

// TestShardReplyLostRawDriver: through the sharded bed, findAndModify
// answered 89 NetworkTimeout after the shard ran it: the driver returns
// 89 (no RetryableWriteError label: not retried) and the $inc is applied
// once.
func TestShardReplyLostRawDriver(t *testing.T) {
	b := newCaseBed(t, cbRetryWrites(), cbProxyOptions(faultproxy.WithSharded(faultproxy.Sharding{})))
	if b.server == nil {
		t.Skipf("%s: the fault needs the bed's proxy", b.backend())
	}
	const coll = "fam_raw"
	b.seed(coll, cbD("_id", "acct-1", "balance", int64(0)))
	b.script(faultproxy.On("findAndModify").In(b.ns(coll)).Do(faultproxy.ShardReplyLost(89)))
	err := b.db.Collection(coll).FindOneAndUpdate(b.ctx, cbD("_id", "acct-1"), cbD("$inc", cbD("balance", int64(100)))).Err()
	var se mongo.ServerError
	if !errors.As(err, &se) || !se.HasErrorCode(89) {
		t.Fatalf("err = %v, want 89 NetworkTimeout", err)
	}
	if n := b.proxy.Stats().Count("findAndModify"); n != 1 {
		t.Errorf("%d findAndModify commands, want 1", n)
	}
	if got := balance(t, b, coll, "acct-1"); got != 100 {
		t.Errorf("balance %d, want 100", got)
	}
}
