package writeguard_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"testing/synctest"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/writeguard/writeguard"
	"github.com/writeguard/writeguard/mocks"
	"github.com/writeguard/writeguard/policy"
)

// transientFaults are the whole-command failures a half may meet while a
// bisection narrows a batch down, none of which says where the poison is
// (C72): a dropped connection, a shutdown (91), a stepdown (10107), a
// write conflict (112), a throttle (462).
var transientFaults = []struct {
	name  string
	reply string // "" for a dropped connection
}{
	{"drop", ""},
	{"91", `{"ok":0,"code":91,"codeName":"ShutdownInProgress","errmsg":"The server is in quiesce mode and will shut down","errorLabels":["RetryableWriteError"]}`},
	{"10107", `{"ok":0,"code":10107,"codeName":"NotWritablePrimary","errmsg":"not primary","errorLabels":["RetryableWriteError"]}`},
	{"112", `{"ok":0,"code":112,"codeName":"WriteConflict","errmsg":"WriteConflict error: this operation conflicted with another operation"}`},
	{"462", `{"ok":0,"code":462,"codeName":"IngressRequestRateLimitExceeded","errmsg":"Rate limiter 'ingressRequestRateLimiter' rate exceeded","errorLabels":["SystemOverloadedError","RetryableError"]}`},
}

// faultAt is a Target that fails chosen commands of one call with a
// transient fault: the commands of the call's documents (a string _id
// with the call's prefix) that do not carry the poison document and
// come after its first failure are counted from 1, and those whose
// number is in at fail with reply (a dropped connection when reply is
// ""), applying nothing. Every other command goes to the Fake.
type faultAt struct {
	*mocks.Fake
	prefix, poison string
	reply          string
	at             map[int]bool

	mu       sync.Mutex
	poisoned bool // the poison's first failure happened
	n        int  // counted commands so far
	injected int
}

func (f *faultAt) InsertMany(ctx context.Context, docs any, opts ...options.Lister[options.InsertManyOptions]) (*mongo.InsertManyResult, error) {
	if err := f.fault(docs.([]any)); err != nil {
		return nil, err
	}
	return f.Fake.InsertMany(ctx, docs, opts...)
}

func (f *faultAt) InsertOne(ctx context.Context, doc any, opts ...options.Lister[options.InsertOneOptions]) (*mongo.InsertOneResult, error) {
	if err := f.fault([]any{doc}); err != nil {
		return nil, err
	}
	return f.Fake.InsertOne(ctx, doc, opts...)
}

// fault decides the fate of one command of docs.
func (f *faultAt) fault(docs []any) error {
	ours, poison := false, false
	for _, d := range docs {
		raw, err := bson.Marshal(d)
		if err != nil {
			return nil
		}
		id, ok := bson.Raw(raw).Lookup("_id").StringValueOK()
		ours = ours || ok && strings.HasPrefix(id, f.prefix)
		poison = poison || ok && id == f.poison
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	switch {
	case !ours:
		return nil
	case poison:
		f.poisoned = true
		return nil // the Fake's poison fails it
	case !f.poisoned:
		return nil
	}
	f.n++
	if !f.at[f.n] {
		return nil
	}
	f.injected++
	if f.reply == "" {
		return mocks.NetworkError(mocks.OpInsertMany)
	}
	return mocks.ReplyError(mocks.OpInsertMany, bson.Raw(mustJSON(f.reply)))
}

func mustJSON(ext string) []byte {
	var raw bson.Raw
	if err := bson.UnmarshalExtJSON([]byte(ext), false, &raw); err != nil {
		panic(err)
	}
	return raw
}

// poisonCall runs an InsertMany of n documents (prefix+index) of which
// poisonIndex makes every command carrying it fail as a dropped
// connection, while another writer of the same Guarded keeps the server
// visibly healthy, and the commands numbered at (see faultAt) fail with
// reply. It returns the Report (nil when the call wrote everything) and
// the Target.
func poisonCall(t *testing.T, n, poisonIndex int, ordered bool, reply string, at []int, attempts int) (*writeguard.Report, *faultAt) {
	t.Helper()
	prefix := "g"
	poison := fmt.Sprintf("%s%02d", prefix, poisonIndex)
	ft := &faultAt{Fake: mocks.NewFake("db.c72").Poison(poison, mocks.DropConnection()), prefix: prefix, poison: poison, reply: reply, at: map[int]bool{}}
	for _, k := range at {
		ft.at[k] = true
	}
	fx := &fixture{fake: ft.Fake, sink: &mocks.Sink{}, rec: &mocks.Recorder{}}
	g, err := writeguard.New(ft, writeguard.WithDeadLetter(fx.sink), writeguard.WithHooks(fx.rec.Hooks()),
		writeguard.WithBackoff(policy.Backoff{MaxAttempts: attempts, Jitter: func() float64 { return 0.5 }}))
	if err != nil {
		t.Fatal(err)
	}
	fx.g = g
	docs := make([]any, n)
	for i := range docs {
		docs[i] = bson.D{{Key: "_id", Value: fmt.Sprintf("%s%02d", prefix, i)}, {Key: "n", Value: int32(i)}}
	}
	stop := anotherWriter(t, fx, false)
	_, err = g.InsertMany(ctx, docs, options.InsertMany().SetOrdered(ordered))
	stop()
	if err == nil {
		t.Fatal("the call wrote the poison document")
	}
	var r *writeguard.Report
	if !errors.As(err, &r) {
		t.Fatalf("err = %v, want a Report", err)
	}
	checkOutcomes(t, r)
	return r, ft
}

// checkGoodWritten holds that every good document of an unordered call,
// and every one before the poison of an ordered call, is written and
// stored, and that the poison is not.
func checkGoodWritten(t *testing.T, r *writeguard.Report, ft *faultAt, poisonIndex int, ordered bool) {
	t.Helper()
	stored := map[string]bool{}
	for _, id := range storedIDs(t, ft.Fake) {
		stored[id] = true
	}
	bad := 0
	for _, o := range r.Outcomes {
		id := fmt.Sprintf(`"g%02d"`, o.Index)
		switch {
		case o.Index == poisonIndex:
			if o.Disposition.Stored() || stored[id] {
				t.Errorf("the poison document ended %s", o.Disposition)
			}
		case ordered && o.Index > poisonIndex:
			// The ordered write stops at the unhandled poison.
		case o.Disposition != writeguard.Written || !stored[id]:
			bad++
			if bad <= 3 {
				t.Errorf("good document %d: %s after %d attempts (stored %v)", o.Index, o.Disposition, o.Attempts, stored[id])
			}
		}
	}
	if bad > 0 {
		t.Errorf("%d good documents not written; counts %v", bad, r.Counts())
	}
}

// C72: an unordered (and an ordered) InsertMany of 64 documents, one of
// which makes every command carrying it fail as a dropped connection;
// while the batch is narrowed down, one command without it gets 91
// ShutdownInProgress. That half proves nothing about where the poison
// is: every good document is written, at 3, 4 and the default 5 attempts.
func TestC72TransientFaultDuringBisection(t *testing.T) {
	for _, attempts := range []int{3, 4, 5} {
		for _, ordered := range []bool{false, true} {
			for _, at := range [][]int{{1}, {1, 4}} {
				t.Run(fmt.Sprintf("attempts=%d/ordered=%v/at=%v", attempts, ordered, at), func(t *testing.T) {
					synctest.Test(t, func(t *testing.T) {
						r, ft := poisonCall(t, 64, 40, ordered, transientFaults[1].reply, at, attempts)
						if ft.injected == 0 {
							t.Fatal("no 91 was injected: the test did not reach its narrowing")
						}
						checkGoodWritten(t, r, ft, 40, ordered)
					})
				})
			}
		}
	}
}

// The bisection's table (C72): every transient fault kind, at several
// positions among the narrowing's commands, ordered and unordered: the
// good documents are written, the poison is not, and the call stays
// within a finite number of commands.
func TestBisectTransientTable(t *testing.T) {
	for _, fk := range transientFaults {
		for _, at := range [][]int{{1}, {2}, {3}, {5}, {1, 2}} {
			for _, ordered := range []bool{false, true} {
				for _, poisonIndex := range []int{5, 40} {
					name := fmt.Sprintf("%s/at=%v/ordered=%v/poison=%d", fk.name, at, ordered, poisonIndex)
					t.Run(name, func(t *testing.T) {
						synctest.Test(t, func(t *testing.T) {
							r, ft := poisonCall(t, 64, poisonIndex, ordered, fk.reply, at, 4)
							checkGoodWritten(t, r, ft, poisonIndex, ordered)
							if n := r.Attempts; n > 60 {
								t.Errorf("%d attempts: the bisection is not bounded", n)
							}
						})
					})
				}
			}
		}
	}
}
