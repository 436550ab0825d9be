package writeguard

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/writeguard/writeguard/envelope"
	"github.com/writeguard/writeguard/internal/driveropts"
	"github.com/writeguard/writeguard/internal/engine"
)

// The guarded methods of one write: UpdateOne, UpdateByID, UpdateMany,
// ReplaceOne, DeleteOne, DeleteMany and the FindOneAnd* methods. Each is
// one input (index 0 of its Report), routed as the matching BulkWrite
// model is (UpdateOneModel, ...), and dead-lettered as that model.
//
// Proof rules (DESIGN, "What a reply proves"; policy.ReplyShapes):
//   - a reply that proves the write not applied (a write error with a
//     verdict code, NoWritesPerformed, nothing sent) lets a transient
//     failure be retried;
//   - a reply that may have applied it (a lost reply, a timeout after
//     sending, an interruption) lets it be re-sent only when the caller
//     marked it idempotent (WithIdempotent, IdempotentModels(ctx, 0));
//     otherwise it ends unknown. writeguard's re-send is a new command:
//     unlike the driver's own retryable-write retry (Retryable Writes
//     spec; UpdateMany and DeleteMany are never retryable writes there)
//     the server cannot deduplicate it;
//   - a write concern error: written_unconfirmed, or re-sent when its
//     class is retryable and the write is marked idempotent;
//   - findAndModify reports its statement's failure (121, 11000) as the
//     command's error; a command of one statement rejected with a
//     per-document verdict code is that statement's verdict (the engine's
//     one-statement rule, citing src/mongo/db/commands/find_and_modify.cpp):
//     dead-lettered (Invalid) or handed to the conflict handler (Conflict),
//     an upsert first run again (WithUpsertConflictRetries).

// one guards a method of one write: model is the write as a BulkWrite
// model (for routing, the Report and the dead-letter envelope), call the
// driver's method, acked whether a result is acknowledged.
func one[T any](g *Guarded, ctx context.Context, name, command string, model mongo.WriteModel, callOpts envelope.CallOptions, check func() error,
	call func(ctx context.Context) (*T, error), acked func(*T) bool) (*T, error) {
	var last *T
	return guard(g, ctx, method[T]{
		name: name, txInputs: 1, tx: call,
		// findAndModify returns a document (before or after the write); a
		// second run after a lost reply would return another one (the
		// pre-image of the second run, or none after a delete).
		neverResend: command == "findAndModify",
		inputs: func() (engine.Inputs, error) {
			if check != nil {
				if err := check(); err != nil {
					return engine.Inputs{}, err
				}
			}
			return engine.Inputs{Ordered: true, Models: []mongo.WriteModel{model}, Command: command, CallOptions: callOpts}, nil
		},
		matchedNothing: matchedNothing,
		send: func(ctx context.Context, _ engine.Batch) (any, error) {
			res, err := call(ctx)
			if res != nil {
				last = res
				if err == nil && !acked(res) {
					return res, engine.ErrUnacked
				}
			}
			return res, err
		},
		result: func(r engine.Result) *T {
			if d := r.Disposition(0); d.Stored() || d == Unacknowledged {
				return last
			}
			return nil
		},
	})
}

// matchedNothing reports whether an acknowledged result of a method of
// one write matched no document (hooks.OperationEnd.MatchedNothing).
func matchedNothing(res any) bool {
	switch r := res.(type) {
	case *mongo.UpdateResult:
		return r.MatchedCount == 0 && r.UpsertedCount == 0
	case *mongo.DeleteResult:
		return r.DeletedCount == 0
	case *mongo.SingleResult:
		return errors.Is(r.Err(), mongo.ErrNoDocuments)
	}
	return false
}

func updateAcked(r *mongo.UpdateResult) bool { return r.Acknowledged }
func deleteAcked(r *mongo.DeleteResult) bool { return r.Acknowledged }

// UpdateOne updates one document through the policy chain. After a
// failure that may have applied the update (a lost reply, a timeout after
// sending, an interruption) it is re-sent only when ctx marks it
// idempotent (WithIdempotent, IdempotentModels(ctx, 0)); otherwise it ends
// unknown. On success it returns exactly what the driver returns (after a
// retry: the result of the attempt that succeeded, which counts only what
// that attempt did: after a re-send that followed a lost reply,
// MatchedCount and ModifiedCount may be 0 and UpsertedID nil although the
// first attempt matched, modified or upserted; the same holds for the
// DeletedCount of DeleteOne and DeleteMany). Otherwise it returns a
// *Report with one Outcome (Model: the UpdateOneModel) and a nil result,
// or the result when the update is stored (written_unconfirmed). A nil
// filter or update, or an update document without update operators, is an
// invalid argument, as in the driver: nothing is sent and the error is
// not a Report. Inside a transaction it makes one attempt and returns the
// driver's result and error unchanged. A nil ctx is context.Background().
func (g *Guarded) UpdateOne(ctx context.Context, filter any, update any, opts ...options.Lister[options.UpdateOneOptions]) (*mongo.UpdateResult, error) {
	var o options.UpdateOneOptions
	if err := applyOptions(opts, &o); err != nil {
		return nil, err
	}
	m := &mongo.UpdateOneModel{Filter: filter, Update: update, ArrayFilters: o.ArrayFilters, Collation: o.Collation, Hint: o.Hint, Upsert: o.Upsert, Sort: o.Sort}
	co := envelope.CallOptions{BypassDocumentValidation: o.BypassDocumentValidation, Let: o.Let, Comment: o.Comment}
	return one(g, ctx, "updateOne", "update", m, co, func() error { return checkUpdate(filter, update) },
		func(ctx context.Context) (*mongo.UpdateResult, error) {
			return g.target.UpdateOne(ctx, filter, update, opts...)
		}, updateAcked)
}

// UpdateByID updates the document with _id id through the policy chain,
// as UpdateOne with the filter {_id: id}. A nil id is an invalid argument,
// as in the driver.
func (g *Guarded) UpdateByID(ctx context.Context, id any, update any, opts ...options.Lister[options.UpdateOneOptions]) (*mongo.UpdateResult, error) {
	if id == nil {
		return nil, fmt.Errorf("invalid id: %w", mongo.ErrNilValue)
	}
	var o options.UpdateOneOptions
	if err := applyOptions(opts, &o); err != nil {
		return nil, err
	}
	filter := bson.D{{Key: "_id", Value: id}}
	m := &mongo.UpdateOneModel{Filter: filter, Update: update, ArrayFilters: o.ArrayFilters, Collation: o.Collation, Hint: o.Hint, Upsert: o.Upsert, Sort: o.Sort}
	co := envelope.CallOptions{BypassDocumentValidation: o.BypassDocumentValidation, Let: o.Let, Comment: o.Comment}
	return one(g, ctx, "updateByID", "update", m, co, func() error { return checkUpdate(filter, update) },
		func(ctx context.Context) (*mongo.UpdateResult, error) {
			return g.target.UpdateByID(ctx, id, update, opts...)
		}, updateAcked)
}

// UpdateMany updates every document matching filter through the policy
// chain, as UpdateOne. The driver never retries it (a multi-document
// update is not a retryable write: Retryable Writes spec), and writeguard
// re-sends it after a failure that may have applied it only when ctx
// marks it idempotent.
func (g *Guarded) UpdateMany(ctx context.Context, filter any, update any, opts ...options.Lister[options.UpdateManyOptions]) (*mongo.UpdateResult, error) {
	var o options.UpdateManyOptions
	if err := applyOptions(opts, &o); err != nil {
		return nil, err
	}
	m := &mongo.UpdateManyModel{Filter: filter, Update: update, ArrayFilters: o.ArrayFilters, Collation: o.Collation, Hint: o.Hint, Upsert: o.Upsert}
	co := envelope.CallOptions{BypassDocumentValidation: o.BypassDocumentValidation, Let: o.Let, Comment: o.Comment}
	return one(g, ctx, "updateMany", "update", m, co, func() error { return checkUpdate(filter, update) },
		func(ctx context.Context) (*mongo.UpdateResult, error) {
			return g.target.UpdateMany(ctx, filter, update, opts...)
		}, updateAcked)
}

// ReplaceOne replaces one document through the policy chain, as UpdateOne.
// A nil filter or replacement, or a replacement whose first key starts
// with '$', is an invalid argument, as in the driver. A replacement that
// fails validation (121) is dead-lettered as a ReplaceOneModel.
func (g *Guarded) ReplaceOne(ctx context.Context, filter any, replacement any, opts ...options.Lister[options.ReplaceOptions]) (*mongo.UpdateResult, error) {
	var o options.ReplaceOptions
	if err := applyOptions(opts, &o); err != nil {
		return nil, err
	}
	m := &mongo.ReplaceOneModel{Filter: filter, Replacement: replacement, Collation: o.Collation, Hint: o.Hint, Upsert: o.Upsert, Sort: o.Sort}
	co := envelope.CallOptions{BypassDocumentValidation: o.BypassDocumentValidation, Let: o.Let, Comment: o.Comment}
	return one(g, ctx, "replaceOne", "update", m, co, func() error { return checkReplacement(filter, replacement) },
		func(ctx context.Context) (*mongo.UpdateResult, error) {
			return g.target.ReplaceOne(ctx, filter, replacement, opts...)
		}, updateAcked)
}

// DeleteOne deletes one document through the policy chain. After a
// failure that may have applied it, it is re-sent only when ctx marks it
// idempotent: a delete by _id is; a delete by a filter that matches
// several documents is not (the second run deletes another one). A nil
// filter is an invalid argument, as in the driver.
func (g *Guarded) DeleteOne(ctx context.Context, filter any, opts ...options.Lister[options.DeleteOneOptions]) (*mongo.DeleteResult, error) {
	var o options.DeleteOneOptions
	if err := applyOptions(opts, &o); err != nil {
		return nil, err
	}
	m := &mongo.DeleteOneModel{Filter: filter, Collation: o.Collation, Hint: o.Hint}
	co := envelope.CallOptions{Let: o.Let, Comment: o.Comment}
	return one(g, ctx, "deleteOne", "delete", m, co, func() error { return checkFilter(filter) },
		func(ctx context.Context) (*mongo.DeleteResult, error) {
			return g.target.DeleteOne(ctx, filter, opts...)
		}, deleteAcked)
}

// DeleteMany deletes every document matching filter through the policy
// chain, as DeleteOne. The driver never retries it (not a retryable
// write); writeguard re-sends it after a failure that may have applied it
// only when ctx marks it idempotent.
func (g *Guarded) DeleteMany(ctx context.Context, filter any, opts ...options.Lister[options.DeleteManyOptions]) (*mongo.DeleteResult, error) {
	var o options.DeleteManyOptions
	if err := applyOptions(opts, &o); err != nil {
		return nil, err
	}
	m := &mongo.DeleteManyModel{Filter: filter, Collation: o.Collation, Hint: o.Hint}
	co := envelope.CallOptions{Let: o.Let, Comment: o.Comment}
	return one(g, ctx, "deleteMany", "delete", m, co, func() error { return checkFilter(filter) },
		func(ctx context.Context) (*mongo.DeleteResult, error) {
			return g.target.DeleteMany(ctx, filter, opts...)
		}, deleteAcked)
}

// FindOneAndUpdate runs findAndModify through the policy chain, routed as
// UpdateOne. On success it returns the driver's *mongo.SingleResult (no
// matching document is a success: its Err is mongo.ErrNoDocuments).
// Otherwise it returns a SingleResult whose Err is the *Report (or the
// invalid-argument error). A duplicate key or a validation failure, which
// findAndModify reports as the command's error, is the statement's
// verdict (conflict handler, dead-letter sink).
//
// A findAndModify that may have been applied (a lost reply, a timeout
// after sending, an interruption) is never sent again, even when ctx marks
// it idempotent: the second run would return another document (its own
// pre-image, or none after FindOneAndDelete) as if it were the first's.
// It ends unknown with MaybeWritten; read the document to learn its state.
// Failures proved not applied (nothing sent, NoWritesPerformed) are
// retried as for every method.
func (g *Guarded) FindOneAndUpdate(ctx context.Context, filter any, update any, opts ...options.Lister[options.FindOneAndUpdateOptions]) *mongo.SingleResult {
	var o options.FindOneAndUpdateOptions
	if err := applyOptions(opts, &o); err != nil {
		return errResult(err)
	}
	m := &mongo.UpdateOneModel{Filter: filter, Update: update, ArrayFilters: o.ArrayFilters, Collation: o.Collation, Hint: o.Hint, Upsert: o.Upsert, Sort: o.Sort}
	co := envelope.CallOptions{BypassDocumentValidation: o.BypassDocumentValidation, Let: o.Let, Comment: o.Comment}
	return single(one(g, ctx, "findOneAndUpdate", "findAndModify", m, co, func() error { return checkUpdate(filter, update) },
		func(ctx context.Context) (*mongo.SingleResult, error) {
			return found(g.target.FindOneAndUpdate(ctx, filter, update, opts...))
		}, singleAcked))
}

// FindOneAndReplace runs findAndModify with a replacement through the
// policy chain, as FindOneAndUpdate (never sent again once it may have
// been applied), routed as ReplaceOne.
func (g *Guarded) FindOneAndReplace(ctx context.Context, filter any, replacement any, opts ...options.Lister[options.FindOneAndReplaceOptions]) *mongo.SingleResult {
	var o options.FindOneAndReplaceOptions
	if err := applyOptions(opts, &o); err != nil {
		return errResult(err)
	}
	m := &mongo.ReplaceOneModel{Filter: filter, Replacement: replacement, Collation: o.Collation, Hint: o.Hint, Upsert: o.Upsert, Sort: o.Sort}
	co := envelope.CallOptions{BypassDocumentValidation: o.BypassDocumentValidation, Let: o.Let, Comment: o.Comment}
	return single(one(g, ctx, "findOneAndReplace", "findAndModify", m, co, func() error { return checkReplacement(filter, replacement) },
		func(ctx context.Context) (*mongo.SingleResult, error) {
			return found(g.target.FindOneAndReplace(ctx, filter, replacement, opts...))
		}, singleAcked))
}

// FindOneAndDelete runs findAndModify with remove through the policy
// chain, as FindOneAndUpdate (never sent again once it may have been
// applied: the deleted document would be lost to the caller), routed as
// DeleteOne.
func (g *Guarded) FindOneAndDelete(ctx context.Context, filter any, opts ...options.Lister[options.FindOneAndDeleteOptions]) *mongo.SingleResult {
	var o options.FindOneAndDeleteOptions
	if err := applyOptions(opts, &o); err != nil {
		return errResult(err)
	}
	// A DeleteOneModel has no sort: the envelope of a findOneAndDelete
	// keeps its filter, collation and hint (replay deletes one matching
	// document, not necessarily the first in o.Sort's order).
	m := &mongo.DeleteOneModel{Filter: filter, Collation: o.Collation, Hint: o.Hint}
	co := envelope.CallOptions{Let: o.Let, Comment: o.Comment}
	return single(one(g, ctx, "findOneAndDelete", "findAndModify", m, co, func() error { return checkFilter(filter) },
		func(ctx context.Context) (*mongo.SingleResult, error) {
			return found(g.target.FindOneAndDelete(ctx, filter, opts...))
		}, singleAcked))
}

// found splits a SingleResult into the result and the command's error: no
// matching document is a successful command.
func found(sr *mongo.SingleResult) (*mongo.SingleResult, error) {
	if sr == nil {
		return nil, errors.New("writeguard: the target returned no SingleResult")
	}
	if err := sr.Err(); err != nil && !errors.Is(err, mongo.ErrNoDocuments) {
		return sr, err
	}
	return sr, nil
}

// singleAcked: findAndModify is always acknowledged (the driver refuses an
// unacknowledged write concern for it).
func singleAcked(*mongo.SingleResult) bool { return true }

// single returns the SingleResult of a guarded findAndModify: the
// driver's on success, one carrying err otherwise.
func single(sr *mongo.SingleResult, err error) *mongo.SingleResult {
	if err != nil {
		return errResult(err)
	}
	if sr == nil {
		return errResult(errors.New("writeguard: no result"))
	}
	return sr
}

// errResult is a SingleResult whose Err is err.
func errResult(err error) *mongo.SingleResult {
	return mongo.NewSingleResultFromDocument(bson.D{}, err, nil)
}

// applyOptions applies opts to o, as the driver does
// (driveropts.Apply: nil and typed nil builders skipped); the error is
// the driver's wording for a failing option builder.
func applyOptions[T any](opts []options.Lister[T], o *T) error {
	if err := driveropts.Apply(opts, o); err != nil {
		return fmt.Errorf("failed to construct options from builder: %w", err)
	}
	return nil
}

// checkFilter rejects a nil filter, as the driver does (mongo.ErrNilDocument).
func checkFilter(filter any) error {
	if isNil(filter) {
		return fmt.Errorf("invalid filter: %w", mongo.ErrNilDocument)
	}
	return nil
}

// checkUpdate rejects, as the driver does before sending, a nil filter or
// update and an update document whose first key is not an update operator
// (an update pipeline, a slice, is accepted).
func checkUpdate(filter, update any) error {
	if err := checkFilter(filter); err != nil {
		return err
	}
	if isNil(update) {
		return fmt.Errorf("invalid update: %w", mongo.ErrNilDocument)
	}
	if k := reflect.ValueOf(update).Kind(); k == reflect.Slice && !isRawDoc(update) || k == reflect.Array {
		return nil
	}
	if key, ok := firstKey(update); ok && !strings.HasPrefix(key, "$") {
		return errors.New("invalid update: update document must contain key beginning with '$'")
	}
	return nil
}

// checkReplacement rejects, as the driver does before sending, a nil
// filter or replacement and a replacement whose first key starts with '$'.
func checkReplacement(filter, replacement any) error {
	if err := checkFilter(filter); err != nil {
		return err
	}
	if isNil(replacement) {
		return fmt.Errorf("invalid replacement: %w", mongo.ErrNilDocument)
	}
	if key, ok := firstKey(replacement); ok && strings.HasPrefix(key, "$") {
		return errors.New("invalid replacement: replacement document cannot contain keys beginning with '$'")
	}
	return nil
}

func isRawDoc(v any) bool {
	switch v.(type) {
	case bson.Raw, []byte, bson.D:
		return true
	}
	return false
}

// firstKey returns the first key of doc as the default registry marshals
// it; ok is false when it cannot tell (the driver then decides).
func firstKey(doc any) (string, bool) {
	raw, err := bson.Marshal(doc)
	if err != nil {
		return "", false
	}
	e, err := bson.Raw(raw).IndexErr(0)
	if err != nil {
		return "", false
	}
	return e.Key(), true
}
