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

// TestReplyErrorBadInputIsAnError: a reply the driver cannot take (a write
// error index outside a bulkWrite's models, which panics inside the v2.10
// driver), an unknown op and invalid BSON are errors naming what was
// wrong, never a panic and never nil.
func TestReplyErrorBadInputIsAnError(t *testing.T) {
	raw := func(js string) bson.Raw {
		t.Helper()
		var r bson.Raw
		if err := bson.UnmarshalExtJSON([]byte(js), false, &r); err != nil {
			t.Fatal(err)
		}
		return r
	}
	for _, js := range []string{
		`{"ok":1,"n":0,"writeErrors":[{"index":-1,"code":11000,"errmsg":"E11000"}]}`,
		`{"ok":1,"n":0,"writeErrors":[{"index":2000000,"code":11000,"errmsg":"E11000"}]}`,
	} {
		var dp *mocks.DriverPanicError
		res, err := mocks.ReplyResult(mocks.OpBulkWrite, raw(js))
		if !errors.As(err, &dp) || dp.Op != mocks.OpBulkWrite || dp.Value == nil || res != nil {
			t.Errorf("bulkWrite %s: (%v, %v), want a *DriverPanicError and no result", js, res, err)
		}
		// insertMany takes the same reply without panicking: the
		// driver's own error comes back.
		var bwe mongo.BulkWriteException
		if err := mocks.ReplyError(mocks.OpInsertMany, raw(js)); !errors.As(err, &bwe) {
			t.Errorf("insertMany %s: %v, want the driver's BulkWriteException", js, err)
		}
	}
	ok := raw(`{"ok":1,"n":1}`)
	if err := mocks.ReplyError("update", ok); !errors.Is(err, mocks.ErrUnknownOp) {
		t.Errorf("unknown op: %v, want ErrUnknownOp", err)
	}
	if err := mocks.ReplyError(mocks.OpInsertOne, bson.Raw{5, 0, 0, 0, 1}); !errors.Is(err, mocks.ErrInvalidReply) {
		t.Errorf("invalid BSON: %v, want ErrInvalidReply", err)
	}
	// Shapes the driver would read as success.
	for _, js := range []string{
		`{"n":1}`,
		`{"ok":1,"n":0,"writeErrors":5}`,
		`{"ok":1,"n":0,"writeErrors":[7]}`,
		`{"ok":1,"n":0,"writeErrors":[{"index":"a","code":11000,"errmsg":"E11000"}]}`,
		`{"ok":1,"n":1,"writeConcernError":"timeout"}`,
	} {
		for _, op := range []string{mocks.OpInsertOne, mocks.OpInsertMany, mocks.OpBulkWrite} {
			if err := mocks.ReplyError(op, raw(js)); !errors.Is(err, mocks.ErrInvalidReply) {
				t.Errorf("%s %s: %v, want ErrInvalidReply", op, js, err)
			}
		}
	}
}

// TestFakePanicsAsTheDriverDoes: a scripted reply the driver panics on
// makes the Fake's BulkWrite panic too, with the driver's value, and the
// Fake stays usable (its lock released).
func TestFakePanicsAsTheDriverDoes(t *testing.T) {
	f := mocks.NewFake("db.c").Script(mocks.Reply(`{"ok":1,"n":0,"writeErrors":[{"index":5,"code":11000,"errmsg":"E11000"}]}`))
	models := []mongo.WriteModel{mongo.NewInsertOneModel().SetDocument(bson.D{{Key: "_id", Value: 1}})}
	func() {
		defer func() {
			if r := recover(); r == nil {
				t.Error("BulkWrite with a write error index outside the command did not panic")
			}
		}()
		_, _ = f.BulkWrite(context.Background(), models)
	}()
	if _, err := f.BulkWrite(context.Background(), models); err != nil || len(f.Docs()) != 1 {
		t.Errorf("after the panic: %v, %d stored; want the write to pass", err, len(f.Docs()))
	}
}

// TestFakeTimeSeries: a time-series Fake has no unique _id, so a re-sent
// insert stores a second copy (C55); CollectionType says which kind it is.
func TestFakeTimeSeries(t *testing.T) {
	ctx := context.Background()
	f := mocks.NewFake("db.m").TimeSeries()
	if k, err := f.CollectionType(ctx); k != mocks.TypeTimeSeries || err != nil {
		t.Fatalf("CollectionType = %q, %v", k, err)
	}
	docs := []any{bson.D{{Key: "_id", Value: 1}, {Key: "v", Value: 1.5}}, bson.D{{Key: "_id", Value: 2}, {Key: "v", Value: 2.5}}}
	f.Script(mocks.LoseReply())
	if _, err := f.InsertMany(ctx, docs); !mongo.IsNetworkError(err) {
		t.Fatalf("attempt 1: %v, want a network error", err)
	}
	if _, err := f.InsertMany(ctx, docs, options.InsertMany().SetOrdered(false)); err != nil {
		t.Fatalf("attempt 2: %v, want success (no unique _id)", err)
	}
	if n := len(f.Docs()); n != 4 {
		t.Errorf("%d documents stored, want 4 (each measurement twice)", n)
	}
	cur, err := f.Find(ctx, bson.D{{Key: "_id", Value: 1}})
	if err != nil {
		t.Fatal(err)
	}
	var got []bson.Raw
	if err := cur.All(ctx, &got); err != nil || len(got) != 2 {
		t.Errorf("Find _id 1: %d documents (%v), want 2", len(got), err)
	}
	plain := mocks.NewFake("db.c")
	if k, _ := plain.CollectionType(ctx); k != mocks.TypeCollection {
		t.Errorf("plain Fake: CollectionType = %q", k)
	}
	if _, err := plain.InsertMany(ctx, docs); err != nil {
		t.Fatal(err)
	}
	if _, err := plain.InsertMany(ctx, docs, options.InsertMany().SetOrdered(false)); !mongo.IsDuplicateKeyError(err) {
		t.Errorf("plain Fake re-insert: %v, want a duplicate key error", err)
	}
}

// FuzzReplyResultNeverPanics: whatever the reply, ReplyResult returns (a
// result or an error); with a write error index that names no model it is
// a *DriverPanicError, never a panic.
func FuzzReplyResultNeverPanics(f *testing.F) {
	for _, js := range []string{
		`{"ok":1,"n":2}`,
		`{"ok":1,"n":0,"writeErrors":[{"index":3,"code":11000,"errmsg":"E11000"}]}`,
		`{"ok":1,"n":0,"writeErrors":[{"index":-7,"code":6,"errmsg":"Write results unavailable from shard01"}]}`,
		`{"ok":1,"n":1,"upserted":[{"index":9,"_id":1}]}`,
		`{"ok":0,"code":91,"errmsg":"x","errorLabels":["RetryableWriteError"]}`,
	} {
		var r bson.Raw
		if err := bson.UnmarshalExtJSON([]byte(js), false, &r); err != nil {
			f.Fatal(err)
		}
		f.Add([]byte(r), uint8(2))
	}
	ops := []string{mocks.OpInsertOne, mocks.OpInsertMany, mocks.OpBulkWrite}
	f.Fuzz(func(t *testing.T, reply []byte, op uint8) {
		_, _ = mocks.ReplyResult(ops[int(op)%len(ops)], bson.Raw(reply))
	})
}
