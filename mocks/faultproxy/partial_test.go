package faultproxy_test

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/writeguard/writeguard/mocks/faultproxy"
)

// received is what a recording upstream saw of one write command.
type received struct {
	name     string
	ordered  bool
	inline   bool     // statements in the body, not in a document sequence
	ids      []string // the _id (insert) or q._id (update, delete) of each statement
	sequence []string // identifiers of the document sequences
}

// recorder is a null-backend proxy that records every write command it
// receives: the stand-in for the server's storage in the partial
// application tests (what it received is what the server applied).
type recorder struct {
	p  *faultproxy.Proxy
	mu sync.Mutex
	rx []received
}

func startRecorder(t *testing.T) *recorder {
	t.Helper()
	r := &recorder{}
	rec := faultproxy.Custom(func(c *faultproxy.Command, forward func(*faultproxy.Command) (bson.Raw, error)) (bson.Raw, error) {
		got := received{name: c.Name, ordered: c.Ordered()}
		field := map[string]string{"insert": "documents", "update": "updates", "delete": "deletes"}[c.Name]
		_, err := c.Body.LookupErr(field)
		got.inline = err == nil
		for _, s := range c.Sequences {
			got.sequence = append(got.sequence, s.Identifier)
		}
		for _, st := range c.Statements() {
			target := st
			if c.Name != "insert" {
				target = st.Lookup("q").Document()
			}
			got.ids = append(got.ids, target.Lookup("_id").String())
		}
		r.mu.Lock()
		r.rx = append(r.rx, got)
		r.mu.Unlock()
		return forward(c)
	})
	isWrite := func(c *faultproxy.Command) bool {
		return c.Name == "insert" || c.Name == "update" || c.Name == "delete"
	}
	r.p = startProxy(t, faultproxy.WithScript(faultproxy.MustScript(faultproxy.OnAny().Where(isWrite).Always().Do(rec))))
	return r
}

func (r *recorder) take() []received {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.rx
	r.rx = nil
	return out
}

func (r *recorder) ids() []string {
	var out []string
	for _, rx := range r.take() {
		out = append(out, rx.ids...)
	}
	return out
}

func idDocs(ids ...int) []any {
	out := make([]any, len(ids))
	for i, id := range ids {
		out[i] = bson.D{{Key: "_id", Value: id}}
	}
	return out
}

func idStrings(ids ...int) []string {
	out := make([]string, len(ids))
	for i, id := range ids {
		out[i] = fmt.Sprintf(`{"$numberInt":"%d"}`, id)
	}
	return out
}

var interrupted = faultproxy.CommandError{
	Code: 11602, CodeName: "InterruptedDueToReplStateChange",
	Message: "operation was interrupted", Labels: []string{"RetryableWriteError"},
}

func TestApplyThenErrorStoresThePrefixAndAnswersTheError(t *testing.T) {
	for _, ordered := range []bool{true, false} {
		t.Run(fmt.Sprintf("ordered=%v", ordered), func(t *testing.T) {
			rec := startRecorder(t)
			p := startProxy(t, faultproxy.WithUpstream(rec.p.Addr()), faultproxy.WithScript(faultproxy.MustScript(
				faultproxy.On("insert").Do(faultproxy.ApplyThenError(2, interrupted)))))
			coll := connect(t, p.URI(), false).Database("app").Collection("users")

			res, err := coll.InsertMany(opCtx(t), idDocs(1, 2, 3, 4, 5), options.InsertMany().SetOrdered(ordered))
			var ce mongo.CommandError
			if !errors.As(err, &ce) {
				t.Fatalf("err = %v (%T), want the injected CommandError", err, err)
			}
			if ce.Code != 11602 || ce.Name != "InterruptedDueToReplStateChange" || !ce.HasErrorLabel("RetryableWriteError") {
				t.Errorf("CommandError = %+v", ce)
			}
			var we mongo.BulkWriteException
			if errors.As(err, &we) {
				t.Errorf("the client must not see the server's reply (write errors %v)", we.WriteErrors)
			}
			if res != nil && len(res.InsertedIDs) != 0 {
				t.Errorf("result claims inserted ids %v", res.InsertedIDs)
			}
			rx := rec.take()
			if len(rx) != 1 {
				t.Fatalf("upstream received %d commands, want 1: %+v", len(rx), rx)
			}
			if !cmp.Equal(rx[0].ids, idStrings(1, 2)) || rx[0].ordered != ordered || rx[0].inline ||
				!cmp.Equal(rx[0].sequence, []string{"documents"}) {
				t.Errorf("upstream received %+v; want ids 1, 2 as a documents sequence, ordered=%v", rx[0], ordered)
			}
			st := p.Stats()
			if st.Documents["insert"] != 5 || st.Forwarded["insert"] != 2 || st.Faults[faultproxy.FaultApplyThenError] != 1 {
				t.Errorf("stats: documents %d, forwarded %d, faults %v; want 5, 2, one apply_then_error",
					st.Documents["insert"], st.Forwarded["insert"], st.Faults)
			}
		})
	}
}

func TestApplyThenCloseStoresThePrefixAndDropsTheConnection(t *testing.T) {
	for _, tc := range []struct {
		k    int
		want []string
	}{
		{0, nil},
		{3, idStrings(1, 2, 3)},
		{99, idStrings(1, 2, 3, 4, 5)}, // k beyond the batch applies all of it
	} {
		t.Run(fmt.Sprintf("k=%d", tc.k), func(t *testing.T) {
			rec := startRecorder(t)
			p := startProxy(t, faultproxy.WithUpstream(rec.p.Addr()), faultproxy.WithScript(faultproxy.MustScript(
				faultproxy.On("insert").Do(faultproxy.ApplyThenClose(tc.k)))))
			coll := connect(t, p.URI(), false).Database("app").Collection("users")
			_, err := coll.InsertMany(opCtx(t), idDocs(1, 2, 3, 4, 5))
			if !mongo.IsNetworkError(err) {
				t.Fatalf("err = %v, want a network error", err)
			}
			if got := rec.ids(); !cmp.Equal(got, tc.want) {
				t.Errorf("upstream stored %v, want %v", got, tc.want)
			}
			if _, err := coll.InsertOne(opCtx(t), bson.D{{Key: "_id", Value: 6}}); err != nil {
				t.Fatalf("the next insert must succeed on a new connection: %v", err)
			}
			if got := rec.ids(); !cmp.Equal(got, idStrings(6)) {
				t.Errorf("after the fault the upstream stored %v, want [6]", got)
			}
			st := p.Stats()
			if st.Faults[faultproxy.FaultApplyThenClose] != 1 || st.Forwarded["insert"] != int64(len(tc.want))+1 {
				t.Errorf("stats: faults %v, forwarded %d; want one apply_then_close, %d", st.Faults, st.Forwarded["insert"], len(tc.want)+1)
			}
		})
	}
}

// TestApplyThenErrorKeepsTheInlineForm: a command whose statements are an
// array in the body (as RunCommand sends them) is cut in place.
func TestApplyThenErrorKeepsTheInlineForm(t *testing.T) {
	rec := startRecorder(t)
	p := startProxy(t, faultproxy.WithUpstream(rec.p.Addr()), faultproxy.WithScript(faultproxy.MustScript(
		faultproxy.On("insert").Do(faultproxy.ApplyThenError(1, faultproxy.CommandError{Code: 50, CodeName: "MaxTimeMSExpired"})))))
	db := connect(t, p.URI(), false).Database("app")
	err := db.RunCommand(opCtx(t), bson.D{
		{Key: "insert", Value: "users"},
		{Key: "documents", Value: idDocs(7, 8, 9)},
		{Key: "ordered", Value: false},
	}).Err()
	var ce mongo.CommandError
	if !errors.As(err, &ce) || ce.Code != 50 {
		t.Fatalf("err = %v, want code 50", err)
	}
	rx := rec.take()
	if len(rx) != 1 || !rx[0].inline || len(rx[0].sequence) != 0 || rx[0].ordered || !cmp.Equal(rx[0].ids, idStrings(7)) {
		t.Errorf("upstream received %+v; want only _id 7, inline, unordered", rx)
	}
}

func TestApplyThenErrorOnUpdatesAndDeletes(t *testing.T) {
	rec := startRecorder(t)
	p := startProxy(t, faultproxy.WithUpstream(rec.p.Addr()), faultproxy.WithScript(faultproxy.MustScript(
		faultproxy.On("update").Do(faultproxy.ApplyThenError(1, faultproxy.CommandError{Code: 11600, CodeName: "InterruptedAtShutdown"})),
		faultproxy.On("delete").Do(faultproxy.ApplyThenError(2, faultproxy.CommandError{Code: 11601, CodeName: "Interrupted"})),
	)))
	coll := connect(t, p.URI(), false).Database("app").Collection("users")
	set := bson.D{{Key: "$set", Value: bson.D{{Key: "x", Value: 1}}}}
	var updates, deletes []mongo.WriteModel
	for _, id := range []int{1, 2, 3} {
		updates = append(updates, mongo.NewUpdateOneModel().SetFilter(bson.D{{Key: "_id", Value: id}}).SetUpdate(set))
		deletes = append(deletes, mongo.NewDeleteOneModel().SetFilter(bson.D{{Key: "_id", Value: id}}))
	}
	for _, tc := range []struct {
		models []mongo.WriteModel
		code   int32
		want   []string
	}{
		{updates, 11600, idStrings(1)},
		{deletes, 11601, idStrings(1, 2)},
	} {
		_, err := coll.BulkWrite(opCtx(t), tc.models)
		var ce mongo.CommandError
		if !errors.As(err, &ce) || ce.Code != tc.code {
			t.Errorf("err = %v, want code %d", err, tc.code)
		}
		if got := rec.ids(); !cmp.Equal(got, tc.want) {
			t.Errorf("code %d: upstream received statements for %v, want %v", tc.code, got, tc.want)
		}
	}
}

// TestPartialFaultsInARandomSchedule: both faults mix with others in a
// chaos schedule, and what the upstream stored matches what each client
// call saw.
func TestPartialFaultsInARandomSchedule(t *testing.T) {
	rec := startRecorder(t)
	schedule := faultproxy.RandomSchedule(11,
		faultproxy.Rate{Fault: faultproxy.ApplyThenError(1, interrupted), P: 0.25},
		faultproxy.Rate{Fault: faultproxy.ApplyThenClose(3), P: 0.25},
		faultproxy.Rate{Fault: faultproxy.ErrorReply(interrupted), P: 0.2},
	)
	// Replica-set mode only for its streaming hello: after a dropped
	// connection the driver's monitor does not wait ~0.5 s for a
	// heartbeat. Retryable writes are off, so nothing is retried.
	p := startProxy(t, faultproxy.WithUpstream(rec.p.Addr()), faultproxy.WithReplicaSet("rs0"), faultproxy.WithScript(faultproxy.MustScript(
		faultproxy.On("insert").Always().Do(schedule))))
	coll := connect(t, p.URI(), false).Database("app").Collection("users")
	var want []string
	var trace strings.Builder
	for i := 0; i < 40; i++ {
		ids := []int{4 * i, 4*i + 1, 4*i + 2, 4*i + 3}
		_, err := coll.InsertMany(opCtx(t), idDocs(ids...))
		var ce mongo.CommandError
		switch {
		case err == nil:
			want = append(want, idStrings(ids...)...)
			trace.WriteByte('.')
		case mongo.IsNetworkError(err):
			want = append(want, idStrings(ids[:3]...)...)
			trace.WriteByte('c')
		case errors.As(err, &ce) && ce.Code == 11602:
			// ApplyThenError stored one document, ErrorReply none: the
			// upstream's record tells them apart below.
			trace.WriteByte('e')
		default:
			t.Fatalf("call %d: unexpected error %v", i, err)
		}
	}
	st := p.Stats()
	partial := st.Faults[faultproxy.FaultApplyThenError]
	if partial == 0 || st.Faults[faultproxy.FaultApplyThenClose] == 0 || st.Faults[faultproxy.FaultErrorReply] == 0 {
		t.Fatalf("not every fault fired in 40 draws: %v (%s)", st.Faults, trace.String())
	}
	got := rec.ids()
	if int64(len(got)) != int64(len(want))+partial || st.Forwarded["insert"] != int64(len(got)) {
		t.Errorf("upstream stored %d documents, forwarded counter %d; want %d (clean and closed calls) + %d (one per apply_then_error)",
			len(got), st.Forwarded["insert"], len(want), partial)
	}
	seen := map[string]bool{}
	for _, id := range got {
		seen[id] = true
	}
	for _, id := range want {
		if !seen[id] {
			t.Errorf("document %s missing upstream", id)
		}
	}
}
