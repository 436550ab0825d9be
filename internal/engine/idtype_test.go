package engine

import (
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
