package jsonschema

import (
	"errors"
	"strings"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"
)

func schema(s bson.D) bson.D { return bson.D{{Key: "$jsonSchema", Value: s}} }

func extJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := bson.MarshalExtJSON(v, false, false)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestCompileRejectsInvalidSchemas(t *testing.T) {
	for _, tc := range []struct {
		schema bson.D
		want   string
	}{
		{bson.D{{Key: "foo", Value: 1}}, "Unknown $jsonSchema keyword: foo"},
		{bson.D{{Key: "$ref", Value: "#"}}, "'$ref' is not currently supported"},
		{bson.D{{Key: "type", Value: "integer"}}, "'integer' is not currently supported"},
		{bson.D{{Key: "type", Value: "object"}, {Key: "bsonType", Value: "object"}}, "both"},
		{bson.D{{Key: "exclusiveMinimum", Value: true}}, "'minimum' must be a present"},
		{bson.D{{Key: "required", Value: bson.A{}}}, "cannot be an empty array"},
		{bson.D{{Key: "enum", Value: bson.A{1, 1.0}}}, "duplicate"},
		{bson.D{{Key: "minLength", Value: -1}}, "non-negative integer"},
		{bson.D{{Key: "multipleOf", Value: 0}}, "positive"},
		{bson.D{{Key: "title", Value: 1}}, "must be of type string"},
	} {
		_, err := Compile(schema(tc.schema))
		if err == nil || !strings.Contains(err.Error(), tc.want) || errors.Is(err, ErrUnsupported) {
			t.Errorf("Compile(%v) = %v, want an error containing %q", tc.schema, err, tc.want)
		}
	}
	if _, err := Compile(nil); err == nil {
		t.Error("Compile(nil) succeeded")
	}
}

func TestUnsupportedListsEveryFeature(t *testing.T) {
	got, err := Unsupported(bson.D{{Key: "$jsonSchema", Value: bson.D{
		{Key: "properties", Value: bson.D{
			{Key: "a", Value: bson.D{{Key: "encrypt", Value: bson.D{}}}},
			{Key: "b", Value: bson.D{{Key: "pattern", Value: "(?=x)"}}},
		}},
	}}})
	if err != nil || len(got) != 2 || got[0] != "encrypt" || !strings.Contains(got[1], "pattern") {
		t.Errorf("Unsupported = %q, %v", got, err)
	}
	got, err = Unsupported(bson.D{{Key: "$and", Value: bson.A{
		bson.D{{Key: "$jsonSchema", Value: bson.D{}}},
		bson.D{{Key: "a", Value: bson.D{{Key: "$gt", Value: 1}}}},
	}}})
	if err != nil || len(got) != 1 || !strings.Contains(got[0], `"a"`) {
		t.Errorf("Unsupported = %q, %v", got, err)
	}
	if got, err := Unsupported(schema(bson.D{{Key: "required", Value: bson.A{"a"}}})); err != nil || got != nil {
		t.Errorf("a supported validator: %q, %v", got, err)
	}
	_, err = Compile(bson.D{{Key: "$expr", Value: bson.D{}}})
	if !errors.Is(err, ErrUnsupported) {
		t.Errorf("Compile($expr) = %v, want ErrUnsupported", err)
	}
}

func TestMatches(t *testing.T) {
	v, err := Compile(schema(bson.D{
		{Key: "required", Value: bson.A{"name"}},
		{Key: "additionalProperties", Value: false},
		{Key: "properties", Value: bson.D{
			{Key: "_id", Value: bson.D{}},
			{Key: "name", Value: bson.D{{Key: "bsonType", Value: "string"}, {Key: "minLength", Value: 2}, {Key: "pattern", Value: "^[a-z]+$"}}},
			{Key: "n", Value: bson.D{{Key: "type", Value: "number"}, {Key: "minimum", Value: 0}, {Key: "exclusiveMinimum", Value: true}, {Key: "multipleOf", Value: 0.1}}},
			{Key: "tags", Value: bson.D{{Key: "type", Value: "array"}, {Key: "uniqueItems", Value: true}, {Key: "items", Value: bson.D{{Key: "enum", Value: bson.A{"a", "b", bson.D{{Key: "x", Value: 1}, {Key: "y", Value: 2}}}}}}}},
		}},
	}))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		doc  bson.D
		want bool
	}{
		{bson.D{{Key: "_id", Value: 1}, {Key: "name", Value: "ab"}}, true},
		{bson.D{{Key: "_id", Value: 1}, {Key: "name", Value: "a"}}, false},
		{bson.D{{Key: "_id", Value: 1}, {Key: "name", Value: "AB"}}, false},
		{bson.D{{Key: "_id", Value: 1}}, false},
		{bson.D{{Key: "_id", Value: 1}, {Key: "name", Value: "ab"}, {Key: "extra", Value: 1}}, false},
		{bson.D{{Key: "_id", Value: 1}, {Key: "name", Value: "ab"}, {Key: "n", Value: 0.3}}, true},
		{bson.D{{Key: "_id", Value: 1}, {Key: "name", Value: "ab"}, {Key: "n", Value: 0.35}}, false},
		{bson.D{{Key: "_id", Value: 1}, {Key: "name", Value: "ab"}, {Key: "n", Value: int32(0)}}, false},
		{bson.D{{Key: "_id", Value: 1}, {Key: "name", Value: "ab"}, {Key: "tags", Value: bson.A{"a", bson.D{{Key: "y", Value: 2}, {Key: "x", Value: 1.0}}}}}, true},
		{bson.D{{Key: "_id", Value: 1}, {Key: "name", Value: "ab"}, {Key: "tags", Value: bson.A{"a", "a"}}}, false},
		{bson.D{{Key: "_id", Value: 1}, {Key: "name", Value: "ab"}, {Key: "tags", Value: bson.A{"c"}}}, false},
	} {
		if got := v.Matches(tc.doc); got != tc.want {
			t.Errorf("Matches(%v) = %v, want %v", tc.doc, got, tc.want)
		}
		if got := v.Validate(tc.doc) == nil; got != tc.want {
			t.Errorf("Validate(%v) passed = %v, want %v", tc.doc, got, tc.want)
		}
	}
}

// TestShapesReadFromServerSource covers error shapes the corpus has no
// example of; the expected output follows doc_validation_error.cpp.
func TestShapesReadFromServerSource(t *testing.T) {
	for _, tc := range []struct {
		name   string
		schema bson.D
		doc    bson.D
		want   string
	}{
		{
			"oneOf with several matching subschemas",
			bson.D{{Key: "properties", Value: bson.D{{Key: "a", Value: bson.D{{Key: "oneOf", Value: bson.A{
				bson.D{{Key: "minimum", Value: 1}}, bson.D{{Key: "maximum", Value: 9}},
			}}}}}}},
			bson.D{{Key: "_id", Value: 1}, {Key: "a", Value: 5}},
			`{"failingDocumentId":1,"details":{"operatorName":"$jsonSchema","schemaRulesNotSatisfied":[{"operatorName":"properties","propertiesNotSatisfied":[{"propertyName":"a","details":[{"operatorName":"oneOf","reason":"more than one subschema matched","matchingSchemaIndexes":[0,1]}]}]}]}}`,
		},
		{
			"additionalItems false",
			bson.D{{Key: "properties", Value: bson.D{{Key: "a", Value: bson.D{
				{Key: "items", Value: bson.A{bson.D{}}}, {Key: "additionalItems", Value: false},
			}}}}},
			bson.D{{Key: "_id", Value: 1}, {Key: "a", Value: bson.A{1, 2, 3}}},
			`{"failingDocumentId":1,"details":{"operatorName":"$jsonSchema","schemaRulesNotSatisfied":[{"operatorName":"properties","propertiesNotSatisfied":[{"propertyName":"a","details":[{"operatorName":"additionalItems","specifiedAs":{"additionalItems":false},"reason":"found additional items","additionalItems":[2,3]}]}]}]}}`,
		},
		{
			"top-level type other than object",
			bson.D{{Key: "bsonType", Value: "array"}},
			bson.D{{Key: "_id", Value: 1}},
			`{"failingDocumentId":1,"details":{"operatorName":"$jsonSchema","specifiedAs":{"$jsonSchema":{"bsonType":"array"}},"reason":"expression always evaluates to false"}}`,
		},
		{
			"schema dependency",
			bson.D{{Key: "dependencies", Value: bson.D{{Key: "a", Value: bson.D{{Key: "required", Value: bson.A{"b"}}}}}}},
			bson.D{{Key: "_id", Value: 1}, {Key: "a", Value: 1}},
			`{"failingDocumentId":1,"details":{"operatorName":"$jsonSchema","schemaRulesNotSatisfied":[{"operatorName":"dependencies","failingDependencies":[{"conditionalProperty":"a","details":[{"operatorName":"required","specifiedAs":{"required":["b"]},"missingProperties":["b"]}]}]}]}}`,
		},
	} {
		v, err := Compile(schema(tc.schema))
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if got := extJSON(t, v.Validate(tc.doc)); got != tc.want {
			t.Errorf("%s:\n got %s\nwant %s", tc.name, got, tc.want)
		}
	}
}

func TestWithID(t *testing.T) {
	d := bson.D{{Key: "a", Value: 1}}
	got := WithID(d)
	if len(got) != 2 || got[0].Key != "_id" || len(d) != 1 {
		t.Fatalf("WithID = %v (input now %v)", got, d)
	}
	if _, ok := got[0].Value.(bson.ObjectID); !ok {
		t.Errorf("generated _id is %T", got[0].Value)
	}
	withID := bson.D{{Key: "a", Value: 1}, {Key: "_id", Value: 2}}
	if got := WithID(withID); len(got) != 2 || got[1].Value != 2 {
		t.Errorf("WithID changed a document that has an _id: %v", got)
	}
}

func TestDeeplyNestedErrorIsTruncated(t *testing.T) {
	inner := bson.D{{Key: "minimum", Value: 1}}
	doc := any(0)
	for i := 0; i < 100; i++ {
		inner = bson.D{{Key: "properties", Value: bson.D{{Key: "a", Value: inner}}}}
		doc = bson.D{{Key: "a", Value: doc}}
	}
	v, err := Compile(schema(inner))
	if err != nil {
		t.Fatal(err)
	}
	got := extJSON(t, v.Validate(append(bson.D{{Key: "_id", Value: 1}}, doc.(bson.D)...)))
	if want := `{"reason":"generated error was too deeply nested","truncated":true}`; got != want {
		t.Errorf("got %s, want %s", got, want)
	}
}
