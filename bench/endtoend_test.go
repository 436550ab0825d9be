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

// e2eRun is what one run of the end-to-end workload did.
type e2eRun struct {
	elapsed  time.Duration
	inserts  int64 // insert commands the proxy received on the namespace
	others   int64 // other commands (not hello, isMaster, ping), all namespaces
	stored   int64 // documents counted on the server afterwards
	docsSent int64 // documents in the insert commands the proxy received
}

// BenchmarkEndToEnd writes order lines without _id (as a new user hands
// them) to the embedded FerretDB through a faultproxy without faults, with
// batches of 1, 100 and 500 documents per InsertMany (ordered, the
// default) and 1 or 16 writers sharing one client, the raw
// *mongo.Collection and the Guarded wrapping it (default options)
// interleaved in one process: each iteration runs both on a freshly
// dropped collection (the drop untimed), raw first on odd iterations and
// guarded first on even ones. Run it with -benchtime 1x -count 6: each
// -count is one interleaved pair, and benchstat's median is the figure.
//
// Metrics: raw-docs/s and guarded-docs/s (documents stored ÷ wall time
// of the run), guarded/raw (their ratio; goal ≥ 0.95 at batches 100 and
// 500), raw-insert-cmds/op and guarded-insert-cmds/op (insert commands
// the proxy received), raw-other-cmds/op and guarded-other-cmds/op (any
// other command but the driver's hello/isMaster/ping monitoring: a read-back
// would show here), and guarded-sent/stored (documents sent ÷ stored).
// Every run must store every document; the benchmark fails otherwise.
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
	name := fmt.Sprintf("e2e_%d_%d", batch, writers)
	ns := benchDB + "." + name
	p, client := upstreamProxy(b, false)
	defer closeUpstream(p, client)
	raw := client.Database(benchDB).Collection(name)
	g, err := writeguard.Wrap(raw)
	if err != nil {
		b.Fatal(err)
	}
	direct := directClient(b).Database(benchDB).Collection(name)
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
	total := per * writers

	runOne := func(c writeguard.Collection) e2eRun {
		b.StopTimer()
		if err := direct.Drop(context.Background()); err != nil {
			b.Fatal(err)
		}
		before := p.Stats()
		b.StartTimer()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		var wg sync.WaitGroup
		errs := make([]error, writers)
		start := time.Now()
		for k := range writers {
			wg.Go(func() {
				for _, docs := range work[k] {
					if _, err := c.InsertMany(ctx, docs); err != nil {
						errs[k] = err
						return
					}
				}
			})
		}
		wg.Wait()
		el := time.Since(start)
		b.StopTimer()
		for k, err := range errs {
			if err != nil {
				b.Fatalf("writer %d: %v", k, err)
			}
		}
		after := p.Stats()
		stored, err := direct.CountDocuments(context.Background(), bson.D{})
		if err != nil {
			b.Fatal(err)
		}
		if stored != int64(total) {
			b.Fatalf("%d of %d documents stored", stored, total)
		}
		b.StartTimer()
		return e2eRun{
			elapsed:  el,
			inserts:  after.CountIn("insert", ns) - before.CountIn("insert", ns),
			others:   otherCommands(after) - otherCommands(before),
			stored:   stored,
			docsSent: after.Documents["insert"] - before.Documents["insert"],
		}
	}

	var runs [2]e2eRun // raw, guarded: sums
	iter := 0
	for b.Loop() {
		iter++
		var r, gd e2eRun
		if iter%2 == 1 {
			r, gd = runOne(raw), runOne(g)
		} else {
			gd, r = runOne(g), runOne(raw)
		}
		b.Logf("batch %3d, %2d writers: raw %6.0f docs/s (%d inserts), guarded %6.0f docs/s (%d inserts, %d other), guarded/raw %.3f",
			batch, writers, rate(r), r.inserts, rate(gd), gd.inserts, gd.others, rate(gd)/rate(r))
		for i, x := range []e2eRun{r, gd} {
			runs[i].elapsed += x.elapsed
			runs[i].inserts += x.inserts
			runs[i].others += x.others
			runs[i].stored += x.stored
			runs[i].docsSent += x.docsSent
		}
	}
	k := float64(iter)
	b.ReportMetric(rate(runs[0]), "raw-docs/s")
	b.ReportMetric(rate(runs[1]), "guarded-docs/s")
	b.ReportMetric(rate(runs[1])/rate(runs[0]), "guarded/raw")
	b.ReportMetric(float64(runs[0].inserts)/k, "raw-insert-cmds/op")
	b.ReportMetric(float64(runs[1].inserts)/k, "guarded-insert-cmds/op")
	b.ReportMetric(float64(runs[0].others)/k, "raw-other-cmds/op")
	b.ReportMetric(float64(runs[1].others)/k, "guarded-other-cmds/op")
	b.ReportMetric(float64(runs[1].docsSent)/float64(runs[1].stored), "guarded-sent/stored")
}

func rate(r e2eRun) float64 { return float64(r.stored) / r.elapsed.Seconds() }

// otherCommands counts the commands of st that are neither inserts nor
// the driver's monitoring and handshake (hello, isMaster, ping).
func otherCommands(st faultproxy.Stats) int64 {
	var n int64
	for name, c := range st.Commands {
		switch name {
		case "insert", "hello", "isMaster", "ismaster", "ping":
		default:
			n += c
		}
	}
	return n
}
