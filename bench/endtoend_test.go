package bench

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/writeguard/writeguard"
	"github.com/writeguard/writeguard/mocks/faultproxy"
)

// e2eDocs is the number of documents one run of BenchmarkEndToEnd writes
// at a batch size: batches of 1 are a round trip per document, so they
// write fewer.
func e2eDocs(batch int) int {
	if batch == 1 {
		return 2000
	}
	return 20000
}

// e2eSide is what one variant did in one run of the end-to-end workload.
type e2eSide struct {
	busy     time.Duration // sum over writers of the time spent in its calls
	inserts  int64         // insert commands the proxy received on its namespace
	others   int64         // other commands on its namespace
	stored   int64         // documents counted on the server afterwards
	docsSent int64         // documents in its insert commands
}

// BenchmarkEndToEnd writes order lines without _id (as a new user hands
// them) to the embedded FerretDB through a faultproxy without faults, with
// batches of 1, 100 and 500 documents per InsertMany (ordered, the
// default) and 1 or 16 writers sharing one client, through the raw
// *mongo.Collection and through the Guarded wrapping another collection
// of the same client (default options). The two are interleaved call by
// call: each writer alternates a raw call and a guarded call of the same
// size (raw first on even batches, guarded first on odd ones) and times
// each, so that the load of the shared machine falls on both alike. A
// variant's throughput is its documents ÷ (its writers' summed call time
// ÷ writers): with one writer, documents per second of its own calls;
// with 16, the same at a concurrency of 16 calls, half of them the other
// variant's. Each run starts on freshly dropped collections (untimed).
// Run it with -benchtime 1x -count 6: each -count is one run, and
// benchstat's median is the figure.
//
// Metrics: raw-docs/s and guarded-docs/s, guarded/raw (their ratio; goal
// ≥ 0.95 at batches 100 and 500), raw-insert-cmds/op and
// guarded-insert-cmds/op (insert commands the proxy received on each
// collection), raw-other-cmds/op and guarded-other-cmds/op (any other
// command on each collection: a read-back would show here), and
// guarded-sent/stored (documents sent ÷ stored). Every document of both
// variants must be stored; the benchmark fails otherwise.
func BenchmarkEndToEnd(b *testing.B) {
	for _, batch := range []int{1, 100, 500} {
		for _, writers := range []int{1, 16} {
			b.Run(fmt.Sprintf("batch=%d/writers=%d", batch, writers), func(b *testing.B) {
				benchEndToEnd(b, batch, writers)
			})
		}
	}
}

func benchEndToEnd(b *testing.B, batch, writers int) {
	names := [2]string{fmt.Sprintf("e2e_raw_%d_%d", batch, writers), fmt.Sprintf("e2e_guarded_%d_%d", batch, writers)}
	p, client := upstreamProxy(b, false)
	defer closeUpstream(p, client)
	raw := client.Database(benchDB).Collection(names[0])
	g, err := writeguard.Wrap(client.Database(benchDB).Collection(names[1]))
	if err != nil {
		b.Fatal(err)
	}
	colls := [2]writeguard.Collection{raw, g}
	n := e2eDocs(batch)
	// The documents of each writer, built once (untimed) and handed to
	// both variants: neither changes them.
	work := make([][][]any, writers)
	per := n / writers
	for k := range writers {
		for from := k * per; from < (k+1)*per; from += batch {
			work[k] = append(work[k], orderLines(from, min(batch, (k+1)*per-from)))
		}
	}
	total := int64(per * writers)

	var sums [2]e2eSide
	iter := 0
	for b.Loop() {
		iter++
		b.StopTimer()
		for _, name := range names {
			if err := directClient(b).Database(benchDB).Collection(name).Drop(context.Background()); err != nil {
				b.Fatal(err)
			}
		}
		before := p.Stats()
		b.StartTimer()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		var wg sync.WaitGroup
		errs := make([]error, writers)
		busy := make([][2]time.Duration, writers)
		for k := range writers {
			wg.Go(func() {
				for j, docs := range work[k] {
					for o := range 2 {
						v := (j + o) % 2
						t0 := time.Now()
						_, err := colls[v].InsertMany(ctx, docs)
						busy[k][v] += time.Since(t0)
						if err != nil {
							errs[k] = fmt.Errorf("%s: %w", names[v], err)
							return
						}
					}
				}
			})
		}
		wg.Wait()
		cancel()
		b.StopTimer()
		for k, err := range errs {
			if err != nil {
				b.Fatalf("writer %d: %v", k, err)
			}
		}
		after := p.Stats()
		var run [2]e2eSide
		for v, name := range names {
			ns := benchDB + "." + name
			stored, err := directClient(b).Database(benchDB).Collection(name).CountDocuments(context.Background(), bson.D{})
			if err != nil {
				b.Fatal(err)
			}
			if stored != total {
				b.Fatalf("%s: %d of %d documents stored", name, stored, total)
			}
			for k := range writers {
				run[v].busy += busy[k][v]
			}
			run[v].stored = stored
			run[v].inserts = after.CountIn("insert", ns) - before.CountIn("insert", ns)
			run[v].others = nsCommands(after, ns) - nsCommands(before, ns) - run[v].inserts
			sums[v].busy += run[v].busy
			sums[v].stored += stored
			sums[v].inserts += run[v].inserts
			sums[v].others += run[v].others
		}
		sums[1].docsSent += after.Documents["insert"] - before.Documents["insert"] - run[0].stored
		b.StartTimer()
		b.Logf("batch %3d, %2d writers: raw %6.0f docs/s (%d inserts), guarded %6.0f docs/s (%d inserts, %d other), guarded/raw %.3f",
			batch, writers, rate(run[0], writers), run[0].inserts, rate(run[1], writers), run[1].inserts, run[1].others, rate(run[1], writers)/rate(run[0], writers))
	}
	k := float64(iter)
	b.ReportMetric(rate(sums[0], writers), "raw-docs/s")
	b.ReportMetric(rate(sums[1], writers), "guarded-docs/s")
	b.ReportMetric(rate(sums[1], writers)/rate(sums[0], writers), "guarded/raw")
	b.ReportMetric(float64(sums[0].inserts)/k, "raw-insert-cmds/op")
	b.ReportMetric(float64(sums[1].inserts)/k, "guarded-insert-cmds/op")
	b.ReportMetric(float64(sums[0].others)/k, "raw-other-cmds/op")
	b.ReportMetric(float64(sums[1].others)/k, "guarded-other-cmds/op")
	b.ReportMetric(float64(sums[1].docsSent)/float64(sums[1].stored), "guarded-sent/stored")
}

// rate is a side's documents per second at writers concurrent calls.
func rate(s e2eSide, writers int) float64 {
	return float64(s.stored) / (s.busy.Seconds() / float64(writers))
}

// nsCommands counts the commands of st on namespace ns, all names.
func nsCommands(st faultproxy.Stats, ns string) int64 {
	var n int64
	for key, c := range st.CommandsByNamespace {
		if key.Namespace == ns {
			n += c
		}
	}
	return n
}
