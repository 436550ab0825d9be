package writeguard_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.mongodb.org/mongo-driver/v2/x/mongo/driver"

	"github.com/writeguard/writeguard"
	"github.com/writeguard/writeguard/mocks"
	"github.com/writeguard/writeguard/policy"
)

// overloadNWP is the retry's own reply that the driver returns when the
// deadline cuts its overload backoff short (operation.go 637-646).
const overloadNWP = `{"ok":0,"code":462,"codeName":"IngressRequestRateLimitExceeded","errmsg":"overloaded","errorLabels":["SystemOverloadedError","RetryableError","NoWritesPerformed"]}`

// hiddenPaths are the three driver paths (mongo-go-driver v2.10.0
// x/mongo/driver/operation.go) that return "not sent" or "nothing
// written" about a retry after an earlier attempt of the same call was
// sent and applied.
func hiddenPaths(t *testing.T, op string) map[string]error {
	return map[string]error{
		// 747-750, 818-822: the deadline checked before the retry's send.
		"ctx": fmt.Errorf("%w: rtt 2ms", driver.ErrDeadlineWouldBeExceeded),
		// 583-585, 691-703: the retry's checkout from a cleared pool.
		"pool_clear": mocks.PoolClearedError{Address: "localhost:27017"},
		// 637-646: the overload backoff cut short returns the retry's
		// own error, labelled NoWritesPerformed.
		"overload_nwp": mocks.ReplyError(op, bson.Raw(mustExtJSON(t, overloadNWP))),
	}
}

func mustExtJSON(t *testing.T, s string) bson.Raw {
	t.Helper()
	var raw bson.Raw
	if err := bson.UnmarshalExtJSON([]byte(s), false, &raw); err != nil {
		t.Fatal(err)
	}
	return raw
}

func balance(t *testing.T, f *mocks.Fake, id any) int64 {
	t.Helper()
	for _, d := range f.Docs() {
		if d.Lookup("_id").Equal(bson.RawValue{}) {
			continue
		}
		want, _ := bson.Marshal(bson.D{{Key: "_id", Value: id}})
		if d.Lookup("_id").Equal(bson.Raw(want).Lookup("_id")) {
			v, _ := d.Lookup("balance").AsInt64OK()
			return v
		}
	}
	t.Fatalf("no document %v", id)
	return 0
}

// C67: the driver's retry is cut after its first attempt applied the
// update: the update ends unknown with MaybeWritten, is never sent again
// by writeguard, and Remaining does not hand it back (the balance stays
// 100 after the recipe of "Finishing a call").
func TestC67HiddenAttemptUpdateUnknown(t *testing.T) {
	for path, err := range hiddenPaths(t, mocks.OpUpdateOne) {
		t.Run(path, func(t *testing.T) {
			fake := mocks.NewFake("db.c67").Topology(mocks.ReplicaSet)
			if e := fake.Seed(bson.D{{Key: "_id", Value: "acct-1"}, {Key: "balance", Value: int64(0)}}); e != nil {
				t.Fatal(e)
			}
			fake.Script(mocks.AppliedThen(err))
			fx := newFixture(t, fake)
			callErr := updateInc(fx.g)
			o := oneOutcome(t, callErr)
			if o.Disposition != writeguard.OutcomeUnknown || !o.MaybeWritten {
				t.Fatalf("outcome %s MaybeWritten %v, want unknown, MaybeWritten", o.Disposition, o.MaybeWritten)
			}
			if n := len(fake.Calls()); n != 1 {
				t.Errorf("%d driver calls, want 1: writeguard must not send it again", n)
			}
			var rep *writeguard.Report
			if !errors.As(callErr, &rep) {
				t.Fatal("no report")
			}
			if rm := rep.Remaining(); rm.Len() != 0 || len(rm.Left) != 1 || rm.Left[0].Reason != writeguard.LeftNotIdempotent {
				t.Errorf("Remaining %d, Left %+v: want nothing handed back, left as not idempotent", rm.Len(), rm.Left)
			}
			if b := balance(t, fake, "acct-1"); b != 100 {
				t.Errorf("balance %d, want 100", b)
			}
		})
	}
}

func updateInc(g *writeguard.Guarded) error {
	_, err := g.UpdateOne(context.Background(), bson.D{{Key: "_id", Value: "acct-1"}}, bson.D{{Key: "$inc", Value: bson.D{{Key: "balance", Value: 100}}}})
	return err
}

// C67, the insert: after the same cut the insert is maybe applied; it is
// sent again, meets a duplicate key on its own _id and is read back:
// already_written, never a conflict on its own _id.
func TestC67HiddenAttemptInsertReadBack(t *testing.T) {
	for path, err := range hiddenPaths(t, mocks.OpInsertOne) {
		t.Run(path, func(t *testing.T) {
			fake := mocks.NewFake("db.c67i").Topology(mocks.ReplicaSet).Script(mocks.AppliedThen(err))
			fx := newFixture(t, fake, writeguard.WithConflictHandler(writeguard.ConflictFail()))
			_, callErr := fx.g.InsertOne(context.Background(), bson.D{{Key: "_id", Value: "doc-1"}, {Key: "v", Value: 1}})
			if callErr != nil {
				o := oneOutcome(t, callErr)
				t.Fatalf("outcome %s (%v), want already_written", o.Disposition, callErr)
			}
			if got := len(fake.Docs()); got != 1 {
				t.Errorf("%d documents stored, want 1", got)
			}
			if reads, _ := fake.Reads(); reads == 0 {
				t.Errorf("no read-back: the duplicate on its own _id must be read back")
			}
		})
	}
}

// The same errors with no hidden attempt possible keep proving "not
// sent" (the write is sent again and applied once): driver retries
// declared off, a standalone, a multi statement.
func TestC67NoHiddenAttemptStillNotSent(t *testing.T) {
	for path, err := range hiddenPaths(t, mocks.OpUpdateOne) {
		for name, setup := range map[string]func() (*mocks.Fake, []writeguard.Option){
			"retries_off": func() (*mocks.Fake, []writeguard.Option) {
				return mocks.NewFake("db.nh").Topology(mocks.ReplicaSet), []writeguard.Option{writeguard.WithDriverRetryWrites(false)}
			},
			"standalone": func() (*mocks.Fake, []writeguard.Option) {
				return mocks.NewFake("db.nh").Topology(mocks.Standalone), nil
			},
		} {
			t.Run(path+"/"+name, func(t *testing.T) {
				fake, opts := setup()
				if e := fake.Seed(bson.D{{Key: "_id", Value: "acct-1"}, {Key: "balance", Value: int64(0)}}); e != nil {
					t.Fatal(e)
				}
				fake.Script(mocks.Fail(err))
				fx := newFixture(t, fake, opts...)
				if e := updateInc(fx.g); e != nil {
					t.Fatalf("err = %v, want the update re-sent and written", e)
				}
				if b := balance(t, fake, "acct-1"); b != 100 || len(fake.Calls()) != 2 {
					t.Errorf("balance %d after %d calls, want 100 after 2", b, len(fake.Calls()))
				}
			})
		}
	}
}

// A multi statement is never retried by the driver: the error proves it
// not sent even on a replica set.
func TestC67MultiStatementNoHiddenAttempt(t *testing.T) {
	fake := mocks.NewFake("db.nm").Topology(mocks.ReplicaSet)
	if e := fake.Seed(bson.D{{Key: "_id", Value: "acct-1"}, {Key: "balance", Value: int64(0)}}); e != nil {
		t.Fatal(e)
	}
	fake.Script(mocks.Fail(fmt.Errorf("%w: rtt 2ms", driver.ErrDeadlineWouldBeExceeded)))
	fx := newFixture(t, fake)
	_, err := fx.g.UpdateMany(context.Background(), bson.D{}, bson.D{{Key: "$inc", Value: bson.D{{Key: "balance", Value: 100}}}})
	if err != nil || balance(t, fake, "acct-1") != 100 {
		t.Errorf("err %v, balance %d: want re-sent and written once", err, balance(t, fake, "acct-1"))
	}
}

// Every row of ReplyShapes names its proof after hidden attempts and its
// source; the four rows that describe the last attempt only are maybe
// applied after one.
func TestReplyShapesHidden(t *testing.T) {
	hidden := map[policy.Shape]bool{policy.ShapeTimeoutBeforeSend: true, policy.ShapeContextBeforeSend: true, policy.ShapeCheckout: true, policy.ShapeNoWritesPerformed: true}
	for _, r := range policy.ReplyShapes() {
		if r.HiddenSource == "" {
			t.Errorf("%s: no HiddenSource", r.Name)
		}
		switch {
		case hidden[r.Shape] && r.Hidden != policy.MaybeApplied:
			t.Errorf("%s: Hidden %s, want maybe_applied", r.Name, r.Hidden)
		case !hidden[r.Shape] && r.Hidden != r.Failed:
			t.Errorf("%s: Hidden %s, want %s (Failed)", r.Name, r.Hidden, r.Failed)
		}
	}
}

// cancelTarget cancels the call's context as the driver returns: the
// deadline ended during the driver's hidden retry.
type cancelTarget struct {
	*mocks.Fake
	cancel context.CancelFunc
}

func (c cancelTarget) InsertOne(ctx context.Context, doc any, opts ...options.Lister[options.InsertOneOptions]) (*mongo.InsertOneResult, error) {
	defer c.cancel()
	return c.Fake.InsertOne(ctx, doc, opts...)
}

// C67, the insert when the deadline has ended: nothing can be read back
// on the caller's context, so the insert is unknown with MaybeWritten;
// Remaining hands it back with the mark "maybe applied", and the call
// that finishes it reads it back on its own _id: already_written, never
// a conflict, stored once.
func TestC67HiddenAttemptInsertAfterDeadline(t *testing.T) {
	fake := mocks.NewFake("db.c67d").Topology(mocks.ReplicaSet).Script(mocks.AppliedThen(fmt.Errorf("%w: rtt 2ms", driver.ErrDeadlineWouldBeExceeded)))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	g, err := writeguard.New(cancelTarget{fake, cancel})
	if err != nil {
		t.Fatal(err)
	}
	_, err = g.InsertOne(ctx, bson.D{{Key: "_id", Value: "doc-1"}})
	o := oneOutcome(t, err)
	if o.Disposition != writeguard.OutcomeUnknown || !o.MaybeWritten {
		t.Fatalf("outcome %s MaybeWritten %v, want unknown, MaybeWritten", o.Disposition, o.MaybeWritten)
	}
	var rep *writeguard.Report
	if !errors.As(err, &rep) {
		t.Fatal("no report")
	}
	rm := rep.Remaining()
	if rm.Len() != 1 {
		t.Fatalf("Remaining %d, want the insert (its _id makes it safe)", rm.Len())
	}
	rec := &mocks.Recorder{}
	g2, err := writeguard.New(fake, writeguard.WithHooks(rec.Hooks()))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := g2.InsertMany(rm.Context(context.Background()), rm.Documents); err != nil {
		t.Fatalf("finishing: %v", err)
	}
	if d := rec.Dispositions(); len(d) != 1 || d[0].Disposition != writeguard.AlreadyWritten || len(fake.Docs()) != 1 {
		t.Errorf("dispositions %+v, %d stored: want already_written, 1 stored", d, len(fake.Docs()))
	}
}
