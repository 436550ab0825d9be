package jsonschema

import (
	"fmt"
	"strings"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// size16MiB is the server's document size limit (BSONObjMaxUserSize).
const size16MiB = 16 * 1024 * 1024

// bigDocument returns a document of about 16 MiB (less 64 KiB) whose
// field "a" is an array of elements made by elem, and its size.
func bigDocument(b *testing.B, elem func(i int) any) (bson.D, int) {
	b.Helper()
	// Measure one element to know how many fit.
	_, val, err := bson.MarshalValue(elem(1234567))
	if err != nil {
		b.Fatal(err)
	}
	per := 1 + 8 + len(val) // type byte, index key ("1234567\x00"), value
	n := (size16MiB - 64*1024) / per
	a := make(bson.A, n)
	for i := range a {
		a[i] = elem(i)
	}
	doc := bson.D{{Key: "_id", Value: int32(1)}, {Key: "a", Value: a}}
	raw, err := bson.Marshal(doc)
	if err != nil {
		b.Fatal(err)
	}
	if len(raw) > size16MiB {
		b.Fatalf("document of %d bytes over 16 MiB", len(raw))
	}
	return doc, len(raw)
}

// BenchmarkValidate16MiB: the emulator's cost on a 16 MiB document, for
// the keywords that look at every element of an array: uniqueItems
// (integers, strings, embedded documents), items with pattern and
// bsonType, and enum. Each sub-benchmark reports the document's bytes per
// second (matching, then the errInfo of a document failing at its last
// element). Before uniqueItems was keyed, 40,000 elements took 19 s; a
// 16 MiB array holds over a million.
func BenchmarkValidate16MiB(b *testing.B) {
	unique := schema(bson.D{{Key: "properties", Value: bson.D{{Key: "a", Value: bson.D{{Key: "uniqueItems", Value: true}}}}}})
	items := schema(bson.D{{Key: "properties", Value: bson.D{{Key: "a", Value: bson.D{{Key: "items", Value: bson.D{
		{Key: "bsonType", Value: "string"}, {Key: "pattern", Value: "^s[0-9]+$"}, {Key: "maxLength", Value: 20}}}}}}}})
	enum := schema(bson.D{{Key: "properties", Value: bson.D{{Key: "a", Value: bson.D{{Key: "items", Value: bson.D{
		{Key: "enum", Value: bson.A{int32(0), int32(1), int32(2), int32(3)}}}}}}}}})
	for _, c := range []struct {
		name   string
		schema bson.D
		elem   func(i int) any
		bad    any
	}{
		{"uniqueItems/int32", unique, func(i int) any { return int32(i) }, 7.0},
		{"uniqueItems/string", unique, func(i int) any { return fmt.Sprintf("s%07d", i) }, "s0000007"},
		{"uniqueItems/document", unique, func(i int) any { return bson.D{{Key: "k", Value: int32(i)}, {Key: "s", Value: "x"}} },
			bson.D{{Key: "s", Value: "x"}, {Key: "k", Value: int64(7)}}},
		{"items_pattern", items, func(i int) any { return fmt.Sprintf("s%07d", i) }, "t" + strings.Repeat("0", 7)},
		{"enum", enum, func(i int) any { return int32(i % 4) }, int32(9)},
	} {
		v, err := Compile(c.schema)
		if err != nil {
			b.Fatal(err)
		}
		doc, size := bigDocument(b, c.elem)
		a := doc[1].Value.(bson.A)
		b.Run(c.name+"/match", func(b *testing.B) {
			b.SetBytes(int64(size))
			b.ReportMetric(float64(len(a)), "elements")
			for b.Loop() {
				if !v.Matches(doc) {
					b.Fatal("the document does not match")
				}
			}
		})
		bad := append(bson.A(nil), a...)
		bad[len(bad)-1] = c.bad
		badDoc := bson.D{doc[0], {Key: "a", Value: bad}}
		b.Run(c.name+"/errinfo", func(b *testing.B) {
			b.SetBytes(int64(size))
			for b.Loop() {
				if v.Validate(badDoc) == nil {
					b.Fatal("the failing document passes")
				}
			}
		})
	}
}
