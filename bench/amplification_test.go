package bench

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/writeguard/writeguard"
	"github.com/writeguard/writeguard/envelope"
	"github.com/writeguard/writeguard/hooks"
	"github.com/writeguard/writeguard/mocks/faultproxy"
	"github.com/writeguard/writeguard/policy"
)

// The amplification workload: ampDocs order lines written in ordered
// InsertMany batches of ampBatch (the driver's default, ordered: true).
// Every document carries a unique content field, seq, by which the
// documents are counted afterwards. Of them:
//
//   - ampInvalid fail the collection's validator (faultproxy's emulated
//     $jsonSchema; code 121);
//   - ampReplays are re-deliveries of lines already stored: they carry a
//     content-derived _id ("<order_id>/<line>") and the same line is in the
//     collection before the run (code 11000 on _id);
//   - the rest carry no _id: the driver, or writeguard, assigns one.
//
// Every insert into the collection is subject to the same seeded fault
// schedule (faultproxy.RandomSchedule, by occurrence): a stepdown reply
// (10107 NotWritablePrimary or 189 PrimarySteppedDown, labelled
// RetryableWriteError, nothing written) or a dropped reply
// (CloseAfterForward: written, the client sees a network error).
const (
	ampDocs    = 2000
	ampBatch   = 100
	ampInvalid = 10
	ampReplays = 10

	ampPStepdown   = 0.05 // each of 10107 and 189
	ampPDropReply  = 0.08
	ampDefaultSeed = 1
)

const (
	ampSeedEnv      = "WRITEGUARD_AMPLIFICATION_SEED"
	ampUnorderedEnv = "WRITEGUARD_AMPLIFICATION_UNORDERED"
	ampReplSetEnv   = "WRITEGUARD_AMPLIFICATION_REPLSET"
)

// ampConfig is one amplification run's shape.
//
//   - seed: the fault schedule and the places of the bad documents;
//   - ordered: ordered batches (the driver's default) or unordered;
//   - replicaSet: the bed in replica-set mode (faultproxy.WithReplicaSet in
//     front of the embedded FerretDB), so every strategy's client has the
//     driver's retryable writes on (the default) and the proxy executes
//     each (lsid, txnNumber) once, as a replica set does. Otherwise the
//     standalone runs: FerretDB as it is, and only raw-retrywrites sees a
//     replica-set hello (replicaSetHello), without the server's
//     retryable-write deduplication.
type ampConfig struct {
	seed                int64
	ordered, replicaSet bool
}

// ampEnvConfig is the configuration the environment asks for:
// WRITEGUARD_AMPLIFICATION_SEED (default 1),
// WRITEGUARD_AMPLIFICATION_UNORDERED=1, WRITEGUARD_AMPLIFICATION_REPLSET=1.
func ampEnvConfig() ampConfig {
	return ampConfig{seed: ampSeed(), ordered: os.Getenv(ampUnorderedEnv) == "", replicaSet: os.Getenv(ampReplSetEnv) != ""}
}

func (c ampConfig) insertOpts() *options.InsertManyOptionsBuilder {
	return options.InsertMany().SetOrdered(c.ordered)
}

// replicaSetProxy starts a faultproxy in replica-set mode in front of the
// embedded server, with the rules of items, and a client with the
// driver's defaults (retryable writes on). The caller closes both
// (closeUpstream).
func replicaSetProxy(tb testing.TB, items ...faultproxy.ScriptItem) (*faultproxy.Proxy, *mongo.Client) {
	tb.Helper()
	script, err := faultproxy.NewScript(items...)
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
	c, err := mongo.Connect(options.Client().ApplyURI(p.URI()).SetRetryWrites(true))
	if err != nil {
		_ = p.Close()
		tb.Fatal(err)
	}
	if err := c.Ping(context.Background(), nil); err != nil {
		tb.Fatal(err)
	}
	return p, c
}

func ampSeed() int64 {
	if v := os.Getenv(ampSeedEnv); v != "" {
		s, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			panic(fmt.Sprintf("%s=%q: %v", ampSeedEnv, v, err))
		}
		return s
	}
	return ampDefaultSeed
}

// orderLineWithID is an order line with a content-derived _id.
type orderLineWithID struct {
	ID   string    `bson:"_id"`
	Line orderLine `bson:",inline"`
}

// workload is one run's input.
type workload struct {
	docs    []any   // in input order
	seqs    []int64 // seq of docs[i]
	batches [][]any // docs cut into batches
	first   []int   // index in docs of each batch's first document
	replays []any   // the lines stored before the run
}

func newWorkload(seed int64) workload {
	r := rand.New(rand.NewPCG(uint64(seed), 0x5eed))
	kind := make([]byte, ampDocs) // 0 plain, 1 invalid, 2 replay
	for placed := 0; placed < ampInvalid; {
		if i := r.IntN(ampDocs); kind[i] == 0 {
			kind[i] = 1
			placed++
		}
	}
	for placed := 0; placed < ampReplays; {
		if i := r.IntN(ampDocs); kind[i] == 0 {
			kind[i] = 2
			placed++
		}
	}
	var w workload
	for i := range ampDocs {
		var d any
		switch kind[i] {
		case 1:
			d = invalidOrderLine(i)
		case 2:
			l := newOrderLine(i)
			d = orderLineWithID{ID: l.OrderID + "/" + strconv.Itoa(int(l.Line)), Line: l}
			w.replays = append(w.replays, d)
		default:
			d = newOrderLine(i)
		}
		w.docs = append(w.docs, d)
		w.seqs = append(w.seqs, int64(i))
	}
	for i := 0; i < ampDocs; i += ampBatch {
		w.batches = append(w.batches, w.docs[i:min(i+ampBatch, ampDocs)])
		w.first = append(w.first, i)
	}
	return w
}

// faultSchedule is the seeded schedule every strategy meets, on the
// inserts into ns.
func faultSchedule(ns string, seed int64) []faultproxy.ScriptItem {
	stepdown := func(code int32, name string) faultproxy.Fault {
		return faultproxy.ErrorReply(faultproxy.CommandError{Code: code, CodeName: name, Message: "scripted stepdown", Labels: []string{"RetryableWriteError"}})
	}
	return []faultproxy.ScriptItem{
		faultproxy.Validator(ns, orderSchema()),
		faultproxy.On("insert").In(ns).Always().Do(faultproxy.RandomSchedule(seed,
			faultproxy.Rate{Fault: stepdown(10107, "NotWritablePrimary"), P: ampPStepdown},
			faultproxy.Rate{Fault: stepdown(189, "PrimarySteppedDown"), P: ampPStepdown},
			faultproxy.Rate{Fault: faultproxy.CloseAfterForward(), P: ampPDropReply},
		)),
	}
}

// ampResult is what a strategy tells its caller: the documents it
// reports as not written (by input index), and the dead-letter queue; for
// writeguard, its attempts by kind.
type ampResult struct {
	reported map[int]bool
	dlq      map[int64]bool // by seq
	attempts ampAttempts
}

// ampAttempts counts writeguard's driver calls by kind, from the hooks'
// AttemptStart: the first of a call (first), a later one without a
// backoff wait before it (continuation: an ordered write resumed after a
// handled document, in its window), and a retry after a backoff wait
// (retry).
type ampAttempts struct {
	mu                           sync.Mutex
	first, continuation, retried int
}

func (a *ampAttempts) hooks() hooks.Hooks {
	return hooks.Hooks{AttemptStarted: func(ctx context.Context, ev *hooks.AttemptStart) context.Context {
		a.mu.Lock()
		defer a.mu.Unlock()
		switch {
		case ev.Attempt == 1:
			a.first++
		case ev.Delay > 0:
			a.retried++
		default:
			a.continuation++
		}
		return ctx
	}}
}

func (a *ampAttempts) total() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.first + a.continuation + a.retried
}

func newAmpResult() *ampResult {
	return &ampResult{reported: map[int]bool{}, dlq: map[int64]bool{}}
}

func (r *ampResult) reportBatch(first, n int) {
	for i := range n {
		r.reported[first+i] = true
	}
}

// reportDriverError records what the driver's error names as not written:
// the write errors' documents, or the whole batch when the error names no
// document (a command error, a network error).
func (r *ampResult) reportDriverError(err error, first, n int) {
	var bwe mongo.BulkWriteException
	if errors.As(err, &bwe) && len(bwe.WriteErrors) > 0 {
		for _, we := range bwe.WriteErrors {
			r.reported[first+we.Index] = true
		}
		return
	}
	r.reportBatch(first, n)
}

type ampStrategy struct {
	name       string
	replicaSet bool // the proxy presents a replica-set primary: retryable writes on
	run        func(ctx context.Context, coll *mongo.Collection, w workload, cfg ampConfig) *ampResult
}

func seededBackoff(seed int64) policy.Backoff {
	r := rand.New(rand.NewPCG(uint64(seed), 0xb0ff))
	return policy.Backoff{Jitter: r.Float64}.WithDefaults()
}

var ampStrategies = []ampStrategy{
	{"raw-retrywrites", true, runRaw},
	{"naive-retry", false, runNaive},
	{"per-code-dispatch", false, runDispatch},
	{"writeguard", false, runWriteguard},
}

// runRaw is the driver alone, with retryable writes (one retry of a
// retryable error, the same _ids): a failed batch is reported as the
// driver's error names it.
func runRaw(ctx context.Context, coll *mongo.Collection, w workload, cfg ampConfig) *ampResult {
	res := newAmpResult()
	for b, batch := range w.batches {
		if _, err := coll.InsertMany(ctx, batch, cfg.insertOpts()); err != nil {
			res.reportDriverError(err, w.first[b], len(batch))
		}
	}
	return res
}

// runNaive re-sends the whole batch on any error, with backoff, up to 5
// attempts, then reports the batch as not written. The documents carry
// no _id, so the driver mints new ones on every attempt.
func runNaive(ctx context.Context, coll *mongo.Collection, w workload, cfg ampConfig) *ampResult {
	res := newAmpResult()
	bo := seededBackoff(cfg.seed)
	for b, batch := range w.batches {
		for attempt := 1; ; attempt++ {
			_, err := coll.InsertMany(ctx, batch, cfg.insertOpts())
			if err == nil {
				break
			}
			if attempt == bo.MaxAttempts {
				res.reportBatch(w.first[b], len(batch))
				break
			}
			time.Sleep(bo.Delay(attempt))
		}
	}
	return res
}

var transientCodes = []int{6, 7, 89, 91, 189, 262, 9001, 10107, 11600, 11602, 13435, 13436}

func transient(err error) bool {
	if mongo.IsNetworkError(err) || mongo.IsTimeout(err) {
		return true
	}
	var se mongo.ServerError
	if !errors.As(err, &se) {
		return false
	}
	if se.HasErrorLabel("RetryableWriteError") {
		return true
	}
	for _, c := range transientCodes {
		if se.HasErrorCode(c) {
			return true
		}
	}
	return false
}

// runDispatch is the usual hand-written policy: skip (report) duplicate
// keys and validation failures, retry the whole batch with backoff on
// transient errors (up to 5 attempts), report anything else.
func runDispatch(ctx context.Context, coll *mongo.Collection, w workload, cfg ampConfig) *ampResult {
	res := newAmpResult()
	bo := seededBackoff(cfg.seed)
	for b, batch := range w.batches {
		for attempt := 1; ; attempt++ {
			_, err := coll.InsertMany(ctx, batch, cfg.insertOpts())
			if err == nil {
				break
			}
			var bwe mongo.BulkWriteException
			if errors.As(err, &bwe) && len(bwe.WriteErrors) > 0 && bwe.WriteConcernError == nil {
				skip := true
				for _, we := range bwe.WriteErrors {
					skip = skip && (we.Code == 11000 || we.Code == 121)
				}
				if skip {
					res.reportDriverError(err, w.first[b], len(batch))
					break
				}
			}
			if !transient(err) || attempt == bo.MaxAttempts {
				res.reportDriverError(err, w.first[b], len(batch))
				break
			}
			time.Sleep(bo.Delay(attempt))
		}
	}
	return res
}

// memSink is an in-memory dead-letter queue.
type memSink struct {
	mu   sync.Mutex
	envs []envelope.Envelope
}

func (s *memSink) Put(_ context.Context, envs []envelope.Envelope) error {
	s.mu.Lock()
	s.envs = append(s.envs, envs...)
	s.mu.Unlock()
	return nil
}

// runWriteguard is writeguard with its defaults, an in-memory dead-letter
// sink and ConflictSkip (the _ids that collide are content-derived: the
// stored line is the same). A document is reported when its disposition
// is not written, already_written, dead_lettered or conflict_skipped.
// Its driver calls (attempts) are counted by kind through the hooks
// (ampAttempts).
func runWriteguard(ctx context.Context, coll *mongo.Collection, w workload, cfg ampConfig) *ampResult {
	res := newAmpResult()
	sink := &memSink{}
	g, err := writeguard.Wrap(coll,
		writeguard.WithDeadLetter(sink),
		writeguard.WithConflictHandler(writeguard.ConflictSkip()),
		writeguard.WithBackoff(seededBackoff(cfg.seed)),
		writeguard.WithHooks(res.attempts.hooks()))
	if err != nil {
		panic(err)
	}
	for b, batch := range w.batches {
		_, err := g.InsertMany(ctx, batch, cfg.insertOpts())
		if err == nil {
			continue
		}
		var r *writeguard.Report
		if !errors.As(err, &r) {
			res.reportBatch(w.first[b], len(batch))
			continue
		}
		for _, o := range r.Outcomes {
			switch o.Disposition {
			case writeguard.Written, writeguard.AlreadyWritten, writeguard.DeadLettered, writeguard.ConflictSkipped:
			default:
				res.reported[w.first[b]+o.Index] = true
			}
		}
	}
	for _, env := range sink.envs {
		if v, err := env.Original.LookupErr("seq"); err == nil {
			res.dlq[v.AsInt64()] = true
		}
	}
	return res
}

// ampRow is one strategy's line of the table.
type ampRow struct {
	strategy              string
	docs                  int
	commands              int64 // on the collection: inserts (driver retries included) and reads
	inserts               int64
	sent                  int64 // documents sent in inserts
	faults                int64
	lost, dup             int
	reported, deadLetters int
	elapsed               time.Duration
	// writeguard's commands by class: its driver calls by kind
	// (ampAttempts), the driver's own retries (the insert commands beyond
	// those calls), its read-backs (find, and a getMore where the server
	// did not answer in one reply) and anything else.
	first, continuation, retried, driverRetries, readBacks, other int
	otherNames                                                    string // the other commands by name
}

var ampRun struct {
	mu sync.Mutex
	n  int
}

// runAmplification runs one strategy against the embedded server on a
// fresh collection and counts.
func runAmplification(tb testing.TB, s ampStrategy, cfg ampConfig) ampRow {
	tb.Helper()
	ctx := context.Background()
	seed := cfg.seed
	ampRun.mu.Lock()
	ampRun.n++
	name := fmt.Sprintf("amp_%s_%d_%d", strings.ReplaceAll(s.name, "-", "_"), seed, ampRun.n)
	ampRun.mu.Unlock()
	ns := benchDB + "." + name
	w := newWorkload(seed)

	target := directClient(tb).Database(benchDB).Collection(name)
	if err := target.Drop(ctx); err != nil {
		tb.Fatal(err)
	}
	if _, err := target.InsertMany(ctx, w.replays); err != nil {
		tb.Fatalf("seed the replayed lines: %v", err)
	}

	var (
		p *faultproxy.Proxy
		c *mongo.Client
	)
	if cfg.replicaSet {
		p, c = replicaSetProxy(tb, faultSchedule(ns, seed)...)
	} else {
		p, c = upstreamProxy(tb, s.replicaSet, faultSchedule(ns, seed)...)
	}
	coll := c.Database(benchDB).Collection(name)
	t0 := time.Now()
	res := s.run(ctx, coll, w, cfg)
	elapsed := time.Since(t0)
	st := p.Stats()
	closeUpstream(p, c)

	row := ampRow{strategy: s.name, docs: len(w.docs), elapsed: elapsed, reported: len(res.reported), deadLetters: len(res.dlq)}
	for k, v := range st.CommandsByNamespace {
		if k.Namespace == ns {
			row.commands += v
		}
	}
	row.inserts = st.CountIn("insert", ns)
	if calls := res.attempts.total(); calls > 0 {
		a := &res.attempts
		row.first, row.continuation, row.retried = a.first, a.continuation, a.retried
		row.driverRetries = int(row.inserts) - calls
		row.readBacks = int(st.CountIn("find", ns) + st.CountIn("getMore", ns))
		row.other = int(row.commands) - int(row.inserts) - row.readBacks
		var names []string
		for k, v := range st.CommandsByNamespace {
			if k.Namespace == ns && k.Name != "insert" && k.Name != "find" && k.Name != "getMore" {
				names = append(names, fmt.Sprintf("%s %d", k.Name, v))
			}
		}
		slices.Sort(names)
		row.otherNames = strings.Join(names, ", ")
	}
	row.sent = st.Documents["insert"]
	for k, v := range st.Faults {
		if k != faultproxy.FaultValidation && k != faultproxy.FaultCustom && k != faultproxy.FaultFailPoint {
			row.faults += v
		}
	}

	stored := map[int64]int{}
	cur, err := target.Find(ctx, bson.D{})
	if err != nil {
		tb.Fatal(err)
	}
	for cur.Next(ctx) {
		if v, err := cur.Current.LookupErr("seq"); err == nil {
			stored[v.AsInt64()]++
		}
	}
	if err := cur.Err(); err != nil {
		tb.Fatal(err)
	}
	_ = cur.Close(ctx)
	for i, seq := range w.seqs {
		if stored[seq] == 0 && !res.dlq[seq] && !res.reported[i] {
			row.lost++
		}
	}
	for _, n := range stored {
		if n > 1 {
			row.dup += n - 1
		}
	}
	_ = target.Drop(ctx)
	return row
}

// BenchmarkAmplification runs each strategy over the same workload and
// seeded fault schedule (see the ampDocs constants) against the embedded
// server. One iteration takes seconds: run with -benchtime 1x. Metrics:
// cmds/doc (commands on the collection per input document, driver retries
// and read-backs included), lost, dup (extra copies stored), reported
// (documents given back as not written), dlq.
func BenchmarkAmplification(b *testing.B) {
	cfg := ampEnvConfig()
	for _, s := range ampStrategies {
		b.Run(s.name, func(b *testing.B) {
			var sum ampRow
			k := 0
			for b.Loop() {
				r := runAmplification(b, s, cfg)
				sum.commands += r.commands
				sum.sent += r.sent
				sum.lost += r.lost
				sum.dup += r.dup
				sum.reported += r.reported
				sum.deadLetters += r.deadLetters
				sum.docs += r.docs
				k++
			}
			n := float64(k)
			b.ReportMetric(float64(sum.commands)/float64(sum.docs), "cmds/doc")
			b.ReportMetric(float64(sum.sent)/float64(sum.docs), "sent/doc")
			b.ReportMetric(float64(sum.lost)/n, "lost")
			b.ReportMetric(float64(sum.dup)/n, "dup")
			b.ReportMetric(float64(sum.reported)/n, "reported")
			b.ReportMetric(float64(sum.deadLetters)/n, "dlq")
		})
	}
}

const ampTableEnv = "WRITEGUARD_AMPLIFICATION"

// TestAmplificationTable prints the amplification table in markdown. It
// takes about 20 seconds, so it is skipped unless -run names it or
// WRITEGUARD_AMPLIFICATION=1 is set.
func TestAmplificationTable(t *testing.T) {
	if f := flag.Lookup("test.run"); os.Getenv(ampTableEnv) == "" && (f == nil || !strings.Contains(f.Value.String(), "AmplificationTable")) {
		t.Skipf("skipped: takes about 20 s; run with -run TestAmplificationTable or %s=1", ampTableEnv)
	}
	fmt.Print(ampTable(t, ampEnvConfig()))
}

// ampTable runs every strategy with cfg and returns the markdown table,
// with its two-line title, and the table of writeguard's commands by
// class.
func ampTable(tb testing.TB, cfg ampConfig) string {
	var rows []ampRow
	for _, s := range ampStrategies {
		rows = append(rows, runAmplification(tb, s, cfg))
	}
	var sb strings.Builder
	mode := "ordered"
	if !cfg.ordered {
		mode = "unordered"
	}
	fmt.Fprintf(&sb, "Amplification: %d order lines in %s InsertMany batches of %d; %d invalid (121), %d replays of stored lines (11000);\n",
		ampDocs, mode, ampBatch, ampInvalid, ampReplays)
	bed := "embedded FerretDB behind faultproxy (standalone; raw-retrywrites sees a replica-set hello without retryable-write deduplication)"
	if cfg.replicaSet {
		bed = "embedded FerretDB behind faultproxy in replica-set mode (every client retries retryable writes once; each lsid+txnNumber executes once)"
	}
	fmt.Fprintf(&sb, "per insert: P(10107)=P(189)=%.2f stepdown replies, P(dropped reply)=%.2f; seed %d; %s.\n\n",
		ampPStepdown, ampPDropReply, cfg.seed, bed)
	sb.WriteString("| strategy | cmds/doc | commands | docs sent/doc | faults met | lost | duplicated | reported not written | dead-lettered | time |\n")
	sb.WriteString("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n")
	var wg ampRow
	for _, r := range rows {
		fmt.Fprintf(&sb, "| %s | %.4f | %d | %.2f | %d | %d | %d | %d | %d | %.1f s |\n",
			r.strategy, float64(r.commands)/float64(r.docs), r.commands, float64(r.sent)/float64(r.docs), r.faults, r.lost, r.dup, r.reported, r.deadLetters, r.elapsed.Seconds())
		if r.strategy == "writeguard" {
			wg = r
		}
	}
	sb.WriteString("\nwriteguard's commands by class: first sends (one per call), continuations (an ordered write resumed after a handled document), retries after a backoff wait, the driver's own retries, read-backs (find, getMore), other.\n\n")
	sb.WriteString("| first sends | continuations | retries after backoff | driver retries | read-backs | other | commands |\n")
	sb.WriteString("| ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n")
	other := strconv.Itoa(wg.other)
	if wg.otherNames != "" {
		other += " (" + wg.otherNames + ")"
	}
	fmt.Fprintf(&sb, "| %d | %d | %d | %d | %d | %s | %d |\n", wg.first, wg.continuation, wg.retried, wg.driverRetries, wg.readBacks, other, wg.commands)
	return sb.String()
}

// BenchmarkStepdown10000ReplicaSet is BenchmarkStepdown10000 on the bed in
// replica-set mode (replicaSetProxy): 10,000 order lines in one
// InsertMany, every insert answered 10107 NotWritablePrimary (labelled
// RetryableWriteError) for the first 2 seconds. Both variants have the
// driver's retryable writes on, as against a production replica set:
// guarded is writeguard with policy.Backoff{MaxAttempts: 10, MaxElapsed:
// 30 s}; raw-retrywrites is the driver alone (it retries once). Run it with
// -benchtime 1x. Metrics: insert commands per op (driver retries
// included), documents stored per op (counted on the server), faults
// fired per op.
func BenchmarkStepdown10000ReplicaSet(b *testing.B) {
	stepdown10000(b, "stepdown_rs", func(b *testing.B, _ string, rule *faultproxy.Rule) (*faultproxy.Proxy, *mongo.Client) {
		return replicaSetProxy(b, rule)
	})
}
