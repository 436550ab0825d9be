package writeguard

import (
	"context"
	"errors"
	"fmt"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/writeguard/writeguard/internal/engine"
	"github.com/writeguard/writeguard/policy"
)

// Conflict describes one duplicate key (11000 DuplicateKey, or 11001,
// 12582) handed to a ConflictHandler.
type Conflict struct {
	// Operation is the guarded method's name (Report.Operation): insertOne,
	// insertMany, bulkWrite, updateOne, updateByID, updateMany,
	// replaceOne, findOneAndUpdate or findOneAndReplace.
	Operation string
	// Index is the position in the caller's input.
	Index int
	// Document is the document as sent (with its _id) for an insert, the
	// replacement for a replace model, nil otherwise.
	Document bson.Raw
	// Model is the caller's write model (BulkWrite), or the write of a
	// method of one write as a model (UpdateOne: an UpdateOneModel, ...);
	// nil for InsertOne and InsertMany.
	Model mongo.WriteModel
	// KeyPattern and KeyValue name the unique index and the duplicated
	// value ({email: 1} and {email: "a@x"}). Servers before 4.2 do not send
	// them: then both are nil and only Failure.Message names the index.
	// A KeyValue with a null or missing component never reaches a handler
	// (it identifies no single document; policy.KeyIdentifies): such a
	// document ends "conflict" with that reason.
	KeyPattern bson.Raw
	KeyValue   bson.Raw // the duplicated value, e.g. {email: "a@x"}
	// IndexName is the unique index's name as the server's errmsg gives it
	// ("email_1"), "" when it gives none; IndexFields are its key fields
	// from KeyPattern (nil without it). IndexKnown is false when neither
	// names the index (policy.DuplicateKeyIndex).
	IndexName   string
	IndexFields []string
	IndexKnown  bool
	// Failure is the duplicate-key failure itself.
	Failure policy.Failure
	// Target is the collection written to, for handlers that write (see
	// ConflictReplace).
	Target Target
}

// ConflictHandler decides what a duplicate key means.
//
// Resolve returns policy.Conflicted ("conflict": not resolved, the caller
// gets the duplicate-key error) or a resolution named "conflict_<verb>"
// (policy.ConflictSkipped, policy.ConflictReplaced or the handler's own),
// which counts as handled. Any other disposition, or a non-nil error, ends
// the document as "conflict" with the error kept in its Outcome. Resolve
// must be safe for concurrent use.
//
// A duplicate key met by an insert means a document with that key is
// stored; met by an update or a replace (Conflict.IsUpdate) it means the
// change was refused and nothing of it applied: a resolution for it drops
// the change (C71).
type ConflictHandler interface {
	Resolve(ctx context.Context, c *Conflict) (policy.Disposition, error)
}

// ConflictHandlerFunc adapts a function to ConflictHandler.
type ConflictHandlerFunc func(ctx context.Context, c *Conflict) (policy.Disposition, error)

// Resolve returns f(ctx, c).
func (f ConflictHandlerFunc) Resolve(ctx context.Context, c *Conflict) (policy.Disposition, error) {
	return f(ctx, c)
}

// ConflictFail is the default handler: every duplicate key is "conflict"
// and reaches the caller in the Report.
func ConflictFail() ConflictHandler {
	return ConflictHandlerFunc(func(context.Context, *Conflict) (policy.Disposition, error) {
		return policy.Conflicted, nil
	})
}

// ConflictSkip treats a duplicate key met by an insert as expected: the
// document is already there, and it is dropped as "conflict_skipped"
// (handled). Use it when the stored document is known to be the same,
// e.g. content-derived _ids.
//
// A duplicate key met by an update or a replace (Conflict.IsUpdate:
// UpdateOne, UpdateMany, ReplaceOne, FindOneAndUpdate, FindOneAndReplace
// and their BulkWrite models, upserts included) is not "already there":
// the change was refused, so ConflictSkip leaves it "conflict" (not
// handled) and the caller sees it (case C71). ConflictSkipAll skips those
// too.
func ConflictSkip() ConflictHandler {
	return ConflictHandlerFunc(func(_ context.Context, c *Conflict) (policy.Disposition, error) {
		if c.IsUpdate() {
			return policy.Conflicted, nil
		}
		return policy.ConflictSkipped, nil
	})
}

// ConflictSkipAll drops every duplicate key as "conflict_skipped"
// (handled), an update's or a replace's as well as an insert's: a
// refused update's change is then lost without the caller seeing it.
// Choose it only when such a change may be dropped (a denormalised field
// whose unique copy already exists, say); ConflictSkip skips inserts only.
func ConflictSkipAll() ConflictHandler {
	return ConflictHandlerFunc(func(context.Context, *Conflict) (policy.Disposition, error) {
		return policy.ConflictSkipped, nil
	})
}

// IsUpdate reports whether the write that met the duplicate key is an
// update or a replace (an UpdateOneModel, UpdateManyModel or
// ReplaceOneModel, upserts included, and the methods of one write, whose
// Model is such a model) rather than an insert (InsertOne, InsertMany,
// an InsertOneModel). A duplicate key on an insert means a document with
// that key is already stored; on an update it means the change was
// refused and nothing of it applied.
func (c *Conflict) IsUpdate() bool {
	return c.Model != nil && !isInsertModel(c.Model)
}

// ConflictReplace replaces the stored document that holds the conflicting
// key with the inserted one ("conflict_replaced"). The filter is KeyValue
// ({email: "a@x"}); on the _id index (keyPattern {_id: 1}, or errmsg index
// "_id_") it is {_id: <the document's _id>}. When the server sent no
// KeyValue for another index, or named no index at all (Azure Cosmos DB),
// nothing is replaced: the document ends "conflict" with an error saying
// why. When the filter is not
// _id, the replacement leaves out the document's _id, since a replace
// cannot change the stored _id. Only insert documents are replaced; other
// models, and a filter that matches nothing, end "conflict" with an error
// saying why.
func ConflictReplace() ConflictHandler {
	return ConflictHandlerFunc(func(ctx context.Context, c *Conflict) (policy.Disposition, error) {
		if c.Document == nil || c.Model != nil && !isInsertModel(c.Model) {
			return policy.Conflicted, errors.New("writeguard: ConflictReplace handles inserted documents only")
		}
		if c.Target == nil {
			return policy.Conflicted, errors.New("writeguard: ConflictReplace: no target collection")
		}
		filter, replacement, err := engine.ReplaceArgs(c.Document, c.Failure, c.KeyPattern, c.KeyValue, c.IndexKnown, c.IndexName)
		if err != nil {
			return policy.Conflicted, err
		}
		res, err := c.Target.ReplaceOne(ctx, filter, replacement)
		if err != nil {
			return policy.Conflicted, fmt.Errorf("writeguard: ConflictReplace: %w", err)
		}
		if res.MatchedCount == 0 {
			return policy.Conflicted, fmt.Errorf("writeguard: ConflictReplace: no stored document matches %v", filter)
		}
		return policy.ConflictReplaced, nil
	})
}

func isInsertModel(m mongo.WriteModel) bool {
	_, ok := m.(*mongo.InsertOneModel)
	return ok
}

// resolver adapts h to the engine: each duplicate key becomes a *Conflict
// naming its index (policy.DuplicateKeyIndex) and g's target.
func (g *Guarded) resolver(h ConflictHandler) engine.Resolver {
	return func(ctx context.Context, op string, index int, doc bson.Raw, model mongo.WriteModel, f policy.Failure) (policy.Disposition, error) {
		cf := &Conflict{Operation: op, Index: index, Document: doc, Model: model, Failure: f, Target: g.target,
			KeyPattern: f.KeyPattern, KeyValue: f.KeyValue}
		cf.IndexName, cf.IndexFields, cf.IndexKnown = policy.DuplicateKeyIndex(f)
		return h.Resolve(ctx, cf)
	}
}
