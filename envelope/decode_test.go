package envelope

import (
	"errors"
	"strings"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// storedWith returns the stored form of sampleEnvelope with an _id, and
// field set to v (bson.D order kept, the field replaced in place).
func storedWith(t *testing.T, field string, v any) bson.Raw {
	t.Helper()
	raw, err := StoredDocument(sampleEnvelope(t))
	if err != nil {
		t.Fatal(err)
	}
	var d bson.D
	if err := bson.Unmarshal(raw, &d); err != nil {
		t.Fatal(err)
	}
	d = append(bson.D{{Key: "_id", Value: "env-1"}}, d...)
	for i := range d {
		if d[i].Key == field {
			d[i].Value = v
		}
	}
	return mustMarshal(t, d)
}

// TestDecodeBadFields: an envelope with a field of the wrong type is a
// DecodeError naming its _id and the field, and never the field's value.
// Before the change such a document was a bare driver error that named
// neither (and stopped every dlq command).
func TestDecodeBadFields(t *testing.T) {
	if _, err := Decode(storedWith(t, "none", nil)); err != nil {
		t.Fatalf("a good envelope: %v", err)
	}
	const secret = "s3cr3t-value"
	for _, c := range []struct {
		field string
		v     any
		typ   bson.Type
	}{
		{"original", secret, bson.TypeString},
		{"attempts", secret, bson.TypeString},
		{"attempts", 1.5, bson.TypeDouble},
		{"first_seen", int32(5), bson.TypeInt32},
		{"failing_keywords", secret, bson.TypeString},
		{"status", bson.D{{Key: "x", Value: secret}}, bson.TypeEmbeddedDocument},
		{"code", secret, bson.TypeString},
	} {
		_, err := Decode(storedWith(t, c.field, c.v))
		var de *DecodeError
		if !errors.As(err, &de) {
			t.Errorf("%s = %v: %v, want a DecodeError", c.field, c.v, err)
			continue
		}
		if de.Field != c.field || de.Type != c.typ || IDString(de.ID) != `"env-1"` || !errors.Is(err, ErrWrongType) {
			t.Errorf("%s = %v: %+v", c.field, c.v, de)
		}
		msg := err.Error()
		if !strings.Contains(msg, `_id "env-1"`) || !strings.Contains(msg, "field "+c.field) || strings.Contains(msg, secret) || strings.Contains(msg, "1.5") {
			t.Errorf("%s: message %q: want the _id and the field, and no value", c.field, msg)
		}
	}
	// Not BSON at all.
	if _, err := Decode(bson.Raw{7, 0, 0, 0, 1, 'a', 0}); err == nil {
		t.Error("invalid BSON decoded")
	} else if de := (*DecodeError)(nil); !errors.As(err, &de) || de.Field != "" {
		t.Errorf("invalid BSON: %v", err)
	}
}

func TestIDString(t *testing.T) {
	oid := bson.NewObjectID()
	for _, c := range []struct {
		v    any
		want string
	}{
		{oid, oid.Hex()},
		{"abc", `"abc"`},
		{int64(7), `{"$numberLong":"7"}`},
		{strings.Repeat("x", 500), `"` + strings.Repeat("x", maxIDString-1) + "..."},
	} {
		if got := IDString(rawValue(t, c.v)); got != c.want {
			t.Errorf("IDString(%v) = %q, want %q", c.v, got, c.want)
		}
	}
	if got := IDString(bson.RawValue{}); got != "(none)" {
		t.Errorf("no _id: %q", got)
	}
}

// An original that is null, a string, or an original_raw that is not
// binary is undecodable for Decode as it is for Stats' query
// (hasOriginal): list, show and stats count the same envelopes.
func TestDecodeOriginalOfTheWrongType(t *testing.T) {
	for _, c := range []struct {
		name  string
		doc   bson.D
		field string
	}{
		{"null original", bson.D{{Key: "_id", Value: 1}, {Key: "original", Value: nil}}, "original"},
		{"string original", bson.D{{Key: "_id", Value: 2}, {Key: "original", Value: "not a doc"}}, "original"},
		{"string original_raw", bson.D{{Key: "_id", Value: 3}, {Key: "original_raw", Value: "x"}}, "original_raw"},
		{"no original", bson.D{{Key: "_id", Value: 4}}, "original"},
	} {
		raw, err := bson.Marshal(c.doc)
		if err != nil {
			t.Fatal(err)
		}
		_, err = Decode(raw)
		var de *DecodeError
		if !errors.As(err, &de) || de.Field != c.field {
			t.Errorf("%s: err %v, want a DecodeError on %s", c.name, err, c.field)
		}
	}
}

func rawValue(tb testing.TB, v any) bson.RawValue {
	tb.Helper()
	doc := mustMarshal(tb, bson.D{{Key: "v", Value: v}})
	return doc.Lookup("v")
}
