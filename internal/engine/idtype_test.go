package engine

import (
	"context"
	"io"
	"reflect"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"
)

type idFreeLine struct {
	OrderID string `bson:"order_id"`
	Qty     int32
	hidden  string
}

type idTagged struct {
	ID  string `bson:"_id,omitempty"`
	Qty int32
}

type idInlineMap struct {
	Qty   int32
	Extra map[string]any `bson:",inline"`
}

type idInlineStruct struct {
	Base idFreeLine `bson:",inline"`
	Qty  int32
}

type idInlineWithID struct {
	Base idTagged `bson:",inline"`
}

type idEmbedded struct {
	idFreeLine
}

type idMarshals struct{ Qty int32 }

func (idMarshals) MarshalBSON() ([]byte, error) { return bson.Marshal(bson.D{{Key: "_id", Value: 1}}) }

// idFree answers true only for structs whose default encoding cannot
// hold an _id key, and false at any doubt.
func TestIDFree(t *testing.T) {
	cases := []struct {
		v    any
		want bool
	}{
		{idFreeLine{hidden: "x"}, true},
		{&idFreeLine{}, true},
		{idInlineStruct{}, true},
		{idTagged{}, false},
		{idInlineMap{}, false},
		{idInlineWithID{}, false},
		{idEmbedded{}, false},
		{idMarshals{}, false},
		{&idMarshals{}, false},
		{bson.D{}, false},
		{map[string]any{}, false},
		{bson.Raw{}, false},
	}
	for _, c := range cases {
		if got := idFree(reflect.TypeOf(c.v)); got != c.want {
			t.Errorf("idFree(%T) = %v, want %v", c.v, got, c.want)
		}
	}
}

// The arena gives an idFree document a new _id without looking, and keeps
// a document's own _id: the same bytes as with the lookup.
func TestArenaIDFreeSkipsLookup(t *testing.T) {
	e := defaultEncoders.Get().(*docEncoder)
	defer e.release()
	if !e.types {
		t.Fatal("the default pool's encoder does not know types")
	}
	raw, id, assigned, err := e.encode(idFreeLine{OrderID: "o1", Qty: 2}, 2)
	if err != nil || !assigned || id.Type != bson.TypeObjectID || raw.Lookup("order_id").StringValue() != "o1" {
		t.Fatalf("idFree struct: %v %v %v %v", raw, id, assigned, err)
	}
	raw, id, assigned, err = e.encode(idTagged{ID: "mine", Qty: 1}, 1)
	if err != nil || assigned || id.StringValue() != "mine" || raw.Lookup("_id").StringValue() != "mine" {
		t.Fatalf("struct with _id: %v %v %v %v", raw, id, assigned, err)
	}
}

// A call whose documents are all the caller's own bytes fetches no pooled
// encoder; one with a struct does.
func TestNoEncoderForBytes(t *testing.T) {
	made := 0
	e := New(Config{NewEncoder: func(w io.Writer) *bson.Encoder {
		made++
		return bson.NewEncoder(bson.NewDocumentWriter(w))
	}})
	raw, err := bson.Marshal(bson.D{{Key: "_id", Value: 1}})
	if err != nil {
		t.Fatal(err)
	}
	c := e.newCall("insertMany", true, 2)
	c.takeDocs([]any{bson.Raw(raw), raw}, false)
	c.prepareNext(context.Background(), true)
	if made != 0 || c.items[0].doc == nil || c.items[1].doc == nil {
		t.Fatalf("bytes only: %d encoders made, documents %v %v; want none made and both prepared", made, c.items[0].doc, c.items[1].doc)
	}
	c = e.newCall("insertMany", true, 2)
	c.takeDocs([]any{bson.Raw(raw), idFreeLine{Qty: 1}}, false)
	c.prepareNext(context.Background(), true)
	if made != 1 || c.items[1].doc == nil {
		t.Fatalf("with a struct: %d encoders made, want 1", made)
	}
}
