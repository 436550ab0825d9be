package bench

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/event"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/writeguard/writeguard"
	"github.com/writeguard/writeguard/mocks/faultproxy"
	"github.com/writeguard/writeguard/policy"
)

// Shape of BenchmarkFailover: foWriters writers, each writing foCalls
// ordered InsertMany calls of foBatch order lines (batch b holds the order
// lines with seq b·foBatch … b·foBatch+foBatch−1), through one Guarded,
// to the embedded FerretDB behind a faultproxy in replica-set mode
// (retryable writes on).
const (
	foWriters  = 16
	foCalls    = 5
	foBatch    = 100
	foBatches  = foWriters * foCalls
	foOutage   = time.Second
	foTrigger  = 24  // the outage starts when the bed receives this insert command
	foMaxCalls = 200 // guarded calls for one batch before the run is a failure
)

// failover is the bed's scripted failover on one namespace. Before the
// trigger-th insert command every insert is forwarded. That command starts
// the outage: for length, every insert is answered 10107
// NotWritablePrimary labelled RetryableWriteError without being forwarded
// (faultproxy's ErrorReply, which also announces the topology change), and
// every insert that was forwarded before the outage started and is still
// in flight is applied and its reply dropped (the connection closed): a
// primary that steps down with writes on the wire. trigger 0 is no outage.
type failover struct {
	trigger int
	length  time.Duration

	mu       sync.Mutex
	seen     int       // insert commands received
	start    time.Time // the outage's start, zero before
	refused  int       // inserts answered 10107
	dropped  int       // inserts applied with their reply dropped
	after    int       // inserts received after the outage ended
	hit      map[int]bool
	lastSent time.Time // the last insert command received
}

func newFailover(trigger int, length time.Duration) *failover {
	return &failover{trigger: trigger, length: length, hit: map[int]bool{}}
}

var notWritablePrimary = faultproxy.CommandError{Code: 10107, CodeName: "NotWritablePrimary",
	Message: "not primary (scripted failover)", Labels: []string{"RetryableWriteError"}}

// script returns the failover's rules for inserts into ns: the refusal
// first (its predicate sees every insert once, in arrival order), then the
// forwarding that drops the replies of the writes in flight.
func (f *failover) script(ns string) []faultproxy.ScriptItem {
	return []faultproxy.ScriptItem{
		faultproxy.On("insert").In(ns).Always().Where(f.arrive).Do(faultproxy.ErrorReply(notWritablePrimary)),
		faultproxy.On("insert").In(ns).Always().Do(faultproxy.Custom(f.forward)),
	}
}

// arrive counts an insert, starts the outage at the trigger, and reports
// whether the outage refuses it.
func (f *failover) arrive(cmd *faultproxy.Command) bool {
	now := time.Now()
	f.mu.Lock()
	defer f.mu.Unlock()
	f.seen++
	f.lastSent = now
	if f.trigger > 0 && f.seen == f.trigger {
		f.start = now
	}
	if f.start.IsZero() {
		return false
	}
	if now.Sub(f.start) >= f.length {
		f.after++
		return false
	}
	f.refused++
	f.hit[batchOf(cmd)] = true
	return true
}

// forward forwards an insert the outage did not refuse, and drops its
// reply when the outage started while it was in flight.
func (f *failover) forward(cmd *faultproxy.Command, fwd func(*faultproxy.Command) (bson.Raw, error)) (bson.Raw, error) {
	f.mu.Lock()
	before := f.start.IsZero()
	f.mu.Unlock()
	reply, err := fwd(cmd)
	if err != nil || !before {
		return reply, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.start.IsZero() {
		return reply, nil
	}
	f.dropped++
	f.hit[batchOf(cmd)] = true
	return nil, faultproxy.ErrCloseConnection
}

// batchOf is the batch of an insert command: its first document's seq
// over foBatch (a re-sent remainder keeps the batch of its documents).
func batchOf(cmd *faultproxy.Command) int {
	docs := cmd.Statements()
	if len(docs) == 0 {
		return -1
	}
	v, err := docs[0].LookupErr("seq")
	if err != nil {
		return -1
	}
	return int(v.AsInt64() / foBatch)
}

// window returns the outage's start and end relative to t0 (zeros when
// it did not start).
func (f *failover) window(t0 time.Time) (start, end time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.start.IsZero() {
		return 0, 0
	}
	return f.start.Sub(t0), f.start.Sub(t0) + f.length
}

// foBed is the replica-set bed of one failover run: the proxy, a client
// with a command monitor, and the collection.
type foBed struct {
	proxy *faultproxy.Proxy
	coll  *mongo.Collection
	ns    string
	mon   *foMonitor
	fo    *failover
}

func newFoBed(tb testing.TB, name string, fo *failover, tr *foTrace) *foBed {
	tb.Helper()
	ns := benchDB + "." + name
	if err := directClient(tb).Database(benchDB).Collection(name).Drop(context.Background()); err != nil {
		tb.Fatal(err)
	}
	script, err := faultproxy.NewScript(fo.script(ns)...)
	if err != nil {
		tb.Fatal(err)
	}
	p, err := faultproxy.New(faultproxy.WithUpstream(embeddedServer(tb).Addr()), faultproxy.WithReplicaSet("rs0"), faultproxy.WithScript(script))
	if err != nil {
		tb.Fatal(err)
	}
	if err := p.Start(context.Background()); err != nil {
		tb.Fatal(err)
	}
	mon := newFoMonitor(name, tr)
	c, err := mongo.Connect(options.Client().ApplyURI(p.URI()).SetRetryWrites(true).
		SetMaxPoolSize(2 * foWriters).SetMonitor(mon.monitor()))
	if err != nil {
		_ = p.Close()
		tb.Fatal(err)
	}
	if err := c.Ping(context.Background(), nil); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { closeUpstream(p, c) })
	return &foBed{proxy: p, coll: c.Database(benchDB).Collection(name), ns: ns, mon: mon, fo: fo}
}

// foMonitor counts, from the driver's command monitor, the commands on
// the collection by name, and the inserts that repeat an lsid and
// txnNumber already sent (the driver's own retries). It also records each
// command of a writer (the writer's mark travels in the context the
// driver passes to the monitor) as a span of the writer's trace.
type foMonitor struct {
	coll  string
	trace *foTrace
	mu    sync.Mutex
	n     map[string]int
	txn   map[string]int
	open  map[int64]foCmd // by request id
}

type foCmd struct {
	writer int
	name   string
	start  time.Duration
}

func newFoMonitor(coll string, tr *foTrace) *foMonitor {
	return &foMonitor{coll: coll, trace: tr, n: map[string]int{}, txn: map[string]int{}, open: map[int64]foCmd{}}
}

func (m *foMonitor) monitor() *event.CommandMonitor {
	return &event.CommandMonitor{
		Started: func(ctx context.Context, e *event.CommandStartedEvent) {
			c, _ := e.Command.Lookup(e.CommandName).StringValueOK()
			if c != m.coll {
				return
			}
			m.mu.Lock()
			defer m.mu.Unlock()
			m.n[e.CommandName]++
			if w, ok := ctx.Value(foWriterKey{}).(int); ok {
				m.open[e.RequestID] = foCmd{writer: w, name: e.CommandName, start: m.trace.now()}
			}
			if e.CommandName != "insert" {
				return
			}
			if lsid, err := e.Command.LookupErr("lsid", "id"); err == nil {
				if txn, err := e.Command.LookupErr("txnNumber"); err == nil {
					m.txn[lsid.String()+"/"+strconv.FormatInt(txn.AsInt64(), 10)]++
				}
			}
		},
		Succeeded: func(_ context.Context, e *event.CommandSucceededEvent) { m.finish(e.RequestID, "ok") },
		Failed: func(_ context.Context, e *event.CommandFailedEvent) {
			m.finish(e.RequestID, "failed: "+e.Failure.Error())
		},
	}
}

func (m *foMonitor) finish(id int64, how string) {
	m.mu.Lock()
	c, ok := m.open[id]
	delete(m.open, id)
	m.mu.Unlock()
	if ok {
		m.trace.add(foSpan{writer: c.writer, kind: "cmd " + c.name, start: c.start, end: m.trace.now(), note: how})
	}
}

// counts returns the commands by name and the driver's retries of
// inserts (sends of an lsid and txnNumber after its first).
func (m *foMonitor) counts() (byName map[string]int, driverRetries int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, k := range m.txn {
		driverRetries += k - 1
	}
	return maps.Clone(m.n), driverRetries
}

// foResult is one run of the failover workload.
type foResult struct {
	elapsed            time.Duration // writers' start to the last batch stored
	start, end         time.Duration // the outage, from the writers' start
	inserts, finds     int           // commands on the collection, counted by the bed (inserts) and the monitor (finds)
	driverRetries      int
	refused, dropped   int
	afterOutage        int // inserts received after the outage's end
	hit                int // batches that met the outage
	calls              int // guarded calls
	stored, distinct   int
	trace              *foTrace
	writersEnd         []time.Duration // each writer's end
	lastInsertReceived time.Duration
}

// last returns the writer that finished last.
func (r foResult) last() int {
	last := 0
	for w, e := range r.writersEnd {
		if e > r.writersEnd[last] {
			last = w
		}
	}
	return last
}

// runFailover runs the workload once on a fresh bed: every writer sends
// its batches one after the other and sends a call's Remaining again until
// every document is written or already_written.
func runFailover(tb testing.TB, name string, fo *failover, opts ...writeguard.Option) foResult {
	tb.Helper()
	tr := newFoTrace()
	bed := newFoBed(tb, name, fo, tr)
	g, err := writeguard.Wrap(bed.coll, append(opts, writeguard.WithHooks(tr.hooks()))...)
	if err != nil {
		tb.Fatal(err)
	}
	// No deadline: with one, the driver retries a retryable write until
	// the deadline instead of once (driver v2.10.0
	// x/mongo/driver/operation.go 554–558: an unlimited retry budget when
	// csot.IsTimeoutContext, true for any deadline), and a 1-s outage
	// becomes some 1,800 commands from 16 writers.
	ctx := context.Background()
	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		first  error
		calls  int
		ends   = make([]time.Duration, foWriters)
		ready  = make(chan struct{})
		t0     time.Time
		record = func(err error, n int) {
			mu.Lock()
			defer mu.Unlock()
			calls += n
			if err != nil && first == nil {
				first = err
			}
		}
	)
	for w := range foWriters {
		wg.Go(func() {
			<-ready
			for k := range foCalls {
				b := w*foCalls + k
				n, err := writeBatch(tr.withWriter(ctx, w), guardedInsert(g), orderLines(b*foBatch, foBatch), tr.report)
				record(err, n)
			}
			ends[w] = time.Since(t0)
		})
	}
	t0 = time.Now()
	tr.t0 = t0
	close(ready)
	wg.Wait()
	res := foResult{elapsed: time.Since(t0), calls: calls, trace: tr, writersEnd: ends}
	if first != nil {
		tb.Fatal(first)
	}
	res.start, res.end = fo.window(t0)
	st := bed.proxy.Stats()
	res.inserts = int(st.CountIn("insert", bed.ns))
	byName, dr := bed.mon.counts()
	res.finds, res.driverRetries = byName["find"], dr
	fo.mu.Lock()
	res.refused, res.dropped, res.afterOutage, res.hit = fo.refused, fo.dropped, fo.after, len(fo.hit)
	res.lastInsertReceived = fo.lastSent.Sub(t0)
	fo.mu.Unlock()
	res.stored, res.distinct = countStored(tb, name)
	return res
}

// writeBatch writes docs with insert (a guarded InsertMany) until every
// document is written or already_written, sending each Report's Remaining
// again, and returns the number of calls made. onReport, when not nil,
// sees every Report.
func writeBatch(ctx context.Context, insert insertFunc, docs []any, onReport func(*writeguard.Report)) (int, error) {
	callCtx := ctx
	for n := 1; n <= foMaxCalls; n++ {
		err := insert(callCtx, docs)
		if err == nil {
			return n, nil
		}
		var r *writeguard.Report
		if !errors.As(err, &r) {
			return n, err
		}
		if onReport != nil {
			onReport(r)
		}
		for _, o := range r.Outcomes {
			switch o.Disposition {
			case writeguard.Written, writeguard.AlreadyWritten, writeguard.WrittenUnconfirmed,
				writeguard.Exhausted, writeguard.OutcomeUnknown, writeguard.NotAttempted:
			default:
				return n, fmt.Errorf("document %d ended %s: %w", o.Index, o.Disposition, err)
			}
		}
		rm := r.Remaining()
		if len(rm.Left) > 0 {
			return n, fmt.Errorf("%s: %v", rm, rm.Left)
		}
		if rm.Len() == 0 {
			return n, nil
		}
		docs, callCtx = rm.Documents, rm.Context(ctx)
	}
	return foMaxCalls, fmt.Errorf("a batch not stored after %d calls", foMaxCalls)
}

// insertFunc is one InsertMany call.
type insertFunc func(ctx context.Context, docs []any) error

// guardedInsert is g's InsertMany.
func guardedInsert(g *writeguard.Guarded) insertFunc {
	return func(ctx context.Context, docs []any) error {
		_, err := g.InsertMany(ctx, docs)
		return err
	}
}

// countStored counts the documents of the collection and their distinct
// seqs, on the server.
func countStored(tb testing.TB, name string) (stored, distinct int) {
	tb.Helper()
	ctx := context.Background()
	cur, err := directClient(tb).Database(benchDB).Collection(name).Find(ctx, bson.D{},
		options.Find().SetProjection(bson.D{{Key: "seq", Value: 1}}))
	if err != nil {
		tb.Fatal(err)
	}
	seqs := map[int64]bool{}
	for cur.Next(ctx) {
		stored++
		if v, err := cur.Current.LookupErr("seq"); err == nil {
			seqs[v.AsInt64()] = true
		}
	}
	if err := cur.Err(); err != nil {
		tb.Fatal(err)
	}
	return stored, len(seqs)
}

// BenchmarkFailover measures how long 16 writers take to store all their
// documents through a one-second failover, against the physical floor:
// the same workload without the failover (measured in the same iteration,
// on a fresh collection, the two runs in alternating order) plus the
// outage. The workload: 16 writers × 5 ordered InsertMany calls of 100
// order lines through one Guarded on the replica-set bed (embedded
// FerretDB behind a faultproxy in replica-set mode, retryable writes on);
// a writer sends a call's Report.Remaining again until every document is
// stored. The failover (failover): at the 24th insert command the bed
// answers every insert 10107 NotWritablePrimary for 1 s, and the inserts
// in flight at that moment are applied and their replies dropped.
//
// Sub-benchmarks: budget=default (writeguard's defaults), budget=none
// (WithBudget(nil)) and ride-out (no budget and 10 attempts: the outage
// ridden out with parameters alone, no call giving up). Metrics, medians over the iterations (run with
// -benchtime 5x or more):
//
//   - recovery/floor: time to all stored ÷ (no-fault time + outage);
//   - stored-s and floor-s: those two times;
//   - inserts/batch: insert commands the bed received per batch (80
//     batches), driver retries included; floor-inserts/batch: 1 + 2 × the
//     batches that met the outage ÷ 80 (each such batch needs its refused
//     attempt, which the driver sends twice, and one that succeeds);
//   - finds/batch: read-back queries per batch (the driver's monitor);
//   - lost and duplicated: documents not stored, and extra copies, on the
//     server;
//   - refusals, attempts, backoff-s, refused-wait-s: what the hooks saw
//     (budget refusals, driver calls, backoff waited, time waited after a
//     refusal), summed over the run;
//   - tail-s: time from the outage's end to the last batch stored, beyond
//     the no-fault time left at the outage's start;
//   - recovery/floor-less-readbacks: recovery/floor had the read-back
//     queries taken no time (foTrace.withoutReadBacks, an estimate): on
//     the bed each is a full scan of the collection (FerretDB v1 does not
//     push {_id: {$in: …}} down to SQLite), where MongoDB reads the _id
//     index.
//
// Each iteration logs what the hooks and the command monitor saw
// (foTrace.summary): attempts before, during and after the outage,
// refusals, waits, read-backs, and where the writer that finished last
// spent its time after the outage's end; with
// WRITEGUARD_FAILOVER_TIMELINE=1, that writer's whole timeline.
func BenchmarkFailover(b *testing.B) {
	cases := []struct {
		name string
		opts []writeguard.Option
	}{
		{"budget=default", nil},
		// Before the adaptive limit and its failover gate (issue 32,
		// part 2): every call retries on its own.
		{"budget=default,limit=off", []writeguard.Option{writeguard.WithoutAdaptiveLimit()}},
		{"budget=none", []writeguard.Option{writeguard.WithBudget(nil)}},
		// Riding the outage out with parameters alone: no budget, and
		// enough attempts that a call never gives up within an outage of
		// a few seconds (10 attempts, ceilings 100 ms … 10 s).
		{"ride-out", []writeguard.Option{writeguard.WithBudget(nil), writeguard.WithBackoff(policy.Backoff{MaxAttempts: 10})}},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) { benchFailover(b, c.opts) })
	}
}

func benchFailover(b *testing.B, opts []writeguard.Option) {
	var m foMetrics
	i := 0
	for b.Loop() {
		var clean, faulted foResult
		runClean := func() { clean = runFailover(b, "failover_clean", newFailover(0, 0), opts...) }
		runFault := func() { faulted = runFailover(b, "failover", newFailover(foTrigger, foOutage), opts...) }
		if i%2 == 0 {
			runClean()
			runFault()
		} else {
			runFault()
			runClean()
		}
		i++
		m.add(clean, faulted)
		b.Logf("run %d: %s", i, m.line(clean, faulted))
		b.Logf("run %d: %s", i, faulted.trace.summary(faulted))
		if os.Getenv("WRITEGUARD_FAILOVER_TIMELINE") != "" {
			w := faulted.last()
			b.Logf("run %d: writer %d from the outage's start:%s", i, w, faulted.trace.timeline(w, faulted.start))
		}
	}
	m.report(b)
}

// foMetrics gathers the per-iteration figures whose medians are reported.
type foMetrics struct {
	v map[string][]float64
}

func (m *foMetrics) put(name string, x float64) {
	if m.v == nil {
		m.v = map[string][]float64{}
	}
	m.v[name] = append(m.v[name], x)
}

func (m *foMetrics) add(clean, f foResult) {
	floor := clean.elapsed + foOutage
	m.put("recovery/floor", f.elapsed.Seconds()/floor.Seconds())
	m.put("stored-s", f.elapsed.Seconds())
	m.put("floor-s", floor.Seconds())
	m.put("inserts/batch", float64(f.inserts)/foBatches)
	m.put("floor-inserts/batch", 1+2*float64(f.hit)/foBatches)
	m.put("clean-inserts/batch", float64(clean.inserts)/foBatches)
	m.put("finds/batch", float64(f.finds)/foBatches)
	m.put("lost", float64(foBatches*foBatch-f.distinct))
	m.put("duplicated", float64(f.stored-f.distinct))
	m.put("refusals", float64(f.trace.refusals))
	m.put("attempts", float64(f.trace.attempts))
	m.put("backoff-s", f.trace.backoff.Seconds())
	m.put("refused-wait-s", f.trace.refusedWait.Seconds())
	m.put("tail-s", (f.elapsed - f.end - max(clean.elapsed-f.start, 0)).Seconds())
	m.put("recovery/floor-less-readbacks", f.trace.withoutReadBacks(f.writersEnd).Seconds()/floor.Seconds())
}

func (m *foMetrics) report(b *testing.B) {
	for name, xs := range m.v {
		b.ReportMetric(median(xs), name)
	}
	b.ReportMetric(0, "ns/op")
}

func (m *foMetrics) line(clean, f foResult) string {
	return fmt.Sprintf("clean %.2f s (%d inserts); failover: outage %.2f–%.2f s, all stored %.2f s, recovery/floor %.2f; inserts %d (%.2f/batch, floor %.2f: %d batches hit), driver retries %d, refused %d, dropped %d, received after the outage %d (last at %.2f s), finds %d, calls %d; stored %d, distinct %d",
		clean.elapsed.Seconds(), clean.inserts, f.start.Seconds(), f.end.Seconds(), f.elapsed.Seconds(),
		f.elapsed.Seconds()/(clean.elapsed+foOutage).Seconds(), f.inserts, float64(f.inserts)/foBatches,
		1+2*float64(f.hit)/foBatches, f.hit, f.driverRetries, f.refused, f.dropped, f.afterOutage, f.lastInsertReceived.Seconds(),
		f.finds, f.calls, f.stored, f.distinct)
}
