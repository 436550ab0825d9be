// Package demo is "writeguard demo": it loads real, dirty order lines (UCI
// Online Retail, December 2010, embedded) through a guarded collection
// whose validator rejects some of them, while a fault proxy steps the
// primary down, drops replies and reports write conflicts, and then checks
// that every row is accounted for exactly once.
package demo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/writeguard/writeguard"
	"github.com/writeguard/writeguard/cmd/writeguard/internal/conn"
	"github.com/writeguard/writeguard/cmd/writeguard/internal/progress"
	"github.com/writeguard/writeguard/dlq"
	"github.com/writeguard/writeguard/envelope"
	"github.com/writeguard/writeguard/hooks"
	"github.com/writeguard/writeguard/mocks/faultproxy"
	"github.com/writeguard/writeguard/policy"
)

// Defaults of Config.
const (
	DefaultDatabase   = "writeguard_demo"
	DefaultCollection = "orders"
	DefaultDLQ        = "dead_letters"
	DefaultBatch      = 500
	DefaultWorkers    = 3
	DefaultSeed       = 1
	// DefaultMaxAttempts is the demo's attempt limit per document.
	DefaultMaxAttempts = 6
)

// Config is what "writeguard demo" was asked to do.
type Config struct {
	// URI of a real MongoDB; "" runs the embedded FerretDB behind
	// faultproxy.
	URI string
	// DataDir keeps the embedded server's files, for "writeguard dlq".
	DataDir string
	// Seed drives the fault schedule (embedded only).
	Seed int64
	// NoFaults turns fault injection off (the validator stays).
	NoFaults bool
	// Batch is the InsertMany size; Workers the concurrent InsertManys.
	Batch, Workers int
	// Limit loads only the first Limit rows (0: all).
	Limit int
	// Database, Collection and DLQ name the target and the dead-letter
	// collection.
	Database, Collection, DLQ string
	// Progress, when not nil, receives a progress bar.
	Progress io.Writer
	// Hooks are added to the guarded collection (e.g. otelhook).
	Hooks []hooks.Hooks
	// MaxAttempts bounds writeguard's attempts per document
	// (DefaultMaxAttempts when 0). 1 turns writeguard's retries off: the
	// injected transient faults are then left unresolved, and the check
	// fails.
	MaxAttempts int
	// Sharded runs the embedded server behind faultproxy presented as a
	// mongos with two shards (ShardedLimits announced, shard failures
	// after partial application among the faults: ShardedScript).
	Sharded bool
	// Finished, when not nil, is called with the result after the
	// accounting, while the connection is still open: dlqColl is the
	// dead-letter collection (the command observes its backlog there).
	Finished func(ctx context.Context, res *Result, dlqColl *mongo.Collection)
}

// ShardedLimits are the handshake limits of the sharded demo: the driver
// splits each 500-row InsertMany into commands of at most 100 documents.
var ShardedLimits = faultproxy.Limits{MaxWriteBatchSize: 100}

func (c *Config) defaults() {
	if c.Batch <= 0 {
		c.Batch = DefaultBatch
	}
	if c.Workers <= 0 {
		c.Workers = DefaultWorkers
	}
	if c.Database == "" {
		c.Database = DefaultDatabase
	}
	if c.Collection == "" {
		c.Collection = DefaultCollection
	}
	if c.DLQ == "" {
		c.DLQ = DefaultDLQ
	}
	if c.MaxAttempts <= 0 {
		c.MaxAttempts = DefaultMaxAttempts
	}
}

// Result is the demo's outcome. The JSON names of the first block are read
// by checks outside the repository: keep them.
type Result struct {
	Input          int `json:"input"`
	Written        int `json:"written"`
	AlreadyWritten int `json:"already_written"`
	DeadLettered   int `json:"dead_lettered"`
	// Conflicts counts rows whose _id (content) was already stored by
	// another row: writeguard's conflict_skipped, plus duplicate rows that
	// met their twin after a lost reply and were read back as identical
	// (writeguard says already_written for those; see DuplicatesReadBack).
	Conflicts      int              `json:"conflicts"`
	Failed         int              `json:"failed"`
	Lost           int              `json:"lost"`
	Duplicates     int              `json:"duplicates"`
	ServerCommands int64            `json:"server_commands"`
	Amplification  float64          `json:"amplification"`
	Keywords       map[string]int   `json:"keywords"`
	Exhausted      int              `json:"exhausted"`
	Unknown        int              `json:"unknown"`
	NotAttempted   int              `json:"not_attempted"`
	Other          map[string]int   `json:"other_dispositions,omitempty"`
	ElapsedSeconds float64          `json:"elapsed_seconds"`
	Attempts       int64            `json:"attempts"`
	Faults         map[string]int64 `json:"faults"`
	Seed           int64            `json:"seed"`
	Server         string           `json:"server"`

	OK       bool     `json:"ok"`
	Problems []string `json:"problems,omitempty"`

	// Dispositions are the per-row dispositions exactly as writeguard
	// reported them.
	Dispositions map[string]int `json:"dispositions"`
	// DuplicatesReadBack is how many of Conflicts writeguard reported
	// already_written.
	DuplicatesReadBack int `json:"duplicates_read_back"`
	// DuplicateRows is the number of input rows that repeat an earlier
	// row exactly (an input property).
	DuplicateRows int            `json:"duplicate_rows"`
	KeywordPaths  map[string]int `json:"keyword_paths"`

	Batches              int              `json:"batches"`
	BatchSize            int              `json:"batch_size"`
	Workers              int              `json:"workers"`
	Ordered              bool             `json:"ordered"`
	Retries              int64            `json:"retries"`
	RetriesByCause       map[string]int64 `json:"retries_by_cause"`
	BudgetExhausted      int64            `json:"budget_exhausted"`
	DocumentsSent        int64            `json:"documents_sent"`
	CommandsPerDocument  float64          `json:"commands_per_document"`
	ServerCommandsByName map[string]int64 `json:"server_commands_by_name"`
	WriteSeconds         float64          `json:"write_seconds"`

	Namespace    string  `json:"namespace"`
	Target       Target  `json:"target"`
	DLQ          DLQInfo `json:"dlq"`
	DataDir      string  `json:"data_dir,omitempty"`
	Interrupted  bool    `json:"interrupted,omitempty"`
	FaultsActive bool    `json:"faults_active"`
	// Sharded is true when the server was presented as a mongos
	// (Config.Sharded); ChildBatches counts the commands each virtual
	// shard got during the writes.
	Sharded      bool             `json:"sharded,omitempty"`
	ChildBatches map[string]int64 `json:"child_batches,omitempty"`
}

// Target is what the accounting read found in the target collection.
type Target struct {
	Documents   int `json:"documents"`
	DistinctIDs int `json:"distinct_ids"`
	// Expected is the number of distinct _ids the dispositions say are
	// stored; Missing of those are not there; Unexpected documents are
	// there although no row says it stored them.
	Expected   int `json:"expected"`
	Missing    int `json:"missing"`
	Unexpected int `json:"unexpected"`
	// Unreported documents belong to rows reported as not written
	// (exhausted, unknown: the write may have been applied).
	Unreported int `json:"unreported"`
}

// DLQInfo describes the dead-letter collection after the run.
type DLQInfo struct {
	Namespace string `json:"namespace"`
	Setup     string `json:"setup"`
	// Envelopes, Captures (the sum of their attempts) and Pending of this
	// run's namespace; the breakdowns count envelopes.
	Envelopes int64            `json:"envelopes"`
	Captures  int64            `json:"captures"`
	Pending   int64            `json:"pending"`
	ByKeyword map[string]int64 `json:"by_keyword"`
	ByPath    map[string]int64 `json:"by_path"`
	ByCode    map[string]int64 `json:"by_code"`
	// Summary is dlq.Stats' result, for the table.
	Summary dlq.Summary `json:"-"`
}

// batchKey carries a batch's first row index in the context of its
// InsertMany, for the Disposition hook.
type batchKey struct{}

// finishKey carries, in the context of a batch's finishing call
// (finishUnknown), the row index of each of its inputs, for the
// Disposition hook.
type finishKey struct{}

type finishing struct{ rows []int }

// row dispositions after the run
type rowOutcome struct {
	disp     policy.Disposition
	hookDisp policy.Disposition
	attempts int
	code     int32
	batch    int
	keywords []string
	kwPaths  []string
	maybe    bool // writeguard's MaybeWritten
}

// Run runs the demo. It returns an error for an operational failure (the
// server could not be started, a setup step failed); the accounting check
// is in Result.OK and Result.Problems. If ctx is cancelled (Ctrl-C) no new
// batch is started, the batches in flight finish, and the accounting runs
// on what was done (Result.Interrupted).
func Run(ctx context.Context, cfg Config) (*Result, error) {
	cfg.defaults()
	t0 := time.Now()
	rows, err := Rows(cfg.Limit)
	if err != nil {
		return nil, err
	}
	ns := cfg.Database + "." + cfg.Collection
	dlqNS := cfg.Database + "." + cfg.DLQ
	c, err := openServer(ctx, cfg, ns)
	if err != nil {
		return nil, err
	}
	defer c.Close(context.Background())

	res := &Result{
		Seed: cfg.Seed, Server: c.Kind, Input: len(rows), Namespace: ns,
		BatchSize: cfg.Batch, Workers: cfg.Workers, DataDir: cfg.DataDir,
		FaultsActive: cfg.URI == "" && !cfg.NoFaults, Sharded: cfg.Sharded,
	}
	db := c.Client.Database(cfg.Database)
	setup, err := prepare(ctx, db, cfg, c.Kind)
	if err != nil {
		return nil, err
	}
	res.DLQ = DLQInfo{Namespace: dlqNS, Setup: setup}
	if c.Proxy != nil {
		c.Proxy.Reset()
	}
	c.Commands.Reset()

	out, err := writePhase(ctx, db, cfg, c.Kind, rows, res)
	if err != nil {
		return nil, err
	}

	serverCounts(c, ns, dlqNS, res)
	if res.Input > 0 {
		res.Amplification = round(float64(res.DocumentsSent)/float64(res.Input), 4)
		res.CommandsPerDocument = round(float64(res.ServerCommands)/float64(res.Input), 4)
	}

	// The accounting runs even after Ctrl-C: it is what says nothing was
	// lost.
	if err := account(context.WithoutCancel(ctx), db, cfg, rows, out, res); err != nil {
		return nil, err
	}
	res.ElapsedSeconds = round(time.Since(t0).Seconds(), 2)
	res.WriteSeconds = round(res.WriteSeconds, 2)
	if cfg.Finished != nil {
		cfg.Finished(ctx, res, db.Collection(cfg.DLQ))
	}
	return res, nil
}

// openServer starts the server the demo writes to, unless cfg.URI names
// one: the embedded FerretDB behind faultproxy with the demo's validator
// and fault schedule (Script, ShardedScript); and connects to it.
func openServer(ctx context.Context, cfg Config, ns string) (*conn.Conn, error) {
	var script *faultproxy.Script
	var popts []faultproxy.Option
	var err error
	switch {
	case cfg.Sharded && cfg.URI != "":
		return nil, errors.New("demo: the sharded bed is the embedded server's: drop --sharded or --uri")
	case cfg.Sharded:
		script, err = ShardedScript(ns, cfg.Seed, !cfg.NoFaults)
		popts = []faultproxy.Option{faultproxy.WithSharded(faultproxy.Sharding{}), faultproxy.WithLimits(ShardedLimits)}
	case cfg.URI == "":
		script, err = Script(ns, cfg.Seed, !cfg.NoFaults)
	}
	if err != nil {
		return nil, err
	}
	return conn.Open(ctx, conn.Options{URI: cfg.URI, DataDir: cfg.DataDir, Script: script, ProxyOptions: popts})
}

// writePhase wraps the target (guardOrders) and writes the rows
// (writeAll); it returns each row's outcome and records the batches, the
// write time, the attempts and the retries in res.
func writePhase(ctx context.Context, db *mongo.Database, cfg Config, kind string, rows []Row, res *Result) ([]rowOutcome, error) {
	var st stats
	out := make([]rowOutcome, len(rows))
	orders, err := guardOrders(db, cfg, kind, out, &st)
	if err != nil {
		return nil, err
	}
	tw := time.Now()
	res.Batches, res.Interrupted, err = writeAll(ctx, orders, rows, out, cfg)
	if err != nil {
		return nil, err
	}
	res.WriteSeconds = time.Since(tw).Seconds()
	res.Attempts, res.DocumentsSent, res.BudgetExhausted = st.attempts, st.docsSent, st.budget
	res.Retries, res.RetriesByCause = st.retries, st.byCause
	if res.RetriesByCause == nil {
		res.RetriesByCause = map[string]int64{}
	}
	return out, nil
}

// guardOrders wraps the target collection: the dead-letter sink, the
// conflict handler, the demo's backoff and the hooks that record each
// row's outcome into out and the amplification into st.
func guardOrders(db *mongo.Database, cfg Config, kind string, out []rowOutcome, st *stats) (*writeguard.Guarded, error) {
	h := hooks.Hooks{
		// A call that writes everything returns no Report: the hook is
		// what tells written from already_written then.
		Disposition: recordDisposition(out),
		AttemptStarted: func(ctx context.Context, ev *hooks.AttemptStart) context.Context {
			atomic.AddInt64(&st.attempts, 1)
			atomic.AddInt64(&st.docsSent, int64(ev.Documents))
			return ctx
		},
		RetryScheduled: func(_ context.Context, ev *hooks.Retry) { st.retry(ev) },
		BudgetExhausted: func(context.Context, *hooks.BudgetExhausted) {
			atomic.AddInt64(&st.budget, 1)
		},
	}
	// The dead-letter sink. On FerretDB, which finds documents by scanning
	// the collection, upserts by fingerprint grow quadratically: insert
	// new envelopes first and upsert only the recaptures.
	var sinkOpts []dlq.SinkOption
	if kind == conn.KindEmbedded {
		sinkOpts = append(sinkOpts, dlq.WithInsertFirst())
	}
	sink := dlq.NewMongoSink(db.Collection(cfg.DLQ), sinkOpts...)
	opts := []writeguard.Option{
		writeguard.WithDeadLetter(sink),
		writeguard.WithConflictHandler(writeguard.ConflictSkip()),
		// A bulk load is not latency-bound: allow a batch two minutes of
		// retrying (the default 30 s can run out on a loaded machine).
		writeguard.WithBackoff(policy.Backoff{Base: 20 * time.Millisecond, Cap: time.Second, MaxAttempts: cfg.MaxAttempts, MaxElapsed: 2 * time.Minute}),
		writeguard.WithHooks(h),
	}
	for _, x := range cfg.Hooks {
		opts = append(opts, writeguard.WithHooks(x))
	}
	return writeguard.Wrap(db.Collection(cfg.Collection), opts...)
}

// serverCounts records the commands the server saw during the write phase
// (before the accounting reads), by name, and the faults injected.
func serverCounts(c *conn.Conn, ns, dlqNS string, res *Result) {
	res.ServerCommandsByName = map[string]int64{}
	res.Faults = map[string]int64{}
	if c.Proxy == nil {
		for k, n := range c.Commands.Snapshot() {
			res.ServerCommandsByName[k] += n
			res.ServerCommands += n
		}
		return
	}
	ps := c.Proxy.Stats()
	for k, n := range ps.CommandsByNamespace {
		if k.Namespace == ns || k.Namespace == dlqNS {
			res.ServerCommandsByName[k.Name] += n
			res.ServerCommands += n
		}
	}
	for k, n := range ps.Faults {
		res.Faults[string(k)] = n
	}
	if res.Sharded {
		res.ChildBatches = ps.ChildBatches
	}
}

func round(x float64, digits int) float64 {
	p := 1.0
	for range digits {
		p *= 10
	}
	return float64(int64(x*p+0.5)) / p
}

type stats struct {
	attempts, docsSent, budget int64
	mu                         sync.Mutex
	retries                    int64
	byCause                    map[string]int64
}

func (s *stats) retry(ev *hooks.Retry) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.byCause == nil {
		s.byCause = map[string]int64{}
	}
	s.retries++
	cause := ev.Class.String()
	if ev.Code != 0 {
		cause = fmt.Sprintf("%d", ev.Code)
	}
	s.byCause[cause]++
}

// prepare drops and recreates the target (with the validator on a real
// MongoDB; the proxy emulates it on the embedded server) and sets up the
// dead-letter collection. It returns the DLQ setup report.
func prepare(ctx context.Context, db *mongo.Database, cfg Config, kind string) (string, error) {
	for _, name := range []string{cfg.Collection, cfg.DLQ} {
		if err := db.Collection(name).Drop(ctx); err != nil {
			return "", fmt.Errorf("drop %s.%s: %w", cfg.Database, name, err)
		}
	}
	co := options.CreateCollection()
	if kind == conn.KindMongoDB {
		co.SetValidator(Validator()).SetValidationLevel("strict").SetValidationAction("error")
	}
	if err := db.CreateCollection(ctx, cfg.Collection, co); err != nil {
		return "", fmt.Errorf("create %s.%s: %w", cfg.Database, cfg.Collection, err)
	}
	rep, err := dlq.EnsureCollection(ctx, db, cfg.DLQ)
	if err != nil {
		return rep.String(), fmt.Errorf("set up the dead-letter collection: %w", err)
	}
	return SetupSummary(rep), nil
}

// writeAll inserts rows in batches with cfg.Workers concurrent guarded
// InsertManys, recording each row's outcome. After ctx is cancelled no
// batch starts; the rows of batches never started end not_attempted.
func writeAll(ctx context.Context, orders *writeguard.Guarded, rows []Row, out []rowOutcome, cfg Config) (batches int, interrupted bool, err error) {
	var bar *progress.Bar
	if cfg.Progress != nil {
		bar = progress.New(cfg.Progress, "writing", len(rows))
		defer bar.Finish()
	}
	work := make(chan span)
	var (
		wg       sync.WaitGroup
		errMu    sync.Mutex
		firstErr error
	)
	// In-flight batches finish even after Ctrl-C, so nothing is left
	// half-done; the timeout bounds a stuck server.
	wctx := context.WithoutCancel(ctx)
	for range cfg.Workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for s := range work {
				if err := insertBatch(wctx, orders, rows, out, s); err != nil {
					errMu.Lock()
					if firstErr == nil {
						firstErr = err
					}
					errMu.Unlock()
				}
				bar.Add(s.hi - s.lo)
			}
		}()
	}
	for lo := 0; lo < len(rows); lo += cfg.Batch {
		hi := min(lo+cfg.Batch, len(rows))
		select {
		case work <- span{lo, hi}:
			batches++
			continue
		case <-ctx.Done():
			interrupted = true
		}
		break
	}
	close(work)
	wg.Wait()
	for i := range out {
		if out[i].disp == "" {
			out[i].disp = writeguard.NotAttempted
		}
	}
	return batches, interrupted, firstErr
}

// span is a batch: the rows lo to hi-1.
type span struct{ lo, hi int }

// insertBatch inserts the rows of s with one guarded, unordered
// InsertMany, bounded by 5 minutes, and records each row's outcome in out.
// When the call fails without a Report covering its rows, they are all
// failed and the error is returned.
func insertBatch(wctx context.Context, orders *writeguard.Guarded, rows []Row, out []rowOutcome, s span) error {
	docs := make([]any, 0, s.hi-s.lo)
	for i := s.lo; i < s.hi; i++ {
		docs = append(docs, rows[i].Doc)
	}
	bctx, cancel := context.WithTimeout(context.WithValue(wctx, batchKey{}, s.lo), 5*time.Minute)
	_, err := orders.InsertMany(bctx, docs, options.InsertMany().SetOrdered(false))
	cancel()
	var rep *writeguard.Report
	switch {
	case err == nil:
		// Every document ended written or already_written (a reply lost,
		// read back): the Disposition hook said which.
		for i := s.lo; i < s.hi; i++ {
			out[i].disp = out[i].hookDisp
			if out[i].disp == "" {
				out[i].disp = writeguard.Written
			}
		}
	case errors.As(err, &rep) && len(rep.Outcomes) == s.hi-s.lo:
		for j, o := range rep.Outcomes {
			r := &out[s.lo+j]
			r.disp = o.Disposition
			r.attempts = o.Attempts
			r.batch = s.lo
			r.maybe = o.MaybeWritten
			if o.Failure != nil {
				r.code = o.Failure.Code
			}
			if o.Disposition == writeguard.DeadLettered && o.Failure != nil {
				r.keywords = envelope.FailingKeywords(o.Failure.ErrInfo)
				r.kwPaths = KeywordPaths(o.Failure.ErrInfo)
			}
		}
		finishUnknown(wctx, orders, out, s, rep)
	default:
		for i := s.lo; i < s.hi; i++ {
			out[i].disp = writeguard.Failed
		}
		return fmt.Errorf("insert rows %d..%d: %w", s.lo+1, s.hi, err)
	}
	return nil
}

// SetupSummary is a one-line form of an EnsureCollection report:
// "collection applied, validator unsupported (238), ...".
func SetupSummary(rep dlq.SetupReport) string {
	parts := make([]string, 0, len(rep.Features))
	for _, f := range rep.Features {
		p := f.Feature + " " + string(f.State)
		if f.Code != 0 {
			p += fmt.Sprintf(" (%d)", f.Code)
		}
		parts = append(parts, p)
	}
	return strings.Join(parts, ", ")
}

// finishUnknown finishes a batch whose call ended with inserts unknown and
// MaybeWritten (the call gave up while the primary was gone, say, and
// left their read-back to the call that sends them again), as README's
// "Finishing a call" does: once, with Report.Remaining's documents and
// context, so that each is read back on its own _id. It runs only when
// every input Remaining hands back ended unknown: an exhausted,
// not_attempted or dead_letter_failed row stays as the first call
// reported it, for the accounting to judge.
func finishUnknown(wctx context.Context, orders *writeguard.Guarded, out []rowOutcome, s span, rep *writeguard.Report) {
	rest := rep.Remaining()
	if rest.Len() == 0 {
		return
	}
	rowsOf := make([]int, len(rest.Indexes))
	for k, i := range rest.Indexes {
		if rep.Outcomes[i].Disposition != writeguard.OutcomeUnknown {
			return
		}
		rowsOf[k] = s.lo + i
	}
	fctx, cancel := context.WithTimeout(context.WithValue(wctx, finishKey{}, finishing{rows: rowsOf}), 5*time.Minute)
	defer cancel()
	_, err := orders.InsertMany(rest.Context(fctx), rest.Documents, options.InsertMany().SetOrdered(false))
	var frep *writeguard.Report
	for k, row := range rowsOf {
		r := &out[row]
		switch {
		case err == nil:
			r.disp = r.hookDisp
		case errors.As(err, &frep) && len(frep.Outcomes) == len(rowsOf):
			r.disp, r.maybe = frep.Outcomes[k].Disposition, frep.Outcomes[k].MaybeWritten
		default:
			continue // the first call's unknown stands
		}
		if r.disp == "" {
			r.disp = writeguard.Written
		}
	}
}

// recordDisposition is the Disposition hook that records each row's
// disposition into out: a batch's call names its first row (batchKey), a
// finishing call each of its rows (finishKey).
func recordDisposition(out []rowOutcome) func(ctx context.Context, ev *hooks.Disposition) {
	return func(ctx context.Context, ev *hooks.Disposition) {
		if f, ok := ctx.Value(finishKey{}).(finishing); ok && ev.Index < len(f.rows) {
			r := &out[f.rows[ev.Index]]
			r.hookDisp, r.attempts, r.code = ev.Disposition, r.attempts+ev.Attempts, ev.Code
		} else if lo, ok := ctx.Value(batchKey{}).(int); ok && lo+ev.Index < len(out) {
			r := &out[lo+ev.Index]
			r.hookDisp, r.attempts, r.code, r.batch = ev.Disposition, ev.Attempts, ev.Code, lo
		}
	}
}
