package writeguard

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

var (
	errTooLarge    = errors.New("document too large")
	errInvalidBSON = errors.New("invalid BSON document")
)

// newItems allocates n items in one slab.
func (c *call) newItems(n int) {
	slab := make([]item, n)
	c.items = make([]*item, n)
	for i := range slab {
		slab[i].index = i
		c.items[i] = &slab[i]
	}
}

// prepareDoc marshals one document once and makes sure it has an _id.
func (c *call) prepareDoc(it *item, doc any) {
	it.kind = policy.KindInsert
	raw, id, assigned, err := prepare(doc)
	if err != nil {
		c.prefail(it, err)
		return
	}
	it.doc, it.id, it.idAssigned = raw, id, assigned
	c.checkSize(it)
}

func (c *call) checkSize(it *item) {
	if len(it.doc) > MaxDocumentSize {
		c.prefail(it, fmt.Errorf("document is %d bytes, over the %d-byte maximum (BSONObjectTooLarge): %w", len(it.doc), MaxDocumentSize, errTooLarge))
		it.fail.Code, it.fail.CodeName = 10334, "BSONObjectTooLarge"
	}
}

func (c *call) prefail(it *item, err error) {
	it.prefail = true
	it.fail = &policy.Failure{Index: it.index, Origin: policy.OriginClient, Shape: policy.ShapeClient, Message: err.Error(), Err: err}
}

// prepare marshals doc to BSON and prepends a new ObjectID _id when it has
// none, as the driver does (ensureID), but once, before the first attempt.
func prepare(doc any) (raw bson.Raw, id bson.RawValue, assigned bool, err error) {
	if doc == nil {
		return nil, bson.RawValue{}, false, mongo.ErrNilDocument
	}
	own := false // the caller's own bytes, not bson.Marshal's output
	switch d := doc.(type) {
	case bson.Raw:
		raw, own = d, true
	case []byte:
		raw, own = d, true
	default:
		b, err := bson.Marshal(doc)
		if err != nil {
			return nil, bson.RawValue{}, false, mongo.MarshalError{Value: doc, Err: err}
		}
		raw = b
	}
	if own {
		// Check the caller's bytes once, here, rather than on the server.
		if err := raw.Validate(); err != nil {
			return nil, bson.RawValue{}, false, fmt.Errorf("%w: %w", errInvalidBSON, err)
		}
	}
	if v, err := raw.LookupErr("_id"); err == nil {
		return raw, v, false, nil
	}
	oid := bson.NewObjectID()
	out := make([]byte, 0, len(raw)+17)
	out = append(out, 0, 0, 0, 0, byte(bson.TypeObjectID))
	out = append(out, "_id"...)
	out = append(out, 0)
	out = append(out, oid[:]...)
	out = append(out, raw[4:]...)
	n := int32(len(out))
	out[0], out[1], out[2], out[3] = byte(n), byte(n>>8), byte(n>>16), byte(n>>24)
	id = bson.RawValue{Type: bson.TypeObjectID, Value: out[9 : 9+12]}
	return bson.Raw(out), id, true, nil
}

// prepareModel copies an insert model with a prepared document and keeps
// other models as they are.
func (c *call) prepareModel(it *item, m mongo.WriteModel) error {
	i := it.index
	it.model, it.send = m, m
	switch mm := m.(type) {
	case *mongo.InsertOneModel:
		c.prepareDoc(it, mm.Document)
		if !it.prefail || it.doc != nil {
			it.send = &mongo.InsertOneModel{Document: it.doc}
		}
	case *mongo.UpdateOneModel:
		it.kind, it.upsert = policy.KindUpdate, mm.Upsert != nil && *mm.Upsert
	case *mongo.UpdateManyModel:
		it.kind, it.upsert = policy.KindUpdate, mm.Upsert != nil && *mm.Upsert
	case *mongo.ReplaceOneModel:
		it.kind, it.upsert = policy.KindReplace, mm.Upsert != nil && *mm.Upsert
	case *mongo.DeleteOneModel, *mongo.DeleteManyModel:
		it.kind = policy.KindDelete
	case nil:
		return fmt.Errorf("invalid model at index %d: %w", i, mongo.ErrNilDocument)
	default:
		return fmt.Errorf("invalid model at index %d: unsupported write model %T", i, m)
	}
	return nil
}
