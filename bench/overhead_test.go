package bench

import (
	"bytes"
	"context"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/writeguard/writeguard"
)

// A floor is what a raw *mongo.Collection is handed in an overhead case:
//
//   - floorPlain ("raw"): the caller's order lines, without _id (the
//     driver appends a new ObjectID: the cheapest path);
//   - floorStructID ("raw-struct-id"): order lines whose struct already
//     carries an ObjectID _id, as any approach that assigns _ids before
//     the first attempt must hand them (the driver's ensureID then decodes
//     the _id reflectively);
//   - floorPrepared ("raw-prepared"): exactly the bytes writeguard hands
//     the driver, a bson.Raw with a new ObjectID _id first (the driver
//     then also re-copies each document element by element).
//
// The guarded path is handed the plain order lines ("guarded") and the
// order lines with their ObjectID _id ("guarded-id", against
// raw-struct-id: the same input on both sides).
type floor int

const (
	floorPlain floor = iota
	floorStructID
	floorPrepared
)

// variants are the sub-benchmarks of every overhead case, in the order
// benchstat shows them: the three floors, then the guarded collection
// handed plain order lines and order lines with their _id.
var variants = []struct {
	name  string
	floor floor
	guard bool
}{
	{"raw", floorPlain, false},
	{"raw-struct-id", floorStructID, false},
	{"raw-prepared", floorPrepared, false},
	{"guarded", floorPlain, true},
	{"guarded-id", floorStructID, true},
}

// An overhead case is one write: op returns the function that performs it
// once on c, with documents of floor f.
type overheadCase struct {
	name string // the benchmark's name without "BenchmarkOverhead"
	docs int    // documents (or models) per operation
	op   func(tb testing.TB, c writeguard.Collection, f floor) func(ctx context.Context) error
}

var overheadCases = []overheadCase{
	{"InsertOne", 1, insertOneOp},
	{"InsertMany10", 10, insertManyOp(10)},
	{"InsertMany100", 100, insertManyOp(100)},
	{"InsertMany1000", 1000, insertManyOp(1000)},
	{"BulkWrite100", 100, bulkWriteOp},
}

// floorDocs returns order lines first..first+n-1 as floor f hands them to
// the driver, and the function to call before each operation: on the
// embedded server the same _id cannot be inserted twice, so it gives the
// documents new _ids (100 ObjectIDs take about 2 µs, inside the measured
// loop); on the null backend, which stores nothing, it does nothing.
func floorDocs(tb testing.TB, f floor, first, n int) ([]any, func()) {
	docs := make([]any, n)
	for i := range docs {
		switch f {
		case floorPlain:
			docs[i] = newOrderLine(first + i)
		case floorStructID:
			docs[i] = orderLineID{ID: bson.NewObjectID(), Line: newOrderLine(first + i)}
		case floorPrepared:
			docs[i] = prepareLikeWriteguard(tb, newOrderLine(first+i))
		}
	}
	if f == floorPlain || backendName() == "null" {
		return docs, func() {}
	}
	return docs, func() {
		for i, d := range docs {
			switch x := d.(type) {
			case orderLineID:
				x.ID = bson.NewObjectID()
				docs[i] = x
			case bson.Raw:
				oid := bson.NewObjectID()
				copy(x[9:21], oid[:]) // the _id's value: writeguard puts it first
			}
		}
	}
}

func insertOneOp(tb testing.TB, c writeguard.Collection, f floor) func(context.Context) error {
	docs, refresh := floorDocs(tb, f, 1, 1)
	return func(ctx context.Context) error {
		refresh()
		_, err := c.InsertOne(ctx, docs[0])
		return err
	}
}

func insertManyOp(n int) func(testing.TB, writeguard.Collection, floor) func(context.Context) error {
	return func(tb testing.TB, c writeguard.Collection, f floor) func(context.Context) error {
		docs, refresh := floorDocs(tb, f, 0, n)
		return func(ctx context.Context) error {
			refresh()
			_, err := c.InsertMany(ctx, docs)
			return err
		}
	}
}

func bulkWriteOp(tb testing.TB, c writeguard.Collection, f floor) func(context.Context) error {
	docs, refresh := floorDocs(tb, f, 0, 40)
	models := bulkModels(docs)
	return func(ctx context.Context) error {
		refresh()
		for i, d := range docs {
			models[i].(*mongo.InsertOneModel).Document = d
		}
		_, err := c.BulkWrite(ctx, models)
		return err
	}
}

// run benchmarks the case on c with documents of floor f.
func (oc overheadCase) run(b *testing.B, c writeguard.Collection, f floor) {
	ctx := context.Background()
	op := oc.op(b, c, f)
	b.ReportAllocs()
	for b.Loop() {
		if err := op(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

// bulkModels returns 100 models, in the order an application that syncs
// an order would send them: 40 inserts of new lines (inserts, order lines
// 0 to 39 as a floor hands them), 20 updateOne $set on lines of the same
// order, 40 deleteOne of those lines. The collection is left as it was (on
// the embedded server, where every update and delete scans the
// collection, it stays small), and the ordered bulk goes out as three
// commands, insert, update and delete, for raw and guarded alike.
func bulkModels(inserts []any) []mongo.WriteModel {
	ms := make([]mongo.WriteModel, 0, 100)
	for _, d := range inserts {
		ms = append(ms, mongo.NewInsertOneModel().SetDocument(d))
	}
	for i := range 20 {
		l := newOrderLine(2 * i)
		ms = append(ms, mongo.NewUpdateOneModel().
			SetFilter(bson.D{{Key: "order_id", Value: l.OrderID}, {Key: "line", Value: l.Line}}).
			SetUpdate(bson.D{{Key: "$set", Value: bson.D{{Key: "qty", Value: l.Qty + 1}, {Key: "warehouse", Value: "DE-HAM-1"}}}}))
	}
	for i := range 40 {
		l := newOrderLine(i)
		ms = append(ms, mongo.NewDeleteOneModel().
			SetFilter(bson.D{{Key: "order_id", Value: l.OrderID}, {Key: "line", Value: l.Line}}))
	}
	return ms
}

// pair returns the raw collection and its guarded wrapper (default
// options: no hooks, no sink) on a freshly dropped collection.
func pair(tb testing.TB, name string) (*mongo.Collection, *writeguard.Guarded) {
	tb.Helper()
	coll := freshCollection(tb, overheadClient(tb), "overhead_"+name)
	g, err := writeguard.Wrap(coll)
	if err != nil {
		tb.Fatal(err)
	}
	return coll, g
}

func runOverhead(b *testing.B, name string) {
	for _, oc := range overheadCases {
		if oc.name != name {
			continue
		}
		raw, g := pair(b, oc.name)
		for _, v := range variants {
			var c writeguard.Collection = raw
			if v.guard {
				c = g
			}
			b.Run(v.name, func(b *testing.B) { oc.run(b, c, v.floor) })
		}
		return
	}
	b.Fatalf("no overhead case %q", name)
}

// BenchmarkOverhead<case>/{raw,raw-struct-id,raw-prepared,guarded,
// guarded-id}: the guarded collection against the raw one on the three
// floors (see floor). Their allocation counts are exact; their times are
// wall-clock and do not resolve on a loaded machine: the ratios are
// BenchmarkThreadCPU's (thread CPU per call, variants shuffled call by
// call, an A/A pair beside them). They are what the CPU and allocation
// profiles of a guarded call are taken from.
func BenchmarkOverheadInsertOne(b *testing.B)      { runOverhead(b, "InsertOne") }
func BenchmarkOverheadInsertMany10(b *testing.B)   { runOverhead(b, "InsertMany10") }
func BenchmarkOverheadInsertMany100(b *testing.B)  { runOverhead(b, "InsertMany100") }
func BenchmarkOverheadInsertMany1000(b *testing.B) { runOverhead(b, "InsertMany1000") }
func BenchmarkOverheadBulkWrite100(b *testing.B)   { runOverhead(b, "BulkWrite100") }

// BenchmarkDriverDocPath takes apart, per document, what the driver does
// with what each path hands it, to show where the guarded path's extra
// cost lies (see the README):
//
//   - raw-driver: the driver's marshal of the caller's struct (an Encoder
//     on a DocumentWriter, as mongo.marshal does) and its ensureID, which
//     prepends a new ObjectID _id to a document without one;
//   - guarded-prepare: writeguard's prepare (bson.Marshal,
//     LookupErr("_id"), copy with a new ObjectID _id first);
//   - guarded-driver-marshal: the driver's marshal of that bson.Raw
//     (copied element by element through the Encoder: mongo.marshal has
//     no fast path for a ready-made document);
//   - guarded-driver-ensureID: the driver's ensureID on it, which finds
//     the _id and decodes it with a reflective Decoder over a
//     bufio.Reader (mongo/mongo.go ensureID, getDecoder).
//
// raw ≈ raw-driver; guarded ≈ guarded-prepare + guarded-driver-marshal +
// guarded-driver-ensureID.
func BenchmarkDriverDocPath(b *testing.B) {
	var doc any = newOrderLine(1)
	b.Run("raw-driver", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			enc := driverMarshal(b, doc)
			out := make([]byte, 0, len(enc)+17)
			out = append(out, 0, 0, 0, 0, byte(bson.TypeObjectID), '_', 'i', 'd', 0)
			oid := bson.NewObjectID()
			out = append(out, oid[:]...)
			out = append(out, enc[4:]...)
			sinkRaw = out
		}
	})
	b.Run("guarded-prepare", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			sinkRaw = prepareLikeWriteguard(b, doc)
		}
	})
	prepared := prepareLikeWriteguard(b, doc)
	b.Run("guarded-driver-marshal", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			sinkRaw = driverMarshal(b, prepared)
		}
	})
	b.Run("guarded-driver-ensureID", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := prepared.LookupErr("_id"); err != nil {
				b.Fatal(err)
			}
			var id struct {
				ID any `bson:"_id"`
			}
			if err := bson.NewDecoder(bson.NewDocumentReader(bytes.NewReader(prepared))).Decode(&id); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// sinkRaw keeps benchmark results alive.
var sinkRaw bson.Raw

// driverMarshal is mongo.marshal: an Encoder on a DocumentWriter.
func driverMarshal(tb testing.TB, v any) bson.Raw {
	buf := new(bytes.Buffer)
	if err := bson.NewEncoder(bson.NewDocumentWriter(buf)).Encode(v); err != nil {
		tb.Fatal(err)
	}
	return buf.Bytes()
}

// prepareLikeWriteguard is writeguard's prepare (engine.go) for a
// document without _id: bson.Marshal, then a copy with a new ObjectID _id
// first (writeguard validates only bytes the caller hands it, not its own
// bson.Marshal output).
func prepareLikeWriteguard(tb testing.TB, doc any) bson.Raw {
	raw, err := bson.Marshal(doc)
	if err != nil {
		tb.Fatal(err)
	}
	if _, err := bson.Raw(raw).LookupErr("_id"); err == nil {
		return raw
	}
	oid := bson.NewObjectID()
	out := make([]byte, 0, len(raw)+17)
	out = append(out, 0, 0, 0, 0, byte(bson.TypeObjectID), '_', 'i', 'd', 0)
	out = append(out, oid[:]...)
	out = append(out, raw[4:]...)
	n := int32(len(out))
	out[0], out[1], out[2], out[3] = byte(n), byte(n>>8), byte(n>>16), byte(n>>24)
	return out
}

// orderLineID is an order line whose caller assigns the _id.
type orderLineID struct {
	ID   bson.ObjectID `bson:"_id"`
	Line orderLine     `bson:",inline"`
}

// BenchmarkPrepare100 measures two ways to give 100 order lines their
// prepared form (bson.Marshal, then a new ObjectID _id first):
//
//   - per-document: what writeguard's prepare does today, a copy of each
//     marshalled document with the _id prepended (2 allocations per
//     document);
//   - slab: the same bytes, the copies made into one slab per call (1
//     allocation per document, the marshal's, and 2 per call).
//
// Encoding straight into a buffer with room for the _id through the
// public API (bson.NewEncoder(bson.NewDocumentWriter(buf))) is not a
// third way: it costs 10 allocations per document, the encoder and writer
// that bson.Marshal takes from its pools.
func BenchmarkPrepare100(b *testing.B) {
	docs := orderLines(0, 100)
	b.Run("per-document", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			for _, d := range docs {
				sinkRaw = prepareLikeWriteguard(b, d)
			}
		}
	})
	b.Run("slab", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			raws := make([][]byte, len(docs))
			total := 0
			for i, d := range docs {
				r, err := bson.Marshal(d)
				if err != nil {
					b.Fatal(err)
				}
				raws[i] = r
				total += len(r) + 17
			}
			slab := make([]byte, 0, total)
			for _, r := range raws {
				start := len(slab)
				oid := bson.NewObjectID()
				slab = append(slab, 0, 0, 0, 0, byte(bson.TypeObjectID), '_', 'i', 'd', 0)
				slab = append(slab, oid[:]...)
				slab = append(slab, r[4:]...)
				n := int32(len(slab) - start)
				slab[start], slab[start+1], slab[start+2], slab[start+3] = byte(n), byte(n>>8), byte(n>>16), byte(n>>24)
				sinkRaw = slab[start:len(slab):len(slab)]
			}
		}
	})
}
