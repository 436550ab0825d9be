package writeguard_test

import (
	"errors"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/writeguard/writeguard"
	"github.com/writeguard/writeguard/mocks"
	"github.com/writeguard/writeguard/policy"
)

// A conflict met on the first attempt, then another document's retry
// meets a timeout (a whole-command 50 MaxTimeMSExpired) or a dropped
// connection, and its third attempt writes it. The driver's last error is
// that timeout or network error, but the call ended in a conflict:
// mongo.IsDuplicateKeyError(err) is true (the Report unwraps the
// conflict's error first), mongo.IsTimeout and mongo.IsNetworkError are
// false (the failed attempt's document was stored: its error is left out).
func TestReportUnwrapsConflictNotStoredInputsErrors(t *testing.T) {
	for _, tc := range []struct {
		name   string
		second mocks.Fault
		is     func(error) bool
	}{
		{"timeout", mocks.Reply(`{"ok":0,"code":50,"codeName":"MaxTimeMSExpired","errmsg":"operation exceeded time limit"}`), mongo.IsTimeout},
		{"network", mocks.DropConnection(), mongo.IsNetworkError},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fake := usersWithEmails(t).Script(mocks.DocError("b", 91, "ShutdownInProgress"), tc.second, mocks.Pass())
			fx := newFixture(t, fake)
			docs := []any{
				bson.D{{Key: "_id", Value: "a"}, {Key: "email", Value: "a@example.com"}},
				bson.D{{Key: "_id", Value: "b"}, {Key: "email", Value: "new@example.com"}},
			}
			_, err := fx.g.InsertMany(ctx, docs, options.InsertMany().SetOrdered(false))
			var r *writeguard.Report
			if !errors.As(err, &r) || len(fake.Calls()) != 3 {
				t.Fatalf("err = %v after %d commands; want a Report after 3", err, len(fake.Calls()))
			}
			if got := dispositions(r); got[0] != writeguard.Conflicted || got[1] != writeguard.Written {
				t.Fatalf("dispositions %v, want [conflict written]", got)
			}
			if !tc.is(r.Err) {
				t.Fatalf("the driver's last error %v is not a %s error: the test does not test", r.Err, tc.name)
			}
			if !mongo.IsDuplicateKeyError(err) {
				t.Error("mongo.IsDuplicateKeyError(err) = false for a call that ended in a conflict")
			}
			if tc.is(err) {
				t.Errorf("err is a %s error, but the document that met it was stored", tc.name)
			}
		})
	}
}

// The conflict's driver error comes before the errors of other unhandled
// inputs, whatever their order: the first server error errors.As finds is
// the duplicate key, and the other input's error is still reachable.
func TestReportUnwrapsConflictsFirst(t *testing.T) {
	fake := usersWithEmails(t).Script(mocks.DocError("x", 91, "ShutdownInProgress"), mocks.DocError("x", 91, "ShutdownInProgress"))
	fx := newFixture(t, fake, writeguard.WithBackoff(policy.Backoff{MaxAttempts: 2, Jitter: func() float64 { return 0.5 }}))
	docs := []any{
		bson.D{{Key: "_id", Value: "x"}, {Key: "email", Value: "x@example.com"}},
		bson.D{{Key: "_id", Value: "a"}, {Key: "email", Value: "a@example.com"}},
	}
	_, err := fx.g.InsertMany(ctx, docs, options.InsertMany().SetOrdered(false))
	var r *writeguard.Report
	if !errors.As(err, &r) {
		t.Fatalf("err = %v, want a Report", err)
	}
	if got := dispositions(r); got[0].Handled() || got[1] != writeguard.Conflicted {
		t.Fatalf("dispositions %v, want [unhandled conflict]", got)
	}
	if !mongo.IsDuplicateKeyError(err) {
		t.Error("mongo.IsDuplicateKeyError(err) = false: the other input's error came first")
	}
	var se mongo.ServerError
	if !errors.As(err, &se) || !se.HasErrorCode(11000) {
		t.Errorf("the first server error is %v, want the duplicate key", se)
	}
	found91 := false
	for _, e := range r.Unwrap() {
		if s, ok := e.(mongo.ServerError); ok && s.HasErrorCode(91) && !s.HasErrorCode(11000) {
			found91 = true
		}
	}
	if !found91 {
		t.Error("the unhandled input's own error (91) is not unwrapped")
	}
}

// Each driver error is unwrapped once, however many inputs it explains.
func TestReportUnwrapsEachErrorOnce(t *testing.T) {
	var script []mocks.Fault
	for range 3 {
		script = append(script, mocks.DropConnection())
	}
	fake := mocks.NewFake("db.once").Script(script...)
	fx := newFixture(t, fake, writeguard.WithBackoff(policy.Backoff{MaxAttempts: 3, Jitter: func() float64 { return 0.5 }}))
	docs := make([]any, 50)
	for i := range docs {
		docs[i] = bson.D{{Key: "n", Value: i}}
	}
	_, err := fx.g.InsertMany(ctx, docs)
	var r *writeguard.Report
	if !errors.As(err, &r) || r.Count(writeguard.OutcomeUnknown) != 50 {
		t.Fatalf("err = %v, want 50 unknown", err)
	}
	drivers := 0
	for _, e := range r.Unwrap() {
		if mongo.IsNetworkError(e) {
			drivers++
		}
	}
	if drivers != 1 {
		t.Errorf("%d network errors unwrapped for 50 inputs of one attempt, want 1", drivers)
	}
}

// The driver errors of handled inputs come last: a document dead-lettered
// on the first attempt (121) and one that ended unhandled on the second
// (91): errors.As finds the unhandled input's error first, and the
// dead-lettered one's is still reachable after it.
func TestReportUnwrapsHandledInputsLast(t *testing.T) {
	fake := mocks.NewFake("db.last").Validator(func(doc bson.Raw) (bson.Raw, bool) {
		_, bad := doc.Lookup("bad").BooleanOK()
		return nil, bad
	}).Script(mocks.DocError("x", 91, "ShutdownInProgress"), mocks.DocError("x", 91, "ShutdownInProgress"))
	fx := newFixture(t, fake, writeguard.WithBackoff(policy.Backoff{MaxAttempts: 2, Jitter: func() float64 { return 0.5 }}))
	docs := []any{
		bson.D{{Key: "_id", Value: "v"}, {Key: "bad", Value: true}},
		bson.D{{Key: "_id", Value: "x"}},
	}
	_, err := fx.g.InsertMany(ctx, docs, options.InsertMany().SetOrdered(false))
	var r *writeguard.Report
	if !errors.As(err, &r) {
		t.Fatalf("err = %v, want a Report", err)
	}
	if got := dispositions(r); got[0] != writeguard.DeadLettered || got[1].Handled() {
		t.Fatalf("dispositions %v, want [dead_lettered <unhandled>]", got)
	}
	var se mongo.ServerError
	if !errors.As(err, &se) || !se.HasErrorCode(91) || se.HasErrorCode(121) {
		t.Errorf("the first server error is %v, want the unhandled input's (91 only)", se)
	}
	var codes []bool
	for _, e := range r.Unwrap() {
		if s, ok := e.(mongo.ServerError); ok {
			codes = append(codes, s.HasErrorCode(121))
		}
	}
	if len(codes) != 2 || codes[0] || !codes[1] {
		t.Errorf("server errors unwrapped (is the dead-lettered one's): %v, want [false true]", codes)
	}
}
