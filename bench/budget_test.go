package bench

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/writeguard/writeguard"
	"github.com/writeguard/writeguard/hooks"
	"github.com/writeguard/writeguard/mocks/faultproxy"
	"github.com/writeguard/writeguard/policy"
)

// Shape of one operation of BenchmarkBudget: the same number of calls for
// every writer count, so that the bucket's initial burst weighs the same.
const (
	budgetCalls = 3200 // InsertMany calls per operation, split among the writers
	budgetBatch = 10   // documents per InsertMany
)

// budgetFault is the transient failure of BenchmarkBudget: 89
// NetworkTimeout labelled RetryableWriteError, nothing written. A
// transient code on purpose that is not a "not primary" or "node is
// recovering" error, so that the driver does not mark the server unknown
// and pause every writer for a heartbeat (as it does after a 189 or
// 10107): the counts are the budget's alone, and a run takes seconds.
var budgetFault = faultproxy.CommandError{Code: 89, CodeName: "NetworkTimeout", Message: "operation timed out", Labels: []string{"RetryableWriteError"}}

// budgetCase is one retry budget under test.
type budgetCase struct {
	name string
	make func() *policy.Budget
}

var budgetCases = []budgetCase{
	// writeguard's default: 100 tokens, 0.1 refunded per success.
	{"default", policy.DefaultBudget},
	// gRPC's retry throttling as gRFC A6 documents it
	// ("retryThrottling": {"maxTokens": 10, "tokenRatio": 0.1}).
	{"grpc-a6", func() *policy.Budget {
		b, err := policy.NewBudget(10, 0.1)
		if err != nil {
			panic(err)
		}
		return b
	}},
	// No budget: only the backoff's 5 attempts bound the retries.
	{"none", func() *policy.Budget { return nil }},
}

// BenchmarkBudget measures how a retry budget shared by many writers
// behaves when a fraction of the commands fail transiently.
// Sub-benchmarks writers=<16|50>/faults=<5|15|30>%/budget=<default|
// grpc-a6|none>: the writers share one Guarded (default backoff: base 100
// ms, cap 10 s, 5 attempts) and together make 3,200 ordered InsertMany
// calls of 10 order lines per operation, through faultproxy's null
// backend, which answers each insert command independently with
// budgetFault with the given probability (a seeded RandomSchedule). Each
// operation starts with a new, full budget.
//
// Metrics per operation: retries (allowed by the budget), refused
// (retries the budget refused), exhausted-docs (documents ending
// "exhausted": refused, or 5 attempts failed), exhausted-% (of the 32,000
// documents), faulted-cmds, insert-cmds, and tokens-left at the end. One
// operation takes 1 to 10 s; run it with -benchtime 1x.
func BenchmarkBudget(b *testing.B) {
	for _, writers := range []int{16, 50} {
		for _, pct := range []int{5, 15, 30} {
			for _, bc := range budgetCases {
				b.Run(fmt.Sprintf("writers=%d/faults=%d%%/budget=%s", writers, pct, bc.name), func(b *testing.B) {
					benchBudget(b, writers, float64(pct)/100, bc)
				})
			}
		}
	}
}

func benchBudget(b *testing.B, writers int, p float64, bc budgetCase) {
	const ns = benchDB + ".budget"
	rule := faultproxy.On("insert").In(ns).Always().Do(faultproxy.RandomSchedule(1,
		faultproxy.Rate{P: p, Fault: faultproxy.ErrorReply(budgetFault)}))
	px, coll := budgetTarget(b, rule, writers, "budget")

	var retries, refused, exhausted, faulted, cmds, left float64
	iter := 0
	for b.Loop() {
		b.StopTimer()
		iter++
		var nRetry, nRefused, nExhausted atomic.Int64
		budget := bc.make()
		g, err := writeguard.Wrap(coll, writeguard.WithBudget(budget), writeguard.WithHooks(hooks.Hooks{
			RetryScheduled:  func(context.Context, *hooks.Retry) { nRetry.Add(1) },
			BudgetExhausted: func(context.Context, *hooks.BudgetExhausted) { nRefused.Add(1) },
		}))
		if err != nil {
			b.Fatal(err)
		}
		px.Reset()
		docs := orderLines(0, budgetBatch)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		var wg sync.WaitGroup
		var firstErr atomic.Pointer[error]
		b.StartTimer()
		for k := range writers {
			wg.Go(func() {
				for i := k; i < budgetCalls; i += writers {
					_, err := g.InsertMany(ctx, docs)
					tallyCall(err, len(docs), &nExhausted, &firstErr)
				}
			})
		}
		wg.Wait()
		b.StopTimer()
		cancel()
		if e := firstErr.Load(); e != nil {
			b.Fatalf("want nil or a Report of %d exhausted: %v", budgetBatch, *e)
		}
		st := px.Stats()
		retries += float64(nRetry.Load())
		refused += float64(nRefused.Load())
		exhausted += float64(nExhausted.Load())
		faulted += float64(st.Faults[faultproxy.FaultErrorReply])
		cmds += float64(st.CountIn("insert", ns))
		if budget != nil {
			left += budget.Tokens()
		}
		b.StartTimer()
	}
	k := float64(iter)
	b.ReportMetric(retries/k, "retries/op")
	b.ReportMetric(refused/k, "refused/op")
	b.ReportMetric(exhausted/k, "exhausted-docs/op")
	b.ReportMetric(100*exhausted/k/(budgetCalls*budgetBatch), "exhausted-%")
	b.ReportMetric(faulted/k, "faulted-cmds/op")
	b.ReportMetric(cmds/k, "insert-cmds/op")
	b.ReportMetric(left/k, "tokens-left")
}

// Shape of one operation of BenchmarkBudgetFailover.
const (
	failoverRun    = 3 * time.Second // each writer writes for this long
	failoverStart  = 1 * time.Second // the outage starts this long into the run
	failoverLength = 1 * time.Second // and lasts this long
)

// BenchmarkBudgetFailover measures a retry budget against correlated
// faults: 16 or 50 writers share one Guarded (default backoff) and write
// InsertMany calls of 10 order lines back to back for 3 s through
// faultproxy's null backend, which answers every insert with budgetFault
// from 1 s to 2 s into the run (an outage that fails every in-flight
// write at once, as a failover does) and accepts every insert otherwise.
// Each operation starts with a new, full budget.
//
// Metrics per operation: calls, retries (allowed), refused,
// exhausted-docs (documents ending "exhausted": refused, or 5 attempts
// failed), faulted-cmds and tokens-left. One operation takes 3 s plus the
// last backoff waits; run it with -benchtime 1x.
func BenchmarkBudgetFailover(b *testing.B) {
	for _, writers := range []int{16, 50} {
		for _, bc := range budgetCases {
			b.Run(fmt.Sprintf("writers=%d/budget=%s", writers, bc.name), func(b *testing.B) {
				benchBudgetFailover(b, writers, bc)
			})
		}
	}
}

func benchBudgetFailover(b *testing.B, writers int, bc budgetCase) {
	const ns = benchDB + ".failover"
	var start atomic.Pointer[time.Time]
	rule := faultproxy.On("insert").In(ns).Always().Where(func(*faultproxy.Command) bool {
		t := start.Load()
		if t == nil {
			return false
		}
		since := time.Since(*t)
		return since >= failoverStart && since < failoverStart+failoverLength
	}).Do(faultproxy.ErrorReply(budgetFault))
	px, coll := budgetTarget(b, rule, writers, "failover")

	var calls, retries, refused, exhausted, faulted, left float64
	iter := 0
	for b.Loop() {
		b.StopTimer()
		iter++
		var nCalls, nRetry, nRefused, nExhausted atomic.Int64
		budget := bc.make()
		g, err := writeguard.Wrap(coll, writeguard.WithBudget(budget), writeguard.WithHooks(hooks.Hooks{
			RetryScheduled:  func(context.Context, *hooks.Retry) { nRetry.Add(1) },
			BudgetExhausted: func(context.Context, *hooks.BudgetExhausted) { nRefused.Add(1) },
		}))
		if err != nil {
			b.Fatal(err)
		}
		px.Reset()
		docs := orderLines(0, budgetBatch)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		var wg sync.WaitGroup
		var firstErr atomic.Pointer[error]
		t0 := time.Now()
		start.Store(&t0)
		b.StartTimer()
		for range writers {
			wg.Go(func() {
				for time.Since(t0) < failoverRun {
					nCalls.Add(1)
					_, err := g.InsertMany(ctx, docs)
					tallyCall(err, len(docs), &nExhausted, &firstErr)
				}
			})
		}
		wg.Wait()
		b.StopTimer()
		cancel()
		start.Store(nil)
		if e := firstErr.Load(); e != nil {
			b.Fatalf("want nil or a Report of %d exhausted: %v", budgetBatch, *e)
		}
		calls += float64(nCalls.Load())
		retries += float64(nRetry.Load())
		refused += float64(nRefused.Load())
		exhausted += float64(nExhausted.Load())
		faulted += float64(px.Stats().Faults[faultproxy.FaultErrorReply])
		if budget != nil {
			left += budget.Tokens()
		}
		b.StartTimer()
	}
	k := float64(iter)
	b.ReportMetric(calls/k, "calls/op")
	b.ReportMetric(retries/k, "retries/op")
	b.ReportMetric(refused/k, "refused/op")
	b.ReportMetric(exhausted/k, "exhausted-docs/op")
	b.ReportMetric(faulted/k, "faulted-cmds/op")
	b.ReportMetric(left/k, "tokens-left")
}

// tallyCall records one call's result: nil, or a Report whose n documents
// all ended exhausted (counted in exhausted); anything else is kept as the
// first unexpected error.
func tallyCall(err error, n int, exhausted *atomic.Int64, first *atomic.Pointer[error]) {
	if err == nil {
		return
	}
	var r *writeguard.Report
	if !errors.As(err, &r) || r.Count(writeguard.Exhausted) != n {
		first.CompareAndSwap(nil, &err)
		return
	}
	exhausted.Add(int64(n))
}

// budgetTarget starts a null-backend proxy running rule and returns it
// with collection name on a client whose pool fits writers.
func budgetTarget(b *testing.B, rule *faultproxy.Rule, writers int, name string) (*faultproxy.Proxy, *mongo.Collection) {
	px := newProxy(b, faultproxy.WithScript(faultproxy.MustScript(rule)))
	client := connect(b, options.Client().ApplyURI(px.URI()).SetMaxPoolSize(uint64(writers)))
	b.Cleanup(func() {
		_ = client.Disconnect(context.Background())
		_ = px.Close()
	})
	return px, client.Database(benchDB).Collection(name)
}
