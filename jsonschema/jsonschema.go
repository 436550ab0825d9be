// Package jsonschema emulates a MongoDB collection validator written with
// $jsonSchema: it decides whether a document passes and, when it does not,
// builds the errInfo object of the 121 (DocumentValidationFailure) write
// error exactly as a MongoDB 5.0+ server does — same operator names, field
// order, reason strings, considered values and types.
//
// The writeguard command uses it to check dead-lettered documents against a
// fixed validator before replaying them, and faultproxy, the wire-protocol
// fault proxy of writeguard's tests, uses it to emulate validators on
// servers that have none (FerretDB) or no server at all. It mirrors the server's two steps: the validator is
// translated into the match-expression tree the server's $jsonSchema parser
// builds (json_schema_parser.cpp), and the error generator
// (doc_validation_error.cpp) walks that tree.
//
// Supported: every $jsonSchema keyword the server accepts except encrypt and
// encryptMetadata — bsonType/type (string or array, "number" alias),
// required, properties, patternProperties, additionalProperties (boolean and
// schema), minProperties/maxProperties, dependencies, enum, minimum/maximum
// with the boolean exclusiveMinimum/exclusiveMaximum, multipleOf,
// minLength/maxLength, pattern (RE2 syntax only), items (schema and tuple
// form), additionalItems, minItems/maxItems, uniqueItems, allOf/anyOf/oneOf/
// not, title/description. At the top level a validator may be
// {$jsonSchema: ...} or $and/$or/$nor lists of such validators. Other query
// operators ($expr, $gt, ...) are unsupported: Compile reports them with
// ErrUnsupported.
//
// Not emulated: the server's truncation of errors larger than its size limit
// (maxDocValidationErrorSize) — errInfo is always the full form.
package jsonschema

import (
	"errors"
	"fmt"
	"strings"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// Validator is a compiled collection validator. It is immutable and safe
// for concurrent use.
type Validator struct {
	root      *node
	validator bson.D
}

// toD converts a validator or document given as bson.D, bson.M, bson.Raw,
// []byte (BSON) or any other value bson.Marshal accepts into a bson.D whose
// nested documents are bson.D and arrays bson.A.
func toD(v any) (bson.D, error) {
	var raw []byte
	switch x := v.(type) {
	case nil:
		return nil, errors.New("jsonschema: nil document")
	case bson.Raw:
		raw = x
	case []byte:
		raw = x
	default:
		b, err := bson.Marshal(x)
		if err != nil {
			return nil, fmt.Errorf("jsonschema: marshal: %w", err)
		}
		raw = b
	}
	var d bson.D
	if err := bson.Unmarshal(raw, &d); err != nil {
		return nil, fmt.Errorf("jsonschema: unmarshal: %w", err)
	}
	if d == nil {
		d = bson.D{}
	}
	return d, nil
}

// Compile parses a collection validator, e.g.
// bson.D{{"$jsonSchema", bson.D{{"required", bson.A{"name"}}}}}. The
// validator may be a bson.D, bson.M, bson.Raw or BSON bytes. It returns an
// error for a nil or malformed validator, an invalid schema (the messages
// follow the server's), and an error wrapping ErrUnsupported, listing every
// unsupported keyword or operator found, for a validator outside the
// emulated subset.
func Compile(validator any) (*Validator, error) {
	d, err := toD(validator)
	if err != nil {
		return nil, err
	}
	p := &parser{}
	root, err := p.parseValidator(d)
	if err != nil {
		return nil, err
	}
	if len(p.unsupported) > 0 {
		return nil, fmt.Errorf("%w: %s", ErrUnsupported, strings.Join(p.unsupported, "; "))
	}
	return &Validator{root: root, validator: d}, nil
}

// Unsupported walks a validator and returns the keywords and query
// operators in it that this package does not emulate (nil when the
// validator is inside the supported subset). The error is non-nil only when
// the validator is malformed or is an invalid $jsonSchema.
func Unsupported(validator any) ([]string, error) {
	d, err := toD(validator)
	if err != nil {
		return nil, err
	}
	p := &parser{}
	if _, err := p.parseValidator(d); err != nil {
		return nil, err
	}
	return p.unsupported, nil
}

// Validator returns the validator document v was compiled from.
func (v *Validator) Validator() bson.D { return v.validator }

// normalize round-trips doc through BSON so that Go values (int, uint8,
// []string, structs...) take the BSON types the driver gives them.
func normalize(doc bson.D) bson.D {
	d, err := toD(doc)
	if err != nil {
		return doc
	}
	return d
}

// Matches reports whether doc passes the validator.
func (v *Validator) Matches(doc bson.D) bool {
	return matches(v.root, normalize(doc))
}

// Validate checks doc against the validator. It returns nil when the
// document passes; otherwise the errInfo object the server would attach to
// the 121 write error: {failingDocumentId: <doc._id>, details: {...}}
// (failingDocumentId is omitted when doc has no _id — the server always
// adds one before validating, see WithID), or {reason: "generated error
// was too deeply nested", truncated: true} like the server when the
// details nest deeper than 190 levels.
func (v *Validator) Validate(doc bson.D) bson.D {
	doc = normalize(doc)
	if matches(v.root, doc) {
		return nil
	}
	c := &genCtx{root: doc}
	c.walk(v.root)
	var details any = bson.D{}
	switch c.latest.kind {
	case errObj:
		details = c.latest.d
	case errArr:
		details = c.latest.a
	}
	errInfo := bson.D{}
	for _, e := range doc {
		if e.Key == "_id" {
			errInfo = append(errInfo, bson.E{Key: "failingDocumentId", Value: e.Value})
			break
		}
	}
	errInfo = append(errInfo, bson.E{Key: "details", Value: details})
	if nesting(errInfo) > maxErrorDepth {
		return bson.D{{Key: "reason", Value: "generated error was too deeply nested"}, {Key: "truncated", Value: true}}
	}
	return errInfo
}

// ValidateRaw is Validate for a document in BSON form. It returns an error
// only when doc is not a valid BSON document.
func (v *Validator) ValidateRaw(doc bson.Raw) (bson.D, error) {
	d, err := toD(doc)
	if err != nil {
		return nil, err
	}
	if matches(v.root, d) {
		return nil, nil
	}
	return v.Validate(d), nil
}

// WithID returns doc with an _id as the server stores it on insert: doc
// itself when it has an _id, otherwise a copy with a new ObjectID prepended
// (the server puts a generated _id first, so it leads additionalProperties
// lists and counts towards minProperties/maxProperties).
func WithID(doc bson.D) bson.D {
	for _, e := range doc {
		if e.Key == "_id" {
			return doc
		}
	}
	out := make(bson.D, 0, len(doc)+1)
	out = append(out, bson.E{Key: "_id", Value: bson.NewObjectID()})
	return append(out, doc...)
}
