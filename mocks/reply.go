package mocks

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.mongodb.org/mongo-driver/v2/x/mongo/driver/drivertest"
	"go.mongodb.org/mongo-driver/v2/x/mongo/driver/xoptions"
)

// Operations accepted by ReplyError.
const (
	OpInsertOne  = "insertOne"
	OpInsertMany = "insertMany"
	OpBulkWrite  = "bulkWrite"

	OpUpdateOne         = "updateOne"
	OpUpdateMany        = "updateMany"
	OpReplaceOne        = "replaceOne"
	OpDeleteOne         = "deleteOne"
	OpDeleteMany        = "deleteMany"
	OpFindOneAndUpdate  = "findOneAndUpdate"
	OpFindOneAndReplace = "findOneAndReplace"
	OpFindOneAndDelete  = "findOneAndDelete"
)

// ReplyError returns exactly the error the driver returns when the server
// answers op with reply: the reply is fed to the real driver (v2) through
// its experimental drivertest.MockDeployment, and the driver's error comes
// back unchanged (mongo.WriteException, mongo.BulkWriteException,
// mongo.CommandError, ...). It returns nil when the driver sees success.
//
// op is one of the Op constants (the reply is read as the driver reads
// the reply to that method's command: findOneAnd* as findAndModify's, the
// others as insert, update or delete's). For insertMany and
// bulkWrite the command carries as many documents as the reply needs (one
// more than its largest writeErrors index, at least reply.n, at least 1);
// retryable writes are off, so the driver reads exactly one reply.
//
// Bad input is an error, never a panic, and never nil, so a test cannot
// mistake it for success: an unknown op (ErrUnknownOp), a reply that is not
// a valid BSON document or not shaped like a server's reply (ErrInvalidReply:
// no "ok"; "writeErrors" not an array of documents each with an integer
// "index"; "writeConcernError" not a document; the driver would read some
// of these as success), or a reply the real driver
// cannot take without panicking (a *DriverPanicError: the v2.10 driver's
// BulkWrite indexes its models by each write error's index, so an index
// that is negative or names no model of the command panics inside the
// driver, mongo/bulk_write.go runBatch; so does an upserted index).
// ReplyResult returns the same errors.
func ReplyError(op string, reply bson.Raw) error {
	_, err := ReplyResult(op, reply)
	return err
}

// ReplyResult is ReplyError that also returns the driver's result
// (*mongo.InsertOneResult, *mongo.InsertManyResult or
// *mongo.BulkWriteResult, *mongo.UpdateResult, *mongo.DeleteResult; nil
// when the driver returns none, and always nil for findOneAnd*).
func ReplyResult(op string, reply bson.Raw) (any, error) {
	if err := reply.Validate(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidReply, err)
	}
	var d bson.D
	if err := bson.Unmarshal(reply, &d); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidReply, err)
	}
	if err := checkShape(reply); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidReply, err)
	}
	n := docsFor(reply)
	return runMock(op, n, d)
}

// NetworkError returns the error the driver returns for op when the
// connection fails while it waits for the reply: a mongo.CommandError
// labelled NetworkError (mongo.IsNetworkError is true).
func NetworkError(op string) error {
	_, err := runMock(op, 1)
	if err == nil {
		return errors.New("mocks: the driver reported no network error")
	}
	return err
}

// ErrUnknownOp is returned (wrapped) by ReplyError, ReplyResult and
// NetworkError for an op other than OpInsertOne, OpInsertMany and
// OpBulkWrite.
var ErrUnknownOp = errors.New("mocks: unknown op")

// ErrInvalidReply is returned (wrapped, with what was wrong) by ReplyError
// and ReplyResult for a reply that is not a valid BSON document or not
// shaped like a server's reply.
var ErrInvalidReply = errors.New("mocks: reply is not a valid BSON document")

// DriverPanicError is the error ReplyError and ReplyResult return when the
// real driver panics on the reply (a write error index outside the
// command, for bulkWrite): the driver would take the caller's goroutine
// down, the mock reports it instead. Fake re-raises the panic with Value,
// as a *mongo.Collection would.
type DriverPanicError struct {
	// Op is the operation run (OpBulkWrite, say).
	Op string
	// Value is the value the driver panicked with (a runtime.Error).
	Value any
}

// Error names the operation and the panic value.
func (e *DriverPanicError) Error() string {
	return fmt.Sprintf("mocks: the driver panicked on this reply to %s: %v", e.Op, e.Value)
}

var mockMu sync.Mutex // drivertest's mock connection is not safe for concurrent use

func runMock(op string, n int, replies ...bson.D) (res any, err error) {
	switch op {
	case OpInsertOne, OpInsertMany, OpBulkWrite, OpUpdateOne, OpUpdateMany, OpReplaceOne, OpDeleteOne, OpDeleteMany,
		OpFindOneAndUpdate, OpFindOneAndReplace, OpFindOneAndDelete:
	default:
		return nil, fmt.Errorf("%w %q: want one of the Op constants", ErrUnknownOp, op)
	}
	mockMu.Lock()
	defer mockMu.Unlock()
	defer func() {
		if r := recover(); r != nil {
			res, err = nil, &DriverPanicError{Op: op, Value: r}
		}
	}()
	md := drivertest.NewMockDeployment(replies...)
	opts := options.Client().SetRetryWrites(false).SetRetryReads(false)
	if err := xoptions.SetInternalClientOptions(opts, "deployment", md); err != nil {
		return nil, fmt.Errorf("mocks: %w", err)
	}
	client, err := mongo.Connect(opts)
	if err != nil {
		return nil, fmt.Errorf("mocks: %w", err)
	}
	ctx := context.Background()
	defer func() { _ = client.Disconnect(ctx) }()
	coll := client.Database("db").Collection("coll")
	docs := make([]any, n)
	for i := range docs {
		docs[i] = bson.D{{Key: "_id", Value: i}}
	}
	set := bson.D{{Key: "$set", Value: bson.D{{Key: "a", Value: 1}}}}
	switch op {
	case OpInsertOne:
		return coll.InsertOne(ctx, docs[0])
	case OpUpdateOne:
		return coll.UpdateOne(ctx, docs[0], set)
	case OpUpdateMany:
		return coll.UpdateMany(ctx, docs[0], set)
	case OpReplaceOne:
		return coll.ReplaceOne(ctx, docs[0], bson.D{{Key: "a", Value: 1}})
	case OpDeleteOne:
		return coll.DeleteOne(ctx, docs[0])
	case OpDeleteMany:
		return coll.DeleteMany(ctx, docs[0])
	case OpFindOneAndUpdate:
		return nil, coll.FindOneAndUpdate(ctx, docs[0], set).Err()
	case OpFindOneAndReplace:
		return nil, coll.FindOneAndReplace(ctx, docs[0], bson.D{{Key: "a", Value: 1}}).Err()
	case OpFindOneAndDelete:
		return nil, coll.FindOneAndDelete(ctx, docs[0]).Err()
	case OpInsertMany:
		return coll.InsertMany(ctx, docs, options.InsertMany().SetOrdered(false))
	default:
		models := make([]mongo.WriteModel, n)
		for i := range models {
			models[i] = mongo.NewInsertOneModel().SetDocument(docs[i])
		}
		return coll.BulkWrite(ctx, models, options.BulkWrite().SetOrdered(false))
	}
}

func docsFor(reply bson.Raw) int {
	n := 1
	if v, err := reply.LookupErr("n"); err == nil {
		if k, ok := v.AsInt64OK(); ok && int(k) > n && k < 1<<20 {
			n = int(k)
		}
	}
	if v, err := reply.LookupErr("writeErrors"); err == nil {
		if arr, ok := v.ArrayOK(); ok {
			vals, _ := arr.Values()
			for _, we := range vals {
				doc, ok := we.DocumentOK()
				if !ok {
					continue
				}
				if iv, err := doc.LookupErr("index"); err == nil {
					if k, ok := iv.AsInt64OK(); ok && int(k)+1 > n && k < 1<<20 {
						n = int(k) + 1
					}
				}
			}
		}
	}
	return n
}

// checkShape returns what makes reply unlike any server reply the driver
// reads: no ok field, writeErrors that are not an array of documents with
// an integer index, a writeConcernError that is not a document.
func checkShape(reply bson.Raw) error {
	if _, err := reply.LookupErr("ok"); err != nil {
		return errors.New(`no "ok" field`)
	}
	if v, err := reply.LookupErr("writeErrors"); err == nil {
		arr, ok := v.ArrayOK()
		if !ok {
			return fmt.Errorf(`"writeErrors" is a %s, not an array`, v.Type)
		}
		vals, err := arr.Values()
		if err != nil {
			return fmt.Errorf(`"writeErrors": %w`, err)
		}
		for i, we := range vals {
			doc, ok := we.DocumentOK()
			if !ok {
				return fmt.Errorf(`"writeErrors.%d" is a %s, not a document`, i, we.Type)
			}
			if _, ok := doc.Lookup("index").AsInt64OK(); !ok {
				return fmt.Errorf(`"writeErrors.%d" has no integer "index"`, i)
			}
		}
	}
	if v, err := reply.LookupErr("writeConcernError"); err == nil {
		if _, ok := v.DocumentOK(); !ok {
			return fmt.Errorf(`"writeConcernError" is a %s, not a document`, v.Type)
		}
	}
	return nil
}
