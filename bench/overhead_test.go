package bench

import (
	"bytes"
	"context"
	"flag"
	"runtime"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/writeguard/writeguard"
)

// An overhead case is one write, raw or guarded: op returns the function
// that performs it once on c.
type overheadCase struct {
	name string // the benchmark's name without "BenchmarkOverhead"
	docs int    // documents (or models) per operation
	op   func(c writeguard.Collection) func(ctx context.Context) error
}

var overheadCases = []overheadCase{
	{"InsertOne", 1, insertOneOp},
	{"InsertMany10", 10, insertManyOp(10)},
	{"InsertMany100", 100, insertManyOp(100)},
	{"InsertMany1000", 1000, insertManyOp(1000)},
	{"BulkWrite100", 100, bulkWriteOp},
}

func insertOneOp(c writeguard.Collection) func(context.Context) error {
	var doc any = newOrderLine(1)
	return func(ctx context.Context) error {
		_, err := c.InsertOne(ctx, doc)
		return err
	}
}

func insertManyOp(n int) func(writeguard.Collection) func(context.Context) error {
	return func(c writeguard.Collection) func(context.Context) error {
		docs := orderLines(0, n)
		return func(ctx context.Context) error {
			_, err := c.InsertMany(ctx, docs)
			return err
		}
	}
}

func bulkWriteOp(c writeguard.Collection) func(context.Context) error {
	models := bulkModels()
	return func(ctx context.Context) error {
		_, err := c.BulkWrite(ctx, models)
		return err
	}
}

// run benchmarks the case on c.
func (oc overheadCase) run(b *testing.B, c writeguard.Collection) {
	ctx := context.Background()
	op := oc.op(c)
	b.ReportAllocs()
	for b.Loop() {
		if err := op(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

// bulkModels returns 100 models, in the order an application that syncs
// an order would send them: 40 inserts of new lines, 20 updateOne $set on
// lines of the same order, 40 deleteOne of those lines. The collection is
// left as it was (on the embedded server, where every update and delete
// scans the collection, it stays small), and the ordered bulk goes out as
// three commands, insert, update and delete, for raw and guarded alike.
func bulkModels() []mongo.WriteModel {
	ms := make([]mongo.WriteModel, 0, 100)
	for i := range 40 {
		ms = append(ms, mongo.NewInsertOneModel().SetDocument(newOrderLine(i)))
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
		b.Run("raw", func(b *testing.B) { oc.run(b, raw) })
		b.Run("guarded", func(b *testing.B) { oc.run(b, g) })
		return
	}
	b.Fatalf("no overhead case %q", name)
}

func BenchmarkOverheadInsertOne(b *testing.B)      { runOverhead(b, "InsertOne") }
func BenchmarkOverheadInsertMany10(b *testing.B)   { runOverhead(b, "InsertMany10") }
func BenchmarkOverheadInsertMany100(b *testing.B)  { runOverhead(b, "InsertMany100") }
func BenchmarkOverheadInsertMany1000(b *testing.B) { runOverhead(b, "InsertMany1000") }
func BenchmarkOverheadBulkWrite100(b *testing.B)   { runOverhead(b, "BulkWrite100") }

// BenchmarkOverheadRatio measures every overhead case raw and guarded in
// this process, interleaved (raw, guarded, raw, guarded; the faster run of
// each counts), and reports per case:
//
//   - <case>-guarded/raw: guarded ns/op ÷ raw ns/op (goal ≤ 1.05);
//   - <case>-dallocs/doc: (guarded − raw) allocs/op per document (goal ≤ 1);
//   - <case>-dns/doc: (guarded − raw) ns/op per document;
//   - <case>-dB/doc: (guarded − raw) B/op per document.
//
// testing.Benchmark cannot be called from a running benchmark (it waits
// for the lock the running benchmark holds), so measure does what it
// does: run the operation, growing the count, until a run lasts at least
// -benchtime (1 s when -benchtime is a count), and reads the allocation
// counters around the last run. One iteration takes about 20 ×
// -benchtime, so it runs once per -count; its own ns/op, B/op and
// allocs/op are reported as 0.
func BenchmarkOverheadRatio(b *testing.B) {
	minTime := time.Second
	if f := flag.Lookup("test.benchtime"); f != nil {
		if d, err := time.ParseDuration(f.Value.String()); err == nil && d > 0 {
			minTime = d
		}
	}
	for b.Loop() {
		for _, oc := range overheadCases {
			raw, g := pair(b, oc.name)
			rawOp, gOp := oc.op(raw), oc.op(g)
			r := measure(b, rawOp, minTime)
			gd := measure(b, gOp, minTime)
			r = r.best(measure(b, rawOp, minTime))
			gd = gd.best(measure(b, gOp, minTime))
			d := float64(oc.docs)
			b.ReportMetric(gd.ns/r.ns, oc.name+"-guarded/raw")
			b.ReportMetric((gd.allocs-r.allocs)/d, oc.name+"-dallocs/doc")
			b.ReportMetric((gd.ns-r.ns)/d, oc.name+"-dns/doc")
			b.ReportMetric((gd.bytes-r.bytes)/d, oc.name+"-dB/doc")
			b.Logf("%-15s raw %10.0f ns/op %7.0f allocs/op | guarded %10.0f ns/op %7.0f allocs/op | ratio %.3f, %+.2f allocs/doc",
				oc.name, r.ns, r.allocs, gd.ns, gd.allocs, gd.ns/r.ns, (gd.allocs-r.allocs)/d)
		}
	}
	// The loop's own time and allocations (the measurements) mean nothing.
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(0, "B/op")
	b.ReportMetric(0, "allocs/op")
}

// opCost is the per-operation cost of one measurement.
type opCost struct{ ns, allocs, bytes float64 }

func (a opCost) best(b opCost) opCost {
	if b.ns < a.ns {
		return b
	}
	return a
}

// measure runs op n times, growing n as testing does, until a run lasts
// minTime, and returns that run's cost per operation.
func measure(tb testing.TB, op func(context.Context) error, minTime time.Duration) opCost {
	tb.Helper()
	ctx := context.Background()
	if err := op(ctx); err != nil { // warm up: connections, caches
		tb.Fatal(err)
	}
	var before, after runtime.MemStats
	for n := 1; ; {
		runtime.GC()
		runtime.ReadMemStats(&before)
		t0 := time.Now()
		for range n {
			if err := op(ctx); err != nil {
				tb.Fatal(err)
			}
		}
		el := time.Since(t0)
		runtime.ReadMemStats(&after)
		if el >= minTime || n >= 1<<30 {
			k := float64(n)
			return opCost{
				ns:     float64(el.Nanoseconds()) / k,
				allocs: float64(after.Mallocs-before.Mallocs) / k,
				bytes:  float64(after.TotalAlloc-before.TotalAlloc) / k,
			}
		}
		// Aim 20% past minTime, growing at least 2× and at most 100×.
		per := max(el.Nanoseconds()/int64(n), 1)
		next := int(1.2 * float64(minTime.Nanoseconds()) / float64(per))
		n = min(max(next, 2*n), 100*n)
	}
}

// BenchmarkDriverDocPath takes apart, per document, what the driver does
// with what each path hands it, to show where the guarded path's extra
// cost lies (see the README):
//
//   - raw-driver: the driver's marshal of the caller's struct (an Encoder
//     on a DocumentWriter, as mongo.marshal does) and its ensureID, which
//     prepends a new ObjectID _id to a document without one;
//   - guarded-prepare: writeguard's prepare (bson.Marshal, Validate,
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
// document without _id.
func prepareLikeWriteguard(tb testing.TB, doc any) bson.Raw {
	raw, err := bson.Marshal(doc)
	if err != nil {
		tb.Fatal(err)
	}
	if err := bson.Raw(raw).Validate(); err != nil {
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

// BenchmarkIDFloorInsertMany100 puts the guarded InsertMany of 100 order
// lines next to three raw driver calls, to separate writeguard's own cost
// from what the driver charges for a document that already has an _id:
//
//   - raw: order lines without _id (the driver adds one: cheap);
//   - raw-struct-id: the caller's structs carry an ObjectID _id, as every
//     approach that assigns _ids before the first attempt must (the
//     driver's ensureID then decodes the _id reflectively);
//   - raw-prepared: bson.Raw documents with an _id, what writeguard hands
//     the driver (the driver also re-copies each document element by
//     element);
//   - guarded: writeguard.
func BenchmarkIDFloorInsertMany100(b *testing.B) {
	raw, g := pair(b, "IDFloor")
	ctx := context.Background()
	plain := orderLines(0, 100)
	withIDs := make([]any, 100)
	prepared := make([]any, 100)
	for i := range withIDs {
		withIDs[i] = orderLineID{ID: bson.NewObjectID(), Line: newOrderLine(i)}
		prepared[i] = prepareLikeWriteguard(b, newOrderLine(i))
	}
	run := func(c writeguard.Collection, docs func() []any) func(*testing.B) {
		return func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := c.InsertMany(ctx, docs()); err != nil {
					b.Fatal(err)
				}
			}
		}
	}
	// On the embedded server the same _ids cannot be inserted twice: give
	// each operation new ones (the refresh is part of the measured loop,
	// 100 ObjectIDs, about 2 µs).
	refresh := func(docs []any) func() []any {
		return func() []any {
			if backendName() == "null" {
				return docs
			}
			for i, d := range docs {
				switch x := d.(type) {
				case orderLineID:
					x.ID = bson.NewObjectID()
					docs[i] = x
				case bson.Raw:
					oid := bson.NewObjectID()
					copy(x[9:21], oid[:])
				}
			}
			return docs
		}
	}
	b.Run("raw", run(raw, func() []any { return plain }))
	b.Run("raw-struct-id", run(raw, refresh(withIDs)))
	b.Run("raw-prepared", run(raw, refresh(prepared)))
	b.Run("guarded", run(g, func() []any { return plain }))
}
