package readback_test

import (
	"context"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/writeguard/writeguard/internal/readback"
	"github.com/writeguard/writeguard/mocks"
)

// ByID reads the documents of the listed _ids in one find and keys them
// by Key, which keeps _ids of different BSON types apart.
func TestByID(t *testing.T) {
	fake := mocks.NewFake("db.c")
	if err := fake.Seed(
		bson.D{{Key: "_id", Value: int32(1)}, {Key: "v", Value: "int32"}},
		bson.D{{Key: "_id", Value: "1"}, {Key: "v", Value: "string"}},
		bson.D{{Key: "_id", Value: int32(2)}, {Key: "v", Value: "other"}},
	); err != nil {
		t.Fatal(err)
	}
	id := func(v any) bson.RawValue {
		raw, err := bson.Marshal(bson.D{{Key: "v", Value: v}})
		if err != nil {
			t.Fatal(err)
		}
		return bson.Raw(raw).Lookup("v")
	}
	got, err := readback.ByID(context.Background(), fake, bson.A{int32(1), "1", int32(3)})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 {
		t.Fatalf("%d documents, want 2 (_id 1 as int32 and as string)", len(got))
	}
	if d, ok := got[readback.Key(id(int32(1)))]; !ok || d.Lookup("v").StringValue() != "int32" {
		t.Errorf("int32 _id 1: %v", d)
	}
	if d, ok := got[readback.Key(id("1"))]; !ok || d.Lookup("v").StringValue() != "string" {
		t.Errorf("string _id \"1\": %v", d)
	}
	if f := readback.Filter(bson.A{int32(1)}); len(f) != 1 || f[0].Key != "_id" {
		t.Errorf("Filter = %v", f)
	}
}
