package engine

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/writeguard/writeguard/policy"
)

type line struct {
	SKU string `bson:"sku"`
	Qty int32  `bson:"qty"`
}

type lineID struct {
	ID  string `bson:"_id"`
	SKU string `bson:"sku"`
}

// Every document is encoded as bson.Marshal encodes it, into bytes of its
// own (no spare capacity, not overwritten by the next document), with a
// new ObjectID _id first when it has none; the caller's bytes that carry
// an _id are sent in the caller's own box; bad input fails that document
// alone, and the next one is still encoded.
func TestPrepareDocsEncodesOnce(t *testing.T) {
	withID := bson.Raw(mustMarshal(t, bson.D{{Key: "_id", Value: 7}, {Key: "a", Value: "raw"}}))
	noID := mustMarshal(t, bson.D{{Key: "b", Value: true}})
	big := bson.D{{Key: "blob", Value: strings.Repeat("x", policy.MaxBSONSize)}}
	docs := []any{
		line{SKU: "A-1", Qty: 2},                              // 0: struct without _id
		lineID{ID: "k-1", SKU: "B-2"},                         // 1: struct with _id
		bson.D{{Key: "x", Value: 1}, {Key: "_id", Value: 42}}, // 2: _id not first
		withID,                   // 3: caller's bytes with _id
		noID,                     // 4: caller's []byte without _id
		make(chan int),           // 5: cannot be encoded
		line{SKU: "C-3", Qty: 5}, // 6: after the failure
		nil,                      // 7: nil
		bson.Raw{1, 2, 3},        // 8: invalid bytes
		big,                      // 9: too large
		line{SKU: "D-4", Qty: 1}, // 10: after the large one
	}
	e := New(Config{})
	c := e.newCall("insertMany", false, len(docs))
	c.takeDocs(slices.Clone(docs), false) // it clears the entries it has prepared
	c.prepareNext(context.Background(), true)
	its := c.items

	for _, i := range []int{0, 6, 10} {
		it := its[i]
		if !it.idAssigned || it.id.Type != bson.TypeObjectID || it.state != pending {
			t.Fatalf("doc %d: idAssigned %v, id %v, state %s", i, it.idAssigned, it.id, it.state)
		}
		want := mustMarshal(t, docs[i])
		first := it.doc.Index(0)
		if first.Key() != "_id" || !first.Value().Equal(it.id) {
			t.Errorf("doc %d: first element %v, want the _id %v", i, first, it.id)
		}
		if !bytes.Equal(it.doc[4+idElementSize:], want[4:]) {
			t.Errorf("doc %d: %v, want %v after the _id", i, it.doc, bson.Raw(want))
		}
		if len(it.doc) != len(want)+idElementSize || cap(it.doc) != len(it.doc) {
			t.Errorf("doc %d: len %d cap %d, want len %d and no spare capacity", i, len(it.doc), cap(it.doc), len(want)+idElementSize)
		}
		if b := sentBytes(t, Batch{it}.Doc(0)); !bytes.Equal(b, it.doc) || &b[0] != &it.doc[0] {
			t.Errorf("doc %d: the driver is handed %v, want the prepared bytes themselves", i, bson.Raw(b))
		}
	}
	if its[0].id.Equal(its[6].id) {
		t.Error("two documents got the same _id")
	}
	for _, i := range []int{1, 2} {
		it := its[i]
		if want := mustMarshal(t, docs[i]); it.idAssigned || !bytes.Equal(it.doc, want) {
			t.Errorf("doc %d: idAssigned %v, %v, want %v as given", i, it.idAssigned, it.doc, bson.Raw(want))
		}
	}
	if got := its[1].id.StringValue(); got != "k-1" {
		t.Errorf("doc 1: _id %q", got)
	}
	if got := its[2].id.Int32(); got != 42 {
		t.Errorf("doc 2: _id %d", got)
	}
	if it := its[3]; it.idAssigned || &it.doc[0] != &withID[0] || &sentBytes(t, Batch{it}.Doc(0))[0] != &withID[0] {
		t.Errorf("doc 3: the caller's bytes with _id are not sent as given")
	}
	if it := its[4]; !it.idAssigned || it.doc.Lookup("b").Boolean() != true || it.doc.Index(0).Key() != "_id" {
		t.Errorf("doc 4: %v", it.doc)
	}
	var me mongo.MarshalError
	if it := its[5]; it.state != prefailed || !errors.As(it.fail.Err, &me) {
		t.Errorf("doc 5: state %s, failure %v, want a MarshalError", it.state, it.fail)
	}
	if it := its[7]; it.state != prefailed || !errors.Is(it.fail.Err, mongo.ErrNilDocument) {
		t.Errorf("doc 7: state %s, failure %v", it.state, it.fail)
	}
	if it := its[8]; it.state != prefailed || !errors.Is(it.fail.Err, ErrInvalidBSON) {
		t.Errorf("doc 8: state %s, failure %v", it.state, it.fail)
	}
	if it := its[9]; it.state != prefailed || !errors.Is(it.fail.Err, ErrTooLarge) || it.fail.Code != 10334 || it.doc == nil {
		t.Errorf("doc 9: state %s, failure %v, want too large with its bytes kept", it.state, it.fail)
	}
}

// The documents of a large call are spread over bounded chunks, every one
// intact at the end.
func TestPrepareDocsManyDocuments(t *testing.T) {
	const n = 20000 // about 30 bytes each plus the _id: several chunks
	docs := make([]any, n)
	for i := range docs {
		docs[i] = line{SKU: strings.Repeat("s", i%50), Qty: int32(i)}
	}
	c := New(Config{}).newCall("insertMany", false, n)
	c.takeDocs(docs, false)
	c.prepareNext(context.Background(), true)
	for i, it := range c.items {
		if it.doc.Lookup("qty").Int32() != int32(i) || len(it.doc.Lookup("sku").StringValue()) != i%50 {
			t.Fatalf("doc %d: %v", i, it.doc)
		}
		if err := it.doc.Validate(); err != nil {
			t.Fatalf("doc %d: %v", i, err)
		}
	}
}

func mustMarshal(t *testing.T, v any) []byte {
	t.Helper()
	b, err := bson.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// sentBytes returns what the driver's encoder takes from a document Batch.Doc
// hands it: the bytes of its bson.Marshaler.
func sentBytes(t *testing.T, doc any) []byte {
	t.Helper()
	m, ok := doc.(bson.Marshaler)
	if !ok {
		t.Fatalf("Batch.Doc gave %T, want a bson.Marshaler", doc)
	}
	b, err := m.MarshalBSON()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestSendDocNoBox: handing a prepared document to the driver allocates
// nothing (a bson.Raw in an interface would allocate its slice header per
// document), and the driver's encoder reads exactly the prepared bytes.
func TestSendDocNoBox(t *testing.T) {
	it := &item{doc: mustMarshal(t, bson.D{{Key: "_id", Value: int32(1)}, {Key: "a", Value: "x"}})}
	b := Batch{it}
	var sink any
	if n := testing.AllocsPerRun(100, func() { sink = b.Doc(0) }); n != 0 {
		t.Errorf("Batch.Doc allocates %v times per document, want 0", n)
	}
	got, err := bson.Marshal(sink)
	if err != nil || !bytes.Equal(got, it.doc) {
		t.Errorf("bson.Marshal(Batch.Doc) = %v, %v; want %v", bson.Raw(got), err, it.doc)
	}
}

// TestNilTypedInputs: a typed nil pointer document is a nil document (as an
// untyped nil is), named with its type; a typed nil model is an error
// naming its index, not a panic.
func TestNilTypedInputs(t *testing.T) {
	type line struct{ A int }
	e := New(Config{})
	c := e.newCall("insertMany", true, 3)
	c.takeDocs([]any{&line{1}, (*line)(nil), bson.M(nil)}, false)
	c.prepareNext(context.Background(), true)
	if it := c.items[1]; it.state != prefailed || !errors.Is(it.fail.Err, mongo.ErrNilDocument) || !strings.Contains(it.fail.Message, "*engine.line") {
		t.Errorf("typed nil pointer: state %s, failure %+v", it.state, it.fail)
	}
	if it := c.items[0]; it.state != pending {
		t.Errorf("a pointer to a struct: state %s", it.state)
	}
	for _, m := range []mongo.WriteModel{(*mongo.InsertOneModel)(nil), (*mongo.UpdateOneModel)(nil), (*mongo.DeleteManyModel)(nil)} {
		c := e.newCall("bulkWrite", true, 2)
		err := c.prepareModels([]mongo.WriteModel{mongo.NewInsertOneModel().SetDocument(bson.D{}), m})
		if !errors.Is(err, mongo.ErrNilDocument) || !strings.Contains(err.Error(), "index 1") {
			t.Errorf("%T(nil): %v, want an error naming index 1", m, err)
		}
	}
}
