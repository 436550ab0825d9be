package envelope

import (
	"bytes"
	"errors"
	"fmt"
	"io"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.mongodb.org/mongo-driver/v2/x/bsonx/bsoncore"

	"github.com/writeguard/writeguard/internal/driveropts"
)

// Kinds of write an envelope holds (Envelope.Kind): the driver's write
// models (mongo-driver/v2 mongo/bulk_write_models.go), named as the
// statements of the bulkWrite command.
const (
	KindInsertOne  = "insertOne"
	KindUpdateOne  = "updateOne"
	KindUpdateMany = "updateMany"
	KindReplaceOne = "replaceOne"
	KindDeleteOne  = "deleteOne"
	KindDeleteMany = "deleteMany"
)

// Field names of a model document (ModelDocument). They are the driver
// model's field names, lower camel case.
const (
	modelOp           = "op"
	modelFilter       = "filter"
	modelUpdate       = "update"
	modelReplacement  = "replacement"
	modelArrayFilters = "arrayFilters"
	modelCollation    = "collation"
	modelHint         = "hint"
	modelUpsert       = "upsert"
	modelSort         = "sort"
)

// ModelDocument returns the kind of m and the document an envelope keeps
// as the original of an update, replace or delete model (format 2):
//
//	{op: <kind>, filter, update | replacement, arrayFilters, collation,
//	 hint, upsert, sort}
//
// with every field of the driver's model that changes what the write does
// and that is set (a nil field is left out, so an unset upsert and
// upsert: false stay apart, as they do in the command the driver sends).
// Each value is marshalled as the driver marshals it into the statement
// (mongo/bulk_write.go createDeleteDoc, updateDoc.marshal): filter,
// replacement and sort as documents; update as a document or, for a slice,
// a pipeline array; arrayFilters as an array; hint as any value (an index
// name or key document); collation as the driver's collation document
// (locale, caseLevel, caseFirst, strength, numericOrdering, alternate,
// maxVariable, normalization, backwards). Values are marshalled with the
// default registry: a collection with a custom registry sends what that
// registry makes of them.
//
// An InsertOneModel gives KindInsertOne and its document. A nil model, a
// model of another type, and a value that does not marshal are errors.
// ParseModel reads the document back.
func ModelDocument(m mongo.WriteModel) (kind string, doc bson.Raw, err error) {
	return modelDocument(m, nil)
}

// modelDocument is ModelDocument with the values encoded by the encoders
// enc makes (nil: bson.Marshal's, the default registry).
func modelDocument(m mongo.WriteModel, enc func(io.Writer) *bson.Encoder) (kind string, doc bson.Raw, err error) {
	var (
		f        modelFields
		nilModel bool
	)
	switch mm := m.(type) {
	case *mongo.InsertOneModel:
		if mm == nil || mm.Document == nil {
			return "", nil, errors.New("envelope: insertOne model without a document")
		}
		raw, err := marshalDoc(mm.Document, enc)
		if err != nil {
			return "", nil, fmt.Errorf("envelope: insertOne document: %w", err)
		}
		return KindInsertOne, raw, nil
	case *mongo.UpdateOneModel:
		kind, nilModel = KindUpdateOne, mm == nil
		if !nilModel {
			f = modelFields{filter: mm.Filter, update: &mm.Update, arrayFilters: mm.ArrayFilters, collation: mm.Collation, hint: mm.Hint, upsert: mm.Upsert, sort: mm.Sort}
		}
	case *mongo.UpdateManyModel:
		kind, nilModel = KindUpdateMany, mm == nil
		if !nilModel {
			f = modelFields{filter: mm.Filter, update: &mm.Update, arrayFilters: mm.ArrayFilters, collation: mm.Collation, hint: mm.Hint, upsert: mm.Upsert}
		}
	case *mongo.ReplaceOneModel:
		kind, nilModel = KindReplaceOne, mm == nil
		if !nilModel {
			f = modelFields{filter: mm.Filter, replacement: &mm.Replacement, collation: mm.Collation, hint: mm.Hint, upsert: mm.Upsert, sort: mm.Sort}
		}
	case *mongo.DeleteOneModel:
		kind, nilModel = KindDeleteOne, mm == nil
		if !nilModel {
			f = modelFields{filter: mm.Filter, collation: mm.Collation, hint: mm.Hint}
		}
	case *mongo.DeleteManyModel:
		kind, nilModel = KindDeleteMany, mm == nil
		if !nilModel {
			f = modelFields{filter: mm.Filter, collation: mm.Collation, hint: mm.Hint}
		}
	default:
		return "", nil, fmt.Errorf("envelope: write model %T is not one of the driver's models", m)
	}
	if nilModel {
		return "", nil, fmt.Errorf("envelope: nil %s model", kind)
	}
	raw, err := marshalWith(enc, f.document(kind))
	if err != nil {
		return "", nil, fmt.Errorf("envelope: %s model: %w", kind, err)
	}
	return kind, raw, nil
}

// modelFields are the fields of an update, replace or delete model that
// ModelDocument keeps; a model without a field leaves it nil. update and
// replacement point at the model's field: a model that has one keeps it
// even when it is nil (the driver sends it and the server refuses it).
type modelFields struct {
	filter, hint, sort  any
	update, replacement *any
	arrayFilters        []any
	collation           *options.Collation
	upsert              *bool
}

// document is the model's original, in the order ModelDocument states.
func (f modelFields) document(kind string) bson.D {
	d := bson.D{{Key: modelOp, Value: kind}, {Key: modelFilter, Value: asRaw(f.filter)}}
	add := func(key string, v any) { d = append(d, bson.E{Key: key, Value: asRaw(v)}) }
	if f.update != nil {
		add(modelUpdate, *f.update)
	}
	if f.replacement != nil {
		add(modelReplacement, *f.replacement)
	}
	if f.arrayFilters != nil {
		add(modelArrayFilters, f.arrayFilters)
	}
	if f.collation != nil {
		add(modelCollation, collationDoc(f.collation))
	}
	if f.hint != nil {
		add(modelHint, f.hint)
	}
	if f.upsert != nil {
		add(modelUpsert, *f.upsert)
	}
	if f.sort != nil {
		add(modelSort, f.sort)
	}
	return d
}

// asRaw turns the byte-slice document forms the driver takes as they are
// ([]byte, bsoncore.Document) into bson.Raw, which bson.Marshal also
// copies as it is (it would make a binary value of a []byte).
func asRaw(v any) any {
	switch t := v.(type) {
	case []byte:
		return bson.Raw(t)
	case bsoncore.Document:
		return bson.Raw(t)
	}
	return v
}

// marshalWith encodes v as a document with an encoder enc makes (nil:
// bson.Marshal).
func marshalWith(enc func(io.Writer) *bson.Encoder, v any) (bson.Raw, error) {
	if enc == nil {
		return bson.Marshal(v)
	}
	var buf bytes.Buffer
	if err := enc(&buf).Encode(v); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func marshalDoc(v any, enc func(io.Writer) *bson.Encoder) (bson.Raw, error) {
	if r, ok := asRaw(v).(bson.Raw); ok {
		if err := r.Validate(); err != nil {
			return nil, err
		}
		return r, nil
	}
	return marshalWith(enc, v)
}

// collationDoc is the driver's collation document (mongo/collection.go
// toDocument).
func collationDoc(c *options.Collation) bson.Raw {
	if c == nil {
		return nil
	}
	idx, doc := bsoncore.AppendDocumentStart(nil)
	if c.Locale != "" {
		doc = bsoncore.AppendStringElement(doc, "locale", c.Locale)
	}
	if c.CaseLevel {
		doc = bsoncore.AppendBooleanElement(doc, "caseLevel", true)
	}
	if c.CaseFirst != "" {
		doc = bsoncore.AppendStringElement(doc, "caseFirst", c.CaseFirst)
	}
	if c.Strength != 0 {
		doc = bsoncore.AppendInt32Element(doc, "strength", int32(c.Strength))
	}
	if c.NumericOrdering {
		doc = bsoncore.AppendBooleanElement(doc, "numericOrdering", true)
	}
	if c.Alternate != "" {
		doc = bsoncore.AppendStringElement(doc, "alternate", c.Alternate)
	}
	if c.MaxVariable != "" {
		doc = bsoncore.AppendStringElement(doc, "maxVariable", c.MaxVariable)
	}
	if c.Normalization {
		doc = bsoncore.AppendBooleanElement(doc, "normalization", true)
	}
	if c.Backwards {
		doc = bsoncore.AppendBooleanElement(doc, "backwards", true)
	}
	doc, _ = bsoncore.AppendDocumentEnd(doc, idx)
	return bson.Raw(doc)
}

// parseCollation reads a collation document back (the inverse of
// collationDoc); an unknown field or a wrong type is an error.
func parseCollation(v bson.RawValue) (*options.Collation, error) {
	doc, ok := v.DocumentOK()
	if !ok {
		return nil, fmt.Errorf("collation is a %s, not a document", v.Type)
	}
	elems, err := doc.Elements()
	if err != nil {
		return nil, fmt.Errorf("collation: %w", err)
	}
	c := &options.Collation{}
	for _, e := range elems {
		k, v := e.Key(), e.Value()
		var ok bool
		switch k {
		case "locale":
			c.Locale, ok = v.StringValueOK()
		case "caseLevel":
			c.CaseLevel, ok = v.BooleanOK()
		case "caseFirst":
			c.CaseFirst, ok = v.StringValueOK()
		case "strength":
			var n int32
			n, ok = v.Int32OK()
			c.Strength = int(n)
		case "numericOrdering":
			c.NumericOrdering, ok = v.BooleanOK()
		case "alternate":
			c.Alternate, ok = v.StringValueOK()
		case "maxVariable":
			c.MaxVariable, ok = v.StringValueOK()
		case "normalization":
			c.Normalization, ok = v.BooleanOK()
		case "backwards":
			c.Backwards, ok = v.BooleanOK()
		default:
			return nil, fmt.Errorf("collation field %q is not one the driver sends", k)
		}
		if !ok {
			return nil, fmt.Errorf("collation field %q is a %s", k, v.Type)
		}
	}
	return c, nil
}

// ParseModel builds the write model an envelope of the given kind holds:
// for KindInsertOne an InsertOneModel of doc itself; for the other kinds
// the model ModelDocument described, each field as it was stored (bson.Raw
// documents, a pipeline as a bson.A of bson.Raw stages, hint and
// arrayFilters values as bson.RawValue), so that the driver sends the same
// statement bytes (TestModelRoundTripCommandBSON). An unknown kind, a
// missing filter, update or replacement, and a field of the wrong BSON
// type are errors naming it.
func ParseModel(kind string, doc bson.Raw) (mongo.WriteModel, error) {
	if err := doc.Validate(); err != nil {
		return nil, fmt.Errorf("envelope: %s original is not valid BSON: %w", kind, err)
	}
	if kind == KindInsertOne {
		return mongo.NewInsertOneModel().SetDocument(doc), nil
	}
	if op, ok := doc.Lookup(modelOp).StringValueOK(); ok && op != kind {
		return nil, fmt.Errorf("envelope: model document says op %q, envelope kind %q", op, kind)
	}
	p := modelParser{kind: kind, doc: doc}
	filter := p.document(modelFilter, true)
	collation := p.collation()
	hint := p.value(modelHint)
	var upsert *bool
	if v, err := doc.LookupErr(modelUpsert); err == nil {
		b, ok := v.BooleanOK()
		if !ok {
			p.fail("upsert is a %s, not a boolean", v.Type)
		}
		upsert = &b
	}
	var m mongo.WriteModel
	switch kind {
	case KindUpdateOne, KindUpdateMany:
		update := p.update()
		af := p.arrayFilters()
		if kind == KindUpdateOne {
			m = &mongo.UpdateOneModel{Filter: filter, Update: update, ArrayFilters: af, Collation: collation, Hint: hint, Upsert: upsert, Sort: p.sort()}
		} else {
			m = &mongo.UpdateManyModel{Filter: filter, Update: update, ArrayFilters: af, Collation: collation, Hint: hint, Upsert: upsert}
		}
	case KindReplaceOne:
		rep := p.document(modelReplacement, true)
		m = &mongo.ReplaceOneModel{Filter: filter, Replacement: rep, Collation: collation, Hint: hint, Upsert: upsert, Sort: p.sort()}
	case KindDeleteOne:
		m = &mongo.DeleteOneModel{Filter: filter, Collation: collation, Hint: hint}
	case KindDeleteMany:
		m = &mongo.DeleteManyModel{Filter: filter, Collation: collation, Hint: hint}
	default:
		return nil, fmt.Errorf("envelope: unknown write kind %q", kind)
	}
	if p.err != nil {
		return nil, p.err
	}
	return m, nil
}

type modelParser struct {
	kind string
	doc  bson.Raw
	err  error
}

func (p *modelParser) fail(format string, args ...any) {
	if p.err == nil {
		p.err = fmt.Errorf("envelope: %s model: "+format, append([]any{p.kind}, args...)...)
	}
}

// document returns a document field; nil (any(nil)) when absent.
func (p *modelParser) document(key string, required bool) any {
	v, err := p.doc.LookupErr(key)
	if err != nil {
		if required {
			p.fail("no %s", key)
		}
		return nil
	}
	d, ok := v.DocumentOK()
	if !ok {
		p.fail("%s is a %s, not a document", key, v.Type)
		return nil
	}
	return d
}

func (p *modelParser) value(key string) any {
	v, err := p.doc.LookupErr(key)
	if err != nil {
		return nil
	}
	return v
}

func (p *modelParser) sort() any { return p.document(modelSort, false) }

func (p *modelParser) collation() *options.Collation {
	v, err := p.doc.LookupErr(modelCollation)
	if err != nil {
		return nil
	}
	c, cerr := parseCollation(v)
	if cerr != nil {
		p.fail("%v", cerr)
	}
	return c
}

// update returns an update document (bson.Raw) or pipeline (bson.A of
// bson.Raw stages).
func (p *modelParser) update() any {
	v, err := p.doc.LookupErr(modelUpdate)
	if err != nil {
		p.fail("no update")
		return nil
	}
	switch v.Type {
	case bson.TypeEmbeddedDocument:
		return v.Document()
	case bson.TypeArray:
		vals, err := v.Array().Values()
		if err != nil {
			p.fail("update pipeline: %v", err)
			return nil
		}
		stages := make(bson.A, 0, len(vals))
		for i, s := range vals {
			d, ok := s.DocumentOK()
			if !ok {
				p.fail("update pipeline stage %d is a %s, not a document", i, s.Type)
				return nil
			}
			stages = append(stages, d)
		}
		return stages
	}
	p.fail("update is a %s, not a document or pipeline", v.Type)
	return nil
}

func (p *modelParser) arrayFilters() []any {
	v, err := p.doc.LookupErr(modelArrayFilters)
	if err != nil {
		return nil
	}
	arr, ok := v.ArrayOK()
	if !ok {
		p.fail("arrayFilters is a %s, not an array", v.Type)
		return nil
	}
	vals, err := arr.Values()
	if err != nil {
		p.fail("arrayFilters: %v", err)
		return nil
	}
	out := make([]any, len(vals))
	for i, f := range vals {
		out[i] = f
	}
	return out
}

// CallOptions are the options of the guarded call that change what its
// writes do, as an envelope keeps them (Envelope.CallOptions, stored as
// the document call_options): ordered, bypassDocumentValidation, let and
// comment, each only when the caller set it. A replay sends each envelope
// with its own call's bypassDocumentValidation, let and comment; ordered
// is kept as a record (a replay writes envelopes one statement each,
// unordered among themselves: the order of the original batch was given up
// when the document was dead-lettered).
type CallOptions struct {
	Ordered                  *bool
	BypassDocumentValidation *bool
	// Let is the bulkWrite's let document (variables for $$name).
	Let any
	// Comment is any BSON value.
	Comment any
}

// Document returns o as the document an envelope stores: {ordered,
// bypassDocumentValidation, let, comment}, each only when set; nil when
// none is.
func (o CallOptions) Document() (bson.Raw, error) {
	var d bson.D
	if o.Ordered != nil {
		d = append(d, bson.E{Key: "ordered", Value: *o.Ordered})
	}
	if o.BypassDocumentValidation != nil {
		d = append(d, bson.E{Key: "bypassDocumentValidation", Value: *o.BypassDocumentValidation})
	}
	if o.Let != nil {
		d = append(d, bson.E{Key: "let", Value: asRaw(o.Let)})
	}
	if o.Comment != nil {
		d = append(d, bson.E{Key: "comment", Value: asRaw(o.Comment)})
	}
	if len(d) == 0 {
		return nil, nil
	}
	raw, err := bson.Marshal(d)
	if err != nil {
		return nil, fmt.Errorf("envelope: call options: %w", err)
	}
	return raw, nil
}

// InsertOneCallOptions, InsertManyCallOptions and BulkWriteCallOptions
// read a guarded call's options into CallOptions (the last setter of each
// option wins, as in the driver).
func InsertOneCallOptions(opts ...options.Lister[options.InsertOneOptions]) (CallOptions, error) {
	if len(opts) == 0 {
		return CallOptions{}, nil
	}
	var o options.InsertOneOptions
	if err := driveropts.Apply(opts, &o); err != nil {
		return CallOptions{}, fmt.Errorf("envelope: call options: %w", err)
	}
	return CallOptions{BypassDocumentValidation: o.BypassDocumentValidation, Comment: o.Comment}, nil
}

// InsertManyCallOptions: see InsertOneCallOptions.
func InsertManyCallOptions(opts ...options.Lister[options.InsertManyOptions]) (CallOptions, error) {
	if len(opts) == 0 {
		return CallOptions{}, nil
	}
	var o options.InsertManyOptions
	if err := driveropts.Apply(opts, &o); err != nil {
		return CallOptions{}, fmt.Errorf("envelope: call options: %w", err)
	}
	return CallOptions{Ordered: o.Ordered, BypassDocumentValidation: o.BypassDocumentValidation, Comment: o.Comment}, nil
}

// BulkWriteCallOptions: see InsertOneCallOptions.
func BulkWriteCallOptions(opts ...options.Lister[options.BulkWriteOptions]) (CallOptions, error) {
	if len(opts) == 0 {
		return CallOptions{}, nil
	}
	var o options.BulkWriteOptions
	if err := driveropts.Apply(opts, &o); err != nil {
		return CallOptions{}, fmt.Errorf("envelope: call options: %w", err)
	}
	return CallOptions{Ordered: o.Ordered, BypassDocumentValidation: o.BypassDocumentValidation, Let: o.Let, Comment: o.Comment}, nil
}

// ParseCallOptions reads a call_options document back into the bulkWrite
// options a replay sends (bypassDocumentValidation, let, comment; ordered
// is returned apart). A nil doc gives nil options.
func ParseCallOptions(doc bson.Raw) (opts *options.BulkWriteOptionsBuilder, ordered *bool, err error) {
	if len(doc) == 0 {
		return nil, nil, nil
	}
	elems, err := doc.Elements()
	if err != nil {
		return nil, nil, fmt.Errorf("envelope: call_options: %w", err)
	}
	opts = options.BulkWrite()
	for _, e := range elems {
		v := e.Value()
		switch e.Key() {
		case "ordered":
			b, ok := v.BooleanOK()
			if !ok {
				return nil, nil, fmt.Errorf("envelope: call_options.ordered is a %s", v.Type)
			}
			ordered = &b
		case "bypassDocumentValidation":
			b, ok := v.BooleanOK()
			if !ok {
				return nil, nil, fmt.Errorf("envelope: call_options.bypassDocumentValidation is a %s", v.Type)
			}
			opts.SetBypassDocumentValidation(b)
		case "let":
			d, ok := v.DocumentOK()
			if !ok {
				return nil, nil, fmt.Errorf("envelope: call_options.let is a %s", v.Type)
			}
			opts.SetLet(d)
		case "comment":
			opts.SetComment(v)
		default:
			return nil, nil, fmt.Errorf("envelope: call_options field %q is not a call option", e.Key())
		}
	}
	return opts, ordered, nil
}
