package jsonschema

import (
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// FuzzValidate feeds an arbitrary validator and document (BSON bytes) to
// Compile, Matches and Validate. Nothing may panic; Validate returns nil
// exactly when Matches is true, and an errInfo otherwise. Seeds:
// testdata/fuzz/FuzzValidate and a schema using every array keyword.
func FuzzValidate(f *testing.F) {
	s, _ := bson.Marshal(schema(bson.D{
		{Key: "required", Value: bson.A{"a"}},
		{Key: "properties", Value: bson.D{{Key: "a", Value: bson.D{
			{Key: "bsonType", Value: "array"}, {Key: "uniqueItems", Value: true}, {Key: "maxItems", Value: 5},
			{Key: "items", Value: bson.D{{Key: "enum", Value: bson.A{int32(1), "x", bson.D{{Key: "k", Value: 1.5}}}}}},
		}}}},
		{Key: "patternProperties", Value: bson.D{{Key: "^b", Value: bson.D{{Key: "minimum", Value: 0}, {Key: "pattern", Value: "^[a-z]+$"}}}}},
	}))
	for _, d := range []bson.D{
		{{Key: "_id", Value: int32(1)}, {Key: "a", Value: bson.A{int32(1), 1.0}}},
		{{Key: "a", Value: bson.A{"x", bson.D{{Key: "k", Value: 1.5}}}}, {Key: "b1", Value: "abc"}},
		{{Key: "b", Value: -1}},
	} {
		doc, _ := bson.Marshal(d)
		f.Add(s, doc)
	}
	f.Fuzz(func(t *testing.T, schemaBytes, docBytes []byte) {
		if bson.Raw(schemaBytes).Validate() != nil {
			return
		}
		v, err := Compile(bson.Raw(schemaBytes))
		if err != nil {
			return
		}
		var doc bson.D
		if bson.Unmarshal(docBytes, &doc) != nil {
			return
		}
		m := v.Matches(doc)
		errInfo := v.Validate(doc)
		if m != (errInfo == nil) {
			t.Fatalf("Matches %v but Validate returned %v", m, errInfo)
		}
	})
}

// FuzzEqualKey: for the values of an arbitrary document, taken two by
// two, valuesEqual holds exactly when equalKey gives one key (uniqueItems
// relies on it). Seeds: testdata/fuzz/FuzzEqualKey and numbers of every
// type.
func FuzzEqualKey(f *testing.F) {
	d128, _ := bson.ParseDecimal128("1.0")
	b, _ := bson.Marshal(bson.D{{Key: "a", Value: int32(1)}, {Key: "b", Value: int64(1)}, {Key: "c", Value: 1.0}, {Key: "d", Value: d128},
		{Key: "e", Value: bson.D{{Key: "x", Value: 1}, {Key: "y", Value: bson.A{"s"}}}}, {Key: "f", Value: bson.D{{Key: "y", Value: bson.A{bson.Symbol("s")}}, {Key: "x", Value: 1.0}}}})
	f.Add(b)
	f.Fuzz(func(t *testing.T, raw []byte) {
		var doc bson.D
		if bson.Unmarshal(raw, &doc) != nil || len(doc) > 64 {
			return
		}
		for _, x := range doc {
			for _, y := range doc {
				eq := valuesEqual(x.Value, y.Value)
				same := string(equalKey(nil, x.Value)) == string(equalKey(nil, y.Value))
				if eq != same {
					t.Fatalf("%s=%v and %s=%v: valuesEqual %v, same key %v", x.Key, x.Value, y.Key, y.Value, eq, same)
				}
			}
		}
	})
}
