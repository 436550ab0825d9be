package mocks

import (
	"errors"
	"fmt"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/writeguard/writeguard/policy"
)

// marshalWithID marshals doc and prepends an ObjectID _id when it has
// none, as the driver does.
func marshalWithID(doc any) (bson.Raw, any, error) {
	if doc == nil {
		return nil, nil, mongo.ErrNilDocument
	}
	var raw bson.Raw
	switch d := doc.(type) {
	case bson.Raw:
		raw = d
	case []byte:
		raw = d
	default:
		b, err := bson.Marshal(doc)
		if err != nil {
			return nil, nil, mongo.MarshalError{Value: doc, Err: err}
		}
		raw = b
	}
	out, id, err := ensureID(raw)
	return out, id, err
}

func ensureID(raw bson.Raw) (bson.Raw, any, error) {
	if v, err := raw.LookupErr("_id"); err == nil {
		return raw, policy.IDValue(v), nil // the value the driver returns
	}
	var d bson.D
	if err := bson.Unmarshal(raw, &d); err != nil {
		return nil, nil, err
	}
	oid := bson.NewObjectID()
	out, err := bson.Marshal(append(bson.D{{Key: "_id", Value: oid}}, d...))
	return out, oid, err
}

func marshalDoc(v any) (bson.Raw, error) {
	if v == nil {
		return bson.Marshal(bson.D{})
	}
	if r, ok := v.(bson.Raw); ok {
		return r, nil
	}
	return bson.Marshal(v)
}

func toOp(m mongo.WriteModel) (op, error) {
	var o op
	var err error
	switch mm := m.(type) {
	case *mongo.InsertOneModel:
		o.kind = "insert"
		o.doc, _, err = marshalWithID(mm.Document)
	case *mongo.UpdateOneModel:
		o.kind, o.upsert = "update", mm.Upsert != nil && *mm.Upsert
		if o.filter, err = marshalDoc(mm.Filter); err == nil {
			o.update, err = marshalDoc(mm.Update)
		}
	case *mongo.UpdateManyModel:
		o.kind, o.multi, o.upsert = "update", true, mm.Upsert != nil && *mm.Upsert
		if o.filter, err = marshalDoc(mm.Filter); err == nil {
			o.update, err = marshalDoc(mm.Update)
		}
	case *mongo.ReplaceOneModel:
		o.kind, o.upsert = "replace", mm.Upsert != nil && *mm.Upsert
		if o.filter, err = marshalDoc(mm.Filter); err == nil {
			o.update, err = marshalDoc(mm.Replacement)
		}
	case *mongo.DeleteOneModel:
		o.kind = "delete"
		o.filter, err = marshalDoc(mm.Filter)
	case *mongo.DeleteManyModel:
		o.kind, o.multi = "delete", true
		o.filter, err = marshalDoc(mm.Filter)
	default:
		return o, fmt.Errorf("mocks: unsupported write model %T", m)
	}
	return o, err
}

// matches reports whether doc satisfies filter: equality on top-level
// fields, or {field: {$in: [...]}}.
func matches(doc, filter bson.Raw) bool {
	elems, err := filter.Elements()
	if err != nil {
		return false
	}
	for _, e := range elems {
		have, err := doc.LookupErr(e.Key())
		want := e.Value()
		if sub, ok := want.DocumentOK(); ok {
			if in, err2 := sub.LookupErr("$in"); err2 == nil {
				arr, ok := in.ArrayOK()
				if !ok || err != nil {
					return false
				}
				vals, _ := arr.Values()
				found := false
				for _, v := range vals {
					if v.Equal(have) {
						found = true
						break
					}
				}
				if !found {
					return false
				}
				continue
			}
		}
		if err != nil || !have.Equal(want) {
			return false
		}
	}
	return true
}

// seedFromFilter starts an upserted document from the filter's equality
// fields, as the server does.
func seedFromFilter(filter, base bson.Raw) bson.Raw {
	var d bson.D
	elems, _ := filter.Elements()
	for _, e := range elems {
		if _, isDoc := e.Value().DocumentOK(); isDoc || len(e.Key()) > 0 && e.Key()[0] == '$' {
			continue
		}
		d = append(d, bson.E{Key: e.Key(), Value: e.Value()})
	}
	out, err := bson.Marshal(d)
	if err != nil {
		return base
	}
	return out
}

// applyUpdate returns doc after the update or replacement of o.
func applyUpdate(doc bson.Raw, o op, inserting bool) (bson.Raw, error) {
	var cur bson.D
	if err := bson.Unmarshal(doc, &cur); err != nil {
		return nil, err
	}
	if o.kind == "replace" {
		var rep bson.D
		if err := bson.Unmarshal(o.update, &rep); err != nil {
			return nil, err
		}
		out := bson.D{}
		for _, e := range cur {
			if e.Key == "_id" {
				out = append(out, e)
			}
		}
		for _, e := range rep {
			if e.Key != "_id" || len(out) == 0 {
				out = append(out, e)
			}
		}
		return bson.Marshal(out)
	}
	ops, err := o.update.Elements()
	if err != nil {
		return nil, err
	}
	for _, opE := range ops {
		fields, ok := opE.Value().DocumentOK()
		if !ok {
			return nil, fmt.Errorf("mocks: update operator %s needs a document", opE.Key())
		}
		fe, _ := fields.Elements()
		for _, e := range fe {
			switch opE.Key() {
			case "$set":
				cur = setField(cur, e.Key(), e.Value())
			case "$setOnInsert":
				if inserting {
					cur = setField(cur, e.Key(), e.Value())
				}
			case "$unset":
				cur = unsetField(cur, e.Key())
			case "$inc":
				n, ok := e.Value().AsInt64OK()
				if !ok {
					return nil, errors.New("mocks: $inc needs an integer")
				}
				var old int64
				for _, c := range cur {
					if c.Key == e.Key() {
						switch v := c.Value.(type) {
						case int32:
							old = int64(v)
						case int64:
							old = v
						}
					}
				}
				cur = setField(cur, e.Key(), old+n)
			default:
				return nil, fmt.Errorf("mocks: update operator %s is not supported by Fake", opE.Key())
			}
		}
	}
	return bson.Marshal(cur)
}

func setField(d bson.D, key string, v any) bson.D {
	for i := range d {
		if d[i].Key == key {
			d[i].Value = v
			return d
		}
	}
	return append(d, bson.E{Key: key, Value: v})
}

func unsetField(d bson.D, key string) bson.D {
	for i := range d {
		if d[i].Key == key {
			return append(d[:i], d[i+1:]...)
		}
	}
	return d
}
