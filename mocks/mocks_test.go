package mocks_test

import (
	"context"
	"errors"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/writeguard/writeguard/mocks"
)

func TestReplyErrorTypes(t *testing.T) {
	we, _ := bson.Marshal(bson.D{{Key: "ok", Value: 1}, {Key: "n", Value: 0}, {Key: "writeErrors", Value: bson.A{
		bson.D{{Key: "index", Value: 2}, {Key: "code", Value: 11000}, {Key: "errmsg", Value: "E11000"}}}}})
	var bwe mongo.BulkWriteException
	if err := mocks.ReplyError(mocks.OpInsertMany, we); !errors.As(err, &bwe) || bwe.WriteErrors[0].Index != 2 {
		t.Errorf("insertMany: %T %v, want a BulkWriteException at index 2", err, err)
	}
	var wex mongo.WriteException
	if err := mocks.ReplyError(mocks.OpInsertOne, we); !errors.As(err, &wex) {
		t.Errorf("insertOne: %T, want a WriteException", err)
	}
	ok, _ := bson.Marshal(bson.D{{Key: "ok", Value: 1}, {Key: "n", Value: 1}})
	if err := mocks.ReplyError(mocks.OpInsertOne, ok); err != nil {
		t.Errorf("success reply: %v", err)
	}
	if err := mocks.ReplyError("update", ok); err == nil {
		t.Error("unknown op accepted")
	}
	if err := mocks.ReplyError(mocks.OpInsertOne, bson.Raw{1, 2}); err == nil {
		t.Error("invalid BSON accepted")
	}
	if err := mocks.NetworkError(mocks.OpInsertOne); !mongo.IsNetworkError(err) {
		t.Errorf("NetworkError: %v is not a network error", err)
	}
}

func TestFakeOrderedSemantics(t *testing.T) {
	ctx := context.Background()
	docs := []any{bson.D{{Key: "_id", Value: 1}}, bson.D{{Key: "_id", Value: 1}}, bson.D{{Key: "_id", Value: 3}}}
	f := mocks.NewFake("db.c")
	res, err := f.InsertMany(ctx, docs)
	var bwe mongo.BulkWriteException
	if !errors.As(err, &bwe) || len(bwe.WriteErrors) != 1 || bwe.WriteErrors[0].Index != 1 {
		t.Fatalf("ordered: %v", err)
	}
	if len(f.Docs()) != 1 || len(res.InsertedIDs) != 1 {
		t.Errorf("ordered write did not stop at the first error: %d stored", len(f.Docs()))
	}
	f2 := mocks.NewFake("db.c")
	_, err = f2.InsertMany(ctx, docs, options.InsertMany().SetOrdered(false))
	if !mongo.IsDuplicateKeyError(err) || len(f2.Docs()) != 2 {
		t.Errorf("unordered: %v, %d stored; want a duplicate and 2 stored", err, len(f2.Docs()))
	}
}

func TestFakeFaults(t *testing.T) {
	ctx := context.Background()
	f := mocks.NewFake("db.c").Script(mocks.LoseReply(), mocks.DropConnection(), mocks.WriteConcernError(64, "WriteConcernTimeout", "timeout"))
	if _, err := f.InsertOne(ctx, bson.D{{Key: "_id", Value: 1}}); !mongo.IsNetworkError(err) || len(f.Docs()) != 1 {
		t.Errorf("LoseReply: %v, %d stored; want a network error and the write applied", err, len(f.Docs()))
	}
	if _, err := f.InsertOne(ctx, bson.D{{Key: "_id", Value: 2}}); !mongo.IsNetworkError(err) || len(f.Docs()) != 1 {
		t.Errorf("DropConnection: %v, %d stored; want a network error and nothing applied", err, len(f.Docs()))
	}
	var wex mongo.WriteException
	if _, err := f.InsertOne(ctx, bson.D{{Key: "_id", Value: 3}}); !errors.As(err, &wex) || wex.WriteConcernError == nil || len(f.Docs()) != 2 {
		t.Errorf("WriteConcernError: %v", err)
	}
	calls := f.Calls()
	if len(calls) != 3 || calls[0].Fault != "lose_reply" || calls[2].Fault != "write_concern_error" {
		t.Errorf("calls %+v", calls)
	}
}

func TestFakeBulkUpdates(t *testing.T) {
	ctx := context.Background()
	f := mocks.NewFake("db.c")
	if err := f.Seed(bson.D{{Key: "_id", Value: 1}, {Key: "n", Value: int32(1)}}); err != nil {
		t.Fatal(err)
	}
	res, err := f.BulkWrite(ctx, []mongo.WriteModel{
		mongo.NewUpdateOneModel().SetFilter(bson.D{{Key: "_id", Value: 1}}).SetUpdate(bson.D{{Key: "$inc", Value: bson.D{{Key: "n", Value: 2}}}}),
		mongo.NewUpdateOneModel().SetFilter(bson.D{{Key: "_id", Value: 2}}).SetUpdate(bson.D{{Key: "$set", Value: bson.D{{Key: "x", Value: 1}}}}).SetUpsert(true),
		mongo.NewDeleteOneModel().SetFilter(bson.D{{Key: "_id", Value: 2}}),
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.ModifiedCount != 1 || res.UpsertedCount != 1 || res.DeletedCount != 1 || res.UpsertedIDs[1] == nil {
		t.Errorf("result %+v", res)
	}
	if n := f.Docs()[0].Lookup("n").AsInt64(); n != 3 {
		t.Errorf("n = %d, want 3", n)
	}
}

// The Fake's unique index keys values as the server does: a missing field
// and null are one key, and numbers compare by value.
func TestFakeUniqueKeysLikeTheServer(t *testing.T) {
	cases := []struct {
		name        string
		first, next bson.D
	}{
		{"missing then null", bson.D{{Key: "_id", Value: 1}}, bson.D{{Key: "_id", Value: 2}, {Key: "email", Value: nil}}},
		{"null then missing", bson.D{{Key: "_id", Value: 1}, {Key: "email", Value: nil}}, bson.D{{Key: "_id", Value: 2}}},
		{"int32 then double", bson.D{{Key: "_id", Value: 1}, {Key: "email", Value: int32(1)}}, bson.D{{Key: "_id", Value: 2}, {Key: "email", Value: 1.0}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := mocks.NewFake("db.u").Unique("email")
			if _, err := f.InsertOne(context.Background(), c.first); err != nil {
				t.Fatal(err)
			}
			_, err := f.InsertOne(context.Background(), c.next)
			if !mongo.IsDuplicateKeyError(err) {
				t.Errorf("err = %v, want a duplicate key", err)
			}
		})
	}
}

// The methods of one write read a reply as the driver reads their
// command's: a write error of the update and delete commands is a
// WriteException, findAndModify's failure a CommandError.
func TestReplyErrorOneWriteMethods(t *testing.T) {
	we, _ := bson.Marshal(bson.D{{Key: "ok", Value: 1}, {Key: "n", Value: 0}, {Key: "writeErrors", Value: bson.A{
		bson.D{{Key: "index", Value: 0}, {Key: "code", Value: 121}, {Key: "errmsg", Value: "Document failed validation"}}}}})
	for _, op := range []string{mocks.OpUpdateOne, mocks.OpUpdateMany, mocks.OpReplaceOne, mocks.OpDeleteOne, mocks.OpDeleteMany} {
		var wex mongo.WriteException
		if err := mocks.ReplyError(op, we); !errors.As(err, &wex) || wex.WriteErrors[0].Code != 121 {
			t.Errorf("%s: %T %v, want a WriteException 121", op, err, err)
		}
	}
	cmdErr, _ := bson.Marshal(bson.D{{Key: "ok", Value: 0}, {Key: "code", Value: 11000}, {Key: "errmsg", Value: "E11000 duplicate key"}})
	for _, op := range []string{mocks.OpFindOneAndUpdate, mocks.OpFindOneAndReplace, mocks.OpFindOneAndDelete} {
		var ce mongo.CommandError
		if err := mocks.ReplyError(op, cmdErr); !errors.As(err, &ce) || ce.Code != 11000 {
			t.Errorf("%s: %T %v, want a CommandError 11000", op, err, err)
		}
	}
}

// Fake.FindOneAndUpdate reports a failed statement as the command's error,
// as the server does; Poison fails every call carrying the document.
func TestFakeFindAndModifyAndPoison(t *testing.T) {
	ctx := context.Background()
	f := mocks.NewFake("db.c").Unique("s")
	if err := f.Seed(bson.D{{Key: "_id", Value: 1}, {Key: "s", Value: "a"}}, bson.D{{Key: "_id", Value: 2}, {Key: "s", Value: "b"}}); err != nil {
		t.Fatal(err)
	}
	var ce mongo.CommandError
	err := f.FindOneAndUpdate(ctx, bson.D{{Key: "_id", Value: 1}}, bson.D{{Key: "$set", Value: bson.D{{Key: "s", Value: "b"}}}}).Err()
	if !errors.As(err, &ce) || ce.Code != 11000 {
		t.Errorf("duplicate key: %T %v, want a CommandError 11000", err, err)
	}
	var got bson.M
	if err := f.FindOneAndUpdate(ctx, bson.D{{Key: "_id", Value: 1}}, bson.D{{Key: "$set", Value: bson.D{{Key: "s", Value: "c"}}}},
		options.FindOneAndUpdate().SetReturnDocument(options.After)).Decode(&got); err != nil || got["s"] != "c" {
		t.Errorf("after image %v, err %v", got, err)
	}
	f.Poison("p", mocks.DropConnection())
	if _, err := f.InsertMany(ctx, []any{bson.D{{Key: "_id", Value: "ok"}}, bson.D{{Key: "_id", Value: "p"}}}); !mongo.IsNetworkError(err) {
		t.Errorf("poisoned call: %v, want a network error", err)
	}
	if _, err := f.InsertOne(ctx, bson.D{{Key: "_id", Value: "ok"}}); err != nil || len(f.Docs()) != 3 {
		t.Errorf("call without the poison: %v, %d stored", err, len(f.Docs()))
	}
}

// An upsert applied by ApplyFirst's first writes is stored like any other
// write, and a call that panics inside the Fake does not leave it locked:
// the next call is answered.
func TestFakeApplyFirstUpsertAndUnlock(t *testing.T) {
	ctx := context.Background()
	f := mocks.NewFake("db.upsert").Script(mocks.ApplyFirst(1, mocks.DropConnection()))
	models := []mongo.WriteModel{
		mongo.NewUpdateOneModel().SetFilter(bson.D{{Key: "k", Value: 1}}).SetUpdate(bson.D{{Key: "$set", Value: bson.D{{Key: "v", Value: 1}}}}).SetUpsert(true),
		mongo.NewUpdateOneModel().SetFilter(bson.D{{Key: "k", Value: 2}}).SetUpdate(bson.D{{Key: "$set", Value: bson.D{{Key: "v", Value: 2}}}}).SetUpsert(true),
	}
	if _, err := f.BulkWrite(ctx, models); err == nil {
		t.Fatal("ApplyFirst(1, DropConnection()): want the dropped connection's error")
	}
	if n := len(f.Docs()); n != 1 {
		t.Fatalf("%d documents stored, want the first upsert's 1", n)
	}
	done := make(chan error, 1)
	go func() {
		_, err := f.InsertOne(ctx, bson.D{{Key: "k", Value: 3}})
		done <- err
	}()
	if err := <-done; err != nil {
		t.Fatalf("the next call: %v", err)
	}
	if n := len(f.Docs()); n != 2 {
		t.Fatalf("%d documents stored, want 2", n)
	}
}

// A validator that panics (a test's bug, recovered by the caller as
// writeguard recovers a target's panic) leaves the Fake unlocked: the
// next call is answered instead of waiting for the lock forever.
func TestFakeUnlockedAfterPanic(t *testing.T) {
	ctx := context.Background()
	panicked := false
	f := mocks.NewFake("db.panic").Validator(func(bson.Raw) (bson.Raw, bool) {
		if !panicked {
			panicked = true
			panic("validator bug")
		}
		return nil, false
	})
	func() {
		defer func() { _ = recover() }()
		_, _ = f.InsertOne(ctx, bson.D{{Key: "k", Value: 1}})
	}()
	done := make(chan error, 1)
	go func() {
		_, err := f.InsertOne(ctx, bson.D{{Key: "k", Value: 2}})
		done <- err
	}()
	if err := <-done; err != nil {
		t.Fatalf("the call after the panic: %v", err)
	}
}
