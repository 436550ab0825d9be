package envelope

import (
	"crypto/sha256"
	"encoding/hex"
	"regexp"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"
)

func fp(t *testing.T, v any, idAssigned bool) string {
	t.Helper()
	return Fingerprint(mustMarshal(t, v), idAssigned)
}

func TestFingerprintKeyOrder(t *testing.T) {
	a := bson.D{
		{Key: "name", Value: "Anne"},
		{Key: "age", Value: int32(30)},
		{Key: "address", Value: bson.D{{Key: "city", Value: "Paris"}, {Key: "zip", Value: "75001"}}},
	}
	b := bson.D{
		{Key: "address", Value: bson.D{{Key: "zip", Value: "75001"}, {Key: "city", Value: "Paris"}}},
		{Key: "age", Value: int32(30)},
		{Key: "name", Value: "Anne"},
	}
	if fp(t, a, false) != fp(t, b, false) {
		t.Error("same document with a different key order fingerprints differently")
	}
	// The same through a map (random iteration order) and a struct.
	type addr struct {
		Zip  string `bson:"zip"`
		City string `bson:"city"`
	}
	type person struct {
		Age     int32  `bson:"age"`
		Address addr   `bson:"address"`
		Name    string `bson:"name"`
	}
	if got, want := fp(t, person{Age: 30, Address: addr{Zip: "75001", City: "Paris"}, Name: "Anne"}, false), fp(t, a, false); got != want {
		t.Error("struct and bson.D of the same document fingerprint differently")
	}
	m := bson.M{"name": "Anne", "age": int32(30), "address": bson.M{"city": "Paris", "zip": "75001"}}
	for range 20 {
		if fp(t, m, false) != fp(t, a, false) {
			t.Fatal("bson.M of the same document fingerprints differently")
		}
	}
}

func TestFingerprintNestedSorted(t *testing.T) {
	// Documents inside arrays, inside documents inside arrays, are sorted too.
	a := bson.D{{Key: "items", Value: bson.A{
		bson.D{{Key: "sku", Value: "x"}, {Key: "qty", Value: int32(1)}, {Key: "tags", Value: bson.A{
			bson.D{{Key: "k", Value: "a"}, {Key: "v", Value: int32(1)}},
		}}},
		bson.D{{Key: "deep", Value: bson.D{{Key: "z", Value: int32(1)}, {Key: "y", Value: bson.D{{Key: "b", Value: 1.5}, {Key: "a", Value: nil}}}}}},
	}}}
	b := bson.D{{Key: "items", Value: bson.A{
		bson.D{{Key: "tags", Value: bson.A{
			bson.D{{Key: "v", Value: int32(1)}, {Key: "k", Value: "a"}},
		}}, {Key: "qty", Value: int32(1)}, {Key: "sku", Value: "x"}},
		bson.D{{Key: "deep", Value: bson.D{{Key: "y", Value: bson.D{{Key: "a", Value: nil}, {Key: "b", Value: 1.5}}}, {Key: "z", Value: int32(1)}}}},
	}}}
	if fp(t, a, false) != fp(t, b, false) {
		t.Error("nested documents are not sorted")
	}
}

func TestFingerprintArrayOrderKept(t *testing.T) {
	a := bson.D{{Key: "a", Value: bson.A{int32(1), int32(2)}}}
	b := bson.D{{Key: "a", Value: bson.A{int32(2), int32(1)}}}
	if fp(t, a, false) == fp(t, b, false) {
		t.Error("arrays in a different order fingerprint the same")
	}
}

func TestFingerprintNumericTypesDistinct(t *testing.T) {
	seen := map[string]string{}
	for name, v := range map[string]any{
		"int32 1":    int32(1),
		"int64 1":    int64(1),
		"double 1.0": 1.0,
		"decimal 1":  bson.NewDecimal128(0x3040000000000000, 1),
		"string 1":   "1",
	} {
		f := fp(t, bson.D{{Key: "a", Value: v}}, false)
		if other, dup := seen[f]; dup {
			t.Errorf("%s and %s fingerprint the same", name, other)
		}
		seen[f] = name
	}
}

func TestFingerprintAssignedID(t *testing.T) {
	id1, id2 := bson.NewObjectID(), bson.NewObjectID()
	doc := func(id bson.ObjectID) bson.D {
		return bson.D{{Key: "_id", Value: id}, {Key: "a", Value: int32(1)}, {Key: "n", Value: bson.D{{Key: "_id", Value: int32(7)}}}}
	}
	noID := bson.D{{Key: "a", Value: int32(1)}, {Key: "n", Value: bson.D{{Key: "_id", Value: int32(7)}}}}

	if fp(t, doc(id1), true) != fp(t, doc(id2), true) {
		t.Error("assigned _id not ignored")
	}
	if fp(t, doc(id1), true) != fp(t, noID, true) {
		t.Error("assigned _id not ignored: differs from the payload without _id")
	}
	if fp(t, doc(id1), false) == fp(t, doc(id2), false) {
		t.Error("caller's _id ignored when idAssigned is false")
	}
	if fp(t, doc(id1), false) == fp(t, noID, false) {
		t.Error("caller's _id ignored when idAssigned is false")
	}
	// Only the top-level _id is dropped.
	other := bson.D{{Key: "a", Value: int32(1)}, {Key: "n", Value: bson.D{{Key: "_id", Value: int32(8)}}}}
	if fp(t, noID, true) == fp(t, other, true) {
		t.Error("nested _id dropped")
	}
	// _id at any position at the top level.
	late := bson.D{{Key: "a", Value: int32(1)}, {Key: "n", Value: bson.D{{Key: "_id", Value: int32(7)}}}, {Key: "_id", Value: id2}}
	if fp(t, late, true) != fp(t, noID, true) {
		t.Error("top-level _id not first is not dropped")
	}
}

// TestFingerprintCanonicalForm checks the documented definition: the SHA-256
// of the BSON document with keys sorted at every level.
func TestFingerprintCanonicalForm(t *testing.T) {
	in := bson.D{
		{Key: "_id", Value: int32(5)},
		{Key: "b", Value: bson.A{bson.D{{Key: "y", Value: "s"}, {Key: "x", Value: true}}, int64(3)}},
		{Key: "a", Value: bson.D{{Key: "d", Value: 2.5}, {Key: "c", Value: bson.Regex{Pattern: "^a", Options: "i"}}}},
		{Key: "ä", Value: bson.Binary{Subtype: 0, Data: []byte{1, 2}}},
		{Key: "Z", Value: bson.D{}},
	}
	want := mustMarshal(t, bson.D{
		{Key: "Z", Value: bson.D{}},
		{Key: "a", Value: bson.D{{Key: "c", Value: bson.Regex{Pattern: "^a", Options: "i"}}, {Key: "d", Value: 2.5}}},
		{Key: "b", Value: bson.A{bson.D{{Key: "x", Value: true}, {Key: "y", Value: "s"}}, int64(3)}},
		{Key: "ä", Value: bson.Binary{Subtype: 0, Data: []byte{1, 2}}},
	})
	got, ok := appendCanonicalDoc(nil, mustMarshal(t, in), true, 1)
	if !ok {
		t.Fatal("canonical form failed")
	}
	if string(got) != string(want) {
		t.Fatalf("canonical form\n got %v\nwant %v", bson.Raw(got), bson.Raw(want))
	}
	if err := bson.Raw(got).Validate(); err != nil {
		t.Fatalf("canonical form is not valid BSON: %v", err)
	}
	sum := sha256.Sum256(want)
	if f := Fingerprint(mustMarshal(t, in), true); f != hex.EncodeToString(sum[:]) {
		t.Errorf("Fingerprint = %s, want sha256 of the canonical form %x", f, sum)
	}
}

func TestFingerprintInvalid(t *testing.T) {
	valid := mustMarshal(t, bson.D{{Key: "a", Value: "x"}, {Key: "b", Value: bson.D{{Key: "c", Value: int32(1)}}}})
	hexRE := regexp.MustCompile(`^[0-9a-f]{64}$`)
	for name, b := range map[string][]byte{
		"nil":            nil,
		"empty":          {},
		"cut short":      valid[:len(valid)-3],
		"trailing bytes": append(append([]byte{}, valid...), 0xAA),
		"bad length":     {0xff, 0xff, 0xff, 0x7f, 0x00},
		"unknown type":   {0x0c, 0, 0, 0, 0x42, 'a', 0, 1, 0, 0, 0, 0},
		"no terminator":  {0x0b, 0, 0, 0, 0x0a, 'a', 0, 0x0a, 'b', 0, 0x0a},
		"string no NUL":  {0x0e, 0, 0, 0, 0x02, 'a', 0, 2, 0, 0, 0, 'x', 'y', 0},
	} {
		t.Run(name, func(t *testing.T) {
			f := Fingerprint(b, true)
			sum := sha256.Sum256(b)
			if f != hex.EncodeToString(sum[:]) {
				t.Errorf("Fingerprint(invalid) = %s, want sha256 of the raw bytes", f)
			}
			if !hexRE.MatchString(f) {
				t.Errorf("Fingerprint = %q, not 64 lowercase hex digits", f)
			}
		})
	}
	// Too deep to canonicalise: hashed raw, without panicking.
	deep := bson.D{{Key: "x", Value: int32(1)}}
	for range 250 {
		deep = bson.D{{Key: "d", Value: deep}}
	}
	raw := mustMarshal(t, deep)
	sum := sha256.Sum256(raw)
	if f := Fingerprint(raw, false); f != hex.EncodeToString(sum[:]) {
		t.Errorf("Fingerprint(too deep) = %s, want sha256 of the raw bytes", f)
	}
}

func TestFingerprintStable(t *testing.T) {
	// A fixed document has a fixed fingerprint: this value is stored in
	// dead-letter collections, so a change here breaks deduplication of
	// envelopes written by older versions.
	raw := mustExtJSON(t, `{"_id": {"$oid": "630d093a931191850b40d0a9"}, "name": "Anne", "gpa": 3, "tags": ["a", {"y": 1, "x": 2.0}]}`)
	const want = "7cda6a2dd43e85891dc3a78d0113c481603938d250cb6e27d4fc94a993a738ed"
	if got := Fingerprint(raw, true); got != want {
		t.Errorf("Fingerprint = %s, want %s", got, want)
	}
	canon := mustExtJSON(t, `{"gpa": 3, "name": "Anne", "tags": ["a", {"x": 2.0, "y": 1}]}`)
	if sum := sha256.Sum256(canon); hex.EncodeToString(sum[:]) != want {
		t.Errorf("sha256 of the hand-sorted document = %x, want %s", sum, want)
	}
}
