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
// default) and 1 or 16 writers sharing one client, three ways, each on
// its own collection of the same client: the raw *mongo.Collection handed
// the order lines (raw), the raw collection handed the same order lines
// with an ObjectID _id the caller assigned (raw-id: the idempotent
// floor), and the Guarded (default options) handed the order lines
// without _id. The three are interleaved call by call: each writer makes
// a call of each variant in turn for every batch (starting with the next
// variant on each batch) and times each, so that the load of the shared
// machine falls on all alike. A variant's throughput is its documents ÷
// (its writers' summed call time ÷ writers): with one writer, documents
// per second of its own calls; with 16, the same at a concurrency of 16
// calls, a third of them its own. Each run starts on freshly dropped
// collections (untimed). Run it with -benchtime 1x -count 6: each -count
// is one run, and benchstat's median is the figure.
//
// Metrics: raw-docs/s, raw-id-docs/s and guarded-docs/s, guarded/raw
// (goal ≥ 0.95 at batches 100 and 500) and guarded/raw-id,
// <variant>-insert-cmds/op (insert commands the proxy received on each
// collection), <variant>-other-cmds/op (any other command on each
// collection: a read-back would show here), and guarded-sent/stored
// (documents sent ÷ stored). Every document of every variant must be
// stored; the benchmark fails otherwise.
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
	names := [3]string{fmt.Sprintf("e2e_raw_%d_%d", batch, writers), fmt.Sprintf("e2e_rawid_%d_%d", batch, writers), fmt.Sprintf("e2e_guarded_%d_%d", batch, writers)}
	p, client := upstreamProxy(b, false)
	defer closeUpstream(p, client)
	raw := client.Database(benchDB).Collection(names[0])
	rawID := client.Database(benchDB).Collection(names[1])
	g, err := writeguard.Wrap(client.Database(benchDB).Collection(names[2]))
	if err != nil {
		b.Fatal(err)
	}
	colls := [3]writeguard.Collection{raw, rawID, g}
	n := e2eDocs(batch)
	// The documents of each writer, built once (untimed) and handed to
	// raw and guarded (neither changes them), and the same with their
	// _ids for raw-id (each run writes a freshly dropped collection).
	work := make([][][]any, writers)
	workID := make([][][]any, writers)
	per := n / writers
	for k := range writers {
		for from := k * per; from < (k+1)*per; from += batch {
			docs := orderLines(from, min(batch, (k+1)*per-from))
			withIDs := make([]any, len(docs))
			for i, d := range docs {
				withIDs[i] = withObjectID(d)
			}
			work[k], workID[k] = append(work[k], docs), append(workID[k], withIDs)
		}
	}
	total := int64(per * writers)

	var sums [3]e2eSide
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
		busy := make([][3]time.Duration, writers)
		for k := range writers {
			wg.Go(func() {
				for j := range work[k] {
					for o := range 3 {
						v := (j + o) % 3
						docs := work[k][j]
						if v == 1 {
							docs = workID[k][j]
						}
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
		var run [3]e2eSide
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
		sums[2].docsSent += after.Documents["insert"] - before.Documents["insert"] - run[0].stored - run[1].stored
		b.StartTimer()
		b.Logf("batch %3d, %2d writers: raw %6.0f docs/s (%d inserts), raw-id %6.0f docs/s (%d inserts), guarded %6.0f docs/s (%d inserts, %d other), guarded/raw %.3f, guarded/raw-id %.3f",
			batch, writers, rate(run[0], writers), run[0].inserts, rate(run[1], writers), run[1].inserts, rate(run[2], writers), run[2].inserts, run[2].others,
			rate(run[2], writers)/rate(run[0], writers), rate(run[2], writers)/rate(run[1], writers))
	}
	k := float64(iter)
	for v, name := range []string{"raw", "raw-id", "guarded"} {
		b.ReportMetric(rate(sums[v], writers), name+"-docs/s")
		b.ReportMetric(float64(sums[v].inserts)/k, name+"-insert-cmds/op")
		b.ReportMetric(float64(sums[v].others)/k, name+"-other-cmds/op")
	}
	b.ReportMetric(rate(sums[2], writers)/rate(sums[0], writers), "guarded/raw")
	b.ReportMetric(rate(sums[2], writers)/rate(sums[1], writers), "guarded/raw-id")
	b.ReportMetric(float64(sums[2].docsSent)/float64(sums[2].stored), "guarded-sent/stored")
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
