package writeguard_test

import (
	"context"
	"fmt"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/writeguard/writeguard"
	"github.com/writeguard/writeguard/mocks"
	"github.com/writeguard/writeguard/policy"
)

const incompleteHistory = `{"ok":0,"code":217,"codeName":"IncompleteTransactionHistory","errmsg":"Incomplete history detected for transaction 1 on session 0b5e"}`

// C69: IncompleteTransactionHistory on a retry whose first run was
// applied: the server cannot tell whether the statement ran
// (transaction_participant.cpp _checkStatementExecuted): the update is
// unknown, MaybeWritten, never sent again; an insert is read back.
func TestC69IncompleteTransactionHistory(t *testing.T) {
	t.Run("update", func(t *testing.T) {
		fake := mocks.NewFake("db.c69")
		if err := fake.Seed(bson.D{{Key: "_id", Value: "acct-1"}, {Key: "balance", Value: int64(0)}}); err != nil {
			t.Fatal(err)
		}
		fake.Script(mocks.AppliedThen(mocks.ReplyError(mocks.OpUpdateOne, mustExtJSON(t, incompleteHistory))))
		fx := newFixture(t, fake)
		o := oneOutcome(t, updateInc(fx.g))
		if o.Disposition != writeguard.OutcomeUnknown || !o.MaybeWritten || o.Failure == nil || o.Failure.Shape != policy.ShapeCommandUnproven {
			t.Errorf("outcome %s MaybeWritten %v failure %v, want unknown, MaybeWritten, command_unproven", o.Disposition, o.MaybeWritten, o.Failure)
		}
		if n := len(fake.Calls()); n != 1 || balance(t, fake, "acct-1") != 100 {
			t.Errorf("%d calls, balance %d: want 1 call, 100", n, balance(t, fake, "acct-1"))
		}
	})
	t.Run("insert", func(t *testing.T) {
		fake := mocks.NewFake("db.c69i").Script(mocks.AppliedThen(mocks.ReplyError(mocks.OpInsertOne, mustExtJSON(t, incompleteHistory))))
		fx := newFixture(t, fake)
		if _, err := fx.g.InsertOne(context.Background(), bson.D{{Key: "_id", Value: "d1"}}); err != nil {
			t.Fatalf("err = %v, want already_written after the read-back", err)
		}
		if d := fx.rec.Dispositions(); len(d) != 1 || d[0].Disposition != writeguard.AlreadyWritten {
			t.Errorf("dispositions %+v, want already_written", d)
		}
	})
}

// C69, through mongos: findAndModify fails as a whole with 6, 89 or 9001
// when mongos loses the shard's reply after the shard ran it
// (cluster_find_and_modify_cmd.cpp): unknown, never re-sent.
func TestC69MongosLostShardReply(t *testing.T) {
	for _, code := range []int{6, 89, 9001} {
		t.Run(fmt.Sprint(code), func(t *testing.T) {
			fake := mocks.NewFake("db.c69m").Topology(mocks.Mongos)
			if err := fake.Seed(bson.D{{Key: "_id", Value: "acct-1"}, {Key: "balance", Value: int64(0)}}); err != nil {
				t.Fatal(err)
			}
			reply := fmt.Sprintf(`{"ok":0,"code":%d,"errmsg":"shard unreachable","errorLabels":["RetryableWriteError"]}`, code)
			fake.Script(mocks.AppliedThen(mocks.ReplyError(mocks.OpFindOneAndUpdate, mustExtJSON(t, reply))))
			fx := newFixture(t, fake)
			err := fx.g.FindOneAndUpdate(context.Background(), bson.D{{Key: "_id", Value: "acct-1"}}, bson.D{{Key: "$inc", Value: bson.D{{Key: "balance", Value: 100}}}}).Err()
			o := oneOutcome(t, err)
			if o.Disposition != writeguard.OutcomeUnknown || !o.MaybeWritten {
				t.Errorf("outcome %s MaybeWritten %v, want unknown, MaybeWritten", o.Disposition, o.MaybeWritten)
			}
			if n := len(fake.Calls()); n != 1 || balance(t, fake, "acct-1") != 100 {
				t.Errorf("%d calls, balance %d: want 1 call, 100", n, balance(t, fake, "acct-1"))
			}
		})
	}
}

// command_rejected keeps only the codes whose source shows a refusal
// before the command ran (policy.RejectedCodes); 217, the network-class
// codes, Atlas's 8000 and unknown codes are command_unproven.
func TestC69WholeCommandShapes(t *testing.T) {
	for code, want := range map[int]policy.Shape{
		2: policy.ShapeCommandRejected, 9: policy.ShapeCommandRejected, 59: policy.ShapeCommandRejected,
		121: policy.ShapeCommandRejected, 462: policy.ShapeCommandRejected, 11000: policy.ShapeCommandRejected,
		13: policy.ShapeAuthorization, 8000: policy.ShapeCommandUnproven,
		217: policy.ShapeCommandUnproven, 6: policy.ShapeCommandUnproven, 89: policy.ShapeCommandUnproven,
		9001: policy.ShapeCommandUnproven, 424242: policy.ShapeCommandUnproven,
		11601: policy.ShapeInterrupted, 20: policy.ShapeConfiguration,
	} {
		reply := mustExtJSON(t, fmt.Sprintf(`{"ok":0,"code":%d,"errmsg":"x"}`, code))
		fs := policy.Extract(mocks.ReplyError(mocks.OpUpdateOne, reply))
		if len(fs) != 1 || fs[0].Shape != want {
			t.Errorf("code %d: %+v, want shape %s", code, fs, want)
		}
		if r := want.Row(); r.Source == "" {
			t.Errorf("%s: no source", r.Name)
		}
	}
}
