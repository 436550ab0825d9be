package envelope

import (
	"strconv"
	"unicode/utf8"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// maxSubdocumentDepth is the deepest nesting of a document (the document
// itself is depth 1) that an envelope stores as a sub-document. MongoDB
// stores no document nested more than 100 levels deep (manual, "BSON
// Document" limits: "Nested Depth for BSON Documents"; mongodb/mongo
// src/mongo/bson/bson_depth.h kDefaultMaxAllowableDepth); the envelope adds
// one level, and a margin is kept for the update operators that store it.
const maxSubdocumentDepth = 90

// subdocumentRefusal returns "" when doc can be stored as a sub-document
// of an envelope on every server writeguard supports, or the first reason
// it cannot:
//
//   - a key with a dot or starting with "$": a MongoDB server before 5.0
//     refuses them anywhere in a stored document, and 5.0+ still refuses
//     "$"-prefixed keys in the $setOnInsert document MongoSink upserts
//     (mongodb/mongo src/mongo/db/update/storage_validation.cpp, 52
//     DollarPrefixedFieldName; manual, "Field Names with Periods and
//     Dollar Signs"); FerretDB v1 refuses both everywhere;
//   - an empty key, or two equal keys in one document (a duplicated _id):
//     FerretDB refuses them, and what MongoDB does with duplicates is not
//     specified (manual, "Document Field Names": "the behavior ... is
//     undefined");
//   - a key or string value that is not UTF-8: the Extended JSON that
//     dlq show prints would replace it;
//   - nesting deeper than maxSubdocumentDepth.
//
// A document refused here is stored as its exact bytes (binary field
// <name>_raw), which every server takes.
func subdocumentRefusal(doc bson.Raw) string {
	if len(doc) == 0 {
		return ""
	}
	if err := doc.Validate(); err != nil {
		return "not valid BSON: " + err.Error()
	}
	return refusalIn(doc, "", 1, false)
}

func refusalIn(doc []byte, path string, depth int, array bool) string {
	if depth > maxSubdocumentDepth {
		return "nested deeper than " + strconv.Itoa(maxSubdocumentDepth) + " levels at " + quotePath(path)
	}
	seen := map[string]bool{}
	it := newElemIter(doc)
	for {
		key, t, val, ok := it.next()
		if !ok {
			break
		}
		k := string(key)
		p := k
		if path != "" {
			p = path + "." + k
		}
		if !array {
			switch {
			case k == "":
				return "empty key in " + quotePath(path)
			case !utf8.ValidString(k):
				return "key that is not UTF-8 in " + quotePath(path)
			case k[0] == '$':
				return "key " + strconv.Quote(k) + " starts with $ (at " + quotePath(p) + ")"
			case containsDot(k):
				return "key " + strconv.Quote(k) + " holds a dot (at " + quotePath(p) + ")"
			case seen[k]:
				return "key " + strconv.Quote(k) + " appears twice in " + quotePath(path)
			}
			seen[k] = true
		}
		switch t {
		case bson.TypeEmbeddedDocument:
			if r := refusalIn(val, p, depth+1, false); r != "" {
				return r
			}
		case bson.TypeArray:
			if r := refusalIn(val, p, depth+1, true); r != "" {
				return r
			}
		case bson.TypeString, bson.TypeSymbol, bson.TypeJavaScript:
			if len(val) >= 5 && !utf8.Valid(val[4:len(val)-1]) {
				return "string that is not UTF-8 at " + quotePath(p)
			}
		}
	}
	if it.bad {
		return "not valid BSON at " + quotePath(path)
	}
	return ""
}

func containsDot(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] == '.' {
			return true
		}
	}
	return false
}

func quotePath(p string) string {
	if p == "" {
		return "the top level"
	}
	return strconv.Quote(p)
}

// rawSuffix is appended to a field's name when it is stored as exact
// bytes.
const rawSuffix = "_raw"

// docElem returns the stored element of a document field of the
// envelope: name: doc when the server takes doc as a sub-document, else
// name_raw: BinData(0, doc) and the reason, recorded in binary. refused,
// when not empty, is a server's refusal of this envelope's sub-documents
// (see MongoSink): every non-empty document field is then stored as
// bytes.
func docElem(name string, doc bson.Raw, binary *[]BinaryField, refused string) bson.E {
	reason := subdocumentRefusal(doc)
	if reason == "" && refused != "" && len(doc) > 5 {
		reason = refused
	}
	if reason != "" {
		*binary = append(*binary, BinaryField{Field: name, Reason: reason})
		return bson.E{Key: name + rawSuffix, Value: bson.Binary{Subtype: bson.TypeBinaryGeneric, Data: doc}}
	}
	return bson.E{Key: name, Value: doc}
}

// binaryFieldNames are the envelope fields that may be stored as exact
// bytes.
var binaryFieldNames = []string{"original", "err_info", "call_options"}

// decodeExact fills env's fields kept as exact bytes (original_raw,
// err_info_raw, call_options_raw: binary holding a BSON document) from
// raw; Decode calls it after the struct fields decoded.
func decodeExact(raw bson.Raw, env *Envelope) *DecodeError {
	id, _ := raw.LookupErr("_id")
	for _, name := range binaryFieldNames {
		v, err := raw.LookupErr(name + rawSuffix)
		if err != nil {
			continue
		}
		_, data, ok := v.BinaryOK()
		if !ok {
			return &DecodeError{ID: id, Field: name + rawSuffix, Type: v.Type, Want: "binary data holding a BSON document", Err: ErrWrongType}
		}
		doc := bson.Raw(append([]byte(nil), data...))
		if err := validateDeep(doc); err != nil {
			return &DecodeError{ID: id, Field: name + rawSuffix, Type: v.Type, Want: "binary data holding a BSON document", Err: err}
		}
		switch name {
		case "original":
			env.Original = doc
		case "err_info":
			env.ErrInfo = doc
		default:
			env.CallOptions = doc
		}
	}
	return nil
}
