package envelope

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"

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
