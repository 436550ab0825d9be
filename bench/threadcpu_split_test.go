package bench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/writeguard/writeguard"
)

// splitTarget is a collection whose InsertMany either adds the calling
// thread's CPU time inside the driver to *driver, or, with stub set,
// answers at once without the driver (what is left of a guarded call is
// writeguard's own work and its one encoding).
type splitTarget struct {
	*mongo.Collection
	driver *time.Duration
	stub   bool
}

func (s splitTarget) InsertMany(ctx context.Context, docs any, opts ...options.Lister[options.InsertManyOptions]) (*mongo.InsertManyResult, error) {
	if s.stub {
		return &mongo.InsertManyResult{Acknowledged: true}, nil
	}
	t0 := threadCPU()
	res, err := s.Collection.InsertMany(ctx, docs, opts...)
	*s.driver += threadCPU() - t0
	return res, err
}

// BenchmarkThreadCPUSplit splits a guarded InsertMany of n order lines
// (1, 100 and 1,000) in the thread-CPU harness's regime (variants
// shuffled call by call, the collector run between rounds, the null
// backend in a child process) into what the driver takes and what
// writeguard takes:
//
//   - driver-guarded/driver-raw: the thread CPU inside the driver's
//     InsertMany when guarded calls it, over the same when the raw
//     collection is handed the prepared bytes (raw-prepared), summed over
//     the run's calls;
//   - own-µs/call and own-ns/doc: a guarded call whose target answers at
//     once (no driver) less writeguard's one encoding alone (the encode
//     variant of BenchmarkThreadCPU), median per call, and that per
//     document.
//
// It prints one line per run. Run it with -benchtime 1x
// (WRITEGUARD_CPU_RUNS and WRITEGUARD_CPU_ROUNDS as in BenchmarkThreadCPU);
// its ns/op means nothing.
func BenchmarkThreadCPUSplit(b *testing.B) {
	if !threadCPUSupported {
		b.Skip("skipped: thread CPU time is read on Linux only")
	}
	runs := envInt(cpuRunsEnv, 5)
	for _, n := range []int{1, 100, 1000} {
		b.Run("docs="+strconv.Itoa(n), func(b *testing.B) {
			client := connect(b, options.Client().ApplyURI(childNullURI(b)))
			coll := client.Database(benchDB).Collection("threadcpu_split_" + strconv.Itoa(n))
			var inGuarded, inRaw time.Duration
			g, err := writeguard.New(splitTarget{Collection: coll, driver: &inGuarded})
			if err != nil {
				b.Fatal(err)
			}
			stub, err := writeguard.New(splitTarget{Collection: coll, stub: true})
			if err != nil {
				b.Fatal(err)
			}
			mk := insertManyOp(n)
			vs := []cpuVariant{
				{"raw-prepared", mk(b, splitTarget{Collection: coll, driver: &inRaw}, floorPrepared)},
				{"guarded", mk(b, g, floorPlain)},
				{"guarded-stub", mk(b, stub, floorPlain)},
				{"encode", encodeOnlyOp(orderLines(0, n))},
			}
			ctx := context.Background()
			for _, v := range vs {
				if err := v.op(ctx); err != nil {
					b.Fatalf("%s: %v", v.name, err)
				}
			}
			rounds := max(envInt(cpuRoundsEnv, 150)*100/max(n, 100), 5)
			var ratio, own []float64
			for b.Loop() {
				for r := range runs {
					inGuarded, inRaw = 0, 0
					run, err := measureShuffled(vs, rounds, rand.New(rand.NewPCG(uint64(n), uint64(r))), os.Getenv(cpuGCEnv) != "on")
					if err != nil {
						b.Fatal(err)
					}
					rt := float64(inGuarded) / float64(max(inRaw, 1))
					o := (medianDur(run.thread[2]) - medianDur(run.thread[3])) / 1e3
					ratio, own = append(ratio, rt), append(own, o)
					fmt.Printf("docs=%d run %d: driver in guarded / in raw-prepared %.3f; guarded with no driver %.1f µs, encode %.1f µs: own %.1f µs a call\n",
						n, r, rt, medianDur(run.thread[2])/1e3, medianDur(run.thread[3])/1e3, o)
				}
			}
			b.ReportMetric(median(ratio), "driver-guarded/driver-raw")
			b.ReportMetric(median(own), "own-µs/call")
			b.ReportMetric(1e3*median(own)/float64(n), "own-ns/doc")
			b.ReportMetric(0, "ns/op")
		})
	}
}
