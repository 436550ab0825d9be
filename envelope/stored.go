package envelope

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"strconv"
	"time"
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
//     "$"-prefixed keys in the $setOnInsert document dlq.MongoSink upserts
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
// (see dlq.MongoSink): every non-empty document field is then stored as
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

// InsertFields returns the fields of env set only when its envelope is
// created (a recapture leaves them alone), in stored order: the
// $setOnInsert document of dlq.MongoSink's upsert. original, err_info and
// call_options are sub-documents, or exact bytes in <name>_raw when the
// server would refuse them (a dotted, "$"-prefixed, empty or duplicated
// key, a string that is not UTF-8, nesting deeper than 90 levels; the
// reason is listed in binary). asBytes, when not empty, is a server's
// refusal of this envelope's sub-documents (code and name): every
// non-empty document field is then stored as bytes, with asBytes as the
// reason.
func InsertFields(env Envelope, asBytes string) bson.D {
	var binary []BinaryField // appended to by docElem, in stored order
	d := originalFields(env, asBytes, &binary)
	d = append(d, failureFields(env, asBytes, &binary)...)
	d = append(d, captureFields(env)...)
	return appendIf(d, len(binary) > 0, "binary", binary)
}

// originalFields are the first fields InsertFields stores: the format,
// the original and what was done to it, the call options, the _id.
func originalFields(env Envelope, asBytes string, binary *[]BinaryField) bson.D {
	d := bson.D{{Key: "schema_version", Value: int32(env.SchemaVersion)}}
	d = appendIf(d, env.FingerprintScheme != "", "fingerprint_scheme", env.FingerprintScheme)
	d = appendIf(d, env.Kind != "", "kind", env.Kind)
	if env.OriginalPieces != nil {
		// Kept apart, whole (see Envelope.OriginalPieces).
		d = append(d, bson.E{Key: "original", Value: rawOrEmpty(nil)}, bson.E{Key: "original_pieces", Value: env.OriginalPieces})
	} else {
		d = append(d, docElem("original", rawOrEmpty(env.Original), binary, asBytes))
	}
	if len(env.CallOptions) > 0 {
		d = append(d, docElem("call_options", env.CallOptions, binary, asBytes))
	}
	if env.OriginalTruncated {
		d = append(d, bson.E{Key: "original_truncated", Value: true}, bson.E{Key: "original_size", Value: int64(env.OriginalSize)})
		d = appendIf(d, len(env.OriginalDropped) > 0, "original_dropped", env.OriginalDropped)
	}
	d = appendIf(d, env.OriginalRedacted, "original_redacted", true)
	d = appendIf(d, len(env.Withheld) > 0, "withheld", env.Withheld)
	d = appendIf(d, env.WithheldNote != "", "withheld_note", env.WithheldNote)
	d = appendIf(d, env.DocumentID.Type != 0, "document_id", env.DocumentID)
	return append(d, bson.E{Key: "id_assigned", Value: env.IDAssigned})
}

// failureFields are the server's verdict InsertFields stores: errInfo and
// what it names, the code, the message, the labels.
func failureFields(env Envelope, asBytes string, binary *[]BinaryField) bson.D {
	var d bson.D
	if len(env.ErrInfo) > 0 {
		d = append(d, docElem("err_info", env.ErrInfo, binary, asBytes))
	}
	d = append(d,
		bson.E{Key: "failing_keywords", Value: nonNil(env.FailingKeywords)},
		bson.E{Key: "failing_paths", Value: nonNil(env.FailingPaths)},
		bson.E{Key: "code", Value: env.Code},
	)
	d = appendIf(d, env.CodeName != "", "code_name", env.CodeName)
	d = append(d, bson.E{Key: "errmsg", Value: env.ErrMsg})
	return appendIf(d, len(env.Labels) > 0, "labels", env.Labels)
}

// captureFields are the write's own fields InsertFields stores (where,
// what, when, the trace) and what was cut for size.
func captureFields(env Envelope) bson.D {
	d := bson.D{
		{Key: "namespace", Value: env.Namespace},
		{Key: "operation", Value: env.Operation},
		{Key: "batch_index", Value: int32(env.BatchIndex)},
		{Key: "first_seen", Value: env.FirstSeen},
	}
	d = appendIf(d, env.TraceID != "", "trace_id", env.TraceID)
	d = appendIf(d, env.SpanID != "", "span_id", env.SpanID)
	return appendIf(d, len(env.Cut) > 0, "cut", env.Cut)
}

// appendIf appends key: value to d when set.
func appendIf(d bson.D, set bool, key string, value any) bson.D {
	if !set {
		return d
	}
	return append(d, bson.E{Key: key, Value: value})
}

func rawOrEmpty(r bson.Raw) bson.Raw {
	if len(r) == 0 {
		return bson.Raw{5, 0, 0, 0, 0}
	}
	return r
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// StoredFields returns a prepared envelope (PrepareStored) as it is
// stored for a first capture: the fingerprint, InsertFields(env,
// asBytes), attempts, last_seen and status, without the _id the server
// assigns. dlq.MongoSink inserts it (dlq.WithInsertFirst).
func StoredFields(env Envelope, asBytes string) bson.D {
	d := append(bson.D{{Key: "fingerprint", Value: env.Fingerprint}}, InsertFields(env, asBytes)...)
	return append(d,
		bson.E{Key: "attempts", Value: int32(env.Attempts)},
		bson.E{Key: "multiplicity", Value: int32(env.Copies())},
		bson.E{Key: "last_seen", Value: env.LastSeen},
		bson.E{Key: "status", Value: StatusPending},
	)
}

// RecaptureUpdate is the update dlq.MongoSink applies to the stored
// envelope of a payload captured again: {$inc: {attempts}, $max:
// {last_seen}, $set: {status: "pending"}}. RecaptureUpdateN also keeps
// the multiplicity.
func RecaptureUpdate(attempts int, lastSeen time.Time) bson.D {
	return bson.D{
		{Key: "$inc", Value: bson.D{{Key: "attempts", Value: int32(attempts)}}},
		{Key: "$max", Value: bson.D{{Key: "last_seen", Value: lastSeen}}},
		{Key: "$set", Value: bson.D{{Key: "status", Value: StatusPending}}},
	}
}

// RecaptureUpdateN is RecaptureUpdate that also keeps the largest
// multiplicity any capture saw: {$inc: {attempts}, $max: {last_seen,
// multiplicity}, $set: {status: "pending"}} (Envelope.Multiplicity; a
// multiplicity below 1 counts as 1). $max, not $inc: a call that re-sends
// the same inputs, or a retried Put, does not multiply it; and on the
// upsert that inserts the envelope, $max of a missing field sets it.
func RecaptureUpdateN(attempts, multiplicity int, lastSeen time.Time) bson.D {
	return bson.D{
		{Key: "$inc", Value: bson.D{{Key: "attempts", Value: int32(attempts)}}},
		{Key: "$max", Value: bson.D{{Key: "last_seen", Value: lastSeen}, {Key: "multiplicity", Value: int32(max(multiplicity, 1))}}},
		{Key: "$set", Value: bson.D{{Key: "status", Value: StatusPending}}},
	}
}

// Copies returns how many writes a replay of env makes: its
// Multiplicity, at least 1. Check MultiplicityProblem first: Copies
// trusts the stored number.
func (e Envelope) Copies() int { return max(e.Multiplicity, 1) }

// isInsert reports whether e holds an insert: its Kind, or before format
// 2 (no Kind) an original with an _id (as package replay reads it).
func (e Envelope) isInsert() bool {
	if e.Kind != "" {
		return e.Kind == KindInsertOne
	}
	_, err := e.Original.LookupErr("_id")
	return err == nil
}

// MaxMultiplicity bounds Envelope.Multiplicity: 100,000, the server's
// maxWriteBatchSize (write_ops::kMaxWriteBatchSize, MongoDB
// src/mongo/db/ops/write_ops.h; the hello reply's maxWriteBatchSize), the
// most statements one write command carries, and replay.MaxBatchSize.
// writeguard counts a multiplicity within one guarded call (identical
// inputs of that call), so a genuine envelope above it would need a call
// of more than 100,000 identical inputs; above it, a number is far more
// likely forged or hand-edited, and one envelope would make a replay
// write more documents than one write command may carry.
const MaxMultiplicity = 100000

// MultiplicityProblem returns why e's Multiplicity is not one writeguard
// stores, or "" when a replay may write e.Copies() writes: above
// MaxMultiplicity, or above 1 on an insert whose _id the caller gave (not
// IDAssigned: its copies would be one document, so writeguard stores 1;
// a replay would have to invent _ids for the others). Package replay
// refuses such an envelope (left pending, reason recorded) instead of
// writing it.
func (e Envelope) MultiplicityProblem() string {
	switch {
	case e.Multiplicity > MaxMultiplicity:
		return fmt.Sprintf("multiplicity %d exceeds %d (envelope.MaxMultiplicity): forged or hand-edited envelope, not replayed", e.Multiplicity, MaxMultiplicity)
	case e.Multiplicity > 1 && e.isInsert() && !e.IDAssigned:
		return fmt.Sprintf("multiplicity %d on an insert whose _id the caller gave (id_assigned false), which is one document whatever its number: "+
			"inconsistent (forged or hand-edited) envelope, not replayed", e.Multiplicity)
	}
	return ""
}

// PrepareStored returns env ready to be stored for a first capture: its
// first_seen defaults to now (UTC, in milliseconds) and its last_seen to
// its first_seen, its status is pending, Protect applies p, and an
// envelope that does not fit MaxEnvelopeSize is made to fit without
// losing its original: diagnostics are cut when that lets the whole
// original fit, else the original is set apart (OriginalPieces; see
// fitEnvelope). It returns Protect's error.
func PrepareStored(env Envelope, p Protection) (Envelope, error) {
	now := time.Now().UTC().Truncate(time.Millisecond)
	if env.FirstSeen.IsZero() {
		env.FirstSeen = now
	}
	if env.LastSeen.IsZero() {
		env.LastSeen = env.FirstSeen
	}
	env.Status = StatusPending
	env, err := Protect(env, p)
	if err != nil {
		return env, err
	}
	return fitEnvelope(env, MaxEnvelopeSize), nil
}

// StoredDocument returns env as a sink of package dlq without options
// stores it for a first capture (PrepareStored with the zero Protection,
// then StoredFields): fingerprint, the Envelope's fields, attempts,
// last_seen and status, as one document without the _id the server
// assigns (an original set apart is not in it: see OriginalPieces).
// dlq.StoredDocument takes the sink's options. For tests and tools. It
// returns the error of an envelope that cannot be marshalled.
func StoredDocument(env Envelope) (bson.Raw, error) {
	e, err := PrepareStored(env, Protection{})
	if err != nil {
		return nil, err
	}
	return bson.Marshal(StoredFields(e, ""))
}

// CopyID returns the _id of copy k (1, 2, ...) of an insert whose
// writeguard-assigned _id is id, which a replay of an envelope of
// Multiplicity n > 1 writes for copies 1 to n-1 (copy 0 is the original,
// with id): the same value on every replay, so that a second replay of a
// copy is a duplicate key, as for the original. For an ObjectID: the
// same 4-byte timestamp, then the first 8 bytes of SHA-256(id's 12 bytes,
// "copy", k as 8 bytes big-endian). For any other type: the document
// {_id: id, copy: k}. k ≤ 0 returns id.
func CopyID(id bson.RawValue, k int) bson.RawValue {
	if k <= 0 {
		return id
	}
	if oid, ok := id.ObjectIDOK(); ok {
		h := sha256.New()
		h.Write(oid[:])
		h.Write([]byte("copy"))
		var n [8]byte
		binary.BigEndian.PutUint64(n[:], uint64(k))
		h.Write(n[:])
		var out bson.ObjectID
		copy(out[:4], oid[:4])
		copy(out[4:], h.Sum(nil)[:8])
		return bson.RawValue{Type: bson.TypeObjectID, Value: out[:]}
	}
	doc, err := bson.Marshal(bson.D{{Key: "_id", Value: id}, {Key: "copy", Value: int64(k)}})
	if err != nil {
		return id
	}
	return bson.RawValue{Type: bson.TypeEmbeddedDocument, Value: doc}
}

// WithID returns doc with the value of its top-level _id replaced by id
// (every other element byte for byte, in order); doc itself when it has
// no _id or is not valid BSON.
func WithID(doc bson.Raw, id bson.RawValue) bson.Raw {
	elems, err := doc.Elements()
	if err != nil {
		return doc
	}
	out := make([]byte, 4, len(doc)+len(id.Value))
	found := false
	for _, el := range elems {
		if el.Key() == "_id" && !found {
			found = true
			out = append(out, byte(id.Type))
			out = append(out, "_id"...)
			out = append(out, 0)
			out = append(out, id.Value...)
			continue
		}
		out = append(out, el...)
	}
	if !found {
		return doc
	}
	out = append(out, 0)
	binary.LittleEndian.PutUint32(out, uint32(len(out)))
	return out
}
