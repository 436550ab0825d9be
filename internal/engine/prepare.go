package engine

import (
	"errors"
	"fmt"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/writeguard/writeguard/policy"
)

// The first step of the write path: every document is marshalled once and
// given its _id before the first attempt, so that no retry can store it
// twice.

// The errors of a document that fails in prepare, kept in its Failure.Err
// (the root names them in Report.Error without quoting them).
var (
	ErrTooLarge    = errors.New("document too large")
	ErrInvalidBSON = errors.New("invalid BSON document")
)

// PrepareDocs prepares the documents of an insert call: docs[i] is input
// i (len(docs) == Len()).
func (c *Call) PrepareDocs(docs []any) { c.prepareDocs(c.items, docs) }

// prepareDocs prepares the documents of an insert: each one is
// marshalled once and given an _id when it has none; the copies that carry
// a new _id are made in one slab for the whole call (one allocation, not
// one per document). docs[i] is the input document of its[i].
func (c *Call) prepareDocs(its []*item, docs []any) {
	need := 0
	for i, it := range its {
		it.kind = KindInsert
		raw, err := marshalDoc(docs[i])
		if err != nil {
			c.prefail(it, err)
			continue
		}
		it.doc = raw
		if v, err := raw.LookupErr("_id"); err == nil {
			it.id = v
			continue
		}
		it.idAssigned = true
		need += len(raw) + idElementSize
	}
	slab := make([]byte, 0, need)
	for _, it := range its {
		if it.state == prefailed {
			continue
		}
		if it.idAssigned {
			start := len(slab)
			slab = appendWithID(slab, it.doc, bson.NewObjectID())
			it.doc = bson.Raw(slab[start:len(slab):len(slab)])
			it.id = bson.RawValue{Type: bson.TypeObjectID, Value: it.doc[9 : 9+12]}
		}
		it.boxed = it.doc
		c.checkSize(it)
	}
}

func (c *Call) checkSize(it *item) {
	if len(it.doc) > policy.MaxBSONSize {
		c.prefail(it, fmt.Errorf("document is %d bytes, over the %d-byte maximum (BSONObjectTooLarge): %w", len(it.doc), policy.MaxBSONSize, ErrTooLarge))
		it.fail.Code, it.fail.CodeName = 10334, "BSONObjectTooLarge"
	}
}

func (c *Call) prefail(it *item, err error) {
	it.to(prefailed)
	it.fail = &policy.Failure{Index: it.index, Origin: policy.OriginClient, Shape: policy.ShapeClient, Message: err.Error(), Err: err}
}

// marshalDoc marshals doc to BSON, once. The caller's own bytes (bson.Raw,
// []byte) are used as they are, after a check that they are a valid BSON
// document (rather than the server's rejection of the whole command).
func marshalDoc(doc any) (bson.Raw, error) {
	switch d := doc.(type) {
	case nil:
		return nil, mongo.ErrNilDocument
	case bson.Raw:
		return d, validate(d)
	case []byte:
		return d, validate(d)
	}
	b, err := bson.Marshal(doc)
	if err != nil {
		return nil, mongo.MarshalError{Value: doc, Err: err}
	}
	return b, nil
}

func validate(raw bson.Raw) error {
	if err := raw.Validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidBSON, err)
	}
	return nil
}

// idElementSize is the size of an ObjectID _id element: type byte, "_id",
// NUL, 12 bytes.
const idElementSize = 1 + 3 + 1 + 12

// appendWithID appends to dst the document raw with a new first element
// _id: oid, as the driver's ensureID does, but once, before the first
// attempt.
func appendWithID(dst []byte, raw bson.Raw, oid bson.ObjectID) []byte {
	start := len(dst)
	dst = append(dst, 0, 0, 0, 0, byte(bson.TypeObjectID))
	dst = append(dst, "_id"...)
	dst = append(dst, 0)
	dst = append(dst, oid[:]...)
	dst = append(dst, raw[4:]...)
	n := int32(len(dst) - start)
	dst[start], dst[start+1], dst[start+2], dst[start+3] = byte(n), byte(n>>8), byte(n>>16), byte(n>>24)
	return dst
}

// PrepareModels reads every model's kind, prepares the documents of the
// insert models together (prepareDocs) and sends each insert model as a
// copy holding its prepared document; other models are sent as they are.
// A nil or unsupported model is an error naming its index.
func (c *Call) PrepareModels(models []mongo.WriteModel) error {
	var inserts []*item
	var docs []any
	for i, m := range models {
		it := c.items[i]
		if err := c.prepareModel(it, m); err != nil {
			return err
		}
		if im, ok := m.(*mongo.InsertOneModel); ok {
			inserts, docs = append(inserts, it), append(docs, im.Document)
		}
	}
	c.prepareDocs(inserts, docs)
	for _, it := range inserts {
		if it.state != prefailed || it.doc != nil {
			it.send = &mongo.InsertOneModel{Document: it.doc}
		}
	}
	return nil
}

// prepareModel records the kind of one model.
func (c *Call) prepareModel(it *item, m mongo.WriteModel) error {
	i := it.index
	it.model, it.send = m, m
	switch mm := m.(type) {
	case *mongo.InsertOneModel:
		it.kind = KindInsert
	case *mongo.UpdateOneModel:
		it.kind, it.upsert = KindUpdate, mm.Upsert != nil && *mm.Upsert
	case *mongo.UpdateManyModel:
		it.kind, it.upsert = KindUpdate, mm.Upsert != nil && *mm.Upsert
	case *mongo.ReplaceOneModel:
		it.kind, it.upsert = KindReplace, mm.Upsert != nil && *mm.Upsert
	case *mongo.DeleteOneModel, *mongo.DeleteManyModel:
		it.kind = KindDelete
	case nil:
		return fmt.Errorf("invalid model at index %d: %w", i, mongo.ErrNilDocument)
	default:
		return fmt.Errorf("invalid model at index %d: unsupported write model %T", i, m)
	}
	return nil
}
