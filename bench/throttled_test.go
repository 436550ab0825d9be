package bench

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/event"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/writeguard/writeguard"
	"github.com/writeguard/writeguard/hooks"
	"github.com/writeguard/writeguard/mocks/faultproxy"
)

// Shape of BenchmarkThrottled: thWriters writers share one Guarded and
// write thCalls ordered InsertMany calls of thBatch order lines each, to
// the embedded FerretDB behind a faultproxy in replica-set mode whose
// ingress rate limiter admits thRate insert commands per second (a burst
// of a quarter of a second) and refuses the others with 462
// IngressRequestRateLimitExceeded (SystemOverloadedError, RetryableError).
// The demand is several times the limit: the unthrottled bed took about
// 140–500 such inserts per second on the loaded reference machine.
const (
	thWriters = 16
	thCalls   = 10
	thBatch   = 10
	thRate    = 40
	thDocs    = thWriters * thCalls * thBatch
	// thCost is the refusal cost of the second set of runs: each refused
	// command takes a quarter of a token (faultproxy.RateLimit.RefusalCost), a
	// server that spends work on what it refuses.
	thCost = 0.25
)

// BenchmarkThrottled measures what writers get from a server that keeps
// signalling overload: goodput (documents stored per second, the writers'
// start to the last document stored) and the insert commands the server
// received per document stored (refused ones and the driver's own
// overload retries included).
//
// Sub-benchmarks:
//
//   - limit=off: writeguard's defaults with WithoutAdaptiveLimit (the code
//     before the adaptive limit): each call waits as long as the server
//     asks after a throttled failure (the driver has already retried it
//     twice with backoff inside the attempt) and nothing lowers the
//     number of calls in flight;
//   - limit=on: writeguard's defaults, its adaptive limit on
//     (writeguard.AdaptiveLimit: AIMD on the driver calls in flight,
//     halved by a call whose final error is labelled
//     SystemOverloadedError; the driver's hidden retries are not seen);
//   - limit=aimd-outside: the limit off, each call admitted by an AIMD
//     concurrency limit kept by the benchmark, outside writeguard
//     (aimdLimit, the sketch of phase 1): it halves the limit when a call
//     met a 462, the driver's hidden retries included (seen through the
//     client's command monitor), and adds one call per window of calls
//     that met none.
//
// A writer sends a call's Report.Remaining again until every document is
// stored (writeBatch). Metrics, medians over the iterations (run with
// -benchtime 5x): goodput-docs/s, cmds/doc, refused/doc (462 replies per
// document), lost and duplicated (on the server), calls/batch.
func BenchmarkThrottled(b *testing.B) {
	for _, cost := range []float64{0, thCost} {
		for _, limit := range []string{"off", "on", "aimd-outside"} {
			b.Run(fmt.Sprintf("refusal-cost=%g/limit=%s", cost, limit), func(b *testing.B) { benchThrottled(b, limit, cost) })
		}
	}
}

// benchThrottled runs the workload b.N times in one mode and reports the
// medians.
func benchThrottled(b *testing.B, limit string, cost float64) {
	var m foMetrics
	for b.Loop() {
		r := runThrottled(b, limit, cost)
		m.put("goodput-docs/s", float64(r.distinct)/r.elapsed.Seconds())
		m.put("cmds/doc", float64(r.inserts)/float64(r.distinct))
		m.put("refused/doc", float64(r.refused)/float64(r.distinct))
		m.put("lost", float64(thDocs-r.distinct))
		m.put("duplicated", float64(r.stored-r.distinct))
		m.put("calls/batch", float64(r.calls)/float64(thWriters*thCalls))
		b.Logf("%s: %d stored in %.2f s (%.0f docs/s), %d inserts (%d refused, %d admitted), %d calls, unstored in Reports %v; limit: %s",
			limit, r.distinct, r.elapsed.Seconds(), float64(r.distinct)/r.elapsed.Seconds(), r.inserts, r.refused, r.admitted, r.calls, r.reasons, r.limit)
	}
	m.report(b)
}

type thResult struct {
	elapsed                    time.Duration
	inserts, refused, admitted int64
	calls, stored, distinct    int
	reasons                    map[string]int
	limit                      string
}

func runThrottled(tb testing.TB, mode string, cost float64) thResult {
	tb.Helper()
	const name = "throttled"
	ns := benchDB + "." + name
	if err := directClient(tb).Database(benchDB).Collection(name).Drop(context.Background()); err != nil {
		tb.Fatal(err)
	}
	lim, err := faultproxy.NewRateLimiter(faultproxy.RateLimit{PerSecond: thRate, Burst: thRate / 4, RefusalCost: cost})
	if err != nil {
		tb.Fatal(err)
	}
	p, err := faultproxy.New(faultproxy.WithUpstream(embeddedServer(tb).Addr()), faultproxy.WithReplicaSet("rs0"),
		faultproxy.WithScript(faultproxy.MustScript(faultproxy.On("insert").In(ns).Always().Do(lim.Fault()))))
	if err != nil {
		tb.Fatal(err)
	}
	if err := p.Start(context.Background()); err != nil {
		tb.Fatal(err)
	}
	al := newAIMDLimit(thWriters)
	c, err := mongo.Connect(options.Client().ApplyURI(p.URI()).SetRetryWrites(true).
		SetMaxPoolSize(2 * thWriters).SetMonitor(al.monitor()))
	if err != nil {
		_ = p.Close()
		tb.Fatal(err)
	}
	defer closeUpstream(p, c)
	tr := newFoTrace()
	lc := &limitCount{}
	opts := []writeguard.Option{writeguard.WithHooks(hooks.Hooks{LimitChanged: lc.changed})}
	if mode != "on" {
		opts = append(opts, writeguard.WithoutAdaptiveLimit())
	}
	g, err := writeguard.Wrap(c.Database(benchDB).Collection(name), opts...)
	if err != nil {
		tb.Fatal(err)
	}
	var (
		wg    sync.WaitGroup
		calls atomic.Int64
		first atomic.Pointer[error]
	)
	ctx := context.Background()
	t0 := time.Now()
	for w := range thWriters {
		wg.Go(func() {
			for k := range thCalls {
				insert := guardedInsert(g)
				if mode == "aimd-outside" {
					insert = al.wrap(insert)
				}
				n, err := writeBatch(ctx, insert, orderLines((w*thCalls+k)*thBatch, thBatch), tr.report)
				calls.Add(int64(n))
				if err != nil {
					first.CompareAndSwap(nil, &err)
				}
			}
		})
	}
	wg.Wait()
	r := thResult{elapsed: time.Since(t0), calls: int(calls.Load()), reasons: tr.reasons, limit: al.String()}
	if mode == "on" {
		r.limit = lc.String()
	}
	if e := first.Load(); e != nil {
		tb.Fatal(*e)
	}
	r.inserts = p.Stats().CountIn("insert", ns)
	r.admitted, r.refused = lim.Counts()
	r.stored, r.distinct = countStored(tb, name)
	return r
}

// limitCount counts the changes of writeguard's adaptive limit
// (hooks.LimitChanged).
type limitCount struct {
	mu                sync.Mutex
	cuts, raises, low int
	last              int
}

func (l *limitCount) changed(_ context.Context, ev *hooks.LimitChange) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if ev.Reason == "overload" || ev.Reason == "overload_observed" {
		l.cuts++
	} else {
		l.raises++
	}
	if l.low == 0 || ev.Limit < l.low {
		l.low = ev.Limit
	}
	l.last = ev.Limit
}

func (l *limitCount) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return fmt.Sprintf("writeguard's: %d cuts, %d raises, lowest %d, final %d driver calls in flight", l.cuts, l.raises, l.low, l.last)
}

// aimdLimit is the benchmark's sketch of an adaptive concurrency limit:
// additive increase, multiplicative decrease of the number of guarded
// calls in flight, between 1 and max. A call that met an overload reply
// (a reply labelled SystemOverloadedError, such as 462, seen by the
// client's command monitor, so the driver's hidden retries count; or in
// the call's final error) halves the limit, at most once per window (the calls that
// started before the last decrease do not decrease it again); every call
// that met none adds 1/limit (one more call in flight per window of
// calls).
type aimdLimit struct {
	max float64

	mu        sync.Mutex
	cond      *sync.Cond
	limit     float64
	inflight  int
	epoch     int // decreases so far
	decreases int
	minSeen   float64
}

type aimdCallKey struct{}

// aimdCall is one call's state: whether the monitor saw an overload
// reply for it, and the epoch it started in.
type aimdCall struct {
	overloaded atomic.Bool
	epoch      int
}

func newAIMDLimit(maxInFlight int) *aimdLimit {
	l := &aimdLimit{max: float64(maxInFlight), limit: float64(maxInFlight), minSeen: float64(maxInFlight)}
	l.cond = sync.NewCond(&l.mu)
	return l
}

func (l *aimdLimit) monitor() *event.CommandMonitor {
	return &event.CommandMonitor{Failed: func(ctx context.Context, e *event.CommandFailedEvent) {
		if c, ok := ctx.Value(aimdCallKey{}).(*aimdCall); ok && overloadReply(e.Failure) {
			c.overloaded.Store(true)
		}
	}}
}

// overloadReply reports whether an error is an overload refusal: labelled
// SystemOverloadedError (client-backpressure specification). A command
// monitor's failure is the driver's internal error (x/mongo/driver.Error),
// a call's final error a mongo.ServerError: both have HasErrorLabel.
func overloadReply(err error) bool {
	var le interface{ HasErrorLabel(string) bool }
	return errors.As(err, &le) && le.HasErrorLabel("SystemOverloadedError")
}

// wrap admits each call of insert through the limit.
func (l *aimdLimit) wrap(insert insertFunc) insertFunc {
	return func(ctx context.Context, docs []any) error {
		c := l.acquire()
		err := insert(context.WithValue(ctx, aimdCallKey{}, c), docs)
		l.release(c, c.overloaded.Load() || err != nil && overloadReply(err))
		return err
	}
}

func (l *aimdLimit) acquire() *aimdCall {
	l.mu.Lock()
	defer l.mu.Unlock()
	for float64(l.inflight) >= math.Floor(l.limit) {
		l.cond.Wait()
	}
	l.inflight++
	return &aimdCall{epoch: l.epoch}
}

func (l *aimdLimit) release(c *aimdCall, overloaded bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.inflight--
	switch {
	case overloaded && c.epoch == l.epoch:
		l.limit = max(1, l.limit/2)
		l.epoch++
		l.decreases++
		l.minSeen = min(l.minSeen, l.limit)
	case !overloaded:
		l.limit = min(l.max, l.limit+1/l.limit)
	}
	l.cond.Broadcast()
}

func (l *aimdLimit) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return fmt.Sprintf("%d decreases, lowest %.1f, final %.1f calls in flight", l.decreases, l.minSeen, l.limit)
}
