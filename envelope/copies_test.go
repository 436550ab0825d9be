package envelope

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// TestCopyIDAndWithID: the _ids of an envelope's copies are the same on
// every call, differ from each other and from the original, keep an
// ObjectID's timestamp; WithID changes the _id only.
func TestCopyIDAndWithID(t *testing.T) {
	oid := bson.NewObjectID()
	id := bson.RawValue{Type: bson.TypeObjectID, Value: oid[:]}
	seen := map[string]bool{string(id.Value): true}
	for k := 1; k <= 50; k++ {
		c := CopyID(id, k)
		if !bytes.Equal(c.Value, CopyID(id, k).Value) || seen[string(c.Value)] {
			t.Fatalf("copy %d: %x not stable or not unique", k, c.Value)
		}
		seen[string(c.Value)] = true
		if !bytes.Equal(c.Value[:4], oid[:4]) {
			t.Errorf("copy %d lost the timestamp", k)
		}
	}
	if CopyID(id, 0).Value == nil || !bytes.Equal(CopyID(id, 0).Value, id.Value) {
		t.Error("copy 0 is not the original _id")
	}
	str := bson.RawValue{Type: bson.TypeString, Value: mustRaw(t, bson.D{{Key: "x", Value: "k"}}).Lookup("x").Value}
	if c := CopyID(str, 2); c.Type != bson.TypeEmbeddedDocument {
		t.Errorf("copy of a string _id: %v", c)
	}
	doc := mustRaw(t, bson.D{{Key: "a", Value: int32(1)}, {Key: "_id", Value: oid}, {Key: "b", Value: "x"}})
	c := CopyID(id, 3)
	got := WithID(doc, c)
	if err := got.Validate(); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got.Lookup("_id").Value, c.Value) || got.Lookup("b").StringValue() != "x" || got.Lookup("a").Int32() != 1 {
		t.Errorf("WithID: %v", got)
	}
	if keys, _ := got.Elements(); keys[1].Key() != "_id" {
		t.Error("WithID moved _id")
	}
	if nid := mustRaw(t, bson.D{{Key: "a", Value: 1}}); !bytes.Equal(WithID(nid, c), nid) {
		t.Error("WithID added an _id")
	}
}

// TestRecaptureUpdateN: multiplicity is kept with $max (never $inc), at
// least 1.
func TestRecaptureUpdateN(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	u := mustRaw(t, RecaptureUpdateN(2, 3, now))
	if got := u.Lookup("$max", "multiplicity").Int32(); got != 3 {
		t.Errorf("$max multiplicity %d, want 3", got)
	}
	if _, err := u.LookupErr("$inc", "multiplicity"); err == nil {
		t.Error("multiplicity incremented")
	}
	if got := mustRaw(t, RecaptureUpdateN(1, 0, now)).Lookup("$max", "multiplicity").Int32(); got != 1 {
		t.Errorf("multiplicity 0 stored as %d, want 1", got)
	}
	if (Envelope{}).Copies() != 1 || (Envelope{Multiplicity: 4}).Copies() != 4 {
		t.Error("Copies")
	}
}

func mustRaw(t *testing.T, v any) bson.Raw {
	t.Helper()
	b, err := bson.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestMultiplicityProblem (trial finding A1): a multiplicity writeguard
// never stores is named: above MaxMultiplicity, or above 1 on an insert
// whose _id the caller gave (format 2, and before it an original with an
// _id); a writeguard-assigned _id's or a model's multiplicity up to the
// cap is fine.
func TestMultiplicityProblem(t *testing.T) {
	withID, _ := bson.Marshal(bson.D{{Key: "_id", Value: "line-1"}})
	for _, c := range []struct {
		env  Envelope
		want string
	}{
		{Envelope{Kind: KindInsertOne, Multiplicity: 1000}, "on an insert whose _id the caller gave"},
		{Envelope{Original: withID, Multiplicity: 2}, "on an insert whose _id the caller gave"},
		{Envelope{Kind: KindInsertOne, Multiplicity: 1}, ""},
		{Envelope{Kind: KindInsertOne, IDAssigned: true, Multiplicity: 3}, ""},
		{Envelope{Kind: KindInsertOne, IDAssigned: true, Multiplicity: MaxMultiplicity}, ""},
		{Envelope{Kind: KindInsertOne, IDAssigned: true, Multiplicity: MaxMultiplicity + 1}, "exceeds 100000"},
		{Envelope{Kind: KindUpdateOne, Multiplicity: 2}, ""},
		{Envelope{Kind: KindUpdateOne, Multiplicity: 1 << 30}, "exceeds 100000"},
	} {
		got := c.env.MultiplicityProblem()
		if (c.want == "") != (got == "") || !strings.Contains(got, c.want) {
			t.Errorf("%s multiplicity %d id_assigned %v: %q, want %q", c.env.Kind, c.env.Multiplicity, c.env.IDAssigned, got, c.want)
		}
	}
}
