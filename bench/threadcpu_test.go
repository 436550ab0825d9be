package bench

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/writeguard/writeguard"
)

// The thread-CPU harness: what one call costs the client, read so that a
// loaded machine cannot bias one variant against another.
//
//   - Per call, the CPU time of the calling OS thread (threadCPU:
//     getrusage RUSAGE_THREAD before and after, on a goroutine locked to
//     its thread), not the wall time: another job on the machine delays a
//     call but does not add to its thread's CPU time.
//   - The variants are shuffled call by call: every round calls each
//     variant once, in a new random order, so that a slow phase of the
//     machine (another job's burst, a GC cycle) falls on each variant
//     alike. A rotated order (the same sequence every round) gave the A/A
//     pair a 3.6 % bias: a variant's cost depends on which one ran before
//     it (caches, the heap a GC cycle inherits).
//   - The null backend runs in a child process (childNullURI), so its CPU
//     is neither this thread's nor this process's.
//   - An A/A pair (raw-prepared twice, with two sets of the same
//     documents) is measured like the others: its ratio is the noise of
//     the method, printed beside every ratio.
//   - The collector is off during the calls and collects between rounds,
//     outside the readings (WRITEGUARD_CPU_GC=on leaves it on). With it
//     on, a cycle's cost lands on whichever call allocates while it runs
//     (its assists) or on other threads (its mark workers), and the A/A
//     pair spread ±12 % at 100 documents and ±27 % at 1,000 on the loaded
//     reference machine, against ±6 % off (each run's median per
//     variant; ±3–5 % with the paired ratios below). What the collector costs
//     follows the objects and bytes a call allocates, which are reported
//     beside the times.
//
// A run is rounds calls of each variant. A ratio of two variants in a run
// is the median over its rounds of the ratio of their two calls in the
// same round (paired: the two calls were made within milliseconds of each
// other). A case is several runs: each ratio is given as the median of
// the runs and their range. Allocation counts are not sampled:
// testing.AllocsPerRun's exact counts; the bytes of the same calls move by
// a few per cent between runs (the driver keeps a wire buffer in its pool
// only while more than half of it is used).

// The variants of the harness, in the order of cpuVariants.
const (
	cvRaw = iota
	cvStructID
	cvPrepared
	cvPreparedAA
	cvGuarded
	cvGuardedID
	cvEncode
	cvCount
)

var cpuVariantNames = [cvCount]string{"raw", "raw-struct-id", "raw-prepared", "raw-prepared'", "guarded", "guarded-id", "encode"}

// Environment overrides of the harness's shape.
const (
	cpuRunsEnv   = "WRITEGUARD_CPU_RUNS"   // runs per case (default 7)
	cpuRoundsEnv = "WRITEGUARD_CPU_ROUNDS" // calls of each variant per run at 100 documents (default 150; a fifth at 1,000)
	cpuGCEnv     = "WRITEGUARD_CPU_GC"     // "on": the collector runs during the calls
)

func envInt(name string, def int) int {
	if v := os.Getenv(name); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			panic(fmt.Sprintf("%s=%q: want a positive integer", name, v))
		}
		return n
	}
	return def
}

// cpuVariant is one way of making the call.
type cpuVariant struct {
	name string
	op   func(context.Context) error
}

// cpuVariants returns the harness's variants for InsertMany of n order
// lines, on coll (raw) and g (guarded):
//
//   - raw, raw-struct-id, raw-prepared, guarded, guarded-id: as in the
//     overhead benchmarks (see floor);
//   - raw-prepared': raw-prepared again, with its own documents (the A/A
//     control);
//   - encode: writeguard's one encoding of the same order lines alone, no
//     call: the default registry's struct codec through one bson.Encoder
//     on a DocumentWriter whose buffer is reused (the engine's docEncoder
//     without its arena copy and _id), the part of guarded that
//     raw-prepared, handed ready bytes, does not pay.
func cpuVariants(tb testing.TB, coll writeguard.Collection, g writeguard.Collection, n int) []cpuVariant {
	vs := make([]cpuVariant, cvCount)
	for i, name := range cpuVariantNames {
		vs[i].name = name
	}
	mk := insertManyOp(n)
	vs[cvRaw].op = mk(tb, coll, floorPlain)
	vs[cvStructID].op = mk(tb, coll, floorStructID)
	vs[cvPrepared].op = mk(tb, coll, floorPrepared)
	vs[cvPreparedAA].op = mk(tb, coll, floorPrepared)
	vs[cvGuarded].op = mk(tb, g, floorPlain)
	vs[cvGuardedID].op = mk(tb, g, floorStructID)
	vs[cvEncode].op = encodeOnlyOp(orderLines(0, n))
	return vs
}

func encodeOnlyOp(docs []any) func(context.Context) error {
	enc := bson.NewEncoder(bson.NewDocumentWriter(io.Discard))
	return func(context.Context) error {
		for _, d := range docs {
			if err := enc.Encode(d); err != nil {
				return err
			}
		}
		return nil
	}
}

// cpuRun is one run's readings: per variant, the thread and process CPU
// time of each call.
type cpuRun struct {
	thread, proc [][]time.Duration
}

// measureShuffled calls every variant rounds times, each round in a new
// order drawn from rng, on a goroutine locked to its OS thread, and reads
// threadCPU and processCPU around each call. With gcOff the collector is
// off during the calls and collects between rounds, outside the readings.
func measureShuffled(vs []cpuVariant, rounds int, rng *rand.Rand, gcOff bool) (cpuRun, error) {
	run := cpuRun{thread: make([][]time.Duration, len(vs)), proc: make([][]time.Duration, len(vs))}
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		ctx := context.Background()
		order := make([]int, len(vs))
		for i := range order {
			order[i] = i
		}
		if gcOff {
			defer debug.SetGCPercent(debug.SetGCPercent(-1))
		}
		for range rounds {
			if gcOff {
				runtime.GC()
			}
			rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
			for _, v := range order {
				t0, p0 := threadCPU(), processCPU()
				err := vs[v].op(ctx)
				t1, p1 := threadCPU(), processCPU()
				if err != nil {
					done <- fmt.Errorf("%s: %w", vs[v].name, err)
					return
				}
				run.thread[v] = append(run.thread[v], t1-t0)
				run.proc[v] = append(run.proc[v], p1-p0)
			}
		}
		done <- nil
	}()
	return run, <-done
}

// paired is a run's ratio of variant a to variant b: the median, over the
// run's rounds, of the ratio of a's call to b's call in the same round
// (calls made within milliseconds of each other, so that a change of the
// machine's state between rounds cancels out).
func (r cpuRun) paired(readings [][]time.Duration, a, b int) float64 {
	rs := make([]float64, len(readings[a]))
	for k := range rs {
		rs[k] = float64(readings[a][k]) / float64(max(readings[b][k], 1))
	}
	return median(rs)
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s) == 0 {
		return 0
	}
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func medianDur(ds []time.Duration) float64 {
	xs := make([]float64, len(ds))
	for i, d := range ds {
		xs[i] = float64(d)
	}
	return median(xs)
}

// spread is a figure over the runs of a case: its median and range.
type spread struct{ med, lo, hi float64 }

func spreadOf(xs []float64) spread {
	return spread{median(xs), slices.Min(xs), slices.Max(xs)}
}

// ratio formats a ratio spread as "1.23 (1.20–1.26)".
func (s spread) ratio() string { return fmt.Sprintf("%.2f (%.2f–%.2f)", s.med, s.lo, s.hi) }

// pct formats a share spread as "12.3 % (11.0–13.1)".
func (s spread) pct() string {
	return fmt.Sprintf("%.1f %% (%.1f–%.1f)", 100*s.med, 100*s.lo, 100*s.hi)
}

// aaSpread is the A/A pair's noise: the largest distance of its runs'
// ratios from 1.
func (s spread) aaSpread() float64 { return max(s.hi-1, 1-s.lo) }

// cpuCase is what the harness found for one call size.
type cpuCase struct {
	docs, runs, rounds int
	// Per run, from the medians of the thread CPU of the run's calls:
	aa         spread           // raw-prepared' / raw-prepared
	prepared   spread           // guarded / raw-prepared
	structID   spread           // guarded-id / raw-struct-id
	raw        spread           // guarded / raw
	own        spread           // 1 − raw-prepared / guarded: writeguard's share of the guarded call
	encode     spread           // encode / guarded: its one encoding's share
	beyond     spread           // own − encode: the rest of writeguard's share
	procPrep   spread           // guarded / raw-prepared in process CPU
	procAA     spread           // the A/A pair in process CPU
	perCallMed [cvCount]float64 // thread CPU per call, ns: median of the runs' medians
	allocs     [cvCount]float64 // per call, exact (testing.AllocsPerRun)
	bytes      [cvCount]float64 // per call (runtime.MemStats.TotalAlloc; the driver's pooled wire buffers move it by a few %)
}

// measureCPUCase runs the harness for InsertMany of n documents.
func measureCPUCase(tb testing.TB, n, runs, rounds int) cpuCase {
	client := connect(tb, options.Client().ApplyURI(childNullURI(tb)))
	coll := client.Database(benchDB).Collection("threadcpu_" + strconv.Itoa(n))
	g, err := writeguard.Wrap(coll)
	if err != nil {
		tb.Fatal(err)
	}
	vs := cpuVariants(tb, coll, g, n)
	ctx := context.Background()
	for range 3 { // warm up: connections, pools, caches
		for _, v := range vs {
			if err := v.op(ctx); err != nil {
				tb.Fatalf("%s: %v", v.name, err)
			}
		}
	}
	cc := cpuCase{docs: n, runs: runs, rounds: rounds}
	var aa, prep, sid, raw, own, enc, beyond, procPrep, procAA []float64
	perVariant := make([][]float64, cvCount)
	for r := range runs {
		runtime.GC()
		run, err := measureShuffled(vs, rounds, rand.New(rand.NewPCG(uint64(n), uint64(r))), os.Getenv(cpuGCEnv) != "on")
		if err != nil {
			tb.Fatal(err)
		}
		for v := range cvCount {
			perVariant[v] = append(perVariant[v], medianDur(run.thread[v]))
		}
		gp := run.paired(run.thread, cvGuarded, cvPrepared)
		aa = append(aa, run.paired(run.thread, cvPreparedAA, cvPrepared))
		prep = append(prep, gp)
		sid = append(sid, run.paired(run.thread, cvGuardedID, cvStructID))
		raw = append(raw, run.paired(run.thread, cvGuarded, cvRaw))
		e := run.paired(run.thread, cvEncode, cvGuarded)
		own = append(own, 1-1/gp)
		enc = append(enc, e)
		beyond = append(beyond, 1-1/gp-e)
		procPrep = append(procPrep, run.paired(run.proc, cvGuarded, cvPrepared))
		procAA = append(procAA, run.paired(run.proc, cvPreparedAA, cvPrepared))
	}
	cc.aa, cc.prepared, cc.structID, cc.raw = spreadOf(aa), spreadOf(prep), spreadOf(sid), spreadOf(raw)
	cc.own, cc.encode, cc.beyond = spreadOf(own), spreadOf(enc), spreadOf(beyond)
	cc.procPrep, cc.procAA = spreadOf(procPrep), spreadOf(procAA)
	for v := range cvCount {
		cc.perCallMed[v] = median(perVariant[v])
		op := vs[v].op
		call := func() {
			if err := op(ctx); err != nil {
				tb.Fatal(err)
			}
		}
		cc.allocs[v] = testing.AllocsPerRun(20, call)
		cc.bytes[v] = bytesPerCall(20, call)
	}
	return cc
}

// bytesPerCall is the bytes allocated per call of f over n calls, with
// one goroutine running at a time (as testing.AllocsPerRun).
func bytesPerCall(n int, f func()) float64 {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	f()
	var a, b runtime.MemStats
	runtime.ReadMemStats(&a)
	for range n {
		f()
	}
	runtime.ReadMemStats(&b)
	return float64(b.TotalAlloc-a.TotalAlloc) / float64(n)
}

// BenchmarkThreadCPU measures, in thread CPU per call, guarded InsertMany
// of 100 and 1,000 order lines against the raw driver (see the harness's
// comment at the top of this file). It prints a markdown table per case
// and reports, as metrics (medians over the runs):
//
//   - guarded/prepared: guarded ÷ raw-prepared (writeguard's whole share);
//   - guarded-id/struct-id: guarded-id ÷ raw-struct-id (both handed order
//     lines with their _id);
//   - aa and aa-spread-%: raw-prepared' ÷ raw-prepared, and the largest
//     distance of its runs from 1 (the noise);
//   - own-%, encode-%, beyond-%: writeguard's share of the guarded call
//     (1 − raw-prepared ÷ guarded), its one encoding's share (encode ÷
//     guarded) and the rest (own − encode);
//   - proc-guarded/prepared: guarded ÷ raw-prepared in process CPU (GC
//     workers included; noisier);
//   - dallocs/doc-prepared and dallocs/doc-id: exact allocations per
//     document, guarded − raw-prepared and guarded-id − raw-struct-id.
//
// One iteration is the whole measurement (7 runs of 150 rounds at 100
// documents, 30 at 1,000; WRITEGUARD_CPU_RUNS and WRITEGUARD_CPU_ROUNDS
// change them): run it with -benchtime 1x. Its ns/op means nothing.
func BenchmarkThreadCPU(b *testing.B) {
	if !threadCPUSupported {
		b.Skip("skipped: thread CPU time (RUSAGE_THREAD) is read on Linux only")
	}
	runs := envInt(cpuRunsEnv, 7)
	rounds := envInt(cpuRoundsEnv, 150)
	for _, n := range []int{100, 1000} {
		b.Run("docs="+strconv.Itoa(n), func(b *testing.B) {
			var cc cpuCase
			for b.Loop() {
				r := rounds
				if n > 100 {
					r = max(rounds/5, 5)
				}
				cc = measureCPUCase(b, n, runs, r)
			}
			fmt.Print(cc.table())
			d := float64(n)
			b.ReportMetric(cc.prepared.med, "guarded/prepared")
			b.ReportMetric(cc.structID.med, "guarded-id/struct-id")
			b.ReportMetric(cc.aa.med, "aa")
			b.ReportMetric(100*cc.aa.aaSpread(), "aa-spread-%")
			b.ReportMetric(100*cc.own.med, "own-%")
			b.ReportMetric(100*cc.encode.med, "encode-%")
			b.ReportMetric(100*cc.beyond.med, "beyond-%")
			b.ReportMetric(cc.procPrep.med, "proc-guarded/prepared")
			b.ReportMetric((cc.allocs[cvGuarded]-cc.allocs[cvPrepared])/d, "dallocs/doc-prepared")
			b.ReportMetric((cc.allocs[cvGuardedID]-cc.allocs[cvStructID])/d, "dallocs/doc-id")
			b.ReportMetric((cc.bytes[cvGuarded]-cc.bytes[cvPrepared])/d, "dB/doc-prepared")
			b.ReportMetric(0, "ns/op")
		})
	}
}

// table formats the case as markdown: the ratios with the A/A spread
// beside them, the shares, the per-call medians and the exact allocation
// counts.
func (cc cpuCase) table() string {
	var sb strings.Builder
	gc := "collector off during the calls"
	if os.Getenv(cpuGCEnv) == "on" {
		gc = "collector on"
	}
	fmt.Fprintf(&sb, "\nInsertMany of %d order lines, null backend in a child process: thread CPU per call, %d runs × %d calls of each variant shuffled call by call, %s; paired ratios, median of the runs (range); A/A spread ±%.1f %%.\n\n",
		cc.docs, cc.runs, cc.rounds, gc, 100*cc.aa.aaSpread())
	fmt.Fprintf(&sb, "| figure | thread CPU | A/A (raw-prepared' / raw-prepared) |\n| --- | ---: | ---: |\n")
	aa := cc.aa.ratio()
	fmt.Fprintf(&sb, "| guarded / raw-prepared | %s | %s |\n", cc.prepared.ratio(), aa)
	fmt.Fprintf(&sb, "| guarded-id / raw-struct-id | %s | %s |\n", cc.structID.ratio(), aa)
	fmt.Fprintf(&sb, "| guarded / raw | %s | %s |\n", cc.raw.ratio(), aa)
	fmt.Fprintf(&sb, "| writeguard's share of the guarded call (1 − raw-prepared / guarded) | %s | |\n", cc.own.pct())
	fmt.Fprintf(&sb, "| — its one encoding (encode / guarded) | %s | |\n", cc.encode.pct())
	fmt.Fprintf(&sb, "| — the rest (outside the driver and the encoding) | %s | |\n", cc.beyond.pct())
	fmt.Fprintf(&sb, "| guarded / raw-prepared in process CPU (GC workers included) | %s | %s |\n\n", cc.procPrep.ratio(), cc.procAA.ratio())
	fmt.Fprintf(&sb, "| variant | thread CPU per call (median of runs) | allocs per call (exact) | bytes per call (the driver's buffer pool moves it by a few %%) |\n| --- | ---: | ---: | ---: |\n")
	for v := range cvCount {
		fmt.Fprintf(&sb, "| %s | %.0f µs | %.0f | %.0f |\n", cpuVariantNames[v], cc.perCallMed[v]/1e3, cc.allocs[v], cc.bytes[v])
	}
	return sb.String()
}
