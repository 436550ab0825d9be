package readback_test

import (
	"context"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

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

type countingFinder struct {
	readback.Finder
	finds int
}

func (c *countingFinder) Find(ctx context.Context, filter any, opts ...options.Lister[options.FindOptions]) (*mongo.Cursor, error) {
	c.finds++
	return c.Finder.Find(ctx, filter, opts...)
}

// More _ids than a chunk take one query per chunk, and every document
// comes back.
func TestByIDChunks(t *testing.T) {
	fake := mocks.NewFake("db.c")
	var ids bson.A
	for i := range int32(250) {
		if err := fake.Seed(bson.D{{Key: "_id", Value: i}}); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, i)
	}
	f := &countingFinder{Finder: fake}
	got, err := readback.ByID(context.Background(), f, ids)
	if err != nil || len(got) != 250 || f.finds != 3 {
		t.Fatalf("%d documents in %d finds (err %v), want 250 in 3", len(got), f.finds, err)
	}
}

// PrimaryReads reads through a Finder's ReadPrimary view when it has one
// (a lagging secondary would read the last writes as absent), and reads
// any other Finder as it is.
func TestPrimaryReads(t *testing.T) {
	ctx := context.Background()
	fake := mocks.NewFake("db.c").Lag(1)
	if err := fake.Seed(bson.D{{Key: "_id", Value: int32(1)}}); err != nil {
		t.Fatal(err)
	}
	raw, _ := bson.Marshal(bson.D{{Key: "v", Value: int32(1)}})
	ids := bson.A{bson.Raw(raw).Lookup("v")}
	got, err := readback.ByID(ctx, readback.PrimaryReads(fake), ids)
	if err != nil || len(got) != 1 {
		t.Fatalf("through PrimaryReads: %d documents, err %v; want the lagging write", len(got), err)
	}
	if primary, other := fake.Reads(); primary != 1 || other != 0 {
		t.Errorf("reads: %d primary, %d other; want 1 and 0", primary, other)
	}
	plain := struct{ readback.Finder }{fake} // no ReadPrimary: read as it is
	if got, err := readback.ByID(ctx, readback.PrimaryReads(plain), ids); err != nil || len(got) != 0 {
		t.Errorf("without ReadPrimary: %d documents, err %v; want the secondary's view (none)", len(got), err)
	}
}
