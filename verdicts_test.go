package writeguard_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/writeguard/writeguard"
	"github.com/writeguard/writeguard/mocks"
	"github.com/writeguard/writeguard/policy"
)

func nOf(t *testing.T, f *mocks.Fake, id string) int32 {
	t.Helper()
	for _, d := range f.Docs() {
		if s, _ := d.Lookup("_id").StringValueOK(); s == id {
			v, _ := d.Lookup("n").AsInt64OK()
			return int32(v)
		}
	}
	t.Fatalf("no document %q", id)
	return 0
}

// C70: UpdateMany({}, {$inc: {n: 1}}) over a (n 0), b (n 1), c (n 0) on a
// collection whose validator refuses n >= 2: the server updates a, refuses
// b (121) and stops. The same with a unique index met by a $set on the
// second document (11000). The statement may have changed documents
// before the refusal: unknown, MaybeWritten, never dead-lettered nor a
// conflict, never sent again, and Remaining leaves it out.
func TestC70MultiUpdateRefusedOnKthDocument(t *testing.T) {
	seed := func(t *testing.T, f *mocks.Fake) {
		t.Helper()
		if err := f.Seed(bson.D{{Key: "_id", Value: "a"}, {Key: "n", Value: 0}, {Key: "k", Value: "ka"}}, bson.D{{Key: "_id", Value: "b"}, {Key: "n", Value: 1}, {Key: "k", Value: "kb"}},
			bson.D{{Key: "_id", Value: "c"}, {Key: "n", Value: 0}, {Key: "k", Value: "kc"}}); err != nil {
			t.Fatal(err)
		}
	}
	cases := map[string]struct {
		fake   func(t *testing.T) *mocks.Fake
		update bson.D
		code   int32
	}{
		"121": {func(t *testing.T) *mocks.Fake {
			f := mocks.NewFake("db.c70").Validator(func(doc bson.Raw) (bson.Raw, bool) {
				n, _ := doc.Lookup("n").AsInt64OK()
				return nil, n >= 2
			})
			seed(t, f)
			return f
		}, bson.D{{Key: "$inc", Value: bson.D{{Key: "n", Value: 1}}}}, 121},
		"11000": {func(t *testing.T) *mocks.Fake {
			f := mocks.NewFake("db.c70u").Unique("k")
			seed(t, f)
			return f
		}, bson.D{{Key: "$set", Value: bson.D{{Key: "k", Value: "same"}}}}, 11000},
	}
	for name, c := range cases {
		for _, topo := range []string{mocks.Standalone, mocks.ReplicaSet, mocks.Mongos} {
			t.Run(name+"/"+topo, func(t *testing.T) {
				fake := c.fake(t).Topology(topo)
				fx := newFixture(t, fake)
				_, err := fx.g.UpdateMany(context.Background(), bson.D{}, c.update)
				o := oneOutcome(t, err)
				if o.Disposition != writeguard.OutcomeUnknown || !o.MaybeWritten || o.Failure == nil || o.Failure.Code != c.code || o.Failure.Shape != policy.ShapeWriteErrorMulti {
					t.Errorf("outcome %s MaybeWritten %v failure %+v: want unknown, MaybeWritten, %d write_error_multi", o.Disposition, o.MaybeWritten, o.Failure, c.code)
				}
				if writeguard.Handled(err) || len(fx.sink.Envelopes()) != 0 || len(fake.Calls()) != 1 {
					t.Errorf("handled %v, %d envelopes, %d calls: want unhandled, none dead-lettered, not re-sent", writeguard.Handled(err), len(fx.sink.Envelopes()), len(fake.Calls()))
				}
				if name == "121" && nOf(t, fake, "a") != 1 {
					t.Errorf("a.n = %d, want 1 (applied once)", nOf(t, fake, "a"))
				}
				var rep *writeguard.Report
				if errorsAs(err, &rep) && rep.Remaining().Len() != 0 {
					t.Errorf("Remaining hands the multi update back")
				}
			})
		}
	}
}

func errorsAs(err error, rep **writeguard.Report) bool { return errors.As(err, rep) }

// The verdicts per deployment: on mongod (standalone, replica set) a write
// error proves its statement not applied for any code but
// policy.NeverVerdictCodes; through mongos only policy.VerdictCodes and
// the Guarded's WithVerdictCodes. An unordered InsertMany of two documents
// whose second meets the write error: failed (proved not applied, not
// retried), unknown (maybe applied, read back, absent), or written (a
// transient code that proves nothing: re-sent).
func TestC70VerdictsByDeployment(t *testing.T) {
	cases := []struct {
		topo  string
		code  int32
		extra []int
		want  writeguard.Disposition
	}{
		{mocks.Standalone, 9, nil, writeguard.Failed},
		{mocks.ReplicaSet, 9, nil, writeguard.Failed},
		{mocks.Mongos, 9, nil, writeguard.OutcomeUnknown},
		{mocks.Mongos, 9, []int{9}, writeguard.Failed},
		{mocks.Standalone, 66, nil, writeguard.Failed},
		{mocks.Mongos, 66, nil, writeguard.Failed},
		{mocks.Mongos, 61, nil, writeguard.Failed},
		{mocks.Mongos, 28, nil, writeguard.Failed},
		{mocks.Mongos, 82, nil, writeguard.Failed},
		{mocks.Mongos, 17419, nil, writeguard.Failed},
		{mocks.Mongos, 53, nil, writeguard.Failed},
		{mocks.ReplicaSet, 72, nil, writeguard.OutcomeUnknown},
		{mocks.Mongos, 72, nil, writeguard.OutcomeUnknown},
		{mocks.ReplicaSet, 11601, nil, writeguard.OutcomeUnknown},
		{mocks.Mongos, 91, nil, writeguard.Written},
		{mocks.Mongos, 13388, nil, writeguard.Written}, // StaleConfig: proved not applied, retried
		{mocks.Standalone, 91, nil, writeguard.Written},
	}
	for _, c := range cases {
		t.Run(fmt.Sprintf("%s/%d/extra%v", c.topo, c.code, c.extra), func(t *testing.T) {
			fake := mocks.NewFake("db.v").Topology(c.topo).Script(mocks.DocError("d2", c.code, "refused"))
			var opts []writeguard.Option
			if c.extra != nil {
				opts = append(opts, writeguard.WithVerdictCodes(c.extra...))
			}
			fx := newFixture(t, fake, opts...)
			_, err := fx.g.InsertMany(context.Background(), []any{bson.D{{Key: "_id", Value: "d1"}}, bson.D{{Key: "_id", Value: "d2"}}},
				options.InsertMany().SetOrdered(false))
			got := writeguard.Written
			if err != nil {
				var rep *writeguard.Report
				if !errorsAs(err, &rep) || len(rep.Outcomes) != 2 {
					t.Fatalf("err = %v", err)
				}
				got = rep.Outcomes[1].Disposition
			}
			if got != c.want {
				t.Errorf("second document: %s, want %s", got, c.want)
			}
		})
	}
	for code, want := range map[int32]bool{121: true, 66: true, 9: false, 72: false} {
		if got := policy.WriteErrorShape(code, "", false, nil) == policy.ShapeWriteError; got != want {
			t.Errorf("WriteErrorShape(%d, mongos) verdict %v, want %v", code, got, want)
		}
	}
}

// WithVerdictCodes refuses the codes that cannot prove a statement not
// applied.
func TestWithVerdictCodesRefusesUnprovable(t *testing.T) {
	for _, code := range []int{72, 91, 6, 89, 9001, 11602, 217, 50, 0, -5} {
		if _, err := writeguard.New(mocks.NewFake("db.x"), writeguard.WithVerdictCodes(code)); err == nil || !strings.Contains(err.Error(), fmt.Sprint(code)) {
			t.Errorf("WithVerdictCodes(%d): %v, want an error naming it", code, err)
		}
	}
	if _, err := writeguard.New(mocks.NewFake("db.x"), writeguard.WithVerdictCodes(9, 40000)); err != nil {
		t.Errorf("WithVerdictCodes(9, 40000): %v", err)
	}
}

// A 72 on a statement sent with others (mongos moving a document's shard
// key) proves nothing; an idempotent model heals by being sent alone, a
// model not marked idempotent ends unknown and is not sent again.
func TestC70ShardKeyMoveAlone(t *testing.T) {
	reply := `{"ok":1,"n":1,"writeErrors":[{"index":1,"code":72,"errmsg":"Must run update to shard key field in a multi-statement transaction or with retryWrites: true."}]}`
	for _, idem := range []bool{true, false} {
		t.Run(fmt.Sprint("idempotent=", idem), func(t *testing.T) {
			fake := mocks.NewFake("db.sk").Topology(mocks.Mongos)
			if err := fake.Seed(bson.D{{Key: "_id", Value: "a"}, {Key: "n", Value: 0}}, bson.D{{Key: "_id", Value: "b"}, {Key: "sk", Value: 1}}); err != nil {
				t.Fatal(err)
			}
			fake.Script(mocks.ApplyFirst(1, mocks.Reply(reply)))
			fx := newFixture(t, fake)
			ctx := context.Background()
			if idem {
				ctx = writeguard.IdempotentModels(ctx, 1)
			}
			models := []mongo.WriteModel{
				mongo.NewUpdateOneModel().SetFilter(bson.D{{Key: "_id", Value: "a"}}).SetUpdate(bson.D{{Key: "$inc", Value: bson.D{{Key: "n", Value: 1}}}}),
				mongo.NewUpdateOneModel().SetFilter(bson.D{{Key: "_id", Value: "b"}}).SetUpdate(bson.D{{Key: "$set", Value: bson.D{{Key: "sk", Value: 2}}}}),
			}
			_, err := fx.g.BulkWrite(ctx, models, options.BulkWrite().SetOrdered(false))
			calls := fake.Calls()
			if idem {
				if err != nil || len(calls) != 2 || calls[1].Models != 1 {
					t.Errorf("err %v, calls %+v: want success, the 72 model re-sent alone", err, calls)
				}
			} else {
				var rep *writeguard.Report
				if !errorsAs(err, &rep) || rep.Outcomes[1].Disposition != writeguard.OutcomeUnknown || rep.Outcomes[0].Disposition != writeguard.Written || len(calls) != 1 {
					t.Errorf("err %v, %d calls: want the first written, the second unknown, 1 call", err, len(calls))
				}
			}
			if nOf(t, fake, "a") != 1 {
				t.Errorf("a.n = %d, want 1", nOf(t, fake, "a"))
			}
		})
	}
}
