package envelope

import (
	"bytes"
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/writeguard/writeguard/jsonschema"
	"github.com/writeguard/writeguard/policy"
)

// corpusErrInfo returns the errInfo of a corpus entry.
func corpusErrInfo(t *testing.T, id string) bson.Raw {
	t.Helper()
	entries, raws := loadCorpus(t)
	for i, e := range entries {
		if e.ID == id {
			return raws[i]
		}
	}
	t.Fatalf("corpus entry %s not found", id)
	return nil
}

// c58Envelope is C58: InsertOne {_id: 7, ssn: "123-45-6789"} refused
// because the schema marks ssn encrypt (the corpus entry's errInfo, with
// the property named ssn as in C58).
func c58Envelope(t *testing.T, ssn string) Envelope {
	t.Helper()
	ei := corpusErrInfo(t, "encrypt-bsontype-string-not-encrypted")
	ei = bytes.Clone(ei)
	// The corpus names the property "a"; C58 names it "ssn".
	js, err := bson.MarshalExtJSON(ei, true, false)
	if err != nil {
		t.Fatal(err)
	}
	js = bytes.Replace(js, []byte(`"propertyName":"a"`), []byte(`"propertyName":"ssn"`), 1)
	if err := bson.UnmarshalExtJSON(js, true, &ei); err != nil {
		t.Fatal(err)
	}
	orig := mustMarshal(t, bson.D{{Key: "_id", Value: int32(7)}, {Key: "name", Value: "Ann"}, {Key: "ssn", Value: ssn}})
	return New(Capture{Document: orig, DocumentID: orig.Lookup("_id"), Namespace: "hr.people", Operation: "insertOne",
		Failure: failure121(ei), Now: t1})
}

// failure121 is a 121 DocumentValidationFailure with errInfo.
func failure121(errInfo bson.Raw) *policy.Failure {
	return &policy.Failure{Code: 121, CodeName: "DocumentValidationFailure", Message: "Document failed validation", ErrInfo: errInfo}
}

// TestEncryptedPaths: the corpus entry names its property under encrypt.
func TestEncryptedPaths(t *testing.T) {
	ei := corpusErrInfo(t, "encrypt-bsontype-string-not-encrypted")
	if got := EncryptedPaths(ei); fmt.Sprint(got) != "[a]" {
		t.Errorf("EncryptedPaths = %v, want [a]", got)
	}
	if got := EncryptedPaths(nil); got == nil || len(got) != 0 {
		t.Errorf("EncryptedPaths(nil) = %#v", got)
	}
	v := mustMarshal(t, bson.D{{Key: "$jsonSchema", Value: bson.D{{Key: "properties", Value: bson.D{
		{Key: "ssn", Value: bson.D{{Key: "encrypt", Value: bson.D{{Key: "bsonType", Value: "string"}}}}},
		{Key: "address", Value: bson.D{{Key: "properties", Value: bson.D{{Key: "zip", Value: bson.D{{Key: "encrypt", Value: bson.D{}}}}}}}},
		{Key: "name", Value: bson.D{{Key: "bsonType", Value: "string"}}},
	}}}}})
	if got := EncryptPaths(v); fmt.Sprint(got) != "[ssn address.zip]" {
		t.Errorf("EncryptPaths = %v", got)
	}
}

// TestC58SecretWithheld: by default the plaintext of a field refused for
// not being encrypted reaches neither the DLQ nor the fallback file; the
// envelope says which path and why.
func TestC58SecretWithheld(t *testing.T) {
	const ssn = "123-45-6789"
	env := c58Envelope(t, ssn)
	doc, err := StoredDocument(env)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(doc, []byte(ssn)) {
		t.Fatal("the DLQ document holds the plaintext")
	}
	back, err := Decode(doc)
	if err != nil {
		t.Fatal(err)
	}
	if len(back.Withheld) != 1 || back.Withheld[0] != (WithheldField{Path: "ssn", Reason: "encrypt"}) {
		t.Errorf("withheld %+v", back.Withheld)
	}
	if back.Original.Lookup("name").StringValue() != "Ann" || back.Original.Lookup("_id").Int32() != 7 {
		t.Errorf("the rest of the original is lost: %s", back.Original)
	}

	path := filepath.Join(t.TempDir(), "dlq.jsonl")
	fs, err := NewFileSink(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := fs.Put(context.Background(), []Envelope{env}); err != nil {
		t.Fatal(err)
	}
	_ = fs.Close()
	got, err := ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || len(got[0].Withheld) != 1 {
		t.Fatalf("file: %+v", got)
	}
	if _, err := got[0].Original.LookupErr("ssn"); err == nil {
		t.Error("the fallback file holds ssn")
	}
	line, _ := MarshalLine(got[0])
	if strings.Contains(string(line), ssn) {
		t.Error("the fallback file holds the plaintext")
	}

	// Opted out: stored as is.
	doc, err = StoredDocument(env, WithPlaintextEncryptedFields())
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(doc, []byte(ssn)) {
		t.Error("WithPlaintextEncryptedFields: plaintext not kept")
	}
}

// TestWithheldAlreadyEncrypted: a value that is already encrypted (binary
// subtype 6, "encrypted value has wrong type") is ciphertext: kept.
func TestWithheldAlreadyEncrypted(t *testing.T) {
	ei := corpusErrInfo(t, "encrypt-wrong-encrypted-type")
	orig := mustMarshal(t, bson.D{{Key: "_id", Value: int32(1)}, {Key: "a", Value: bson.Binary{Subtype: 6, Data: []byte{1, 2, 3}}}})
	env := New(Capture{Document: orig, Failure: failure121(ei), Namespace: "db.c", Now: t1})
	doc, err := StoredDocument(env)
	if err != nil {
		t.Fatal(err)
	}
	back, _ := Decode(doc)
	if len(back.Withheld) != 0 || !bytes.Equal(back.Original, orig) {
		t.Errorf("withheld %+v original %s", back.Withheld, back.Original)
	}
}

// TestWithheldWithoutErrInfo: without errInfo, the paths configured for
// the namespace are withheld and the envelope says on what basis; with
// none configured it says that nothing was withheld, and why.
func TestWithheldWithoutErrInfo(t *testing.T) {
	orig := mustMarshal(t, bson.D{{Key: "_id", Value: int32(1)}, {Key: "ssn", Value: "123-45-6789"}, {Key: "address", Value: bson.D{{Key: "zip", Value: "12345"}}}})
	env := New(Capture{Document: orig, Failure: failure121(nil), Namespace: "hr.people", Now: t1})
	back := mustStoreDecode(t, env)
	if len(back.Withheld) != 0 || !strings.Contains(back.WithheldNote, "nothing withheld") {
		t.Errorf("no config: withheld %+v note %q", back.Withheld, back.WithheldNote)
	}
	back = mustStoreDecode(t, env, WithEncryptedPaths("hr.people", "ssn", "address.zip"))
	if fmt.Sprint(back.Withheld) != "[{ssn schema encrypt} {address.zip schema encrypt}]" || !strings.Contains(back.WithheldNote, "configured") {
		t.Errorf("configured: withheld %+v note %q", back.Withheld, back.WithheldNote)
	}
	if _, err := back.Original.LookupErr("address", "zip"); err == nil {
		t.Error("address.zip stored")
	}
	back = mustStoreDecode(t, env, WithEncryptedPaths("other.ns", "ssn"))
	if len(back.Withheld) != 0 {
		t.Errorf("another namespace's paths applied: %+v", back.Withheld)
	}
}

// TestWithheldInModels: an update's $set of the field, a replacement's
// field and a filter on it are withheld.
func TestWithheldInModels(t *testing.T) {
	ei := corpusErrInfo(t, "encrypt-bsontype-string-not-encrypted") // path "a"
	cases := []struct {
		name, kind string
		doc        bson.D
		want       string
	}{
		{"$set", KindUpdateOne, bson.D{{Key: "op", Value: KindUpdateOne}, {Key: "filter", Value: bson.D{{Key: "_id", Value: 1}}},
			{Key: "update", Value: bson.D{{Key: "$set", Value: bson.D{{Key: "a", Value: "secret"}, {Key: "b", Value: 1}}}}}}, "[update.$set.a]"},
		{"pipeline", KindUpdateMany, bson.D{{Key: "op", Value: KindUpdateMany}, {Key: "filter", Value: bson.D{}},
			{Key: "update", Value: bson.A{bson.D{{Key: "$set", Value: bson.D{{Key: "a", Value: "secret"}}}}}}}, "[update]"},
		{"replacement and filter", KindReplaceOne, bson.D{{Key: "op", Value: KindReplaceOne}, {Key: "filter", Value: bson.D{{Key: "a", Value: "secret"}}},
			{Key: "replacement", Value: bson.D{{Key: "a", Value: "secret"}, {Key: "b", Value: 1}}}}, "[filter.a replacement.a]"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			env := Envelope{Kind: tc.kind, Original: mustMarshal(t, tc.doc), ErrInfo: ei, Code: 121, Namespace: "db.c"}
			back := mustStoreDecode(t, env)
			var paths []string
			for _, w := range back.Withheld {
				paths = append(paths, w.Path)
			}
			if fmt.Sprint(paths) != tc.want || bytes.Contains(back.Original, []byte("secret")) {
				t.Errorf("withheld %v, original %s", paths, back.Original)
			}
		})
	}
}

func mustStoreDecode(t *testing.T, env Envelope, opts ...SinkOption) Envelope {
	t.Helper()
	doc, err := StoredDocument(env, opts...)
	if err != nil {
		t.Fatal(err)
	}
	back, err := Decode(doc)
	if err != nil {
		t.Fatal(err)
	}
	return back
}

// TestFingerprintHidesWithheldValue: a reader of the stored envelope who
// guesses the withheld value cannot confirm the guess with the
// fingerprint, under either scheme (the 24-guess recovery of C58 done
// with every SSN of a 10,000 range that includes the right one).
func TestFingerprintHidesWithheldValue(t *testing.T) {
	const ssn = "123-45-6789"
	key := bytes.Repeat([]byte{0x42}, 32)
	for _, tc := range []struct {
		name   string
		opts   []SinkOption
		scheme string
	}{
		{"unkeyed", nil, SchemeStored},
		{"keyed", []SinkOption{WithFingerprintKey(key)}, SchemeKeyed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := c58Envelope(t, ssn)
			back := mustStoreDecode(t, env, tc.opts...)
			if back.FingerprintScheme != tc.scheme {
				t.Fatalf("scheme %q, want %q", back.FingerprintScheme, tc.scheme)
			}
			// The reader rebuilds candidate originals from what is stored.
			var stored bson.D
			if err := bson.Unmarshal(back.Original, &stored); err != nil {
				t.Fatal(err)
			}
			confirmed := 0
			for i := range 10000 {
				guess := fmt.Sprintf("123-45-%04d", i)
				cand := mustMarshal(t, append(append(bson.D{}, stored...), bson.E{Key: "ssn", Value: guess}))
				for _, fp := range []string{Fingerprint(cand, false), StoredFingerprint(cand)} {
					if fp == back.Fingerprint {
						confirmed++
					}
				}
			}
			if confirmed != 0 {
				t.Errorf("%d guesses confirmed by the fingerprint", confirmed)
			}
			// The envelope's fingerprint depends on the secret only
			// through the key: unkeyed, two SSNs give the same one (the
			// cost: they are one envelope); keyed, different ones.
			other := mustStoreDecode(t, c58Envelope(t, "987-65-4321"), tc.opts...)
			if same := other.Fingerprint == back.Fingerprint; same != (tc.scheme == SchemeStored) {
				t.Errorf("fingerprints equal across secrets: %v", same)
			}
			if tc.scheme == SchemeKeyed {
				if KeyedFingerprint(key, env.Original, false) != back.Fingerprint {
					t.Error("keyed fingerprint is not the HMAC of the original")
				}
				if KeyedFingerprint(bytes.Repeat([]byte{1}, 32), env.Original, false) == back.Fingerprint {
					t.Error("another key gives the same fingerprint")
				}
			}
		})
	}
	if _, err := NewCheckedMongoSink(nil, WithFingerprintKey([]byte("short"))); err == nil || !strings.Contains(err.Error(), "at least 32") {
		t.Errorf("short key: %v", err)
	}
}

// TestC64BinaryOriginal: originals the server cannot store as a
// sub-document (dotted, $-prefixed, duplicated keys, ...) are stored as
// their exact bytes and decoded back; the others as sub-documents.
func TestC64BinaryOriginal(t *testing.T) {
	dup := []byte{0, 0, 0, 0}
	dup = append(dup, 0x10, '_', 'i', 'd', 0, 1, 0, 0, 0)
	dup = append(dup, 0x10, '_', 'i', 'd', 0, 2, 0, 0, 0, 0)
	dup[0] = byte(len(dup))
	cases := []struct {
		name   string
		doc    bson.Raw
		reason string
	}{
		{"plain", mustMarshal(t, bson.D{{Key: "_id", Value: 1}, {Key: "a", Value: bson.D{{Key: "b", Value: 1}}}}), ""},
		{"dotted", mustMarshal(t, bson.D{{Key: "_id", Value: 1}, {Key: "a.b", Value: 1}}), "dot"},
		{"dotted nested", mustMarshal(t, bson.D{{Key: "_id", Value: 1}, {Key: "x", Value: bson.A{bson.D{{Key: "a.b", Value: 1}}}}}), "dot"},
		{"dollar", mustMarshal(t, bson.D{{Key: "_id", Value: 1}, {Key: "$x", Value: 1}}), "starts with $"},
		{"duplicated _id", bson.Raw(dup), "appears twice"},
		{"not UTF-8", mustMarshal(t, bson.D{{Key: "_id", Value: 1}, {Key: "s", Value: string([]byte{0xff, 0xfe})}}), "not UTF-8"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.doc.Validate(); err != nil {
				t.Fatal(err)
			}
			env := New(Capture{Document: tc.doc, Failure: failure121(nil), Namespace: "db.c", Now: t1})
			doc, err := StoredDocument(env)
			if err != nil {
				t.Fatal(err)
			}
			_, sub := doc.Lookup("original").DocumentOK()
			_, rawBytes, isBin := doc.Lookup("original_raw").BinaryOK()
			back, err := Decode(doc)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(back.Original, tc.doc) {
				t.Errorf("decoded original %x, want %x", back.Original, tc.doc)
			}
			if tc.reason == "" {
				if !sub || isBin || len(back.Binary) != 0 {
					t.Errorf("plain document not stored as a sub-document")
				}
				return
			}
			if sub || !isBin || !bytes.Equal(rawBytes, tc.doc) {
				t.Fatalf("stored as sub-document %v, binary %v", sub, isBin)
			}
			if len(back.Binary) != 1 || back.Binary[0].Field != "original" || !strings.Contains(back.Binary[0].Reason, tc.reason) {
				t.Errorf("binary %+v, want a reason with %q", back.Binary, tc.reason)
			}
		})
	}
}

// TestBinaryErrInfo: an errInfo that repeats a dotted key of the document
// (in consideredValue) is stored as exact bytes too.
func TestBinaryErrInfo(t *testing.T) {
	ei := mustMarshal(t, bson.D{{Key: "failingDocumentId", Value: 1}, {Key: "details", Value: bson.D{
		{Key: "operatorName", Value: "$jsonSchema"}, {Key: "consideredValue", Value: bson.D{{Key: "a.b", Value: 1}}}}}})
	orig := mustMarshal(t, bson.D{{Key: "_id", Value: 1}})
	back := mustStoreDecode(t, New(Capture{Document: orig, Failure: failure121(ei), Namespace: "db.c", Now: t1}))
	if !bytes.Equal(back.ErrInfo, ei) || len(back.Binary) != 1 || back.Binary[0].Field != "err_info" {
		t.Errorf("err_info %s, binary %+v", back.ErrInfo, back.Binary)
	}
}

// TestDecodeFormat1: an envelope stored before format 2 decodes as it
// was (no kind, schema_version 1).
func TestDecodeFormat1(t *testing.T) {
	orig := mustMarshal(t, bson.D{{Key: "op", Value: "updateOne"}, {Key: "model", Value: `{"filter":{"_id":1},"update":{"$set":{"a":1}},"upsert":false}`}})
	raw := mustMarshal(t, bson.D{{Key: "fingerprint", Value: "ab"}, {Key: "schema_version", Value: int32(1)}, {Key: "original", Value: orig},
		{Key: "status", Value: "pending"}, {Key: "attempts", Value: int32(2)}})
	env, err := Decode(raw)
	if err != nil {
		t.Fatal(err)
	}
	if env.SchemaVersion != 1 || env.Kind != "" || !bytes.Equal(env.Original, orig) || env.Attempts != 2 {
		t.Errorf("decoded %+v", env)
	}
	if _, err := Decode(mustMarshal(t, bson.D{{Key: "original_raw", Value: "not binary"}})); err == nil {
		t.Error("a string original_raw decoded")
	}
	if _, err := Decode(mustMarshal(t, bson.D{{Key: "original_raw", Value: bson.Binary{Data: []byte{1, 2}}}})); err == nil {
		t.Error("an original_raw that is not BSON decoded")
	}
}

// TestValidatorAcceptsBothForms: the DLQ's own validator, evaluated by the
// bed's $jsonSchema implementation, accepts a stored envelope whose
// original is a sub-document and one whose original is exact bytes, and
// rejects one with neither.
func TestValidatorAcceptsBothForms(t *testing.T) {
	v, err := jsonschema.Compile(Validator())
	if err != nil {
		t.Fatal(err)
	}
	plain := mustMarshal(t, bson.D{{Key: "_id", Value: 1}, {Key: "a", Value: 1}})
	dotted := mustMarshal(t, bson.D{{Key: "_id", Value: 1}, {Key: "a.b", Value: 1}})
	for _, orig := range []bson.Raw{plain, dotted} {
		doc, err := StoredDocument(New(Capture{Document: orig, Failure: failure121(nil), Namespace: "db.c", Operation: "insertOne", Now: t1}))
		if err != nil {
			t.Fatal(err)
		}
		if errInfo, err := v.ValidateRaw(doc); err != nil || errInfo != nil {
			t.Errorf("validator rejects %s: %v %v", doc, errInfo, err)
		}
		var d bson.D
		if err := bson.Unmarshal(doc, &d); err != nil {
			t.Fatal(err)
		}
		var without bson.D
		for _, e := range d {
			if e.Key != "original" && e.Key != "original_raw" {
				without = append(without, e)
			}
		}
		if errInfo, _ := v.ValidateRaw(mustMarshal(t, without)); errInfo == nil {
			t.Error("validator accepts an envelope without an original")
		}
	}
}
