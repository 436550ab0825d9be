package envelope

import (
	"bytes"
	"encoding/binary"
	"math"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// bsonElem appends one element (type, key, value bytes) to a document
// body under construction.
func bsonElem(body []byte, t bson.Type, key string, val []byte) []byte {
	body = append(body, byte(t))
	body = append(body, key...)
	body = append(body, 0)
	return append(body, val...)
}

func bsonDoc(body []byte) bson.Raw {
	out := binary.LittleEndian.AppendUint32(nil, uint32(len(body)+5))
	out = append(out, body...)
	return append(out, 0)
}

func bsonString(s string) []byte {
	out := binary.LittleEndian.AppendUint32(nil, uint32(len(s)+1))
	out = append(out, s...)
	return append(out, 0)
}

func le64(v uint64) []byte { return binary.LittleEndian.AppendUint64(nil, v) }

// exactOriginal is a document holding every BSON type, written byte by
// byte: strings, keys and regexes with invalid UTF-8, -0.0 and a NaN with
// a payload, the deprecated types (undefined, DBPointer, symbol, code with
// scope), binary subtypes, and nested documents whose keys are out of
// order. BSON allows all of it (strings are bytes for the server); a
// fallback file must give back the same bytes, or a replay writes another
// document than the one rejected.
func exactOriginal(t *testing.T) bson.Raw {
	t.Helper()
	var b []byte
	b = bsonElem(b, bson.TypeString, "_id", bsonString("id-\xff\xfe"))
	b = bsonElem(b, bson.TypeString, "bad\xc3key", bsonString("caf\xc3"))
	b = bsonElem(b, bson.TypeString, "nul-esc", bsonString("a\u2028b\x01\x7f<>&\"\\"))
	b = bsonElem(b, bson.TypeDouble, "negzero", le64(math.Float64bits(math.Copysign(0, -1))))
	b = bsonElem(b, bson.TypeDouble, "nanpayload", le64(0x7ff8000000000abc))
	b = bsonElem(b, bson.TypeDouble, "inf", le64(math.Float64bits(math.Inf(-1))))
	b = bsonElem(b, bson.TypeDouble, "tiny", le64(1))
	b = bsonElem(b, bson.TypeEmbeddedDocument, "doc", bsonDoc(bsonElem(bsonElem(nil, bson.TypeInt32, "z", []byte{1, 0, 0, 0}), bson.TypeInt32, "a", []byte{2, 0, 0, 0})))
	b = bsonElem(b, bson.TypeArray, "arr", bsonDoc(bsonElem(bsonElem(nil, bson.TypeInt64, "0", le64(7)), bson.TypeNull, "1", nil)))
	b = bsonElem(b, bson.TypeBinary, "bin0", append(binary.LittleEndian.AppendUint32(nil, 3), 0, 0xff, 0x00, 0x80))
	b = bsonElem(b, bson.TypeBinary, "bin80", append(binary.LittleEndian.AppendUint32(nil, 1), 0x80, 0x01))
	b = bsonElem(b, bson.TypeUndefined, "undef", nil)
	b = bsonElem(b, bson.TypeObjectID, "oid", []byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12})
	b = bsonElem(b, bson.TypeBoolean, "yes", []byte{1})
	b = bsonElem(b, bson.TypeDateTime, "before1970", le64(uint64(0xfffffffffffffc18))) // -1000 ms
	b = bsonElem(b, bson.TypeDateTime, "far", le64(uint64(math.MaxInt64)))
	b = bsonElem(b, bson.TypeNull, "null", nil)
	b = bsonElem(b, bson.TypeRegex, "re", []byte("^a\xff\x00imsx\x00"))
	b = bsonElem(b, bson.TypeDBPointer, "dbptr", append(bsonString("db.coll"), 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12))
	b = bsonElem(b, bson.TypeJavaScript, "js", bsonString("function(){return 1}"))
	b = bsonElem(b, bson.TypeSymbol, "sym", bsonString("sym\xfe"))
	scope := bsonDoc(bsonElem(nil, bson.TypeInt32, "x", []byte{1, 0, 0, 0}))
	code := bsonString("x+1")
	cws := binary.LittleEndian.AppendUint32(nil, uint32(4+len(code)+len(scope)))
	b = bsonElem(b, bson.TypeCodeWithScope, "cws", append(append(cws, code...), scope...))
	b = bsonElem(b, bson.TypeInt32, "i32", []byte{0xff, 0xff, 0xff, 0x7f})
	b = bsonElem(b, bson.TypeTimestamp, "ts", le64(0xffffffff00000001))
	b = bsonElem(b, bson.TypeInt64, "i64", le64(uint64(1)<<63))
	dec, _ := bson.ParseDecimal128("-0.000")
	hi, lo := dec.GetBytes()
	b = bsonElem(b, bson.TypeDecimal128, "dec", append(le64(lo), le64(hi)...))
	b = bsonElem(b, bson.TypeDecimal128, "decnan", append(le64(0), le64(0x7c00000000000000)...))
	b = bsonElem(b, bson.TypeMinKey, "min", nil)
	b = bsonElem(b, bson.TypeMaxKey, "max", nil)
	doc := bsonDoc(b)
	if err := doc.Validate(); err != nil {
		t.Fatalf("test document is not valid BSON: %v", err)
	}
	return doc
}

// TestFileLineExactBytes: MarshalLine then UnmarshalLine gives back the
// original, errInfo and document_id byte for byte, whatever they hold.
func TestFileLineExactBytes(t *testing.T) {
	orig := exactOriginal(t)
	env := sampleEnvelope(t)
	env.Original = orig
	env.ErrInfo = orig
	env.DocumentID = orig.Lookup("_id")
	env.Fingerprint = Fingerprint(orig, false)
	line, err := MarshalLine(env)
	if err != nil {
		t.Fatal(err)
	}
	got, err := UnmarshalLine(line)
	if err != nil {
		t.Fatalf("UnmarshalLine: %v\n%s", err, line)
	}
	if !bytes.Equal(got.Original, orig) {
		t.Errorf("original changed in the round trip:\n got %x\nwant %x", []byte(got.Original), []byte(orig))
	}
	if !bytes.Equal(got.ErrInfo, orig) {
		t.Errorf("err_info changed in the round trip")
	}
	if got.DocumentID.Type != env.DocumentID.Type || !bytes.Equal(got.DocumentID.Value, env.DocumentID.Value) {
		t.Errorf("document_id changed: %v → %v", env.DocumentID, got.DocumentID)
	}
	if Fingerprint(got.Original, false) != env.Fingerprint {
		t.Error("fingerprint of the read original differs")
	}
}
