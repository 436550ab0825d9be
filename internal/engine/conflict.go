package engine

import (
	"context"
	"errors"
	"fmt"

	"github.com/writeguard/writeguard/policy"
	"go.mongodb.org/mongo-driver/v2/bson"
)

// conflictIdentifiable checks, before any handler runs, that the duplicate
// key identifies one stored document: a key value with a null or missing
// component identifies nobody (policy.KeyIdentifies), so the document ends
// "conflict" with that reason and no handler acts on it.
func (c *Call) conflictIdentifiable(it *item) bool {
	if len(it.fail.KeyValue) == 0 {
		return true
	}
	ok, field := policy.KeyIdentifies(it.fail.KeyPattern, it.fail.KeyValue)
	if ok {
		return true
	}
	it.more().err = fmt.Errorf("writeguard: duplicate key with null or missing field %q identifies no single document (use a sparse or partial unique index); no conflict handler was run", field)
	c.settle(it, policy.Conflicted)
	return false
}

// handleConflict hands it to the conflict handler (Config.Resolve) and
// settles it with the handler's disposition, or "conflict" with the
// handler's error, panic or invalid disposition kept in its Outcome.
func (c *Call) handleConflict(ctx context.Context, it *item) {
	var d policy.Disposition
	err := c.e.recovered("conflict handler", func() (err error) {
		d, err = c.e.cfg.Resolve(ctx, c.op.Name, it.index, it.doc, it.model(), *it.fail)
		return err
	})
	if err == nil && !validResolution(d) {
		err = fmt.Errorf("writeguard: conflict handler returned disposition %q; want %q or \"conflict_<verb>\"", d, policy.Conflicted)
	}
	if err != nil {
		it.more().err = err
		d = policy.Conflicted
	}
	c.settle(it, d)
}

// validResolution reports whether d is a disposition a conflict handler
// may return.
func validResolution(d policy.Disposition) bool {
	return d.IsConflict() && d != "conflict_"
}

// ReplaceArgs returns the filter and the replacement with which
// writeguard.ConflictReplace replaces the stored document holding the
// duplicate key f of the inserted doc: {_id: <doc's _id>} and doc on the
// _id index; else keyValue and doc without its _id (a replace cannot
// change the stored _id). It returns an error, and nothing to replace,
// when doc has no _id or the key identifies no single document
// (policy.KeyIdentifies): indexKnown and indexName
// (policy.DuplicateKeyIndex) say why.
func ReplaceArgs(doc bson.Raw, f policy.Failure, keyPattern, keyValue bson.Raw, indexKnown bool, indexName string) (filter, replacement bson.Raw, err error) {
	id, err := doc.LookupErr("_id")
	if err != nil {
		return nil, nil, errors.New("writeguard: ConflictReplace: document has no _id")
	}
	onID := policy.OnIDIndex(f)
	if !onID && len(keyValue) > 0 {
		if elems, err := keyValue.Elements(); err == nil && len(elems) == 1 && elems[0].Key() == "_id" {
			onID = true
		}
	}
	if onID {
		f, err := bson.Marshal(bson.D{{Key: "_id", Value: id}})
		return f, doc, err
	}
	if ok, field := policy.KeyIdentifies(keyPattern, keyValue); !ok {
		switch {
		case !indexKnown:
			return nil, nil, errors.New("writeguard: ConflictReplace: the server named neither the index nor the key (no keyPattern, no index in errmsg); nothing replaced")
		case field == "":
			return nil, nil, fmt.Errorf("writeguard: ConflictReplace: the server sent no keyValue for index %q; nothing replaced", indexName)
		default:
			return nil, nil, fmt.Errorf("writeguard: ConflictReplace: key field %q is null or missing; it identifies no single document; nothing replaced", field)
		}
	}
	elems, err := doc.Elements()
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
	return keyValue, rep, err
}
