package writeguard

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/writeguard/writeguard/policy"
)

// Conflict describes one duplicate key (11000 DuplicateKey, or 11001,
// 12582) handed to a ConflictHandler.
type Conflict struct {
	// Operation is insertOne, insertMany or bulkWrite.
	Operation string
	// Index is the position in the caller's input.
	Index int
	// Document is the document as sent (with its _id) for an insert, the
	// replacement for a replace model, nil otherwise.
	Document bson.Raw
	// Model is the caller's write model (BulkWrite only).
	Model mongo.WriteModel
	// KeyPattern and KeyValue name the unique index and the duplicated
	// value ({email: 1} and {email: "a@x"}). Servers before 4.2 do not send
	// them: then both are nil and only Failure.Message names the index.
	KeyPattern bson.Raw
	KeyValue   bson.Raw // the duplicated value, e.g. {email: "a@x"}
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

// ConflictSkip treats every duplicate key as expected: the document is
// dropped as "conflict_skipped" (handled). Use it when the stored document
// is known to be the same, e.g. content-derived _ids.
func ConflictSkip() ConflictHandler {
	return ConflictHandlerFunc(func(context.Context, *Conflict) (policy.Disposition, error) {
		return policy.ConflictSkipped, nil
	})
}

// ConflictReplace replaces the stored document that holds the conflicting
// key with the inserted one ("conflict_replaced"). The filter is KeyValue
// ({email: "a@x"}); on the _id index, or when the server sent no KeyValue
// (before 4.2), it is {_id: <the document's _id>}. When the filter is not
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
		filter, replacement, err := replaceArgs(c)
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

func replaceArgs(c *Conflict) (filter, replacement bson.Raw, err error) {
	id, err := c.Document.LookupErr("_id")
	if err != nil {
		return nil, nil, errors.New("writeguard: ConflictReplace: document has no _id")
	}
	onID := len(c.KeyValue) == 0
	if !onID {
		elems, err := c.KeyValue.Elements()
		if err != nil || len(elems) == 0 {
			onID = true
		} else if len(elems) == 1 && elems[0].Key() == "_id" {
			onID = true
		}
	}
	if onID {
		f, err := bson.Marshal(bson.D{{Key: "_id", Value: id}})
		return f, c.Document, err
	}
	elems, err := c.Document.Elements()
	if err != nil {
		return nil, nil, err
	}
	var d bson.D
	for _, e := range elems {
		if e.Key() != "_id" {
			d = append(d, bson.E{Key: e.Key(), Value: e.Value()})
		}
	}
	rep, err := bson.Marshal(d)
	return c.KeyValue, rep, err
}

// validResolution reports whether d is a disposition a ConflictHandler may
// return.
func validResolution(d policy.Disposition) bool {
	return d == policy.Conflicted || strings.HasPrefix(string(d), "conflict_") && len(d) > len("conflict_")
}
