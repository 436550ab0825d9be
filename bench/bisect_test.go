package bench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/writeguard/writeguard"
	"github.com/writeguard/writeguard/mocks"
	"github.com/writeguard/writeguard/policy"
)

// BenchmarkPoisonBisect measures what narrowing down poison documents
// costs in commands (CASES C66): one InsertMany of n documents of which k
// are poison (every command carrying one is rejected as a whole:
// {"ok":0,"code":10334}), against mocks.Fake (no I/O: the figures are
// commands, not time). Metrics per op: commands (all the call's
// commands), bisect-bound (engine.BisectBound(n) = ceil(log2 n)+1 per
// poison document, plus the first command and one alone per poison), and
// written (good documents written: n-k expected; without bisection every
// attempt fails as a whole and 0 are written). The poison positions are
// drawn from a fixed seed, the same for every run.
func BenchmarkPoisonBisect(b *testing.B) {
	for _, n := range []int{16, 100, 1000} {
		for _, k := range []int{1, 2, 4} {
			for _, ordered := range []bool{false, true} {
				name := fmt.Sprintf("n=%d/poison=%d/ordered=%v", n, k, ordered)
				b.Run(name, func(b *testing.B) { runPoison(b, n, k, ordered) })
			}
		}
	}
}

func runPoison(b *testing.B, n, k int, ordered bool) {
	rng := rand.New(rand.NewPCG(uint64(n), uint64(k)))
	poison := map[int]bool{}
	for len(poison) < k {
		poison[rng.IntN(n)] = true
	}
	docs := make([]any, n)
	var commands, written int
	for b.Loop() {
		fake := mocks.NewFake("bench.poison")
		for i := range docs {
			id := fmt.Sprintf("d%05d", i)
			docs[i] = bson.D{{Key: "_id", Value: id}, {Key: "n", Value: i}}
			if poison[i] {
				fake.Poison(id, mocks.Reply(`{"ok":0,"code":10334,"codeName":"BSONObjectTooLarge","errmsg":"too large"}`))
			}
		}
		g, err := writeguard.New(fake, writeguard.WithDeadLetter(&mocks.Sink{}),
			writeguard.WithBackoff(policy.Backoff{Base: time.Microsecond, Cap: time.Microsecond}))
		if err != nil {
			b.Fatal(err)
		}
		_, err = g.InsertMany(context.Background(), docs, options.InsertMany().SetOrdered(ordered))
		if !writeguard.Handled(err) {
			b.Fatalf("err = %v, want the poison dead-lettered", err)
		}
		commands += len(fake.Calls())
		written += len(fake.Docs())
	}
	bound := 1 + k*(bisectBound(n)+1)
	b.ReportMetric(float64(commands)/float64(b.N), "commands/op")
	b.ReportMetric(float64(bound), "bisect-bound")
	b.ReportMetric(float64(written)/float64(b.N), "written/op")
}

// bisectBound is engine.BisectBound (internal to the module): ceil(log2 n)+1.
func bisectBound(n int) int {
	b := 1
	for v := n - 1; v > 0; v >>= 1 {
		b++
	}
	return b
}
