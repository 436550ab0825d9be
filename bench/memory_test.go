package bench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"runtime/metrics"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/writeguard/writeguard"
	"github.com/writeguard/writeguard/mocks/faultproxy"
)

// The memory benchmark measures the client alone: its null-backend
// faultproxy runs in a child process (this test binary, re-executed with
// nullProxyEnv set), so that the proxy's parsing of 1,000,000 documents and
// its replies are not counted in the benchmark's allocations and heap.

const (
	// nullProxyEnv, when set, makes the test binary serve a null-backend
	// faultproxy (every insert into memRejectedColl rejected with
	// memRejection)
	// instead of running tests: it prints the proxy's URI on a line of its
	// own and serves until its standard input is closed.
	nullProxyEnv     = "WRITEGUARD_BENCH_NULL_PROXY_CHILD"
	memWrittenColl   = "mem_written"
	memRejectedColl  = "mem_rejected"
	nullProxyURILine = "null-proxy-uri: "
)

// memRejection is the write error the child proxy gives every document
// inserted into memRejectedColl: a document validation failure (121) with
// an errInfo of the shape a MongoDB 5.0+ server gives for one failing
// property (about 300 bytes). Not faultproxy's $jsonSchema emulation:
// its errInfo for invalidOrderLine (two failing properties, with the
// document's _id) makes the reply to a batch of 100,000 documents exceed
// the 48 MB message size the driver accepts.
var memRejection = faultproxy.WriteError{
	Code:    121,
	Message: "Document failed validation",
	ErrInfo: bson.D{{Key: "details", Value: bson.D{
		{Key: "operatorName", Value: "$jsonSchema"},
		{Key: "schemaRulesNotSatisfied", Value: bson.A{bson.D{
			{Key: "operatorName", Value: "properties"},
			{Key: "propertiesNotSatisfied", Value: bson.A{bson.D{
				{Key: "propertyName", Value: "qty"},
				{Key: "details", Value: bson.A{bson.D{
					{Key: "operatorName", Value: "minimum"},
					{Key: "specifiedAs", Value: bson.D{{Key: "minimum", Value: int32(1)}}},
					{Key: "reason", Value: "comparison failed"},
					{Key: "consideredValue", Value: int32(-1)},
				}}},
			}}},
		}}},
	}}},
}

// serveNullProxyChild serves the child's proxy and exits when nullProxyEnv
// is set; it returns at once otherwise.
func serveNullProxyChild() {
	if os.Getenv(nullProxyEnv) == "" {
		return
	}
	script := faultproxy.MustScript(faultproxy.On("insert").In(benchDB + "." + memRejectedColl).Always().
		Do(faultproxy.RejectDocuments(func(bson.Raw) bool { return true }, memRejection)))
	p, err := faultproxy.New(faultproxy.WithScript(script))
	if err == nil {
		err = p.Start(context.Background())
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "null proxy child:", err)
		os.Exit(1)
	}
	fmt.Println(nullProxyURILine + p.URI())
	_, _ = io.Copy(io.Discard, os.Stdin)
	_ = p.Close()
	os.Exit(0)
}

// childProxy is a null-backend faultproxy in a child process.
type childProxy struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	uri   string
}

// startChildProxy starts the child proxy and waits for its URI.
func startChildProxy(tb testing.TB) *childProxy {
	tb.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$", "-test.bench=^$")
	cmd.Env = append(os.Environ(), nullProxyEnv+"=1")
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		tb.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		tb.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	cp := &childProxy{cmd: cmd, stdin: stdin}
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		if uri, ok := strings.CutPrefix(sc.Text(), nullProxyURILine); ok {
			cp.uri = uri
			break
		}
	}
	if cp.uri == "" {
		cp.close()
		tb.Fatal("the null proxy child printed no URI")
	}
	go func() { _, _ = io.Copy(io.Discard, stdout) }()
	return cp
}

// close ends the child: closing its standard input stops it.
func (cp *childProxy) close() {
	_ = cp.stdin.Close()
	done := make(chan struct{})
	go func() { _ = cp.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = cp.cmd.Process.Kill()
		<-done
	}
}

// kibDoc is an order line with a payload that makes its BSON about 1 KiB.
type kibDoc struct {
	Line    orderLine `bson:",inline"`
	Payload string    `bson:"payload"`
}

var kibPayload = strings.Repeat("x", 1024-290)

// A memCase is one InsertMany of the memory benchmark.
type memCase struct {
	name   string
	n      int
	reject bool // documents that orderSchema rejects, sent to memRejectedColl
	doc    func(seq int, invalid bool) any
}

var memCases = []memCase{
	{"small-written", 1_000_000, false, smallDoc},
	{"small-rejected", 1_000_000, true, smallDoc},
	{"1KiB-written", 200_000, false, kibDocOf},
	{"1KiB-rejected", 200_000, true, kibDocOf},
}

func smallDoc(seq int, invalid bool) any {
	if invalid {
		return invalidOrderLine(seq)
	}
	return newOrderLine(seq)
}

func kibDocOf(seq int, invalid bool) any {
	l := newOrderLine(seq)
	if invalid {
		l = invalidOrderLine(seq)
	}
	return kibDoc{Line: l, Payload: kibPayload}
}

// memCost is what one InsertMany cost the client.
type memCost struct {
	ns        float64 // wall time
	allocated float64 // bytes allocated during the call (TotalAlloc)
	mallocs   float64 // objects allocated during the call
	peakHeap  float64 // peak heap object bytes during the call, above those before it
	retained  float64 // heap object bytes after the call and a GC, its result still held, above those before it
}

// heapSampler samples the heap's object bytes (runtime/metrics
// /memory/classes/heap/objects:bytes: live objects and those not yet
// swept, what HeapAlloc reports, read without stopping the world) every
// millisecond, and keeps the highest.
type heapSampler struct {
	stop chan struct{}
	done chan struct{}
	peak uint64
}

const heapObjects = "/memory/classes/heap/objects:bytes"

func readHeapObjects() uint64 {
	s := []metrics.Sample{{Name: heapObjects}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

func startHeapSampler() *heapSampler {
	h := &heapSampler{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(h.done)
		s := []metrics.Sample{{Name: heapObjects}}
		t := time.NewTicker(time.Millisecond)
		defer t.Stop()
		for {
			metrics.Read(s)
			h.peak = max(h.peak, s[0].Value.Uint64())
			select {
			case <-h.stop:
				return
			case <-t.C:
			}
		}
	}()
	return h
}

func (h *heapSampler) finish() uint64 {
	close(h.stop)
	<-h.done
	return max(h.peak, readHeapObjects())
}

// measureMem runs op once and returns its cost: the heap is collected
// before it, so that peakHeap is what the call added to the heap (live and
// not yet collected).
func measureMem(op func() (any, error)) (memCost, error) {
	runtime.GC()
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	base := readHeapObjects()
	h := startHeapSampler()
	t0 := time.Now()
	kept, err := op()
	el := time.Since(t0)
	peak := h.finish()
	runtime.ReadMemStats(&after)
	runtime.GC()
	retained := float64(readHeapObjects()) - float64(base)
	runtime.KeepAlive(kept)
	return memCost{
		ns:        float64(el.Nanoseconds()),
		allocated: float64(after.TotalAlloc - before.TotalAlloc),
		mallocs:   float64(after.Mallocs - before.Mallocs),
		peakHeap:  float64(peak) - float64(base),
		retained:  retained,
	}, err
}

// BenchmarkMemory sends one unordered InsertMany of 1,000,000 order lines
// (about 270 bytes of BSON each) and one of 200,000 order lines with a
// payload (about 1 KiB each), all written, and the same all rejected (the
// invalidOrderLine form, each rejected by the null backend with a 121
// document validation failure and its errInfo, memRejection), three ways,
// interleaved in one process (each iteration starts with the next of the
// three):
//
//   - raw: the *mongo.Collection, handed the documents without _id (the
//     driver appends a new ObjectID to its encoding of each);
//   - raw-id: the same collection, handed the documents with an ObjectID
//     _id assigned by the caller (the idempotent floor: the driver then
//     decodes each _id, mongo.ensureID);
//   - guarded: the Guarded wrapping it (default options: no dead-letter
//     sink, so rejected documents come back failed in the Report), handed
//     the documents without _id.
//
// The null-backend faultproxy runs in a child process, so the figures are
// the client's alone. Each call's result (the Report, the
// BulkWriteException) is checked, then dropped. One iteration takes about
// a minute: run it with -benchtime 1x -count 5. With -short every call
// has a tenth of the documents (for profiles).
//
// Metrics, per case and variant v: <case>-<v>-B/doc (bytes allocated
// during the call, runtime.MemStats.TotalAlloc, per document),
// <case>-<v>-allocs/doc (objects allocated), <case>-<v>-peak-MiB (the
// highest heap object bytes sampled every millisecond during the call,
// above those before it: live objects and garbage not yet collected, at
// the default GOGC), <case>-<v>-retained-B/doc (heap object bytes after
// the call and a collection, with the call's result and error still held,
// above those before it, per document: what the caller keeps); and the
// ratios <case>-alloc-guarded/raw (goal ≤ 1.5
// for small-written), <case>-alloc-guarded/raw-id,
// <case>-peak-guarded/raw, <case>-peak-guarded/raw-id and
// <case>-time-guarded/raw (wall time). The input documents (a []any built
// before the calls) are not counted.
func BenchmarkMemory(b *testing.B) {
	cp := startChildProxy(b)
	defer cp.close()
	client, err := mongo.Connect(options.Client().ApplyURI(cp.uri))
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = client.Disconnect(context.Background()) }()
	if err := client.Ping(context.Background(), nil); err != nil {
		b.Fatal(err)
	}
	variants := []string{"raw", "raw-id", "guarded"}
	results := make(map[string][][]memCost) // case → variant → runs
	iter := 0
	for b.Loop() {
		for _, mc := range memCases {
			coll := client.Database(benchDB).Collection(memWrittenColl)
			if mc.reject {
				coll = client.Database(benchDB).Collection(memRejectedColl)
			}
			g, err := writeguard.Wrap(coll)
			if err != nil {
				b.Fatal(err)
			}
			if testing.Short() {
				mc.n /= 10
			}
			docs := make([]any, mc.n)
			withIDs := make([]any, mc.n)
			for i := range docs {
				docs[i] = mc.doc(i, mc.reject)
				withIDs[i] = withObjectID(docs[i])
			}
			opts := options.InsertMany().SetOrdered(false)
			// Each op returns what the caller holds after the call: the
			// result and the error (the BulkWriteException, the Report).
			ops := []func() (any, error){
				func() (any, error) {
					res, err := coll.InsertMany(context.Background(), docs, opts)
					return []any{res, err}, checkRaw(err, mc)
				},
				func() (any, error) {
					res, err := coll.InsertMany(context.Background(), withIDs, opts)
					return []any{res, err}, checkRaw(err, mc)
				},
				func() (any, error) {
					res, err := g.InsertMany(context.Background(), docs, opts)
					return []any{res, err}, checkGuarded(err, mc)
				},
			}
			cost := make([]memCost, len(ops))
			for k := range ops {
				v := (iter + k) % len(ops)
				c, err := measureMem(ops[v])
				if err != nil {
					b.Fatalf("%s, %s: %v", mc.name, variants[v], err)
				}
				cost[v] = c
			}
			if results[mc.name] == nil {
				results[mc.name] = make([][]memCost, len(ops))
			}
			for v := range cost {
				results[mc.name][v] = append(results[mc.name][v], cost[v])
			}
			r, rid, gd := cost[0], cost[1], cost[2]
			d := float64(mc.n)
			b.Logf("%-14s B/doc raw %5.0f raw-id %5.0f guarded %5.0f | peak MiB %5.0f %5.0f %5.0f | s %5.2f %5.2f %5.2f | guarded/raw alloc %.2f peak %.2f, guarded/raw-id alloc %.2f peak %.2f | retained B/doc %5.0f %5.0f %5.0f",
				mc.name, r.allocated/d, rid.allocated/d, gd.allocated/d,
				r.peakHeap/(1<<20), rid.peakHeap/(1<<20), gd.peakHeap/(1<<20),
				r.ns/1e9, rid.ns/1e9, gd.ns/1e9,
				gd.allocated/r.allocated, gd.peakHeap/r.peakHeap, gd.allocated/rid.allocated, gd.peakHeap/rid.peakHeap,
				r.retained/d, rid.retained/d, gd.retained/d)
		}
		iter++
	}
	for _, mc := range memCases {
		if testing.Short() {
			mc.n /= 10
		}
		var m [3]memCost
		for v := range m {
			m[v] = meanCost(results[mc.name][v])
		}
		d := float64(mc.n)
		for v, name := range variants {
			b.ReportMetric(m[v].allocated/d, mc.name+"-"+name+"-B/doc")
			b.ReportMetric(m[v].mallocs/d, mc.name+"-"+name+"-allocs/doc")
			b.ReportMetric(m[v].peakHeap/(1<<20), mc.name+"-"+name+"-peak-MiB")
			b.ReportMetric(m[v].retained/d, mc.name+"-"+name+"-retained-B/doc")
		}
		r, rid, gd := m[0], m[1], m[2]
		b.ReportMetric(gd.allocated/r.allocated, mc.name+"-alloc-guarded/raw")
		b.ReportMetric(gd.allocated/rid.allocated, mc.name+"-alloc-guarded/raw-id")
		b.ReportMetric(gd.peakHeap/r.peakHeap, mc.name+"-peak-guarded/raw")
		b.ReportMetric(gd.peakHeap/rid.peakHeap, mc.name+"-peak-guarded/raw-id")
		b.ReportMetric(gd.ns/r.ns, mc.name+"-time-guarded/raw")
	}
	b.ReportMetric(0, "ns/op")
}

// withObjectID returns the document doc (an orderLine or a kibDoc) with
// a new ObjectID _id.
func withObjectID(doc any) any {
	switch d := doc.(type) {
	case orderLine:
		return orderLineID{ID: bson.NewObjectID(), Line: d}
	case kibDoc:
		return kibDocID{ID: bson.NewObjectID(), Doc: d}
	}
	panic(fmt.Sprintf("withObjectID: %T", doc))
}

// kibDocID is a kibDoc whose caller assigns the _id.
type kibDocID struct {
	ID  bson.ObjectID `bson:"_id"`
	Doc kibDoc        `bson:",inline"`
}

func meanCost(cs []memCost) memCost {
	var m memCost
	for _, c := range cs {
		m.ns += c.ns
		m.allocated += c.allocated
		m.mallocs += c.mallocs
		m.peakHeap += c.peakHeap
		m.retained += c.retained
	}
	k := float64(len(cs))
	return memCost{m.ns / k, m.allocated / k, m.mallocs / k, m.peakHeap / k, m.retained / k}
}

// checkRaw checks the raw driver's result: nil when written, a
// BulkWriteException with one write error per document when rejected.
func checkRaw(err error, mc memCase) error {
	if !mc.reject {
		return err
	}
	var bwe mongo.BulkWriteException
	if !errors.As(err, &bwe) {
		return fmt.Errorf("raw: want a BulkWriteException, got %v", err)
	}
	if len(bwe.WriteErrors) != mc.n {
		return fmt.Errorf("raw: %d write errors, want %d", len(bwe.WriteErrors), mc.n)
	}
	return nil
}

// checkGuarded checks writeguard's result: nil when written, a Report with
// every document failed when rejected.
func checkGuarded(err error, mc memCase) error {
	if !mc.reject {
		return err
	}
	var r *writeguard.Report
	if !errors.As(err, &r) {
		return fmt.Errorf("guarded: want a Report, got %v", err)
	}
	if n := r.Count(writeguard.Failed); n != mc.n {
		return fmt.Errorf("guarded: %d failed, want %d (%v)", n, mc.n, r.Counts())
	}
	return nil
}
