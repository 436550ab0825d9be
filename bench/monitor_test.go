package bench

import (
	"context"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/writeguard/writeguard"
)

// BenchmarkMonitor measures what writeguard's command monitor
// (writeguard.Monitor, issue 28) costs a guarded InsertOne: two clients
// on the same backend (WRITEGUARD_BENCH_BACKEND, the null backend in a
// child process by default), one with the monitor set, one without; each
// iteration inserts one order line through each, interleaved, in
// alternate order, so that the machine's load falls on both alike. It
// reports ns per insert without and with the monitor and their ratio
// (with/without), in the same run, then the allocations of one insert on
// each side (testing.AllocsPerRun).
func BenchmarkMonitor(b *testing.B) {
	var uri string
	if backendName() == "embedded" {
		uri = embeddedServer(b).URI()
	} else {
		uri = childNullURI(b)
	}
	plain := connect(b, options.Client().ApplyURI(uri))
	monitored := connect(b, options.Client().ApplyURI(uri).SetMonitor(writeguard.Monitor(nil)))
	without, err := writeguard.Wrap(freshCollection(b, plain, "monitor_without"))
	if err != nil {
		b.Fatal(err)
	}
	with, err := writeguard.Wrap(freshCollection(b, monitored, "monitor_with"))
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	for i := range 50 { // warm both connection pools and encoders
		if _, err := without.InsertOne(ctx, newOrderLine(i)); err != nil {
			b.Fatal(err)
		}
		if _, err := with.InsertOne(ctx, newOrderLine(i)); err != nil {
			b.Fatal(err)
		}
	}
	var tWithout, tWith time.Duration
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		doc := newOrderLine(i)
		first, second, tFirst, tSecond := without, with, &tWithout, &tWith
		if i%2 == 1 { // alternate the order: neither side always goes first
			first, second, tFirst, tSecond = with, without, &tWith, &tWithout
		}
		t0 := time.Now()
		if _, err := first.InsertOne(ctx, doc); err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		if _, err := second.InsertOne(ctx, doc); err != nil {
			b.Fatal(err)
		}
		*tSecond += time.Since(t1)
		*tFirst += t1.Sub(t0)
	}
	n := float64(b.N)
	b.ReportMetric(float64(tWithout.Nanoseconds())/n, "ns/insert-without")
	b.ReportMetric(float64(tWith.Nanoseconds())/n, "ns/insert-with")
	if tWithout > 0 {
		b.ReportMetric(float64(tWith)/float64(tWithout), "with/without")
	}
	b.StopTimer()
	// Allocations per insert on each side, apart (the run's allocs/op is
	// both together).
	for _, side := range []struct {
		g    *writeguard.Guarded
		unit string
	}{{without, "allocs/insert-without"}, {with, "allocs/insert-with"}} {
		i := 0
		b.ReportMetric(testing.AllocsPerRun(200, func() {
			i++
			if _, err := side.g.InsertOne(ctx, newOrderLine(i)); err != nil {
				b.Fatal(err)
			}
		}), side.unit)
	}
}
