package envelope

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// DecodeError is a stored envelope that cannot be decoded into an
// Envelope: a field of the wrong BSON type (original a string, attempts a
// string, first_seen a number: a hand-edited or foreign document), or a
// document that is not valid BSON. It names the envelope (its _id) and
// the field, never the field's value (an envelope holds users' data).
//
// Such an envelope is data, not a failure of the reader: Decode returns
// this error for it alone, dlq.Stats counts it, and the writeguard command
// lists, shows and discards it.
type DecodeError struct {
	// ID is the envelope's _id (Type 0 when it has none).
	ID bson.RawValue
	// Field is the stored name of the field that cannot be decoded
	// ("attempts"); "" when the document itself is not valid BSON.
	Field string
	// Type is the BSON type the field holds (0 when Field is "").
	Type bson.Type
	// Want says what the field must hold ("a date").
	Want string
	// Err is the underlying error: the BSON validation error, or a
	// type-mismatch error that holds no value.
	Err error
}

// Error says which envelope and which field: "envelope _id
// 65a1...: field attempts holds a BSON string; want a number".
func (e *DecodeError) Error() string {
	id := IDString(e.ID)
	if e.Field == "" {
		return fmt.Sprintf("envelope _id %s cannot be decoded: %v", id, e.Err)
	}
	if e.Type == 0 {
		return fmt.Sprintf("envelope _id %s cannot be decoded: field %s is missing; want %s", id, e.Field, e.Want)
	}
	return fmt.Sprintf("envelope _id %s cannot be decoded: field %s holds a BSON %s; want %s", id, e.Field, e.Type, e.Want)
}

// Unwrap returns Err.
func (e *DecodeError) Unwrap() error { return e.Err }

// ErrWrongType is the Err of a DecodeError for a field of the wrong BSON
// type; ErrMissingOriginal for an envelope without an original.
var (
	ErrWrongType       = errors.New("envelope: field of the wrong BSON type")
	ErrMissingOriginal = errors.New("envelope: no original")
)

// maxIDString bounds IDString's result, in bytes.
const maxIDString = 96

// IDString renders an envelope's _id for messages: an ObjectID as its
// hex, a string as itself, anything else as canonical Extended JSON; cut
// to 96 bytes (with "...") so that a hostile _id cannot flood a message;
// "(none)" when there is no _id.
func IDString(id bson.RawValue) string {
	var s string
	switch id.Type {
	case 0:
		return "(none)"
	case bson.TypeObjectID:
		if oid, ok := id.ObjectIDOK(); ok {
			return oid.Hex()
		}
	case bson.TypeString:
		if v, ok := id.StringValueOK(); ok {
			s = fmt.Sprintf("%q", v)
		}
	}
	if s == "" {
		if js, err := extJSONValue(id); err == nil {
			s = string(js)
		} else {
			s = "(" + id.Type.String() + ")"
		}
	}
	if len(s) > maxIDString {
		s = validString([]byte(s[:maxIDString])) + "..."
	}
	return s
}

// Decode decodes a stored envelope (a document of the dead-letter
// collection, as dlq.MongoSink writes it). A document whose field has the
// wrong BSON type, or that is not valid BSON, gives a *DecodeError naming
// its _id and the field (the first such field in document order); the
// other envelopes of a batch are not affected. An envelope without an
// original is a DecodeError too (Field "original", Type 0,
// ErrMissingOriginal): there is nothing to replay. Fields Envelope does
// not know are ignored. An original, errInfo or call options kept as
// exact bytes (original_raw, ...) are read back into Original, ErrInfo
// and CallOptions.
func Decode(raw bson.Raw) (Envelope, error) {
	env, err := DecodeProjected(raw)
	if err != nil {
		return env, err
	}
	if err := checkOriginal(raw); err != nil {
		return Envelope{}, err
	}
	return env, nil
}

// DecodeProjected is Decode without the check for an original: it decodes
// a projection of a stored envelope that leaves the original out (as
// dlq.Stats reads the envelopes it counts), with the same *DecodeError
// for a field of the wrong type or a document that is not valid BSON.
func DecodeProjected(raw bson.Raw) (Envelope, error) {
	var env Envelope
	if err := raw.Validate(); err != nil {
		return Envelope{}, decodeFailure(raw, err)
	}
	if err := bson.Unmarshal(raw, &env); err != nil {
		return Envelope{}, decodeFailure(raw, err)
	}
	if derr := decodeExact(raw, &env); derr != nil {
		return Envelope{}, derr
	}
	return env, nil
}

// decodeFailure turns err, the failure to decode raw, into a
// *DecodeError naming raw's _id and the first field that does not decode
// (none when raw is not valid BSON).
func decodeFailure(raw bson.Raw, err error) error {
	id, _ := raw.LookupErr("_id")
	if raw.Validate() != nil {
		return &DecodeError{ID: validOrNone(id), Err: err}
	}
	if derr := findBadField(raw, id); derr != nil {
		return derr
	}
	return &DecodeError{ID: id, Err: err}
}

// checkOriginal returns a *DecodeError when raw holds no original in
// either stored form (ErrMissingOriginal), or one of the wrong type
// (ErrWrongType: original not an embedded document, original_raw not
// binary): the same test as dlq.Stats' query, so that every
// command counts the same envelopes undecodable.
func checkOriginal(raw bson.Raw) error {
	id, _ := raw.LookupErr("_id")
	if v, err := raw.LookupErr("original"); err == nil {
		if v.Type == bson.TypeEmbeddedDocument {
			if err := validateDeep(v.Document()); err != nil {
				return &DecodeError{ID: id, Field: "original", Type: v.Type, Want: envelopeFields()["original"].want, Err: err}
			}
			return nil
		}
		return &DecodeError{ID: id, Field: "original", Type: v.Type, Want: envelopeFields()["original"].want, Err: ErrWrongType}
	}
	if v, err := raw.LookupErr("original" + rawFormSuffix); err == nil {
		if v.Type == bson.TypeBinary {
			return nil
		}
		return &DecodeError{ID: id, Field: "original" + rawFormSuffix, Type: v.Type, Want: "binary (the original's BSON bytes)", Err: ErrWrongType}
	}
	return &DecodeError{ID: id, Field: "original", Want: envelopeFields()["original"].want, Err: ErrMissingOriginal}
}

// rawFormSuffix names the field that holds a document field's exact bytes
// when the server would not take it as a sub-document (original_raw).
const rawFormSuffix = "_raw"

func validOrNone(v bson.RawValue) bson.RawValue {
	if v.Validate() != nil {
		return bson.RawValue{}
	}
	return v
}

// findBadField decodes raw's known fields one by one and returns the
// error of the first that fails.
func findBadField(raw bson.Raw, id bson.RawValue) *DecodeError {
	elems, err := raw.Elements()
	if err != nil {
		return &DecodeError{ID: validOrNone(id), Err: err}
	}
	fields := envelopeFields()
	for _, el := range elems {
		f, ok := fields[el.Key()]
		if !ok {
			continue
		}
		v := el.Value()
		one, err := bson.Marshal(bson.D{{Key: el.Key(), Value: v}})
		if err != nil {
			return &DecodeError{ID: id, Field: el.Key(), Type: v.Type, Want: f.want, Err: ErrWrongType}
		}
		var env Envelope
		if err := bson.Unmarshal(one, &env); err != nil {
			return &DecodeError{ID: id, Field: el.Key(), Type: v.Type, Want: f.want, Err: ErrWrongType}
		}
	}
	return nil
}

type fieldInfo struct{ want string }

var (
	fieldsOnce sync.Once
	fieldsMap  map[string]fieldInfo
)

// envelopeFields maps each stored field name of Envelope to what it must
// hold, from the struct's bson tags.
func envelopeFields() map[string]fieldInfo {
	fieldsOnce.Do(func() {
		fieldsMap = map[string]fieldInfo{}
		t := reflect.TypeFor[Envelope]()
		for i := 0; i < t.NumField(); i++ {
			sf := t.Field(i)
			name, _, _ := strings.Cut(sf.Tag.Get("bson"), ",")
			if name == "" || name == "-" {
				continue
			}
			fieldsMap[name] = fieldInfo{want: wantOf(sf.Type)}
		}
	})
	return fieldsMap
}

// wantOf describes the BSON a Go field type decodes from.
func wantOf(t reflect.Type) string {
	switch {
	case t == reflect.TypeFor[bson.Raw]():
		return "an embedded document"
	case t == reflect.TypeFor[time.Time]():
		return "a date"
	case t == reflect.TypeFor[bson.RawValue]():
		return "any value"
	}
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "a boolean"
	case reflect.Int, reflect.Int32, reflect.Int64:
		return "a whole number (int32, int64, or a double without fraction)"
	case reflect.Slice:
		return "an array of " + strings.TrimPrefix(wantOf(t.Elem()), "a ") + "s"
	}
	return "a " + t.String()
}

// validateDeep validates doc and every document and array nested in it:
// bson.Raw.Validate reads the elements of one level, so an embedded
// document's own elements could still be cut short.
func validateDeep(doc bson.Raw) error {
	if err := doc.Validate(); err != nil {
		return err
	}
	elems, err := doc.Elements()
	if err != nil {
		return err
	}
	for _, el := range elems {
		v := el.Value()
		switch v.Type {
		case bson.TypeEmbeddedDocument:
			if err := validateDeep(v.Document()); err != nil {
				return err
			}
		case bson.TypeArray:
			if err := validateDeep(bson.Raw(v.Array())); err != nil {
				return err
			}
		}
	}
	return nil
}
